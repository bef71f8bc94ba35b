/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cfq against the simulated single-queue device of tests/common/sq_driver.h.
 *
 * Nothing here depends on wall-clock time for its outcome: the library's
 * clock is the device's virtual clock, the device (CLOCK mode, depth 1)
 * serves one request at a time for a fixed virtual cost (plus a seek cost
 * where a test models one), and the test moves the clock in small steps,
 * submitting for each "stream" (an io context) as its think time allows and
 * running the queue after every step so idle windows end on the virtual
 * clock.  There is no service thread (rq_service_manual() in main): the
 * device ends requests, and the streams count them in end_io, on the test's
 * thread, and the service work (the delayed run that ends a cfq idle
 * window, the core's safety-net re-run) is done there too, by
 * rq_service_run() after every step, at the virtual moment it falls due.
 * cfq's fallback that ends an idle window on the real clock after twice its
 * length is then on the library clock as well, so only the virtual window
 * counts, however slowly the build runs.
 *
 * Proportions are measured as requests served per stream in a window after
 * a warm-up; every request costs the same device time there, so requests
 * are device time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "sq_driver.h"

#define US 1000ull
#define MS 1000000ull

static uint8_t scratch[1u << 16];

/* ------------------------------------------------------------ service */


/*
 * Move the virtual clock on by @ns (the device ends what it finishes
 * meanwhile), do the service work due by then, and run the queue.
 */
static void step(struct sq_dev *d, uint64_t ns)
{
	sq_advance(d, ns);
	fx_service_due();
	rq_sq_run_queue(d->q);
}

/* ------------------------------------------------------------ streams */

/**
 * struct stream - one submitter: an io context reading a region of the
 * device, sequentially or at random, keeping up to @depth bios queued and
 * waiting @think_ns after a completion before the next submission.
 */
struct stream {
	struct rq_io_context *ioc;
	unsigned op;
	uint64_t base, span;         /* region, sectors */
	bool random;
	unsigned sectors;            /* per bio */
	unsigned depth;
	uint64_t think_ns;

	unsigned stride;             /* sequential: sectors from one bio to the next */
	uint64_t next;               /* next sequential sector */
	unsigned inflight;
	uint64_t ready_at;
	unsigned long done;
	uint32_t rng;
	struct rq_bio *ended[64];    /* bios to give back */
	unsigned nr_ended;
};

static void stream_end_io(struct rq_bio *bio)
{
	struct stream *s = bio->private_data;

	if (bio->status != RQ_STS_OK)
		fail_msg("bio ended with %d", bio->status);
	s->inflight--;
	s->done++;
	s->ready_at = sq_clock_now() + s->think_ns;
	if (s->nr_ended < 64)
		s->ended[s->nr_ended++] = bio;
}

static void stream_init(struct stream *s, uint16_t ioprio, uint64_t base, bool random,
			unsigned depth, uint64_t think_ns)
{
	memset(s, 0, sizeof(*s));
	s->ioc = rq_ioc_create(ioprio);
	assert_non_null(s->ioc);
	s->op = RQ_OP_READ;
	s->base = base;
	s->span = 1u << 20;
	s->random = random;
	s->sectors = 8;
	s->depth = depth;
	s->think_ns = think_ns;
	s->stride = 2 * s->sectors;  /* a gap of one bio: never merged */
	s->next = base;
	s->rng = (uint32_t)base * 2654435761u + 1;
}

static void stream_submit(struct sq_dev *d, struct stream *s)
{
	struct rq_bio *bio = rq_bio_alloc(1);
	uint64_t sector;

	assert_non_null(bio);
	if (s->random) {
		s->rng = s->rng * 1103515245u + 12345u;
		sector = s->base + ((uint64_t)(s->rng >> 8) % (s->span / s->sectors)) * s->sectors;
	} else {
		sector = s->next;
		s->next += s->stride;
	}
	bio->op = (uint8_t)s->op;
	bio->iter.sector = sector;
	assert_int_equal(rq_bio_add_vec(bio, scratch, s->sectors << 9), 0);
	bio->iter.size = s->sectors << 9;
	bio->ioc = s->ioc;
	bio->end_io = stream_end_io;
	bio->private_data = s;
	s->inflight++;
	rq_submit_bio(d->q, bio);
}

static void stream_reap(struct stream *s)
{
	for (unsigned i = 0; i < s->nr_ended; i++)
		rq_bio_put(s->ended[i]);
	s->nr_ended = 0;
}

static void stream_fini(struct stream *s)
{
	stream_reap(s);
	rq_ioc_put(s->ioc);
}

/*
 * Run the streams for @ns of virtual time in steps of @step_ns: top every
 * stream up, let the device serve, run the queue (idle windows end).
 */
static void simulate(struct sq_dev *d, struct stream *s, unsigned n, uint64_t ns,
		     uint64_t step_ns)
{
	uint64_t end = sq_clock_now() + ns;

	while (sq_clock_now() < end) {
		for (unsigned i = 0; i < n; i++) {
			stream_reap(&s[i]);
			while (s[i].inflight < s[i].depth && sq_clock_now() >= s[i].ready_at)
				stream_submit(d, &s[i]);
		}
		step(d, step_ns);
	}
}

/* Let everything in flight finish (virtual time), then stop the streams. */
static void settle(struct sq_dev *d, struct stream *s, unsigned n)
{
	for (unsigned k = 0; k < 100000; k++) {
		unsigned busy = 0;

		for (unsigned i = 0; i < n; i++)
			busy += s[i].inflight;
		if (!busy)
			return;
		step(d, 100 * US);
	}
	fail_msg("requests never finished");
}

static struct sq_dev *make_disk(uint64_t service_ns, uint64_t seek_ns)
{
	static struct rq_queue_limits lim;
	struct sq_config c = {
		.mode = SQ_MODE_CLOCK,
		.depth = 1,
		.scheduler = "cfq",
		.service_ns = service_ns,
		.seek_ns = seek_ns,
		.capacity = 1ull << 30,
		.limits = &lim,
	};

	memset(&lim, 0, sizeof(lim));

	lim.size = sizeof(lim);
	lim.features = RQ_FEAT_ROTATIONAL;
	return sq_create(&c);
}

static void set_attr(struct sq_dev *d, const char *name, const char *val)
{
	int ret = rq_queue_attr_set(d->q, name, val);

	if (ret)
		fail_msg("setting %s to %s: %d", name, val, ret);
}

static void expect_ratio(const char *what, double got, double want, double tol)
{
	print_message("%s: %.2f (want %.2f +- %.0f%%)\n", what, got, want, tol * 100);
	if (got < want * (1 - tol) || got > want * (1 + tol))
		fail_msg("%s: ratio %.3f, want %.3f +- %.0f%%", what, got, want, tol * 100);
}

/* ==================================================== proportional shares */

/*
 * Two backlogged sequential readers of BE levels 0 and 7 alternate slices
 * of 100 + 20 * (4 - level) ms: 180 ms and 40 ms, so 4.5 : 1 of the disk.
 * Tolerance 10%: each slice can overrun by the one request in flight when
 * it ends and starts only at the queue's first completion (one more request
 * of 1 ms), so per 220 ms round the split moves by at most ~2 ms either way
 * (about 5%); the rest is the partial rounds at the edges of the window.
 */
static void test_prio_levels(void **state)
{
	struct sq_dev *d = make_disk(1 * MS, 0);
	struct stream s[2];

	stream_init(&s[0], RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0), 0, false, 8, 0);
	stream_init(&s[1], RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 7), 1u << 24, false, 8, 0);
	simulate(d, s, 2, 500 * MS, 100 * US);
	s[0].done = s[1].done = 0;
	simulate(d, s, 2, 4400 * MS, 100 * US);
	assert_true(s[1].done > 0);
	expect_ratio("BE0 : BE7", (double)s[0].done / (double)s[1].done, 180.0 / 40.0, 0.10);
	settle(d, s, 2);
	stream_fini(&s[0]);
	stream_fini(&s[1]);
	sq_destroy(d);
}

/*
 * Two io groups of weights 1000 and 100, one backlogged reader each: the
 * group tree charges each group its used time scaled by 100 / weight and
 * serves the least charged, so the disk splits 10 : 1.  The heavy group's
 * reader gets 100 ms slices; the light one 300 * 100 / 1100 = 27 ms (its
 * share of target_latency, low_latency).  Tolerance 15%: a slice starts at
 * the queue's first completion and is charged at most its length, so each
 * turn also gives one or two uncharged 1 ms requests - 2 ms on a 27 ms
 * slice, ~7% in favour of the light group (9.3 : 1 is what the model
 * gives); and the edges of the 6 s window can cut one slice of either
 * group (27 ms of ~550 ms is 5%).
 */
static void test_group_weights(void **state)
{
	struct sq_dev *d = make_disk(1 * MS, 0);
	struct rq_io_group *g[2] = { rq_iog_create(1000), rq_iog_create(100) };
	struct stream s[2];

	assert_non_null(g[0]);
	assert_non_null(g[1]);
	for (unsigned i = 0; i < 2; i++) {
		stream_init(&s[i], 0, (uint64_t)i << 24, false, 8, 0);
		assert_int_equal(rq_ioc_set_group(s[i].ioc, g[i]), 0);
		rq_iog_put(g[i]); /* the contexts hold their groups */
	}
	simulate(d, s, 2, 500 * MS, 100 * US);
	s[0].done = s[1].done = 0;
	simulate(d, s, 2, 6000 * MS, 100 * US);
	assert_true(s[1].done > 0);
	expect_ratio("weight 1000 : 100", (double)s[0].done / (double)s[1].done, 10.0, 0.15);
	settle(d, s, 2);
	stream_fini(&s[0]);
	stream_fini(&s[1]);
	sq_destroy(d);
}

/* ================================================================ idling */

/*
 * A sequential reader (one request at a time, 0.2 ms think time) against a
 * random reader on a disk where a seek costs 8 ms and a request 0.5 ms.
 * With slice_idle 8 ms cfq waits for the sequential reader's next request,
 * which comes 0.2 ms later and needs no seek: it keeps its whole slice.
 * With slice_idle 0 the disk goes to the random reader after every request,
 * and each sequential request pays two seeks.  Expect at least 3x (the
 * model gives ~10x: ~180 vs ~18 requests per 100 ms of its own slice).
 */
static unsigned long run_seq_vs_random(const char *slice_idle, unsigned long *random_done)
{
	struct sq_dev *d = make_disk(500 * US, 8 * MS);
	struct stream s[2];
	unsigned long seq;

	set_attr(d, "iosched/slice_idle", slice_idle);
	stream_init(&s[0], 0, 0, false, 1, 200 * US);
	s[0].stride = s[0].sectors; /* contiguous: no seek on the disk */
	stream_init(&s[1], 0, 1u << 24, true, 1, 200 * US);
	simulate(d, s, 2, 300 * MS, 100 * US);
	s[0].done = s[1].done = 0;
	simulate(d, s, 2, 3000 * MS, 100 * US);
	seq = s[0].done;
	*random_done = s[1].done;
	settle(d, s, 2);
	stream_fini(&s[0]);
	stream_fini(&s[1]);
	sq_destroy(d);
	return seq;
}

static void test_idling_keeps_sequential(void **state)
{
	unsigned long r_idle, r_noidle;
	unsigned long idle = run_seq_vs_random("8", &r_idle);
	unsigned long noidle = run_seq_vs_random("0", &r_noidle);

	print_message("sequential reader: %lu requests with slice_idle 8, %lu with 0 "
		      "(random reader: %lu, %lu)\n", idle, noidle, r_idle, r_noidle);
	assert_true(noidle > 0);
	assert_true(idle >= 3 * noidle);
	/* the random reader is not starved either way */
	assert_true(r_idle > 0 && r_noidle > 0);
}

/* ================================================== classes, fifo, merges */

/* Requests queued by an IDLE, a BE and an RT reader go RT, then BE, then IDLE. */
static void test_class_order(void **state)
{
	struct sq_dev *d = make_disk(1 * MS, 0);
	static const uint16_t prio[3] = {
		RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0),
		RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4),
		RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 4),
	};
	struct stream s[3];
	struct mock_event *ev;
	unsigned n, last_rank = 0;

	sq_pause(d, true);
	for (unsigned i = 0; i < 3; i++) {
		stream_init(&s[i], prio[i], (uint64_t)i << 24, false, 4, 0);
		for (unsigned k = 0; k < 4; k++)
			stream_submit(d, &s[i]);
	}
	sq_pause(d, false);
	settle(d, s, 3);
	n = sq_copy_events(d, &ev);
	assert_int_equal(n, 12);
	for (unsigned i = 0; i < n; i++) {
		/* region 2 is RT (rank 0), 1 BE (rank 1), 0 IDLE (rank 2) */
		unsigned rank = 2 - (unsigned)(ev[i].sector >> 24);

		if (rank < last_rank)
			fail_msg("dispatch %u: class rank %u after %u", i, rank, last_rank);
		last_rank = rank;
	}
	free(ev);
	for (unsigned i = 0; i < 3; i++)
		stream_fini(&s[i]);
	sq_destroy(d);
}

/*
 * An old request far behind the head is passed over by sector order (it is
 * beyond back_seek_max) until a slice begins with its FIFO expired: it is
 * served then, ahead of younger requests, no earlier than fifo_expire_sync
 * after it was queued.  With the expiry out of reach it goes last.
 */
static int fifo_position(const char *fifo_expire, uint64_t *wait_ns)
{
	struct sq_dev *d = make_disk(10 * MS, 0);
	struct stream s;
	struct mock_event *ev;
	uint64_t t0;
	int pos = -1;
	unsigned n;

	set_attr(d, "iosched/fifo_expire_sync", fifo_expire);
	stream_init(&s, 0, 200000, false, 64, 0);
	stream_submit(d, &s);           /* taken by the device at once */
	assert_int_equal(sq_nr_held(d), 1);
	t0 = sq_clock_now();
	s.base = 0;                     /* the old one, far behind */
	{
		uint64_t next = s.next;

		s.next = 0;
		stream_submit(d, &s);
		s.next = next;
	}
	for (unsigned k = 0; k < 30; k++)
		stream_submit(d, &s);
	settle(d, &s, 1);
	n = sq_copy_events(d, &ev);
	assert_int_equal(n, 32);
	for (unsigned i = 0; i < n; i++)
		if (ev[i].sector == 0) {
			pos = (int)i;
			*wait_ns = ev[i].when_ns - t0;
		}
	free(ev);
	stream_fini(&s);
	sq_destroy(d);
	return pos;
}

static void test_fifo_expiry(void **state)
{
	uint64_t wait = 0;
	int pos = fifo_position("125", &wait);

	print_message("expired request served at position %d after %llu ms\n", pos,
		      (unsigned long long)(wait / MS));
	assert_true(pos > 0 && pos < 31);
	assert_true(wait >= 125 * MS);
	/* within a slice (100 ms) and a request of the expiry */
	assert_true(wait <= (125 + 100 + 2 * 10) * MS);
	pos = fifo_position("3600000", &wait);
	assert_int_equal(pos, 31);
}

/*
 * Merges stay inside one cfq queue: a read contiguous with another
 * context's read is not merged into it; one in front of the same context's
 * read is (through cfq's sector tree).
 */
static void test_merges_per_queue(void **state)
{
	struct sq_dev *d = make_disk(1 * MS, 0);
	struct stream a, b;
	struct rq_queue_stats st;
	struct mock_event *ev;
	unsigned n;

	stream_init(&a, 0, 0, false, 8, 0);
	stream_init(&b, 0, 0, false, 8, 0);
	sq_pause(d, true);
	a.next = 100;
	stream_submit(d, &a);           /* A: 100..108 */
	b.next = 108;
	stream_submit(d, &b);           /* B: 108..116, contiguous but B's */
	a.next = 92;
	stream_submit(d, &a);           /* A: 92..100, front of A's */
	sq_pause(d, false);
	for (unsigned k = 0; k < 100000 && (a.inflight || b.inflight); k++)
		step(d, 100 * US);
	n = sq_copy_events(d, &ev);
	assert_int_equal(n, 2);
	for (unsigned i = 0; i < n; i++) {
		if (ev[i].sector == 92)
			assert_int_equal(ev[i].bytes, 16 << 9);
		else
			assert_int_equal(ev[i].sector, 108);
	}
	free(ev);
	rq_queue_get_stats(d->q, &st, sizeof(st));
	assert_int_equal(st.merges_front, 1);
	assert_int_equal(st.merges_back, 0);
	assert_int_equal(a.inflight + b.inflight, 0);
	stream_fini(&a);
	stream_fini(&b);
	sq_destroy(d);
}

/*
 * Contexts and groups the application drops while their requests are
 * queued stay valid until cfq lets go (run it under ASan / valgrind).
 */
static void test_dropped_contexts(void **state)
{
	struct sq_dev *d = make_disk(1 * MS, 0);
	struct rq_io_group *g = rq_iog_create(300);
	struct stream s[3];

	for (unsigned i = 0; i < 3; i++) {
		stream_init(&s[i], 0, (uint64_t)i << 24, i == 2, 4, 0);
		if (i == 1)
			rq_ioc_set_group(s[i].ioc, g);
	}
	rq_iog_put(g);
	simulate(d, s, 3, 50 * MS, 100 * US);
	/* drop two contexts with requests in flight */
	for (unsigned i = 0; i < 2; i++) {
		s[i].depth = 0;
		rq_ioc_put(s[i].ioc);
		s[i].ioc = NULL;
	}
	simulate(d, s, 3, 200 * MS, 100 * US);
	/* new contexts make cfq sweep the dropped ones */
	for (unsigned k = 0; k < 8; k++) {
		struct stream t;

		stream_init(&t, 0, 5ull << 24, false, 1, 0);
		stream_submit(d, &t);
		settle(d, &t, 1);
		stream_fini(&t);
	}
	settle(d, s, 3);
	assert_int_equal(s[0].inflight + s[1].inflight, 0);
	stream_reap(&s[0]);
	stream_reap(&s[1]);
	stream_fini(&s[2]);
	sq_destroy(d);
}

/* ============================================================== tunables */

static const struct {
	const char *name;
	const char *def;
	const char *good;
	const char *bad;
} tunables[] = {
	{ "quantum", "8\n", "4", "0" },
	{ "fifo_expire_sync", "125\n", "200", "0" },
	{ "fifo_expire_async", "250\n", "500", "0" },
	{ "back_seek_max", "16384\n", "0", "-1" },
	{ "back_seek_penalty", "2\n", "3", "0" },
	{ "slice_sync", "100\n", "50", "0" },
	{ "slice_async", "40\n", "20", "0" },
	{ "slice_async_rq", "2\n", "4", "0" },
	{ "slice_idle", "8\n", "0", "x" },
	{ "group_idle", "8\n", "0", "1.5" },
	{ "low_latency", "1\n", "0", "2" },
	{ "target_latency", "300\n", "150", "0" },
};

static void test_tunables(void **state)
{
	struct sq_dev *d = make_disk(1 * MS, 0);
	static const char *const junk[] = { "", "abc", "12abc", "-5", "99999999999999999999", " 3" };
	char buf[64], name[64];

	for (size_t i = 0; i < sizeof(tunables) / sizeof(tunables[0]); i++) {
		char want[64];

		snprintf(name, sizeof(name), "iosched/%s", tunables[i].name);
		assert_true(rq_queue_attr_get(d->q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, tunables[i].def);
		assert_int_equal(rq_queue_attr_set(d->q, name, tunables[i].good), 0);
		snprintf(want, sizeof(want), "%s\n", tunables[i].good);
		assert_true(rq_queue_attr_get(d->q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, want);
		assert_int_equal(rq_queue_attr_set(d->q, name, tunables[i].bad), -EINVAL);
		for (size_t j = 0; j < sizeof(junk) / sizeof(junk[0]); j++)
			assert_int_equal(rq_queue_attr_set(d->q, name, junk[j]), -EINVAL);
		assert_true(rq_queue_attr_get(d->q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, want); /* unchanged by the rejects */
		assert_int_equal(rq_queue_attr_set(d->q, name, tunables[i].def), 0);
	}
	assert_int_equal(rq_queue_attr_get(d->q, "iosched/no_such", buf, sizeof(buf)) < 0, 1);
	sq_destroy(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tunables),
		cmocka_unit_test(test_class_order),
		cmocka_unit_test(test_fifo_expiry),
		cmocka_unit_test(test_merges_per_queue),
		cmocka_unit_test(test_prio_levels),
		cmocka_unit_test(test_group_weights),
		cmocka_unit_test(test_idling_keeps_sequential),
		cmocka_unit_test(test_dropped_contexts),
	};

	/* before any queue: no service thread (see the top) */
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
