/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mq-deadline behaviour: dispatch order, deadlines, writes_starved,
 * fifo_batch, front merges, priority classes and aging, async_depth, the
 * tunables and head insertion; the streaks that dispatch sorted runs keep
 * those rules (at the end).
 *
 * No test depends on wall-clock time: the library clock is a virtual one
 * the tests set (rq_clock_set_source), and the mock driver keeps every
 * request it gets (DEFER) so the order of its queue_rq calls is the order
 * the scheduler chose.  Requests pile up in the scheduler while the queue
 * is quiesced; rq_queue_unquiesce() then drains them all at once at the
 * virtual time the test set.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"
#include "internal/elevator.h"

#define SECTORS_4K 8u
#define MAX_RECS 256

static uint64_t vclock_ns;
static uint8_t data_buf[8192];

static uint64_t vclock(void *arg)
{
	(void)arg;
	return __atomic_load_n(&vclock_ns, __ATOMIC_ACQUIRE);
}

static void vclock_set_ms(uint64_t ms)
{
	__atomic_store_n(&vclock_ns, ms * 1000000ull, __ATOMIC_RELEASE);
}

/* A test device: mq-deadline over a DEFER mock, and the bios sent to it. */
struct dl_dev {
	struct mock_dev *m;
	struct fx_rec recs[MAX_RECS];
	unsigned nr;
};

static struct dl_dev *dev_create(unsigned queue_depth)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = queue_depth };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "mq-deadline" };
	struct dl_dev *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	vclock_set_ms(0);
	d->m = mock_create(&cfg, &qc);
	return d;
}

static void dev_destroy(struct dl_dev *d)
{
	mock_destroy(d->m);
	assert_true(fx_wait(d->recs, d->nr, 10000));
	for (unsigned i = 0; i < d->nr; i++)
		assert_int_equal(fx_done(&d->recs[i]), 1);
	fx_put(d->recs, d->nr);
	free(d);
}

static void dev_set(struct dl_dev *d, const char *attr, const char *val)
{
	assert_int_equal(rq_queue_attr_set(d->m->q, attr, val), 0);
}

/* Submit a 4 KiB (or @len) bio; returns its record. */
static struct fx_rec *submit_len(struct dl_dev *d, unsigned op, uint64_t sector, uint32_t len,
				 uint32_t opf, uint16_t ioprio)
{
	struct fx_rec *rec;
	struct rq_bio *bio;

	assert_true(d->nr < MAX_RECS);
	rec = &d->recs[d->nr++];
	bio = fx_bio(rec, op, sector, data_buf, len);
	bio->opf = opf;
	bio->ioprio = ioprio;
	rq_submit_bio(d->m->q, bio);
	return rec;
}

static struct fx_rec *submit(struct dl_dev *d, unsigned op, uint64_t sector)
{
	return submit_len(d, op, sector, 4096, 0, 0);
}

/* Wait for @n queue_rq calls and check they came in the order @want. */
static void expect_order(struct dl_dev *d, const uint64_t *want, unsigned n)
{
	struct mock_event *ev;
	unsigned got;

	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, n, 10000));
	got = mock_copy_events(d->m, MOCK_QUEUE_RQ, &ev);
	if (got != n) {
		free(ev);
		fail_msg("%u requests dispatched, expected %u", got, n);
	}
	for (unsigned i = 0; i < n; i++) {
		if (ev[i].sector != want[i]) {
			for (unsigned j = 0; j < n; j++)
				print_message("  #%u: sector %llu (expected %llu)\n", j,
					      (unsigned long long)ev[j].sector,
					      (unsigned long long)want[j]);
			free(ev);
			fail_msg("dispatch #%u was sector %llu, expected %llu", i,
				 (unsigned long long)ev[i].sector, (unsigned long long)want[i]);
		}
	}
	free(ev);
}

/* -------------------------------------------------------------- tests */

/* Within a batch, requests go out in ascending sector order, whatever the
 * order they were submitted in. */
static void test_sorted_within_batch(void **state)
{
	static const uint64_t want[] = { 100, 200, 300, 400, 500 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_READ, 500);
	submit(d, RQ_OP_READ, 100);
	submit(d, RQ_OP_READ, 300);
	submit(d, RQ_OP_READ, 200);
	submit(d, RQ_OP_READ, 400);
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, 5);
	dev_destroy(d);
}

/*
 * A read whose deadline (read_expire, 500 ms) has passed is served before
 * sorted work; before it expires it waits for its turn in sector order.
 */
static void test_expired_read_first(void **state)
{
	static const uint64_t want_expired[] = { 1000, 100, 200, 300 };
	static const uint64_t want_sorted[] = { 100, 200, 300, 1000 };
	const uint64_t dispatch_at[2] = { 600, 400 };

	(void)state;
	for (unsigned round = 0; round < 2; round++) {
		struct dl_dev *d = dev_create(64);

		rq_queue_quiesce(d->m->q);
		submit(d, RQ_OP_READ, 1000);    /* t=0: deadline 500 ms */
		vclock_set_ms(200);
		submit(d, RQ_OP_READ, 100);     /* deadlines 700 ms */
		submit(d, RQ_OP_READ, 200);
		submit(d, RQ_OP_READ, 300);
		vclock_set_ms(dispatch_at[round]);
		rq_queue_unquiesce(d->m->q);
		expect_order(d, round == 0 ? want_expired : want_sorted, 4);
		dev_destroy(d);
	}
}

/*
 * writes_starved: reads are preferred, but a waiting write is served after
 * writes_starved read batches (batches of one request here).  A fresh
 * scheduler is, as the kernel's (dd->last_dir = DD_WRITE, batching 0), in
 * a write batch that has sent nothing: the lowest write goes first.
 */
static void test_writes_starved(void **state)
{
	static const uint64_t want[] = { 5000, 100, 200, 300, 6000, 400, 500, 600, 700, 800 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	dev_set(d, "iosched/fifo_batch", "1");
	dev_set(d, "iosched/writes_starved", "3");
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_WRITE, 6000);
	submit(d, RQ_OP_WRITE, 5000);
	for (uint64_t s = 100; s <= 800; s += 100)
		submit(d, RQ_OP_READ, s);
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, 10);
	dev_destroy(d);
}

/*
 * fifo_batch bounds a batch: with fifo_batch 3 and writes_starved 1, reads
 * and writes alternate in runs of three sorted requests (writes first: the
 * initial write batch, see test_writes_starved).
 */
static void test_fifo_batch_bounds_batch(void **state)
{
	static const uint64_t want[] = { 5000, 5100, 5200, 100, 200, 300,
					 5300, 5400, 5500, 400, 500, 600 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	dev_set(d, "iosched/fifo_batch", "3");
	dev_set(d, "iosched/writes_starved", "1");
	rq_queue_quiesce(d->m->q);
	for (uint64_t s = 0; s < 6; s++) {
		submit(d, RQ_OP_WRITE, 5500 - 100 * s);
		submit(d, RQ_OP_READ, 600 - 100 * s);
	}
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, 12);
	dev_destroy(d);
}

/*
 * A write's deadline (write_expire) also brings its FIFO head forward:
 * once expired the oldest write starts the next write batch.  A read sent
 * first ends the initial write batch (as in the kernel, a batch in
 * progress is continued without looking at deadlines).
 */
static void test_expired_write_first(void **state)
{
	static const uint64_t want[] = { 50000, 9000, 100, 200 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	dev_set(d, "iosched/write_expire", "1000");
	submit(d, RQ_OP_READ, 50000);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 1, 10000));
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_WRITE, 9000);   /* deadline 1 s */
	vclock_set_ms(500);
	submit(d, RQ_OP_WRITE, 100);
	submit(d, RQ_OP_WRITE, 200);
	vclock_set_ms(1200);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, 4);
	dev_destroy(d);
}

/*
 * front_merges: a bio ending where a queued request starts joins it (found
 * through the sorted tree, and the grown request is re-sorted) when
 * front_merges is 1; with 0 it becomes a request of its own.  A bio that
 * fills the gap between two queued requests merges all three.  The first
 * request inserted (1000) is the one-hit cache, which the kernel tries
 * whatever front_merges says: the front-merge candidate (108) comes second
 * so only the tree can find it.
 */
static void test_front_merges(void **state)
{
	static const uint64_t want_merged[] = { 100, 1000 };
	static const uint64_t want_apart[] = { 100, 108, 1000 };
	struct rq_queue_stats st;

	(void)state;
	for (unsigned fm = 0; fm < 2; fm++) {
		struct dl_dev *d = dev_create(64);
		struct mock_event ev;

		dev_set(d, "iosched/front_merges", fm ? "1" : "0");
		rq_queue_quiesce(d->m->q);
		submit(d, RQ_OP_READ, 1000);
		submit(d, RQ_OP_READ, 108);
		submit(d, RQ_OP_READ, 100);     /* ends at 108: a front merge */
		submit(d, RQ_OP_READ, 1016);
		submit(d, RQ_OP_READ, 1008);    /* back merge, then 1016 joins */
		vclock_set_ms(1);
		rq_queue_unquiesce(d->m->q);
		expect_order(d, fm ? want_merged : want_apart, fm ? 2 : 3);
		rq_queue_get_stats(d->m->q, &st, sizeof(st));
		assert_int_equal(st.merges_front, fm ? 1 : 0);
		assert_int_equal(st.merges_back, 1);
		assert_int_equal(st.merges_rq, 1);
		assert_true(mock_find(d->m, MOCK_QUEUE_RQ, 0, &ev));
		assert_int_equal(ev.bytes, fm ? 8192 : 4096);
		assert_true(mock_find(d->m, MOCK_QUEUE_RQ, fm ? 1 : 2, &ev));
		assert_int_equal(ev.sector, 1000);
		assert_int_equal(ev.bytes, 3 * 4096);
		dev_destroy(d);
	}
}

/* Pin the calling thread to @cpu. */
static void pin_to(unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
}

/*
 * An mq-deadline queue over two hardware queues (CPU 0 -> hw queue 0,
 * CPU 1 -> hw queue 1), deferred completion, quiesced, on the virtual
 * clock at 0; the thread's affinity saved in @old for the caller to put back.
 */
static struct dl_dev *two_hwq_dev(cpu_set_t *old)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .nr_hw_queues = 2 };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "mq-deadline" };
	struct dl_dev *d;

	assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(*old), old), 0);
	d = calloc(1, sizeof(*d));
	assert_non_null(d);
	vclock_set_ms(0);
	d->m = mock_create(&cfg, &qc);
	rq_queue_quiesce(d->m->q);
	return d;
}

/*
 * With two hardware queues (CPU 0 -> hw queue 0, CPU 1 -> hw queue 1),
 * merge state is per hardware queue: a bio submitted on CPU 1 does not
 * merge with a contiguous request queued on hw queue 0, while one
 * submitted on CPU 0 does (here a front merge).
 */
static void test_merges_per_hw_queue(void **state)
{
	struct rq_queue_stats st;
	struct dl_dev *d;
	cpu_set_t old;
	unsigned n;
	struct mock_event *ev;

	(void)state;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		skip();
	d = two_hwq_dev(&old);
	pin_to(0);
	submit(d, RQ_OP_READ, 100);     /* hw queue 0: sectors 100-107 */
	pin_to(1);
	submit(d, RQ_OP_READ, 108);     /* contiguous, but hw queue 1: apart */
	pin_to(0);
	submit(d, RQ_OP_READ, 92);      /* ends at 100, hw queue 0: front merge */
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
	rq_queue_unquiesce(d->m->q);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 2, 10000));
	n = mock_copy_events(d->m, MOCK_QUEUE_RQ, &ev);
	assert_int_equal(n, 2);
	for (unsigned i = 0; i < n; i++) {
		if (ev[i].sector == 92)
			assert_int_equal(ev[i].bytes, 8192);
		else
			assert_true(ev[i].sector == 108 && ev[i].bytes == 4096);
	}
	free(ev);
	rq_queue_get_stats(d->m->q, &st, sizeof(st));
	assert_int_equal(st.merges_front, 1);
	assert_int_equal(st.merges_back, 0);
	dev_destroy(d);
}

/*
 * With two hardware queues, bio_merge looks at the hardware queue the bio
 * maps to even when hw queue 0 holds nothing: requests queued on hw
 * queue 1 only (CPU 1) take a contiguous bio submitted on CPU 1 (a back
 * merge).  Fails when the empty-queue answer reads hw queue 0's counter
 * with several hardware queues.
 */
static void test_merge_second_hw_queue_only(void **state)
{
	struct rq_queue_stats st;
	struct mock_event *ev;
	struct dl_dev *d;
	cpu_set_t old;
	unsigned n;

	(void)state;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		skip();
	d = two_hwq_dev(&old);
	pin_to(1);
	submit(d, RQ_OP_READ, 100);     /* hw queue 1: sectors 100-107 */
	submit(d, RQ_OP_READ, 108);     /* hw queue 1, contiguous: back merge */
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
	rq_queue_unquiesce(d->m->q);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 1, 10000));
	n = mock_copy_events(d->m, MOCK_QUEUE_RQ, &ev);
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].sector, 100);
	assert_int_equal(ev[0].bytes, 8192);
	free(ev);
	rq_queue_get_stats(d->m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back, 1);
	dev_destroy(d);
}

/* RT requests go before BE (and NONE, which counts as BE), BE before IDLE. */
static void test_prio_classes(void **state)
{
	static const uint64_t want[] = { 300, 400, 150, 200, 100 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	rq_queue_quiesce(d->m->q);
	submit_len(d, RQ_OP_READ, 100, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0));
	submit_len(d, RQ_OP_READ, 200, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4));
	submit_len(d, RQ_OP_READ, 150, 4096, 0, 0);
	submit_len(d, RQ_OP_READ, 400, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0));
	submit_len(d, RQ_OP_READ, 300, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 2));
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, 5);
	dev_destroy(d);
}

/*
 * Priority aging: lower-class requests that have waited longer than
 * prio_aging_expire (10 s) go before fresh higher-class ones (the BE one
 * before the IDLE one); with a longer prio_aging_expire they wait.
 */
static void test_prio_aging(void **state)
{
	static const uint64_t want_aged[] = { 200, 100, 300, 400 };
	static const uint64_t want_strict[] = { 300, 400, 200, 100 };

	(void)state;
	for (unsigned round = 0; round < 2; round++) {
		struct dl_dev *d = dev_create(64);

		if (round)
			dev_set(d, "iosched/prio_aging_expire", "20000");
		rq_queue_quiesce(d->m->q);
		submit_len(d, RQ_OP_READ, 100, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0));
		submit_len(d, RQ_OP_READ, 200, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0));
		vclock_set_ms(10500);
		submit_len(d, RQ_OP_READ, 400, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0));
		submit_len(d, RQ_OP_READ, 300, 4096, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0));
		vclock_set_ms(10501);
		rq_queue_unquiesce(d->m->q);
		expect_order(d, round ? want_strict : want_aged, 4);
		dev_destroy(d);
	}
}

/* Count records that ended with @status. */
static unsigned count_status(struct dl_dev *d, unsigned from, unsigned to, int status)
{
	unsigned n = 0;

	for (unsigned i = from; i < to; i++)
		if (fx_done(&d->recs[i]) && d->recs[i].status == status)
			n++;
	return n;
}

/*
 * async_depth: asynchronous writes hold at most async_depth scheduler tags
 * (the rest fail with AGAIN under RQ_BIO_NOWAIT) while reads and sync
 * writes still get tags; the default is 3/4 of nr_requests, and changing
 * nr_requests resets it.
 */
static void test_async_depth(void **state)
{
	struct dl_dev *d = dev_create(64);
	char buf[32];

	(void)state;
	/* nr_requests = 2 * min(queue_depth, 128) = 128 */
	assert_true(rq_queue_attr_get(d->m->q, "nr_requests", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "128\n");
	assert_true(rq_queue_attr_get(d->m->q, "iosched/async_depth", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "96\n");
	dev_set(d, "iosched/async_depth", "16");

	for (unsigned i = 0; i < 40; i++)
		submit_len(d, RQ_OP_WRITE, 1000 + 100 * i, 4096, RQ_BIO_NOWAIT, 0);
	assert_int_equal(count_status(d, 0, 40, RQ_STS_AGAIN), 24);
	assert_true(mock_wait_held(d->m, 16, 10000));
	assert_int_equal(mock_nr_held(d->m), 16);

	/* synchronous I/O is not limited */
	for (unsigned i = 0; i < 8; i++)
		submit_len(d, RQ_OP_WRITE, 20000 + 100 * i, 4096, RQ_BIO_NOWAIT | RQ_BIO_SYNC, 0);
	for (unsigned i = 0; i < 8; i++)
		submit_len(d, RQ_OP_READ, 30000 + 100 * i, 4096, RQ_BIO_NOWAIT, 0);
	assert_true(mock_wait_held(d->m, 32, 10000));
	assert_int_equal(count_status(d, 40, 56, RQ_STS_AGAIN), 0);
	assert_int_equal(mock_nr_held(d->m), 32);

	/* tags come back: async writes fit again */
	mock_complete_all(d->m, RQ_STS_OK);
	submit_len(d, RQ_OP_WRITE, 50000, 4096, RQ_BIO_NOWAIT, 0);
	assert_true(mock_wait_held(d->m, 1, 10000));

	mock_complete_all(d->m, RQ_STS_OK);
	assert_true(fx_wait(d->recs, d->nr, 10000));
	dev_set(d, "nr_requests", "64");
	assert_true(rq_queue_attr_get(d->m->q, "iosched/async_depth", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "48\n");

	/* a depth that fills no word exactly: still exactly async_depth */
	dev_set(d, "nr_requests", "40");
	dev_set(d, "iosched/async_depth", "10");
	for (unsigned i = 0; i < 20; i++)
		submit_len(d, RQ_OP_WRITE, 60000 + 100 * i, 4096, RQ_BIO_NOWAIT, 0);
	assert_int_equal(count_status(d, d->nr - 20, d->nr, RQ_STS_AGAIN), 10);
	assert_true(mock_wait_held(d->m, 10, 10000));
	assert_int_equal(mock_nr_held(d->m), 10);
	mock_complete_all(d->m, RQ_STS_OK);
	dev_destroy(d);
}

/* The same limit holds inside a plug, which takes scheduler tags ahead in
 * batches: a batch for an async request takes only bits it may use, and a
 * bit taken ahead for a sync request is not handed to an async one. */
static void test_async_depth_plugged(void **state)
{
	struct dl_dev *d = dev_create(64);
	struct rq_plug plug;
	unsigned again;

	(void)state;
	dev_set(d, "iosched/async_depth", "8"); /* 4 bits of each 64-bit word */
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 40; i++)
		submit_len(d, RQ_OP_WRITE, 1000 + 100 * i, 4096, RQ_BIO_NOWAIT, 0);
	rq_finish_plug(&plug);
	assert_int_equal(count_status(d, 0, 40, RQ_STS_AGAIN), 32);
	assert_true(mock_wait_held(d->m, 8, 10000));
	assert_int_equal(mock_nr_held(d->m), 8);
	mock_complete_all(d->m, RQ_STS_OK);
	assert_true(fx_wait(d->recs, d->nr, 10000));

	/* a sync write first fills the plug's batch with any bits (8 of a
	 * word, from its lowest): the async writes may have only the low 4 */
	rq_start_plug(&plug);
	submit_len(d, RQ_OP_WRITE, 9000, 4096, RQ_BIO_NOWAIT | RQ_BIO_SYNC, 0);
	for (unsigned i = 0; i < 40; i++)
		submit_len(d, RQ_OP_WRITE, 10000 + 100 * i, 4096, RQ_BIO_NOWAIT, 0);
	rq_finish_plug(&plug);
	again = count_status(d, 41, 81, RQ_STS_AGAIN);
	assert_int_equal(count_status(d, 40, 41, RQ_STS_AGAIN), 0);
	assert_true(again >= 32);
	assert_true(mock_wait_held(d->m, 1 + 40 - again, 10000));
	assert_int_equal(mock_nr_held(d->m), 1 + 40 - again);
	mock_complete_all(d->m, RQ_STS_OK);
	dev_destroy(d);
}

/* Every tunable shows its default, takes a valid value, and refuses bad
 * ones with -EINVAL, keeping the old value. */
static void test_tunables(void **state)
{
	static const struct {
		const char *name, *def, *good;
		const char *bad[4];
	} t[] = {
		{ "read_expire", "500\n", "250", { "-1", "12x", "99999999999", "" } },
		{ "write_expire", "5000\n", "1", { "abc", " 5", "5 ", "1\n\n" } },
		{ "writes_starved", "2\n", "0", { "-2", "x", "2.5", "" } },
		{ "front_merges", "1\n", "0", { "2", "-1", "01x", "true" } },
		{ "fifo_batch", "16\n", "1", { "0", "-16", "1e3", "" } },
		{ "async_depth", "96\n", "128", { "0", "129", "1000", "z" } },
		{ "prio_aging_expire", "10000\n", "0", { "-5", "4294967296", "10s", "\n" } },
	};
	struct dl_dev *d = dev_create(64);
	struct rq_queue *q = d->m->q;
	char name[64], buf[32], want[32];

	(void)state;
	for (unsigned i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(name, sizeof(name), "iosched/%s", t[i].name);
		assert_true(rq_queue_attr_get(q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, t[i].def);
		assert_int_equal(rq_queue_attr_set(q, name, t[i].good), 0);
		snprintf(want, sizeof(want), "%s\n", t[i].good);
		assert_true(rq_queue_attr_get(q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, want);
		for (unsigned b = 0; b < 4; b++) {
			if (rq_queue_attr_set(q, name, t[i].bad[b]) != -EINVAL)
				fail_msg("%s accepted \"%s\"", name, t[i].bad[b]);
			assert_true(rq_queue_attr_get(q, name, buf, sizeof(buf)) > 0);
			assert_string_equal(buf, want);
		}
		/* a trailing newline is fine */
		snprintf(want, sizeof(want), "%s\n", t[i].good);
		assert_int_equal(rq_queue_attr_set(q, name, want), 0);
	}
	dev_destroy(d);
}

/*
 * RQ_INSERT_AT_HEAD: such requests skip sorting and go first, in the order
 * given.  Sector order then goes on from the start of the last of them
 * (800, the kernel's latest_pos): nothing lies above it, so the oldest
 * sorted request (300) starts the next batch, then 100 and 200.  The core inserts nothing at the head today (requeues go to the
 * hctx's dispatch list), so the hooks are driven directly with requests
 * made by hand on a quiesced queue.
 */
static void test_at_head_first(void **state)
{
	static const uint64_t sectors[] = { 300, 100, 200, 900, 800 };
	static const uint64_t want[] = { 900, 800, 300, 100, 200 };
	const struct rq_elevator_type *e = elevator_get("mq-deadline", RQ_ELV_F_MQ);
	struct dl_dev *d = dev_create(64);
	struct rq_hw_ctx *hctx = rq_queue_hctx(d->m->q, 0);
	struct rq_request rqs[5];
	struct rq_list_node list;

	(void)state;
	assert_non_null(e);
	rq_queue_quiesce(d->m->q);
	memset(rqs, 0, sizeof(rqs));
	for (unsigned i = 0; i < 5; i++) {
		struct rq_request *rq = &rqs[i];

		rq->q = d->m->q;
		rq->hctx = hctx;
		rq->op = RQ_OP_READ;
		rq->sector = sectors[i];
		rq->bytes = 4096;
		rq->tag = rq->internal_tag = -1;
		rq->rq_flags = RQ_RQF_ELVPRIV | RQ_RQF_SORTED;
		rq_rb_clear_node(&rq->rb_node);
		rq_list_init(&rq->queuelist);
	}
	rq_list_init(&list);
	for (unsigned i = 0; i < 3; i++)
		rq_list_add_tail(&rqs[i].queuelist, &list);
	e->ops.insert_requests(hctx, &list, 0);
	for (unsigned i = 3; i < 5; i++)
		rq_list_add_tail(&rqs[i].queuelist, &list);
	e->ops.insert_requests(hctx, &list, RQ_INSERT_AT_HEAD);
	assert_true(rq_list_empty(&list));

	for (unsigned i = 0; i < 5; i++) {
		struct rq_request *rq;

		assert_true(e->ops.has_work(hctx));
		rq = e->ops.dispatch_request(hctx);
		assert_non_null(rq);
		assert_int_equal(rq->sector, want[i]);
		assert_false(rq->rq_flags & RQ_RQF_HASHED);
	}
	assert_false(e->ops.has_work(hctx));
	assert_null(e->ops.dispatch_request(hctx));
	rq_queue_unquiesce(d->m->q);
	elevator_put(e);
	dev_destroy(d);
}

/*
 * Sector order goes on from the START of the request sent last (the
 * kernel's latest_pos / deadline_from_pos), not its end: a request that
 * arrives after 100 [100, 108) was sent and starts inside it (104) goes
 * before one further up (200).  Measured from the end (108), 200 would go
 * first and 104 only when the sweep wrapped to the FIFO.
 */
static void test_sweep_from_start(void **state)
{
	static const uint64_t want[] = { 100, 104, 200 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	submit(d, RQ_OP_READ, 100);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 1, 10000));
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_READ, 200);
	submit(d, RQ_OP_READ, 104);
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, 3);
	dev_destroy(d);
}

/*
 * The batch and the position survive the queue running empty, as the
 * kernel's dd->batching and latest_pos do: with fifo_batch 2, a burst of
 * one read leaves a batch with one request to go; the next burst (reads
 * and an older write queued together) continues it with the read at or
 * after the last position (300), then the write batch starts (writes had
 * waited writes_starved 0 batches), then the read below (50).
 */
static void test_batch_carries_over(void **state)
{
	static const uint64_t want[] = { 100, 300, 9000, 50 };
	struct dl_dev *d = dev_create(64);

	(void)state;
	dev_set(d, "iosched/fifo_batch", "2");
	dev_set(d, "iosched/writes_starved", "0");
	submit(d, RQ_OP_READ, 50000);  /* ends the initial write batch */
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 1, 10000));
	mock_complete_one(d->m, 0, RQ_STS_OK);
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_READ, 100);
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 2, 10000));
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_WRITE, 9000);
	submit(d, RQ_OP_READ, 50);
	submit(d, RQ_OP_READ, 300);
	vclock_set_ms(2);
	rq_queue_unquiesce(d->m->q);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 5, 10000));
	{
		struct mock_event *ev;
		unsigned got = mock_copy_events(d->m, MOCK_QUEUE_RQ, &ev);

		assert_int_equal(got, 5);
		for (unsigned i = 0; i < 4; i++)
			assert_int_equal(ev[i + 1].sector, want[i]);
		free(ev);
	}
	dev_destroy(d);
}

/*
 * nomerges 1 leaves the one-hit cache as the only merge path, and an
 * insert makes the new request the cache when it is empty (the kernel's
 * dd_insert_request: "if (!q->last_merge) q->last_merge = rq"): a bio
 * contiguous with the one queued request joins it.
 */
static void test_insert_fills_merge_cache(void **state)
{
	struct rq_queue_stats st;
	struct mock_event ev;
	struct dl_dev *d = dev_create(64);

	(void)state;
	dev_set(d, "nomerges", "1");
	rq_queue_quiesce(d->m->q);
	submit(d, RQ_OP_WRITE, 100);
	submit(d, RQ_OP_WRITE, 108);   /* back merge through the cache */
	submit(d, RQ_OP_WRITE, 92);    /* front merge through the cache */
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, 1, 10000));
	rq_queue_get_stats(d->m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back, 1);
	assert_int_equal(st.merges_front, 1);
	assert_true(mock_find(d->m, MOCK_QUEUE_RQ, 0, &ev));
	assert_int_equal(ev.sector, 92);
	assert_int_equal(ev.bytes, 3 * 4096);
	dev_destroy(d);
}

/* Reads and writes keep their own deadlines, and the queue drains fully
 * when requests complete one by one through a depth-1 device. */
static void test_drain_one_by_one(void **state)
{
	struct dl_dev *d = dev_create(1);
	unsigned n = 0;

	(void)state;
	dev_set(d, "nr_requests", "64"); /* 2 scheduler tags by default at depth 1 */
	rq_queue_quiesce(d->m->q);
	for (unsigned i = 0; i < 20; i++)
		submit(d, i & 1 ? RQ_OP_WRITE : RQ_OP_READ, 10000 - 100 * i);
	vclock_set_ms(1);
	rq_queue_unquiesce(d->m->q);
	while (n < 20) {
		assert_true(mock_wait_held(d->m, 1, 10000));
		mock_complete_one(d->m, 0, RQ_STS_OK);
		n++;
	}
	assert_true(fx_wait(d->recs, d->nr, 10000));
	assert_int_equal(count_status(d, 0, 20, RQ_STS_OK), 20);
	dev_destroy(d);
}

/* ------------------------------------------------ dispatch_requests twin */

#define TWIN_RQS 48

/*
 * Two mq-deadline queues fed the same hand-made requests through the hooks
 * (on quiesced queues, as test_at_head_first): one is drained with
 * dispatch_requests() in small bites, the other with dispatch_request()
 * one at a time, which never takes a batch's rest straight from a run.
 */
struct twin {
	struct dl_dev *d;
	struct rq_hw_ctx *hctx;
	struct rq_request rqs[TWIN_RQS];
};

static void twin_init(struct twin *t)
{
	t->d = dev_create(64);
	t->hctx = rq_queue_hctx(t->d->m->q, 0);
	memset(t->rqs, 0, sizeof(t->rqs));
	dev_set(t->d, "iosched/fifo_batch", "2");
	rq_queue_quiesce(t->d->m->q);
}

/* Insert request @i of each entry of @idx (@n of them) as one list. */
static void twin_insert(struct twin *t, const struct rq_elevator_type *e, const unsigned *idx,
			unsigned n, unsigned flags)
{
	struct rq_list_node list;

	rq_list_init(&list);
	for (unsigned k = 0; k < n; k++) {
		struct rq_request *rq = &t->rqs[idx[k]];
		unsigned i = idx[k];

		rq->q = t->d->m->q;
		rq->hctx = t->hctx;
		rq->op = i % 5 == 4 || i == 26 || i == 29 ? RQ_OP_WRITE : RQ_OP_READ;
		rq->ioprio = i >= 32 ? RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0) : 0;
		/* scrambled, 4 KiB apart, never touching */
		rq->sector = (uint64_t)((i * 37) % TWIN_RQS) * 16;
		rq->bytes = 4096;
		rq->start_time_ns = 0;
		rq->tag = rq->internal_tag = -1;
		rq->rq_flags = RQ_RQF_ELVPRIV | RQ_RQF_SORTED;
		rq_rb_clear_node(&rq->rb_node);
		rq_list_init(&rq->queuelist);
		rq_list_add_tail(&rq->queuelist, &list);
	}
	e->ops.insert_requests(t->hctx, &list, flags);
	assert_true(rq_list_empty(&list));
}

/* Up to @n requests from @a (bites of @bite) and @b (one by one): the same. */
static unsigned twin_dispatch(struct twin *a, struct twin *b, const struct rq_elevator_type *e,
			      unsigned n, unsigned bite)
{
	struct rq_request *got_a[TWIN_RQS], *got_b[TWIN_RQS];
	unsigned na = 0, nb = 0;

	while (na < n) {
		struct rq_list_node list;
		unsigned got, want = n - na < bite ? n - na : bite;

		rq_list_init(&list);
		got = e->dispatch_requests(a->hctx, &list, want);
		assert_true(got <= want);
		for (unsigned k = 0; k < got; k++) {
			struct rq_request *rq = rq_list_first_rq(&list);

			rq_list_del_init(&rq->queuelist);
			got_a[na++] = rq;
		}
		assert_true(rq_list_empty(&list));
		if (got < want)
			break;
	}
	while (nb < n) {
		struct rq_request *rq = e->ops.dispatch_request(b->hctx);

		if (!rq)
			break;
		got_b[nb++] = rq;
	}
	assert_int_equal(na, nb);
	for (unsigned k = 0; k < na; k++)
		if (got_a[k] - a->rqs != got_b[k] - b->rqs)
			fail_msg("dispatch #%u: request %td in bites, %td one by one", k,
				 got_a[k] - a->rqs, got_b[k] - b->rqs);
	return na;
}

/*
 * dispatch_requests() takes the rest of a batch served from a sorted run
 * without deciding again, but only while nothing else could decide.  With
 * fifo_batch 2, runs of reads and writes (the fresh scheduler's write
 * batch must stop after 2 writes, and reads must give way to the writes
 * after writes_starved batches), two writes inserted at the head in the
 * middle of a read batch (both go before the batch goes on), then runs of
 * two classes: bites of 3 give exactly what one request at a time gives.
 * (tests/sched/test_dl_runs.c checks the same against the tree-only
 * scheduler on a long random script.)
 */
static void test_dispatch_requests_same_order(void **state)
{
	static const unsigned first[] = { 3, 17, 9, 0, 12, 5, 22, 14, 1, 19, 7, 10, 24, 2, 16 };
	static const unsigned head[] = { 26, 29 };
	static const unsigned mixed[] = { 33, 4, 35, 11, 40, 6, 37, 13, 44, 8, 18, 41, 20, 21, 23 };
	const struct rq_elevator_type *e = elevator_get("mq-deadline", RQ_ELV_F_MQ);
	struct twin a, b;

	(void)state;
	assert_non_null(e);
	assert_non_null(e->dispatch_requests);
	twin_init(&a);
	twin_init(&b);
	twin_insert(&a, e, first, 15, 0);
	twin_insert(&b, e, first, 15, 0);
	assert_int_equal(twin_dispatch(&a, &b, e, 5, 3), 5);
	twin_insert(&a, e, head, 2, RQ_INSERT_AT_HEAD);
	twin_insert(&b, e, head, 2, RQ_INSERT_AT_HEAD);
	assert_int_equal(twin_dispatch(&a, &b, e, TWIN_RQS, 3), 12);
	assert_null(e->ops.dispatch_request(a.hctx));

	/* runs of BE and IDLE, the IDLE ones past prio_aging_expire */
	vclock_set_ms(20000);
	twin_insert(&a, e, mixed, 15, 0);
	twin_insert(&b, e, mixed, 15, 0);
	assert_int_equal(twin_dispatch(&a, &b, e, TWIN_RQS, 3), 15);
	assert_false(e->ops.has_work(a.hctx));
	assert_false(e->ops.has_work(b.hctx));

	rq_queue_unquiesce(a.d->m->q);
	rq_queue_unquiesce(b.d->m->q);
	elevator_put(e);
	dev_destroy(a.d);
	dev_destroy(b.d);
}

/* ------------------------------------------------ run streaks (plugged) */

/*
 * A plugged batch inserted into an empty hardware queue becomes a sorted
 * run, and dispatch hands its requests out in a streak that also makes
 * the batch's foregone choices (dl_streak_next()).  These tests check the
 * driver's order against the kernel's rules where a streak could go
 * wrong: across batch boundaries, with expired FIFO heads, and with the
 * other direction queued.
 */

/* One plug of 4 KiB bios at @sectors (@ops[i], or all reads if NULL). */
static void submit_plugged(struct dl_dev *d, const uint64_t *sectors, const unsigned *ops,
			   unsigned n)
{
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		submit_len(d, ops ? ops[i] : RQ_OP_READ, sectors[i], 4096, 0, 0);
	rq_finish_plug(&plug);
}

/*
 * A fresh device (@fifo_batch, writes_starved 2), quiesced; one plug of
 * @n bios; the driver must see @want once the queue runs at @at_ms.
 */
static void run_case(const char *fifo_batch, const uint64_t *sectors, const unsigned *ops,
		     unsigned n, uint64_t at_ms, const uint64_t *want)
{
	struct dl_dev *d = dev_create(64);

	dev_set(d, "iosched/fifo_batch", fifo_batch);
	dev_set(d, "iosched/writes_starved", "2");
	rq_queue_quiesce(d->m->q);
	submit_plugged(d, sectors, ops, n);
	vclock_set_ms(at_ms);
	rq_queue_unquiesce(d->m->q);
	expect_order(d, want, n);
	dev_destroy(d);
}

/* Arrival order differs from sector order, so FIFO and sort disagree. */
static const uint64_t arrival[] = { 9000, 1000, 7000, 2000, 6000, 3000, 8000, 4000, 5000 };
#define NR_ARRIVAL (sizeof(arrival) / sizeof(arrival[0]))

/*
 * Before any deadline, a run of 9 goes out in sector order through
 * batches of 2: every new batch continues at the next sector.  A run of
 * 32 scattered sectors (some sharing a bucket of the sort) comes out
 * sorted too.
 */
static void test_run_in_sector_order(void **state)
{
	static const uint64_t sorted[] = { 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000 };
	uint64_t big[32], big_sorted[32];

	(void)state;
	run_case("2", arrival, NULL, NR_ARRIVAL, 1, sorted);
	/*
	 * (i * 13) % 32 is a permutation: the odd ones packed below 512 (one
	 * bucket of the sort), the even ones spread over a million sectors.
	 */
	for (unsigned i = 0; i < 32; i++) {
		uint64_t r = (i * 13u) % 32u;

		big[i] = i & 1 ? 16 * r : 500000 + 16000 * r;
	}
	memcpy(big_sorted, big, sizeof(big));
	for (unsigned i = 1; i < 32; i++)
		for (unsigned j = i; j && big_sorted[j - 1] > big_sorted[j]; j--) {
			uint64_t t = big_sorted[j];

			big_sorted[j] = big_sorted[j - 1];
			big_sorted[j - 1] = t;
		}
	for (unsigned i = 1; i < 32; i++)
		assert_true(big_sorted[i - 1] + 8 < big_sorted[i]); /* no merges, no touching */
	run_case("16", big, NULL, 32, 1, big_sorted);
}

/*
 * Past read_expire (500 ms) every new batch starts at the FIFO head, also
 * where the run's streak would go on in sector order: with fifo_batch 2,
 * the kernel's order is head, its successor, next head, ...  (a head with
 * nothing above it makes a batch of one).
 */
static void test_expired_head_preempts_streak(void **state)
{
	static const uint64_t want[] = { 9000, 1000, 2000, 7000, 8000, 6000, 3000, 4000, 5000 };

	(void)state;
	run_case("2", arrival, NULL, NR_ARRIVAL, 600, want);
}

/*
 * With writes queued a read batch boundary is a real decision: after
 * writes_starved (2) read batches of fifo_batch (2) the oldest write
 * goes, then reads again.  The first batch is a write batch (a fresh
 * scheduler's last direction is write, as in the kernel).
 */
static void test_write_stops_read_streak(void **state)
{
	static const uint64_t sectors[] = { 5000, 6000, 7000, 100, 200, 300, 400, 500, 600, 700,
					    800 };
	static const unsigned ops[] = { RQ_OP_WRITE, RQ_OP_WRITE, RQ_OP_WRITE, RQ_OP_READ,
					RQ_OP_READ,  RQ_OP_READ,  RQ_OP_READ,  RQ_OP_READ,
					RQ_OP_READ,  RQ_OP_READ,  RQ_OP_READ };
	static const uint64_t want[] = { 5000, 6000, 100, 200, 300, 400, 7000, 500, 600, 700, 800 };

	(void)state;
	run_case("2", sectors, ops, 11, 1, want);
}

/*
 * A streak walks a run's live entries and skips the ones a full decision
 * already took out of its middle.  Past read_expire, fifo_batch 3: the
 * expired head 5000 starts a batch (5000, 6000, 7000), the next head 9000
 * has nothing above it (a batch of one), 1000 starts the next (1000,
 * 2000, 3000), and the last, from head 4000, goes on at 8000 past the
 * three taken above 4000.  A take that did not skip them would hand out
 * a request twice or stop at the hole.
 */
static void test_streak_skips_taken_entries(void **state)
{
	static const uint64_t sectors[] = { 5000, 9000, 1000, 2000, 3000, 4000, 6000, 7000, 8000 };
	static const uint64_t want[] = { 5000, 6000, 7000, 9000, 1000, 2000, 3000, 4000, 8000 };

	(void)state;
	run_case("3", sectors, NULL, 9, 600, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sorted_within_batch),
		cmocka_unit_test(test_expired_read_first),
		cmocka_unit_test(test_writes_starved),
		cmocka_unit_test(test_fifo_batch_bounds_batch),
		cmocka_unit_test(test_expired_write_first),
		cmocka_unit_test(test_front_merges),
		cmocka_unit_test(test_merges_per_hw_queue),
		cmocka_unit_test(test_merge_second_hw_queue_only),
		cmocka_unit_test(test_prio_classes),
		cmocka_unit_test(test_prio_aging),
		cmocka_unit_test(test_async_depth),
		cmocka_unit_test(test_async_depth_plugged),
		cmocka_unit_test(test_tunables),
		cmocka_unit_test(test_at_head_first),
		cmocka_unit_test(test_drain_one_by_one),
		cmocka_unit_test(test_sweep_from_start),
		cmocka_unit_test(test_batch_carries_over),
		cmocka_unit_test(test_insert_fills_merge_cache),
		cmocka_unit_test(test_dispatch_requests_same_order),
		cmocka_unit_test(test_run_in_sector_order),
		cmocka_unit_test(test_expired_head_preempts_streak),
		cmocka_unit_test(test_write_stops_read_streak),
		cmocka_unit_test(test_streak_skips_taken_entries),
	};

	rq_clock_set_source(vclock, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
