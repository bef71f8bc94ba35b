/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The core's batching of tags (doc/architecture.md, "Batching"): scheduler
 * tags a plug takes ahead, driver tags taken a word at a time at dispatch,
 * and the completion batch that gives inline-completed requests' tags back
 * at the end of an issue round.  Each is invisible to the user except in
 * what it must never break:
 * - a scheduler switch waits for a plug that holds scheduler tags of the
 *   old scheduler, and a switch from inside one's own plug does not hang;
 * - a driver of depth 1 that completes inline gets every request of a big
 *   plug issued before rq_finish_plug() returns (no stall waiting for a
 *   tag that sits in a batch);
 * - after a round, every tag is back: as many requests as the depth can be
 *   held by the driver at once;
 * - a plug's bios take the CPU's software queue once per usage stock, not
 *   once per bio: their requests stay on that queue's hw queue even if
 *   the thread moves, and the next stock looks again.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
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

#include "mock_driver.h"
#include "fixtures.h"

#define NR_BIOS 64

static const char *const scheds[] = { "none", "mq-deadline", "kyber", "bfq" };
#define NR_SCHEDS (sizeof(scheds) / sizeof(scheds[0]))

static struct mock_dev *make(const char *sched, unsigned depth, enum mock_completion mode)
{
	struct mock_config cfg = { .queue_depth = depth, .completion = mode };
	struct rq_queue_config qc;

	memset(&qc, 0, sizeof(qc));

	qc.size = sizeof(qc);

	qc.size = sizeof(qc);

	qc.size = sizeof(qc);
	qc.scheduler = sched;
	return mock_create(&cfg, &qc);
}

static void set_mode(struct mock_dev *m, enum mock_completion mode)
{
	pthread_mutex_lock(&m->lock);
	m->cfg.completion = mode;
	pthread_mutex_unlock(&m->lock);
}

static uint8_t buf[4096]; /* every read lands here; the data does not matter */

/* Wait for @io, check it ended well, and put its bio. */
static void finish_io(struct mock_io *io)
{
	mock_wait(io);
	assert_int_equal(io->status, RQ_STS_OK);
	rq_bio_put(io->bio);
}

/* Submit @n one-block reads far apart (no merges) on @ios. */
static void submit_reads(struct mock_dev *m, struct mock_io *ios, unsigned n, uint64_t first)
{
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(m->q, mock_bio(&ios[i], RQ_OP_READ, first + 64ull * i, buf, 4096));
}

/* ------------------------------------------- scheduler tags in a plug */

/*
 * A plug that made a request with mq-deadline holds scheduler tags taken
 * ahead even when the request itself left the plug (a PREFLUSH write goes
 * to the flush machinery at once, and completes inline).  A switch to
 * kyber frees those tags, so it must wait until the plug gives them back,
 * then succeed; the plug's next request uses the new scheduler's tags.
 */
static void test_switch_waits_for_plug_tags(void **state)
{
	struct rq_queue_limits lim;
	struct rq_queue_config qc;
	struct mock_config cfg = { .queue_depth = 64, .completion = MOCK_COMPLETE_INLINE };
	struct fx_switch s;
	struct mock_io io[5];
	struct rq_plug plug;
	struct mock_dev *m;

	(void)state;
	rq_queue_limits_default(&lim);
	lim.features = RQ_FEAT_WRITE_CACHE;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.limits = &lim;
	qc.scheduler = "mq-deadline";
	m = mock_create(&cfg, &qc);

	rq_start_plug(&plug);
	{
		struct rq_bio *bio = mock_bio(&io[0], RQ_OP_WRITE, 0, buf, 4096);

		bio->opf |= RQ_BIO_PREFLUSH;
		rq_submit_bio(m->q, bio);
	}
	finish_io(&io[0]);
	fx_switch_start(&s, m->q, "kyber");
	/* the plug is empty but holds the old scheduler's tags: the switch
	 * blocks (asleep inside it, not returned) */
	assert_true(fx_switch_blocked(&s));
	assert_false(fx_switch_done(&s));
	rq_finish_plug(&plug);
	assert_int_equal(fx_switch_join(&s), 0);

	/* the new scheduler's tags work, through a plug again */
	rq_start_plug(&plug);
	submit_reads(m, &io[1], 4, 1 << 16);
	rq_finish_plug(&plug);
	for (unsigned i = 1; i < 5; i++)
		finish_io(&io[i]);
	mock_destroy(m);
}

/* A switch from inside one's own plug lets the plug go first: no hang. */
static void test_switch_inside_own_plug(void **state)
{
	struct mock_dev *m = make("mq-deadline", 64, MOCK_COMPLETE_INLINE);
	struct mock_io io[3];
	struct rq_plug plug;

	(void)state;
	rq_start_plug(&plug);
	submit_reads(m, io, 2, 0);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "bfq"), 0);
	/* the switch issued what the plug held */
	finish_io(&io[0]);
	finish_io(&io[1]);
	submit_reads(m, &io[2], 1, 1 << 16);
	rq_finish_plug(&plug);
	finish_io(&io[2]);
	mock_destroy(m);
}

/* ---------------------------------------------- inline completion, depth 1 */

/*
 * One driver tag and inline completion: each request's tag must be free
 * again for the next one of the same round, so the whole plug is issued
 * by the time rq_finish_plug() returns, with no RESOURCE and no waiting on
 * a delayed run.
 */
static void test_depth1_inline_no_stall(void **state)
{
	(void)state;
	for (unsigned s = 0; s < NR_SCHEDS; s++) {
		struct mock_dev *m = make(scheds[s], 1, MOCK_COMPLETE_INLINE);
		struct mock_io io[NR_BIOS];
		struct rq_queue_stats st;
		struct rq_plug plug;

		rq_start_plug(&plug);
		submit_reads(m, io, NR_BIOS, 0);
		rq_finish_plug(&plug);
		for (unsigned i = 0; i < NR_BIOS; i++) {
			if (io[i].done != 1)
				fail_msg("%s: bio %u ended %d times at plug finish", scheds[s], i,
					 io[i].done);
			finish_io(&io[i]);
		}
		rq_queue_get_stats(m->q, &st, sizeof(st));
		assert_int_equal(st.completed, NR_BIOS);
		assert_int_equal(st.resource, 0);
		mock_destroy(m);
	}
}

/*
 * The same with FUA writes on a device that honours FUA: they bypass the
 * scheduler and wait on the hw queue's dispatch list without a driver tag,
 * so within one issue round each needs the tag the one before it just
 * freed (still in the completion batch).  All must be done when
 * rq_finish_plug() returns.
 */
static void test_depth1_inline_fua_bypass(void **state)
{
	(void)state;
	for (unsigned s = 0; s < NR_SCHEDS; s++) {
		struct mock_config cfg = { .queue_depth = 1, .completion = MOCK_COMPLETE_INLINE };
		struct rq_queue_limits lim;
		struct rq_queue_config qc;
		struct mock_io io[8];
		struct rq_queue_stats st;
		struct rq_plug plug;
		struct mock_dev *m;

		rq_queue_limits_default(&lim);
		lim.features = RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA;
		memset(&qc, 0, sizeof(qc));
		qc.size = sizeof(qc);
		qc.limits = &lim;
		qc.scheduler = scheds[s];
		m = mock_create(&cfg, &qc);
		rq_start_plug(&plug);
		for (unsigned i = 0; i < 8; i++) {
			struct rq_bio *bio = mock_bio(&io[i], RQ_OP_WRITE, 64ull * i, buf, 4096);

			bio->opf |= RQ_BIO_FUA;
			rq_submit_bio(m->q, bio);
		}
		rq_finish_plug(&plug);
		for (unsigned i = 0; i < 8; i++) {
			if (io[i].done != 1)
				fail_msg("%s: FUA write %u ended %d times at plug finish", scheds[s],
					 i, io[i].done);
			finish_io(&io[i]);
		}
		rq_queue_get_stats(m->q, &st, sizeof(st));
		assert_int_equal(st.resource, 0);
		mock_destroy(m);
	}
}

/* ------------------------------------------------ every tag comes back */

/*
 * Rounds of inline completions (through plugs of more requests than the
 * depth) must leave all driver and scheduler tags free: afterwards the
 * driver can hold exactly @depth requests at once.
 */
static void test_tags_back_after_rounds(void **state)
{
	enum { DEPTH = 8 };

	(void)state;
	for (unsigned s = 0; s < NR_SCHEDS; s++) {
		struct mock_dev *m = make(scheds[s], DEPTH, MOCK_COMPLETE_INLINE);
		struct mock_io io[NR_BIOS], held[DEPTH];

		for (unsigned round = 0; round < 3; round++) {
			struct rq_plug plug;

			rq_start_plug(&plug);
			submit_reads(m, io, NR_BIOS, (uint64_t)round << 16);
			rq_finish_plug(&plug);
			for (unsigned i = 0; i < NR_BIOS; i++)
				finish_io(&io[i]);
		}
		set_mode(m, MOCK_COMPLETE_DEFER);
		submit_reads(m, held, DEPTH, 1ull << 20);
		if (!mock_wait_held(m, DEPTH, 5000))
			fail_msg("%s: driver holds %u of %d", scheds[s], mock_nr_held(m), DEPTH);
		assert_int_equal(mock_complete_all(m, RQ_STS_OK), DEPTH);
		for (unsigned i = 0; i < DEPTH; i++)
			finish_io(&held[i]);
		mock_destroy(m);
	}
}

/* ------------------------------------- a plug's run through a scheduler */

/*
 * A plug of more requests than the device's depth, with a scheduler: the
 * run goes into the scheduler and comes back out as chains of tagged
 * requests (lib/mq.c: mq_plug_issue_chain(), sched_dispatch()).  The
 * driver holds a full depth of them, each once, unlinked (rq_next NULL)
 * and with a driver tag of its own; the rest follow as tags come back,
 * and every request is queued exactly once.
 */
static void test_plug_run_through_scheduler(void **state)
{
	enum { DEPTH = 8, N = 2 * DEPTH }; /* N: the scheduler tags (2 x depth) */

	(void)state;
	for (unsigned s = 1; s < NR_SCHEDS; s++) {
		struct mock_dev *m = make(scheds[s], DEPTH, MOCK_COMPLETE_DEFER);
		struct mock_io io[N];
		unsigned done = 0;
		struct rq_plug plug;

		rq_start_plug(&plug);
		submit_reads(m, io, N, 0);
		rq_finish_plug(&plug);
		while (done < N) {
			bool seen[DEPTH] = { false };
			unsigned want = N - done < DEPTH ? N - done : DEPTH;

			if (!mock_wait_held(m, want, 5000))
				fail_msg("%s: driver holds %u of %u", scheds[s], mock_nr_held(m), want);
			assert_int_equal(mock_nr_held(m), want);
			for (unsigned i = 0; i < want; i++) {
				struct rq_request *rq = mock_held(m, i);

				assert_null(rq->rq_next);
				assert_true(rq->tag >= 0 && rq->tag < DEPTH);
				if (seen[rq->tag])
					fail_msg("%s: driver tag %d twice", scheds[s], rq->tag);
				seen[rq->tag] = true;
			}
			assert_int_equal(mock_complete_all(m, RQ_STS_OK), want);
			done += want;
		}
		for (unsigned i = 0; i < N; i++)
			finish_io(&io[i]);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), N);
		mock_destroy(m);
	}
}

/* ------------------------------------ a plug's software queue per stock */

/*
 * The library's sched_getcpu() calls, counted: this definition in the
 * executable comes before libc's in the lookup of librequest.so's calls.
 */
static unsigned getcpu_calls;

int sched_getcpu(void)
{
	static int (*real)(void);

	if (!real)
		real = (int (*)(void))dlsym(RTLD_NEXT, "sched_getcpu");
	getcpu_calls++;
	return real ? real() : 0;
}

/*
 * A full plug's worth of reads: the first takes the plug's usage stock,
 * and with it the calling CPU's software queue; the other 31 take theirs
 * from that stock and look the CPU up no more (they did once per bio).
 */
static void test_plug_cpu_lookup_per_stock(void **state)
{
	enum { N = 32 };
	struct mock_dev *m = make("none", 64, MOCK_COMPLETE_DEFER);
	struct mock_io io[N];
	struct rq_plug plug;
	unsigned calls;

	(void)state;
	rq_start_plug(&plug);
	submit_reads(m, io, 1, 0);
	getcpu_calls = 0;
	submit_reads(m, io + 1, N - 1, 1024);
	calls = getcpu_calls;
	rq_finish_plug(&plug);
	assert_int_equal(calls, 0);
	assert_true(mock_wait_held(m, N, 5000));
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), N);
	for (unsigned i = 0; i < N; i++)
		finish_io(&io[i]);
	mock_destroy(m);
}

static bool pin_to(unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return !pthread_setaffinity_np(pthread_self(), sizeof(set), &set) &&
	       sched_getcpu() == (int)cpu;
}

/*
 * Two hw queues (CPU 0 -> 0, CPU 1 -> 1).  Inside one plug, a read made on
 * CPU 0 and one made after the thread moved to CPU 1 both go to hw queue
 * 0: the second is made on the software queue of the plug's stock, as the
 * kernel's plug-cached requests keep theirs.  A bio of another queue then
 * takes the stock, so the next read of the first queue takes a new one on
 * CPU 1, and hw queue 1: the plug holds three runs (queue, hw queue) and
 * hands each to its own hw queue, in order.  A new plug on CPU 1 takes a
 * new stock there, and hw queue 1.
 */
static void test_plug_ctx_per_stock(void **state)
{
	struct mock_config cfg = { .queue_depth = 8, .completion = MOCK_COMPLETE_DEFER,
				   .nr_hw_queues = 2 };
	static const uint64_t sector[] = { 0, 1024, 4096, 2048 };
	static const unsigned hctx[] = { 0, 0, 1, 1 };
	struct rq_queue_config qc;
	struct mock_event ev;
	struct mock_io io[4], other;
	struct rq_plug plug;
	struct mock_dev *m, *b;
	cpu_set_t old;

	(void)state;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		skip();
	assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
	if (!CPU_ISSET(0, &old) || !CPU_ISSET(1, &old))
		skip();
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.scheduler = "none";
	m = mock_create(&cfg, &qc);
	assert_non_null(m);
	b = make("none", 8, MOCK_COMPLETE_DEFER);
	rq_start_plug(&plug);
	assert_true(pin_to(0));
	submit_reads(m, io, 1, sector[0]);
	assert_true(pin_to(1));
	submit_reads(m, io + 1, 1, sector[1]);
	submit_reads(b, &other, 1, 512);
	submit_reads(m, io + 2, 1, sector[2]);
	rq_finish_plug(&plug);
	rq_start_plug(&plug);
	submit_reads(m, io + 3, 1, sector[3]);
	rq_finish_plug(&plug);
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
	assert_true(mock_wait_held(m, 4, 5000));
	assert_true(mock_wait_held(b, 1, 5000));
	for (unsigned i = 0; i < 4; i++) {
		assert_true(mock_find(m, MOCK_QUEUE_RQ, i, &ev));
		assert_int_equal(ev.sector, sector[i]);
		assert_int_equal(ev.hctx, hctx[i]);
	}
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	assert_int_equal(mock_count(b, MOCK_QUEUE_RQ), 1);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 4);
	assert_int_equal(mock_complete_all(b, RQ_STS_OK), 1);
	for (unsigned i = 0; i < 4; i++)
		finish_io(&io[i]);
	finish_io(&other);
	mock_destroy(m);
	mock_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_switch_waits_for_plug_tags),
		cmocka_unit_test(test_switch_inside_own_plug),
		cmocka_unit_test(test_depth1_inline_no_stall),
		cmocka_unit_test(test_depth1_inline_fua_bypass),
		cmocka_unit_test(test_tags_back_after_rounds),
		cmocka_unit_test(test_plug_run_through_scheduler),
		cmocka_unit_test(test_plug_cpu_lookup_per_stock),
		cmocka_unit_test(test_plug_ctx_per_stock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
