/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * blktrace-format traces (lib/trace.c): the files a known workload leaves,
 * read back record by record, against the queue's own counters; the
 * format blkparse needs (magic and version, per-CPU sequences from 1, time
 * order in every file, process notes); a thread's events in order; drops
 * counted and noted, never silent, and none while the writer keeps going; the API's and the attributes' errors;
 * the action mask; the stamp a step's events share;
 * and a trace under threads and scheduler switches that loses nothing it
 * does not report.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

/* The record as blktrace_api.h documents it (version 7, native order). */
struct rec {
	uint32_t magic, sequence;
	uint64_t time, sector;
	uint32_t bytes, action, pid, device, cpu;
	uint16_t error, pdu_len;
};

enum { A_Q = 1, A_M, A_F, A_G, A_S, A_R, A_D, A_C, A_P, A_U, A_UT, A_I, A_X };
#define TC_NOTIFY (1u << 10)

struct ev {
	struct rec r;
	uint64_t pdu;       /* big-endian u64 payloads (U, X) */
	char text[64];      /* notes */
	unsigned order;     /* position in its file */
};

struct trace {
	struct ev *ev;
	unsigned n, cap;
	unsigned count[16];  /* per action, I/O records only */
	unsigned notes, messages;
	char message[64];
};

static char tmpdir[64];

static void trace_add(struct trace *t, const struct ev *e)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 1024;
		t->ev = realloc(t->ev, t->cap * sizeof(*t->ev));
		assert_non_null(t->ev);
	}
	t->ev[t->n++] = *e;
}

/*
 * Read every file NAME.blktrace.CPU of @nr_cpus: each record well formed,
 * of @dev, its file's sequence numbers 1, 2, 3..., times never going back.
 */
static void read_trace(const char *name, unsigned nr_cpus, uint32_t dev, struct trace *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned c = 0; c < nr_cpus; c++) {
		char path[256];
		FILE *f;
		struct ev e;
		uint32_t seq = 0;
		uint64_t last = 0;

		snprintf(path, sizeof(path), "%s/%s.blktrace.%u", tmpdir, name, c);
		f = fopen(path, "r");
		if (!f)
			fail_msg("missing %s", path);
		while (fread(&e.r, sizeof(e.r), 1, f) == 1) {
			unsigned char pdu[256];

			assert_int_equal(e.r.magic, 0x65617407);
			assert_true(e.r.pdu_len <= sizeof(pdu));
			if (e.r.pdu_len)
				assert_int_equal(fread(pdu, e.r.pdu_len, 1, f), 1);
			assert_int_equal(e.r.cpu, c);
			assert_int_equal(e.r.device, dev);
			assert_int_equal(e.r.sequence, ++seq);
			assert_true(e.r.time >= last);
			last = e.r.time;
			e.pdu = 0;
			e.text[0] = 0;
			e.order = seq;
			if (e.r.pdu_len == 8)
				for (unsigned i = 0; i < 8; i++)
					e.pdu = e.pdu << 8 | pdu[i];
			if (e.r.action & (TC_NOTIFY << 16)) {
				snprintf(e.text, sizeof(e.text), "%.*s", (int)e.r.pdu_len, pdu);
				if ((e.r.action & 0xffff) == 0) {
					t->notes++;
				} else {
					t->messages++;
					snprintf(t->message, sizeof(t->message), "%s", e.text);
				}
			} else {
				t->count[e.r.action & 0xf]++;
			}
			trace_add(t, &e);
		}
		fclose(f);
	}
}

static int by_time(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;

	if (x->r.time != y->r.time)
		return x->r.time < y->r.time ? -1 : 1;
	return x->r.cpu != y->r.cpu ? (int)x->r.cpu - (int)y->r.cpu :
				      (int)x->order - (int)y->order;
}

/* A thread's records, merged over the files by time, have distinct times. */
static void check_thread_order(struct trace *t)
{
	qsort(t->ev, t->n, sizeof(*t->ev), by_time);
	for (unsigned i = 0; i < t->n; i++)
		for (unsigned j = i + 1; j < t->n && j < i + 64; j++)
			if (t->ev[j].r.pid == t->ev[i].r.pid && t->ev[i].r.pid)
				assert_true(t->ev[j].r.time > t->ev[i].r.time);
}

static void remove_trace(const char *name)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	char path[512];

	assert_non_null(d);
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, name, strlen(name))) {
			snprintf(path, sizeof(path), "%s/%s", tmpdir, de->d_name);
			unlink(path);
		}
	closedir(d);
}

static struct mock_dev *make_dev(enum mock_completion comp, const char *sched,
				 unsigned max_sectors)
{
	struct mock_config cfg = { .completion = comp, .queue_depth = 128 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = sched };

	rq_queue_limits_default(&lim);
	if (max_sectors)
		lim.max_sectors = lim.max_hw_sectors = max_sectors;
	return mock_create(&cfg, &qc);
}

static uint8_t buf[64 * 1024];

/* Submit one bio of @op and wait for it. */
static void one(struct mock_dev *m, unsigned op, uint64_t sector, uint32_t len)
{
	assert_int_equal(mock_rw(m, op, sector, buf, len), RQ_STS_OK);
}

/*
 * A known workload under mq-deadline: plugged writes that back- and
 * front-merge, a read split in two, plain reads.  Every action's count in
 * the files equals the queue's counter: Q = bios submitted (the pieces of
 * a split are not queued again, as in the kernel: Q + X = bios), X =
 * splits, M + F = merges, G = requests, D = dispatched, C = completed; I
 * = requests (all through the scheduler), U's depths add up to the
 * requests that left the plug, and the thread has its name note.
 */
static void test_counts_match(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, "mq-deadline", 16);
	struct rq_queue_stats st;
	struct rq_trace_info info;
	struct fx_rec rec[4];
	struct rq_plug plug;
	struct trace t;
	uint64_t depth = 0;
	char comm[16];
	unsigned submitted = 0;

	(void)state;
	prctl(PR_SET_NAME, "tracetest");
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "counts"), 0);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "again"), -EBUSY);
	rq_start_plug(&plug);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 0, buf, 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, 8, buf, 4096));   /* back merge */
	rq_submit_bio(m->q, fx_bio(&rec[2], RQ_OP_WRITE, 200, buf, 4096));
	rq_submit_bio(m->q, fx_bio(&rec[3], RQ_OP_WRITE, 192, buf, 4096)); /* front merge */
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, 4, 10000));
	fx_put(rec, 4);
	submitted += 4;
	one(m, RQ_OP_READ, 1000, 16384); /* split into two 8 KiB pieces */
	submitted++;
	for (unsigned i = 0; i < 10; i++, submitted++)
		one(m, RQ_OP_READ, 5000 + 64 * i, 4096);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	assert_int_equal(rq_queue_trace_stop(m->q, NULL, 0), -ENOENT);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(info.dropped, 0);
	assert_int_equal(info.dev, rq_queue_trace_dev(m->q));
	assert_int_equal(info.dev >> 20, RQ_TRACE_DEV_MAJOR);

	read_trace("counts", info.nr_cpus, info.dev, &t);
	assert_int_equal(t.n, info.events);
	assert_int_equal(t.count[A_Q], submitted);
	assert_int_equal(t.count[A_Q] + t.count[A_X], st.bios);
	assert_int_equal(t.count[A_X], st.splits);
	assert_int_equal(st.splits, 1);
	assert_int_equal(t.count[A_M] + t.count[A_F], st.merges_back + st.merges_front +
						      st.merges_rq);
	assert_true(t.count[A_M] >= 1 && t.count[A_F] >= 1);
	assert_int_equal(t.count[A_G], st.requests);
	assert_int_equal(t.count[A_I], st.requests);
	assert_int_equal(t.count[A_D], st.dispatched);
	assert_int_equal(t.count[A_C], st.completed);
	assert_int_equal(t.count[A_R], 0);
	assert_true(t.count[A_P] >= 1);
	for (unsigned i = 0; i < t.n; i++) {
		if (t.ev[i].r.action & (TC_NOTIFY << 16))
			continue;
		if ((t.ev[i].r.action & 0xffff) == A_U)
			depth += t.ev[i].pdu;
		if ((t.ev[i].r.action & 0xffff) == A_X) {
			/* the front piece, and where the rest starts */
			assert_int_equal(t.ev[i].r.sector, 1000);
			assert_int_equal(t.ev[i].r.bytes, 8192);
			assert_int_equal(t.ev[i].pdu, 1016);
		}
		if ((t.ev[i].r.action & 0xffff) == A_C)
			assert_int_equal(t.ev[i].r.error, 0);
	}
	assert_int_equal(depth, 2); /* the plug held two requests */
	prctl(PR_GET_NAME, comm);
	assert_int_equal(t.notes, 1);
	for (unsigned i = 0; i < t.n; i++)
		if (t.ev[i].r.action == (TC_NOTIFY << 16)) {
			assert_string_equal(t.ev[i].text, comm);
			assert_int_equal(t.ev[i].r.pid, (uint32_t)gettid());
		}
	assert_int_equal(t.messages, 0);
	check_thread_order(&t);
	free(t.ev);
	remove_trace("counts");
	mock_destroy(m);
}

/*
 * The direction and flag bits of the action word, as blktrace encodes
 * them: a read R, a write W, a FUA write W with FUA, a discard D (write
 * and discard bits), a failed request's C carries -errno.
 */
static void test_action_bits(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_DEFER, "none", 0);
	struct rq_trace_info info;
	struct mock_io io;
	struct trace t;
	bool seen_err = false, seen_sync = false;

	(void)state;
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "bits"), 0);
	{
		struct rq_bio *bio = mock_bio(&io, RQ_OP_WRITE, 64, buf, 4096);

		bio->opf |= RQ_BIO_SYNC;
		rq_submit_bio(m->q, bio);
		assert_true(mock_wait_held(m, 1, 10000));
		mock_complete_all(m, RQ_STS_IOERR);
		mock_wait(&io);
	}
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("bits", info.nr_cpus, info.dev, &t);
	for (unsigned i = 0; i < t.n; i++) {
		uint32_t a = t.ev[i].r.action;

		if (a & (TC_NOTIFY << 16))
			continue;
		if ((a & 0xffff) != A_P && (a & 0xffff) != A_U)
			assert_true(a & (2u << 16));      /* BLK_TC_WRITE */
		if (a & (8u << 16))
			seen_sync = true;                 /* BLK_TC_SYNC */
		if ((a & 0xffff) == A_C) {
			assert_int_equal((int16_t)t.ev[i].r.error, -EIO);
			assert_true(a & (1u << 24));      /* BLK_TC_FS */
			seen_err = true;
		}
	}
	assert_true(seen_err && seen_sync);
	free(t.ev);
	remove_trace("bits");
	mock_destroy(m);
}

/* Bad arguments change nothing; the attributes start, show and stop a trace. */
static void test_api_and_attrs(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, "none", 0);
	struct rq_trace_info info;
	char val[512], expect[512];

	(void)state;
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "a/b"), -EINVAL);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, ""), -EINVAL);
	assert_int_equal(rq_queue_trace_start(m->q, NULL, "x"), -EINVAL);
	assert_int_equal(rq_queue_trace_start(m->q, "/nonexistent/dir", "x"), -ENOENT);
	assert_int_equal(rq_queue_trace_get_info(m->q, &info, sizeof(info)), -ENOENT);
	assert_int_equal(rq_queue_attr_get(m->q, "trace", val, sizeof(val)), 2);
	assert_string_equal(val, "0\n");
	assert_int_equal(rq_queue_attr_set(m->q, "trace", tmpdir), 0);
	snprintf(expect, sizeof(expect), "%s/rq%u\n", tmpdir,
		 rq_queue_trace_dev(m->q) & 0xfffff);
	rq_queue_attr_get(m->q, "trace", val, sizeof(val));
	assert_string_equal(val, expect);
	one(m, RQ_OP_READ, 0, 4096);
	assert_int_equal(rq_queue_trace_get_info(m->q, &info, sizeof(info)), 0);
	assert_int_equal(info.nr_threads, 1);
	rq_queue_attr_get(m->q, "trace_dropped", val, sizeof(val));
	assert_string_equal(val, "0\n");
	assert_int_equal(rq_queue_attr_set(m->q, "trace", "0"), 0);
	rq_queue_attr_get(m->q, "trace", val, sizeof(val));
	assert_string_equal(val, "0\n");
	assert_int_equal(rq_queue_attr_set(m->q, "trace", "0"), 0);
	snprintf(expect, sizeof(expect), "rq%u", rq_queue_trace_dev(m->q) & 0xfffff);
	remove_trace(expect);
	/* a queue destroyed while tracing stops its trace and closes its files */
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "destroyed"), 0);
	one(m, RQ_OP_READ, 0, 4096);
	mock_destroy(m);
	remove_trace("destroyed");
}

/*
 * A thread that outruns the writer loses events, counted and noted.  The
 * virtual clock stands still, so the writer may write none of the
 * thread's events (each is a nanosecond after the last, later than "now")
 * until the trace stops: the ring fills and the rest drop.  What was
 * written plus what was dropped is every event made (mq-deadline, no
 * merges: Q G I D C per bio), what was written is the first events in
 * order, and the end of the trace says how many dropped.
 */
static void test_drops_counted(void **state)
{
	struct mock_dev *m;
	struct rq_trace_info info;
	struct trace t;
	char val[32], expect[64];
	/* 100000 events in 80000 slots (G shares its Q's): more than a ring holds (65536) */
	const unsigned nr = 20000;
	uint64_t next = 0;

	(void)state;
	fx_vclock_install(1000000000ull);
	m = make_dev(MOCK_COMPLETE_INLINE, "mq-deadline", 0);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "drops"), 0);
	for (unsigned i = 0; i < nr; i++)
		one(m, RQ_OP_READ, 64ull * i, 4096);
	rq_queue_attr_get(m->q, "trace_dropped", val, sizeof(val));
	assert_true(strtoull(val, NULL, 10) > 0);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("drops", info.nr_cpus, info.dev, &t);
	assert_true(info.dropped > 0);
	assert_int_equal(t.messages, 1);
	snprintf(expect, sizeof(expect), "librequest: %llu events dropped",
		 (unsigned long long)info.dropped);
	assert_string_equal(t.message, expect);
	assert_int_equal(t.n - t.notes - t.messages + info.dropped, 5ull * nr);
	/* the written Q records are the first bios, in order */
	check_thread_order(&t);
	for (unsigned i = 0; i < t.n; i++)
		if ((t.ev[i].r.action & 0xffff) == A_Q && !(t.ev[i].r.action & (TC_NOTIFY << 16))) {
			assert_int_equal(t.ev[i].r.sector, next);
			next += 64;
		}
	assert_true(next > 0);
	free(t.ev);
	remove_trace("drops");
	mock_destroy(m);
	rq_clock_set_source(NULL, NULL);
}

struct ticker {
	_Atomic unsigned submitted;   /* bios the test thread submitted */
	unsigned full;                /* its ring is full by this many */
};

/*
 * Hold the virtual clock still (the writer writes nothing past "now")
 * until the test thread has about filled its ring, let it find the ring
 * full for 10 ms, then move the clock a second on.
 */
static void *clock_ticker(void *arg)
{
	struct ticker *tk = arg;

	while (atomic_load(&tk->submitted) < tk->full)
		usleep(100);
	usleep(10000);
	fx_vclock_set(fx_vclock_now() + 1000000000ull);
	return NULL;
}

/*
 * A thread that outruns the writer waits for it while the writer can go
 * on, and loses nothing.  The virtual clock stands still until the
 * thread's ring is nearly full (16000 bios, 64000 slots: mq-deadline, Q G
 * I D C per bio, G in its Q's slot), so the ring fills; 10 ms later the
 * clock moves on and the writer empties the ring.  The thread waited
 * instead of dropping what it made meanwhile: every one of its 100000
 * events is in the files, none dropped, in order.
 */
static void test_full_ring_waits(void **state)
{
	struct ticker tk = { .full = 16000 };
	struct rq_trace_info info;
	struct mock_dev *m;
	struct trace t;
	pthread_t ticker;
	const unsigned nr = 20000;

	(void)state;
	fx_vclock_install(1000000000ull);
	m = make_dev(MOCK_COMPLETE_INLINE, "mq-deadline", 0);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "waits"), 0);
	assert_int_equal(pthread_create(&ticker, NULL, clock_ticker, &tk), 0);
	for (unsigned i = 0; i < nr; i++) {
		one(m, RQ_OP_READ, 64ull * i, 4096);
		atomic_fetch_add(&tk.submitted, 1);
	}
	pthread_join(ticker, NULL);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("waits", info.nr_cpus, info.dev, &t);
	assert_int_equal(info.dropped, 0);
	assert_int_equal(t.messages, 0);
	assert_int_equal(t.n - t.notes, 5ull * nr);
	check_thread_order(&t);
	free(t.ev);
	remove_trace("waits");
	mock_destroy(m);
	rq_clock_set_source(NULL, NULL);
}

/*
 * A record's time is the library's clock (rq_clock_ns()) since the trace
 * started, whatever stamps the thread took (TSC ticks scaled as the clock
 * scales them, or the clock itself): each bio's records lie between clock
 * readings taken around it, less the start (read between two readings
 * around rq_queue_trace_start()).  Only the order of clock readings
 * matters, not how long anything takes.  Once with the default clock
 * (the TSC where the kernel's clocksource is "tsc"), once with a virtual
 * clock a test sets (the slow stamping).
 */
static void check_times(bool virtual_clock)
{
	struct mock_dev *m;
	struct rq_trace_info info;
	struct trace t;
	enum { NR = 8 };
	uint64_t t0, t1, before[NR], after[NR];
	unsigned seen = 0;

	if (virtual_clock)
		fx_vclock_install(5000000000ull);
	m = make_dev(MOCK_COMPLETE_INLINE, "none", 0);
	t0 = rq_clock_ns();
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "times"), 0);
	t1 = rq_clock_ns();
	for (unsigned i = 0; i < NR; i++) {
		if (virtual_clock)
			fx_vclock_set(fx_vclock_now() + 1000);
		before[i] = rq_clock_ns();
		one(m, RQ_OP_READ, 64ull * i, 4096);
		after[i] = rq_clock_ns();
	}
	if (virtual_clock)
		fx_vclock_set(fx_vclock_now() + 1000000); /* the writer writes up to now */
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	assert_int_equal(info.dropped, 0);
	read_trace("times", info.nr_cpus, info.dev, &t);
	for (unsigned i = 0; i < t.n; i++) {
		const struct rec *r = &t.ev[i].r;
		unsigned b = (unsigned)(r->sector / 64);

		if (r->action & (TC_NOTIFY << 16))
			continue;
		assert_true(b < NR);
		/* a tie within a thread is moved a nanosecond on: NR * 4 at most */
		assert_true(r->time + t1 >= before[b]);
		assert_true(r->time + t0 <= after[b] + 4 * NR);
		seen++;
	}
	assert_int_equal(seen, 4 * NR); /* Q G D C per bio */
	free(t.ev);
	remove_trace("times");
	mock_destroy(m);
	if (virtual_clock)
		rq_clock_set_source(NULL, NULL);
}

static void test_times_are_the_clock(void **state)
{
	(void)state;
	check_times(false);
	check_times(true);
}

/* ------------------------------------------------------------- stress */

#define ST_THREADS 4
#define ST_BIOS 1500

struct submitter {
	struct mock_dev *m;
	unsigned idx;
	pid_t tid;
};

/* Sequential 4 KiB writes in the thread's own region, some plugged in fours. */
static void *submit_thread(void *arg)
{
	struct submitter *s = arg;
	struct fx_rec rec[4];
	static uint8_t data[ST_THREADS][4096];

	s->tid = gettid();
	for (unsigned i = 0; i < ST_BIOS; i += 4) {
		struct rq_plug plug;
		bool plugged = (i / 4) % 2;

		if (plugged)
			rq_start_plug(&plug);
		for (unsigned j = 0; j < 4; j++) {
			uint64_t sector = (uint64_t)s->idx * 16384 + (uint64_t)(i + j) * 8;

			rq_submit_bio(s->m->q, fx_bio(&rec[j], RQ_OP_WRITE, sector,
						       data[s->idx], 4096));
		}
		if (plugged)
			rq_finish_plug(&plug);
		if (!fx_wait(rec, 4, 30000))
			abort();
		fx_put(rec, 4);
	}
	return NULL;
}

/*
 * Four threads write while the scheduler switches between none,
 * mq-deadline, kyber and bfq, completions on the mock's thread.  Every
 * counted action is in the files but for what the trace reports dropped;
 * with no drop, exactly; and each submitter's Q records are its bios in
 * submission order.
 */
static void test_stress_switch(void **state)
{
	static const char *const scheds[] = { "mq-deadline", "kyber", "bfq", "none" };
	struct mock_dev *m = make_dev(MOCK_COMPLETE_THREAD, "none", 0);
	struct submitter sub[ST_THREADS];
	pthread_t th[ST_THREADS];
	struct rq_queue_stats st;
	struct rq_trace_info info;
	struct trace t;
	uint64_t missing = 0;
	unsigned sw = 0;

	(void)state;
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "stress"), 0);
	for (unsigned i = 0; i < ST_THREADS; i++) {
		sub[i] = (struct submitter){ .m = m, .idx = i };
		assert_int_equal(pthread_create(&th[i], NULL, submit_thread, &sub[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(rq_queue_attr_set(m->q, "scheduler", scheds[sw++ % 4]), 0);
	for (unsigned i = 0; i < ST_THREADS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	read_trace("stress", info.nr_cpus, info.dev, &t);
	print_message("stress: %u records, %llu dropped, %u threads\n", t.n,
		      (unsigned long long)info.dropped, info.nr_threads);
	assert_int_equal(st.invalid, 0);
	{
		const uint64_t want[][2] = {
			{ A_Q, st.bios - st.splits }, { A_G, st.requests },
			{ A_C, st.completed }, { A_D, st.dispatched },
		};

		for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
			assert_true(t.count[want[i][0]] <= want[i][1]);
			missing += want[i][1] - t.count[want[i][0]];
		}
		assert_true(t.count[A_M] + t.count[A_F] <=
			    st.merges_back + st.merges_front + st.merges_rq);
		missing += st.merges_back + st.merges_front + st.merges_rq - t.count[A_M] -
			   t.count[A_F];
	}
	assert_true(missing <= info.dropped);
	if (!info.dropped)
		assert_int_equal(t.count[A_Q], ST_THREADS * ST_BIOS);
	check_thread_order(&t);
	for (unsigned s = 0; s < ST_THREADS; s++) {
		uint64_t last = 0;
		bool first = true;

		for (unsigned i = 0; i < t.n; i++) {
			const struct rec *r = &t.ev[i].r;

			if (r->pid != (uint32_t)sub[s].tid || (r->action & 0xffff) != A_Q ||
			    (r->action & (TC_NOTIFY << 16)))
				continue;
			if (!first)
				assert_true(r->sector > last);
			first = false;
			last = r->sector;
		}
	}
	free(t.ev);
	remove_trace("stress");
	mock_destroy(m);
}

/*
 * blktrace's action mask, the attribute trace_actions: by default every
 * category that applies; names any case, comma-separated; an unknown,
 * empty or inapplicable name (pc, notify, drv_data) is -EINVAL and
 * changes nothing.  With "issue,complete" a trace has only D and C
 * records (one of each per request), with "write" only the writes'
 * records, and the thread's name note either way.
 */
static void test_action_mask(void **state)
{
	static const char *const bad[] = { "bogus", "", "issue,,complete", "pc", "notify",
					   "drv_data", "queue\n\n", "read,", ",read" };
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, "none", 0);
	struct rq_trace_info info;
	struct trace t;
	char val[256];

	(void)state;
	assert_int_equal(rq_queue_attr_get(m->q, "trace_actions", val, sizeof(val)) > 0, 1);
	assert_string_equal(val, "read,write,flush,sync,queue,requeue,issue,complete,fs,"
				 "ahead,meta,discard,fua\n");
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(rq_queue_attr_set(m->q, "trace_actions", bad[i]), -EINVAL);
	rq_queue_attr_get(m->q, "trace_actions", val, sizeof(val));
	assert_string_equal(val, "read,write,flush,sync,queue,requeue,issue,complete,fs,"
				 "ahead,meta,discard,fua\n");
	assert_int_equal(rq_queue_attr_set(m->q, "trace_actions", "Complete,ISSUE\n"), 0);
	rq_queue_attr_get(m->q, "trace_actions", val, sizeof(val));
	assert_string_equal(val, "issue,complete\n");

	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "mask"), 0);
	for (unsigned i = 0; i < 8; i++)
		one(m, i & 1 ? RQ_OP_WRITE : RQ_OP_READ, 64ull * i, 4096);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("mask", info.nr_cpus, info.dev, &t);
	assert_int_equal(t.n - t.notes, 16);
	assert_int_equal(t.count[A_D], 8);
	assert_int_equal(t.count[A_C], 8);
	assert_int_equal(t.notes, 1);
	free(t.ev);
	remove_trace("mask");

	assert_int_equal(rq_queue_attr_set(m->q, "trace_actions", "write"), 0);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "mask"), 0);
	for (unsigned i = 0; i < 8; i++)
		one(m, i & 1 ? RQ_OP_WRITE : RQ_OP_READ, 64ull * i, 4096);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("mask", info.nr_cpus, info.dev, &t);
	assert_int_equal(t.n - t.notes, 4 * 4); /* Q G D C of each write */
	for (unsigned i = 0; i < t.n; i++)
		if (!(t.ev[i].r.action & (TC_NOTIFY << 16)))
			assert_true(t.ev[i].r.action & (2u << 16)); /* BLK_TC_WRITE */
	free(t.ev);
	remove_trace("mask");
	mock_destroy(m);
}

/*
 * Events one call makes for a bio before the driver gets it share a
 * stamp: with none, an idle queue and a driver that completes inline,
 * each bio's Q, G and D are consecutive records of its file, a
 * nanosecond apart (the writer's tie-break), with the library's clock
 * (the work between them takes far longer where each has its own
 * stamp); its C, made after the driver had it, comes later.
 */
static void test_steps_share_stamps(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, "none", 0);
	struct rq_trace_info info;
	struct trace t;
	unsigned seen = 0;

	(void)state;
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "steps"), 0);
	for (unsigned i = 0; i < 32; i++)
		one(m, RQ_OP_READ, 64ull * i, 4096);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("steps", info.nr_cpus, info.dev, &t);
	assert_int_equal(t.count[A_Q], 32);
	for (unsigned i = 0; i + 2 < t.n; i++) {
		const struct ev *e = &t.ev[i];

		if ((e->r.action & 0xffff) != A_Q || (e->r.action & (TC_NOTIFY << 16)))
			continue;
		assert_int_equal(t.ev[i + 1].r.action & 0xffff, A_G);
		assert_int_equal(t.ev[i + 2].r.action & 0xffff, A_D);
		assert_int_equal(t.ev[i + 1].r.sequence, e->r.sequence + 1);
		assert_int_equal(t.ev[i + 2].r.sequence, e->r.sequence + 2);
		assert_int_equal(t.ev[i + 1].r.time, e->r.time + 1);
		assert_int_equal(t.ev[i + 2].r.time, e->r.time + 2);
		assert_int_equal(t.ev[i + 2].r.sector, e->r.sector);
		assert_int_equal(t.ev[i + 2].r.bytes, e->r.bytes);
		assert_true(t.ev[i + 2].r.action & (1u << 24)); /* D is BLK_TC_FS */
		/* its C, if the thread stayed on the CPU */
		if (i + 3 < t.n && t.ev[i + 3].r.cpu == e->r.cpu) {
			assert_int_equal(t.ev[i + 3].r.action & 0xffff, A_C);
			assert_true(t.ev[i + 3].r.time > e->r.time + 2);
		}
		seen++;
	}
	assert_int_equal(seen, 32);
	free(t.ev);
	remove_trace("steps");
	mock_destroy(m);
}

/* Trace @n 4 KiB reads of @m with trace_actions @mask; their records in @t. */
static void trace_reads(struct mock_dev *m, const char *mask, unsigned n, struct trace *t)
{
	struct rq_trace_info info;

	assert_int_equal(rq_queue_attr_set(m->q, "trace_actions", mask), 0);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "folds"), 0);
	for (unsigned i = 0; i < n; i++)
		one(m, RQ_OP_READ, 64ull * i, 4096);
	assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
	read_trace("folds", info.nr_cpus, info.dev, t);
	remove_trace("folds");
}

/*
 * The points fold a step's G and D into its Q's slot inline
 * (lib/internal/trace.h) only where the out-of-line fold would: a D
 * whose action the mask leaves out is not recorded though its G folded
 * (mask "queue": Q and G only), a D alone is recorded without its Q
 * (mask "issue"), iostats on take the out-of-line way and still count,
 * and a bio split into pieces (each X ends the Q's fold) gives every
 * piece its own G and D.
 */
static void test_inline_folds(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, "none", 0);
	struct rq_diskstats d;
	struct trace t;

	(void)state;
	trace_reads(m, "queue", 8, &t);
	assert_int_equal(t.n - t.notes, 16);
	assert_int_equal(t.count[A_Q], 8);
	assert_int_equal(t.count[A_G], 8);
	free(t.ev);

	trace_reads(m, "issue", 8, &t);
	assert_int_equal(t.n - t.notes, 8);
	assert_int_equal(t.count[A_D], 8);
	free(t.ev);

	assert_int_equal(rq_queue_attr_set(m->q, "iostats", "1"), 0);
	trace_reads(m, "read", 8, &t);
	assert_int_equal(t.n - t.notes, 32);
	assert_int_equal(t.count[A_Q], 8);
	assert_int_equal(t.count[A_G], 8);
	assert_int_equal(t.count[A_D], 8);
	assert_int_equal(t.count[A_C], 8);
	free(t.ev);
	assert_int_equal(rq_queue_get_diskstats(m->q, &d, sizeof(d)), 0);
	assert_int_equal(d.read_ios, 8);
	assert_int_equal(rq_queue_attr_set(m->q, "iostats", "0"), 0);
	mock_destroy(m);

	m = make_dev(MOCK_COMPLETE_INLINE, "none", 8); /* 4 KiB pieces */
	assert_int_equal(rq_queue_attr_set(m->q, "trace_actions", "read"), 0);
	assert_int_equal(rq_queue_trace_start(m->q, tmpdir, "folds"), 0);
	one(m, RQ_OP_READ, 0, 16384);
	{
		struct rq_trace_info info;

		assert_int_equal(rq_queue_trace_stop(m->q, &info, sizeof(info)), 0);
		read_trace("folds", info.nr_cpus, info.dev, &t);
	}
	remove_trace("folds");
	assert_int_equal(t.count[A_Q], 1);
	assert_int_equal(t.count[A_X], 3);
	assert_int_equal(t.count[A_G], 4);
	assert_int_equal(t.count[A_D], 4);
	assert_int_equal(t.count[A_C], 4);
	free(t.ev);
	mock_destroy(m);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/rq-trace-test.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_match),
		cmocka_unit_test(test_action_bits),
		cmocka_unit_test(test_api_and_attrs),
		cmocka_unit_test(test_stress_switch),
		cmocka_unit_test(test_drops_counted),
		cmocka_unit_test(test_full_ring_waits),
		cmocka_unit_test(test_times_are_the_clock),
		cmocka_unit_test(test_action_mask),
		cmocka_unit_test(test_steps_share_stamps),
		cmocka_unit_test(test_inline_folds),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
