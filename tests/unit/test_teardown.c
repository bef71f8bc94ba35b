/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue teardown (doc/semantics-draft.md, "Teardown"; rq_queue_destroy):
 * requests not yet with the driver (quiesced queue, stopped hw queue,
 * scheduler, dispatch list, requeue list, the caller's plug) end with
 * RQ_STS_IOERR exactly once; requests the driver holds are waited for and
 * end with the driver's status; an idle queue goes away cleanly (run under
 * ASan for leaks).
 *
 * These tests destroy the mock's queue themselves, then give the mock a
 * fresh queue over the same tag set so that mock_destroy() can finish.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

static char buf4k[4096];

static struct mock_dev *dev(enum mock_completion c, const char *sched)
{
	struct mock_config cfg;
	struct rq_queue_config qc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = c;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.scheduler = sched ? sched : "none";
	return mock_create(&cfg, &qc);
}

/* Destroy the mock's queue; give it a new idle one so mock_destroy() works. */
static void destroy_queue(struct mock_dev *m)
{
	struct rq_queue_config qc;

	rq_queue_destroy(m->q);
	m->q = NULL;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.queuedata = m;
	qc.scheduler = "none";
	qc.capacity = (1ull << 30) >> RQ_SECTOR_SHIFT;
	assert_int_equal(rq_mq_alloc_queue(m->set, &qc, &m->q), 0);
}

static int io_done(struct mock_io *io)
{
	int d;

	pthread_mutex_lock(&io->lock);
	d = io->done;
	pthread_mutex_unlock(&io->lock);
	return d;
}

/* @io ended exactly once (no waiting: teardown is over) with @status. */
static void expect_ended(struct mock_io *io, rq_status_t status)
{
	assert_int_equal(io_done(io), 1);
	assert_int_equal(io->status, status);
	rq_bio_put(io->bio);
	io->bio = NULL;
}

#define N 4

static void submit_n(struct mock_dev *m, struct mock_io *io, unsigned n, uint64_t base)
{
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(m->q, mock_bio(&io[i], RQ_OP_WRITE, base + i * 1000, buf4k, 4096));
}

/*
 * Quiesced queue (none and test-fifo): requests queued but not issued end
 * with RQ_STS_IOERR exactly once at rq_queue_destroy; the driver never saw them.
 */
static void test_destroy_quiesced(void **state)
{
	static const char *scheds[] = { "none", FIXTURE_FIFO_NAME };

	assert_int_equal(fixture_register_fifo(), 0);
	for (unsigned s = 0; s < 2; s++) {
		struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, scheds[s]);
		struct mock_io io[N];

		rq_queue_quiesce(m->q);
		submit_n(m, io, N, 0);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
		for (unsigned i = 0; i < N; i++)
			assert_int_equal(io_done(&io[i]), 0);
		destroy_queue(m);
		for (unsigned i = 0; i < N; i++)
			expect_ended(&io[i], RQ_STS_IOERR);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
		mock_destroy(m);
	}
}

/* Stopped hw queues: queued requests end with RQ_STS_IOERR exactly once. */
static void test_destroy_stopped(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);
	struct mock_io io[N];

	rq_mq_stop_hw_queues(m->q);
	submit_n(m, io, N, 0);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	destroy_queue(m);
	for (unsigned i = 0; i < N; i++)
		expect_ended(&io[i], RQ_STS_IOERR);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	mock_destroy(m);
}

/*
 * A request parked on the dispatch list (queue_rq answered RESOURCE, and the
 * hw queue was stopped right after) ends with RQ_STS_IOERR exactly once.
 */
static void test_destroy_parked(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);
	rq_status_t busy[64];
	struct mock_io io;

	for (unsigned i = 0; i < 64; i++)
		busy[i] = RQ_STS_RESOURCE; /* ~200 ms of retries before it could go */
	mock_script(m, busy, 64);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 0, buf4k, 4096));
	rq_mq_stop_hw_queues(m->q);
	assert_true(mock_count(m, MOCK_QUEUE_RQ) >= 1);
	destroy_queue(m);
	expect_ended(&io, RQ_STS_IOERR);
	mock_destroy(m);
}

/* A request on the requeue list (requeued without a kick) ends with RQ_STS_IOERR once. */
static void test_destroy_requeued(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER, NULL);
	struct mock_io io;
	struct rq_request *rq;

	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 0, buf4k, 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	rq = mock_take_held(m, 0);
	assert_non_null(rq);
	rq_mq_stop_hw_queues(m->q); /* nothing re-issues it behind our back */
	rq_mq_requeue_request(rq, false);
	assert_int_equal(io_done(&io), 0);
	destroy_queue(m);
	expect_ended(&io, RQ_STS_IOERR);
	assert_int_equal(mock_nr_held(m), 0);
	mock_destroy(m);
}

/*
 * Requests on the calling thread's plug end with RQ_STS_IOERR exactly once
 * at rq_queue_destroy, never reaching the driver; finishing the (now empty)
 * plug afterwards does nothing.
 */
static void test_destroy_plugged(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);
	struct mock_io io[2];
	struct rq_plug plug;

	rq_start_plug(&plug);
	rq_submit_bio(m->q, mock_bio(&io[0], RQ_OP_WRITE, 0, buf4k, 4096));
	rq_submit_bio(m->q, mock_bio(&io[1], RQ_OP_WRITE, 5000, buf4k, 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	destroy_queue(m);
	expect_ended(&io[0], RQ_STS_IOERR);
	expect_ended(&io[1], RQ_STS_IOERR);
	rq_finish_plug(&plug);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	mock_destroy(m);
}

/*
 * Completes everything the driver holds once destroy is under way: when
 * the requests queued behind the quiesce have ended (destroy fails them
 * before it waits for the driver), noting whether destroy had returned.
 */
struct late {
	struct mock_dev *m;
	struct mock_io *queued;  /* the two queued behind the quiesce */
	atomic_int completing;
	atomic_int destroyed;    /* set by the test when destroy returned */
	int destroyed_before;    /* destroy had returned before we completed */
	int queued_ended;        /* both queued ones ended within 10 s */
	unsigned completed;
};

static void *late_thread(void *arg)
{
	struct late *l = arg;

	l->queued_ended = mock_io_wait_timeout(&l->queued[0], 10000) &&
			  mock_io_wait_timeout(&l->queued[1], 10000);
	l->destroyed_before = atomic_load(&l->destroyed);
	atomic_store(&l->completing, 1);
	l->completed = mock_complete_all(l->m, RQ_STS_MEDIUM);
	return NULL;
}

/*
 * Requests the driver holds are waited for: rq_queue_destroy returns only
 * after another thread completed them (once destroy had ended the queued
 * ones, so while it is under way), and their bios end
 * once with the driver's status.  Requests queued behind a quiesce at the
 * same time end with RQ_STS_IOERR.
 */
static void test_destroy_waits_for_driver(void **state)
{
	struct mock_io held[2], queued[2];
	struct late l = { .m = dev(MOCK_COMPLETE_DEFER, NULL), .queued = queued };
	pthread_t th;

	submit_n(l.m, held, 2, 0);
	assert_true(mock_wait_held(l.m, 2, 10000));
	rq_queue_quiesce(l.m->q);
	submit_n(l.m, queued, 2, 100000);
	assert_int_equal(mock_count(l.m, MOCK_QUEUE_RQ), 2);

	assert_int_equal(pthread_create(&th, NULL, late_thread, &l), 0);
	destroy_queue(l.m);
	atomic_store(&l.destroyed, 1);
	assert_int_equal(atomic_load(&l.completing), 1); /* not before the driver ended them */
	for (unsigned i = 0; i < 2; i++) {
		expect_ended(&held[i], RQ_STS_MEDIUM);
		expect_ended(&queued[i], RQ_STS_IOERR);
	}
	pthread_join(th, NULL);
	assert_true(l.queued_ended);
	assert_int_equal(l.destroyed_before, 0);
	assert_int_equal(l.completed, 2);
	assert_int_equal(mock_count(l.m, MOCK_QUEUE_RQ), 2);
	mock_destroy(l.m);
}

/* Idle queues (none, test-fifo, after some I/O) are destroyed cleanly. */
static void test_destroy_idle(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);

	mock_destroy(m);
	m = dev(MOCK_COMPLETE_INLINE, FIXTURE_FIFO_NAME);
	mock_destroy(m);
	m = dev(MOCK_COMPLETE_THREAD, FIXTURE_FIFO_NAME);
	for (unsigned i = 0; i < 16; i++)
		assert_int_equal(mock_rw(m, i % 2 ? RQ_OP_READ : RQ_OP_WRITE, i * 8, buf4k, 4096),
				 RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 16);
	destroy_queue(m);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 16);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_destroy_quiesced),
		cmocka_unit_test(test_destroy_stopped),
		cmocka_unit_test(test_destroy_parked),
		cmocka_unit_test(test_destroy_requeued),
		cmocka_unit_test(test_destroy_waits_for_driver),
		cmocka_unit_test(test_destroy_idle),
		/* last: if it fails, the thread's plug is left pointing at a dead queue */
		cmocka_unit_test(test_destroy_plugged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
