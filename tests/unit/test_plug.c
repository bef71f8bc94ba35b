/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Plugging: requests collect on a per-thread plug and are issued at finish,
 * in submission order, with last=false on all but the final one.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

#define NBUF 40
static uint8_t bufs[NBUF][4096];

/* Sector of the i-th bio: far apart, so nothing merges. */
static uint64_t spread(unsigned i)
{
	return (uint64_t)i * 64;
}

static struct mock_dev *defer_dev(bool queue_rqs)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .use_queue_rqs = queue_rqs };

	return mock_create(&cfg, NULL);
}

/* Check the i-th queue_rq event went to @sector with @last. */
static void expect_issue(struct mock_dev *m, enum mock_call call, unsigned i, uint64_t sector,
			 bool last)
{
	struct mock_event ev;

	assert_true(mock_find(m, call, i, &ev));
	assert_int_equal(ev.sector, sector);
	assert_int_equal(ev.bytes, 4096);
	assert_int_equal(ev.op, RQ_OP_WRITE);
	assert_int_equal(ev.ret, RQ_STS_OK);
	assert_int_equal(ev.last, last);
}

/* Requests on a plug are not issued before rq_finish_plug; then they are
 * issued in submission order with last=false...true and each bio ends once. */
static void test_plug_holds_until_finish(void **state)
{
	struct mock_dev *m = defer_dev(false);
	struct fx_rec rec[4];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, spread(i), bufs[i], 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(fx_done(&rec[i]), 0);
	rq_finish_plug(&plug);

	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	for (unsigned i = 0; i < 4; i++)
		expect_issue(m, MOCK_QUEUE_RQ, i, spread(i), i == 3);
	assert_int_equal(mock_nr_held(m), 4);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 4);
	assert_true(fx_wait(rec, 4, 10000));
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, 4);
	mock_destroy(m);
}

/* A nested plug joins the outer one: finishing the inner plug issues
 * nothing; the outer finish issues everything in order. */
static void test_plug_nested_joins_outer(void **state)
{
	struct mock_dev *m = defer_dev(false);
	struct fx_rec rec[3];
	struct rq_plug outer, inner;

	rq_start_plug(&outer);
	rq_start_plug(&inner);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, spread(0), bufs[0], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, spread(1), bufs[1], 4096));
	rq_finish_plug(&inner);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_submit_bio(m->q, fx_bio(&rec[2], RQ_OP_WRITE, spread(2), bufs[2], 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_finish_plug(&outer);

	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	for (unsigned i = 0; i < 3; i++)
		expect_issue(m, MOCK_QUEUE_RQ, i, spread(i), i == 2);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(rec, 3, 10000));
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 3);
	mock_destroy(m);
}

/* A plug holds at most RQ_PLUG_MAX_REQUESTS requests: after 33 unmergeable
 * bios, the first 32 have been issued by themselves (in order, the 32nd
 * with last=true) and the 33rd waits for rq_finish_plug. */
static void test_plug_flushes_when_full(void **state)
{
	struct mock_dev *m = defer_dev(false);
	struct fx_rec rec[RQ_PLUG_MAX_REQUESTS + 1];
	struct rq_plug plug;
	unsigned n = RQ_PLUG_MAX_REQUESTS + 1;

	assert_int_equal(RQ_PLUG_MAX_REQUESTS, 32);
	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, spread(i), bufs[i], 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), RQ_PLUG_MAX_REQUESTS);
	for (unsigned i = 0; i < RQ_PLUG_MAX_REQUESTS; i++)
		expect_issue(m, MOCK_QUEUE_RQ, i, spread(i), i == RQ_PLUG_MAX_REQUESTS - 1);
	rq_finish_plug(&plug);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), n);
	expect_issue(m, MOCK_QUEUE_RQ, n - 1, spread(n - 1), true);

	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(rec, n, 10000));
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, n);
	mock_destroy(m);
}

/* rq_flush_plug issues what is on the plug without ending it: later bios
 * collect again until rq_finish_plug. */
static void test_flush_plug_keeps_plugging(void **state)
{
	struct mock_dev *m = defer_dev(false);
	struct fx_rec rec[3];
	struct rq_plug plug;

	rq_start_plug(&plug);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, spread(0), bufs[0], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, spread(1), bufs[1], 4096));
	rq_flush_plug();
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	expect_issue(m, MOCK_QUEUE_RQ, 0, spread(0), false);
	expect_issue(m, MOCK_QUEUE_RQ, 1, spread(1), true);
	rq_submit_bio(m->q, fx_bio(&rec[2], RQ_OP_WRITE, spread(2), bufs[2], 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	rq_finish_plug(&plug);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	expect_issue(m, MOCK_QUEUE_RQ, 2, spread(2), true);

	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(rec, 3, 10000));
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 3);
	mock_destroy(m);
}

/* An empty plug finishes without calling the driver. */
static void test_empty_plug(void **state)
{
	struct mock_dev *m = defer_dev(false);
	struct rq_plug plug;

	rq_start_plug(&plug);
	rq_finish_plug(&plug);
	assert_int_equal(mock_nr_events(m), 0);
	mock_destroy(m);
}

/* With ops->queue_rqs and no scheduler, a plug flush hands the whole batch
 * to queue_rqs (in submission order) and queue_rq is not called. */
static void test_plug_uses_queue_rqs(void **state)
{
	struct mock_dev *m = defer_dev(true);
	struct fx_rec rec[5];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 5; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, spread(i), bufs[i], 4096));
	assert_int_equal(mock_queue_rqs_calls(m), 0);
	rq_finish_plug(&plug);

	assert_true(mock_queue_rqs_calls(m) >= 1);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQS), 5);
	assert_int_equal(m->queue_rq_calls, 0);
	for (unsigned i = 0; i < 5; i++)
		expect_issue(m, MOCK_QUEUE_RQS, i, spread(i), i == 4);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 5);
	assert_true(fx_wait(rec, 5, 10000));
	for (unsigned i = 0; i < 5; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, 5);
	mock_destroy(m);
}

/* Without a plug, queue_rqs is not needed: a single bio goes through
 * queue_rq even when queue_rqs is provided. */
static void test_no_plug_uses_queue_rq(void **state)
{
	struct mock_dev *m = defer_dev(true);
	struct fx_rec rec;

	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 0, bufs[0], 4096));
	assert_int_equal(m->queue_rq_calls, 1);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQS), 0);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* Plugged bios on a memory-backed device with inline completion: every bio
 * has ended and its data is on the device when rq_finish_plug returns... or
 * at the latest within the bounded wait. */
static void test_plug_data(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE, .mem_bytes = 1 << 20 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	struct fx_rec rec[8];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 8; i++) {
		fixture_fill(bufs[i], 4096, 7, spread(i) << 9);
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, spread(i), bufs[i], 4096));
	}
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, 8, 10000));
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
		assert_memory_equal(m->mem + (spread(i) << 9), bufs[i], 4096);
	}
	fx_put(rec, 8);
	mock_destroy(m);
}

/*
 * A plug takes its tags ahead a whole batch at a time: its first request
 * takes up to RQ_PLUG_MAX_REQUESTS tags of one bitmap word (depth 256:
 * words of 64 bits) with one compare-and-swap and keeps the rest cached;
 * 32 requests then use exactly that batch, and finishing gives back
 * nothing more.  (Batches were 8: a plug of 32 refilled four times.)
 */
static void test_plug_tag_batch(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = 256 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	struct fx_rec rec[RQ_PLUG_MAX_REQUESTS];
	struct rq_plug plug;

	(void)state;
	rq_start_plug(&plug);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, spread(0), bufs[0], 4096));
	assert_int_equal(__builtin_popcountl(plug.cached_tags), RQ_PLUG_MAX_REQUESTS - 1);
	for (unsigned i = 1; i < RQ_PLUG_MAX_REQUESTS - 1; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, spread(i), bufs[i], 4096));
	assert_int_equal(__builtin_popcountl(plug.cached_tags), 1);
	rq_finish_plug(&plug);
	assert_int_equal(plug.cached_tags, 0);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), RQ_PLUG_MAX_REQUESTS - 1);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), RQ_PLUG_MAX_REQUESTS - 1);
	assert_true(fx_wait(rec, RQ_PLUG_MAX_REQUESTS - 1, 10000));
	fx_put(rec, RQ_PLUG_MAX_REQUESTS - 1);
	mock_destroy(m);
}

/*
 * The body both tests below share, on one queue pinned to one CPU: with
 * the hw queue stopped, a bio at sector 0 is held (staged on the software
 * queue, or inserted into @sched), then a plug takes two far bios and one
 * at sector 8, which must join the held request: 3 dispatches, one of
 * 8192 bytes at sector 0, every bio ended once.
 */
static void held_merge_case(const char *sched, unsigned op)
{
	struct mock_dev *m = defer_dev(false);
	struct fx_rec rec[4];
	struct rq_plug plug;
	struct mock_event ev;
	unsigned merged = 0;

	if (sched)
		assert_int_equal(rq_queue_attr_set(m->q, "scheduler", sched), 0);
	rq_mq_stop_hw_queues(m->q);
	rq_submit_bio(m->q, fx_bio(&rec[0], op, 0, bufs[0], 4096)); /* held */
	rq_start_plug(&plug);
	rq_submit_bio(m->q, fx_bio(&rec[1], op, spread(10), bufs[1], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[2], op, spread(20), bufs[2], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[3], op, 8, bufs[3], 4096)); /* joins rec[0]'s */
	rq_finish_plug(&plug);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_mq_start_hw_queues(m->q);

	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	for (unsigned i = 0; i < 3; i++) {
		assert_true(mock_find(m, MOCK_QUEUE_RQ, i, &ev));
		if (ev.sector == 0) {
			assert_int_equal(ev.bytes, 8192);
			merged++;
		}
	}
	assert_int_equal(merged, 1);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 3);
	assert_true(fx_wait(rec, 4, 10000));
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 4);
	mock_destroy(m);
}

/* Pin the calling thread to its CPU, keeping its old mask in @old; false if it cannot. */
static bool pin_here(cpu_set_t *old)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	assert_true(cpu >= 0);
	pthread_getaffinity_np(pthread_self(), sizeof(*old), old);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

/*
 * Under a plug that already holds requests of the queue (the shape of
 * mq_submit()'s inline case), a bio that starts where a request staged on
 * the software queue ends (the hw queue is stopped) still merges into it:
 * the inline case leaves it to the full path.  Pinned to one CPU, so the
 * staged request and the plugged submissions share a software queue.
 */
static void test_plug_merges_with_staged(void **state)
{
	cpu_set_t old;

	(void)state;
	if (!pin_here(&old))
		skip();
	held_merge_case(NULL, RQ_OP_WRITE);
	pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
}

/*
 * With a scheduler, a plugged bio that touches no request of the plug but
 * one the scheduler holds (inserted while the hw queue was stopped) merges
 * into it through the scheduler's bio_merge, for mq-deadline, kyber and
 * bfq: the plugged scheduler submission's inline case (mq.c,
 * mq_submit_plugged_sched()) asks the scheduler as the full path does.
 * Pinned to one CPU: kyber merges within the submitting software queue.
 */
static void test_plug_sched_bio_merge(void **state)
{
	static const char *const scheds[] = { "mq-deadline", "kyber", "bfq" };
	cpu_set_t old;

	(void)state;
	if (!pin_here(&old))
		skip();
	for (unsigned s = 0; s < 3; s++)
		held_merge_case(scheds[s], RQ_OP_READ);
	pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plug_holds_until_finish),
		cmocka_unit_test(test_plug_nested_joins_outer),
		cmocka_unit_test(test_plug_flushes_when_full),
		cmocka_unit_test(test_flush_plug_keeps_plugging),
		cmocka_unit_test(test_empty_plug),
		cmocka_unit_test(test_plug_uses_queue_rqs),
		cmocka_unit_test(test_no_plug_uses_queue_rq),
		cmocka_unit_test(test_plug_data),
		cmocka_unit_test(test_plug_tag_batch),
		cmocka_unit_test(test_plug_merges_with_staged),
		cmocka_unit_test(test_plug_sched_bio_merge),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
