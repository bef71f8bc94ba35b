/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Busy drivers: RQ_STS_RESOURCE / RQ_STS_DEV_RESOURCE park a request on its
 * hw queue; it is re-issued later (after a completion or a delay), before
 * newer requests, and still ends exactly once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

static uint8_t bufs[16][8192];

static struct mock_dev *dev(enum mock_completion c)
{
	struct mock_config cfg = { .completion = c };

	return mock_create(&cfg, NULL);
}

/* RESOURCE with nothing else in flight: the request is re-issued by itself
 * (the delayed re-run) and ends once, OK; both calls were for the same
 * request; stats.resource counts the busy answer. */
static void test_resource_alone(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	const rq_status_t busy = RQ_STS_RESOURCE;
	struct mock_event e0, e1;
	struct rq_queue_stats st;
	struct fx_rec rec;

	mock_script(m, &busy, 1);
	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 40, bufs[0], 4096));
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	assert_int_equal(rec.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 0, &e0));
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 1, &e1));
	assert_int_equal(e0.ret, RQ_STS_RESOURCE);
	assert_int_equal(e1.ret, RQ_STS_OK);
	assert_int_equal(e0.sector, 40);
	assert_int_equal(e1.sector, 40);
	assert_int_equal(e1.bytes, 4096);
	/*
	 * The bio ends inside the retry's queue_rq, and the dispatcher (the
	 * service thread) counts what it dispatched when its run ends: the
	 * quiesce waits out that run, so the counters are the idle queue's.
	 */
	rq_queue_quiesce(m->q);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	rq_queue_unquiesce(m->q);
	assert_int_equal(st.resource, 1);
	assert_int_equal(st.dispatched, 1);
	assert_int_equal(st.completed, 1);
	assert_int_equal(st.errors, 0);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* Busy with another request in flight: when that one completes the parked
 * one is issued (and each ends once). */
static void busy_then_complete(rq_status_t busy)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	struct fx_rec rec[2];
	struct mock_event ev;

	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 0, bufs[0], 4096));
	assert_int_equal(mock_nr_held(m), 1);
	mock_script(m, &busy, 1);
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, 64, bufs[1], 4096));
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 1, &ev));
	assert_int_equal(ev.ret, busy);
	assert_int_equal(ev.sector, 64);
	assert_int_equal(fx_done(&rec[1]), 0);

	/* end the first (it is held[0]); the parked one must come */
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(mock_held(m, 0)->sector, 64);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(rec, 2, 10000));
	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	fx_put(rec, 2);
	mock_destroy(m);
}

/* RESOURCE with a request in flight: re-issued after its completion. */
static void test_resource_rerun_on_completion(void **state)
{
	busy_then_complete(RQ_STS_RESOURCE);
}

/* DEV_RESOURCE: re-run after a completion of that hctx. */
static void test_dev_resource_rerun_on_completion(void **state)
{
	busy_then_complete(RQ_STS_DEV_RESOURCE);
}

/* DEV_RESOURCE with nothing in flight still makes progress (safety net). */
static void test_dev_resource_alone(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	const rq_status_t busy = RQ_STS_DEV_RESOURCE;
	struct fx_rec rec;

	mock_script(m, &busy, 1);
	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_READ, 8, bufs[0], 4096));
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	assert_int_equal(rec.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* Index of the first queue_rq event for @sector with status @ret at or
 * after @from, or -1. */
static int find_sector(const struct mock_event *evs, unsigned n, unsigned from, uint64_t sector,
		       int ret)
{
	for (unsigned i = from; i < n; i++)
		if (evs[i].sector == sector && (ret < 0 || evs[i].ret == ret))
			return (int)i;
	return -1;
}

/* Parked requests are issued before newer ones: A in flight, B parked by
 * RESOURCE, C submitted later; C never reaches the driver before B is
 * accepted. */
static void test_parked_before_newer(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	const rq_status_t busy = RQ_STS_RESOURCE;
	struct fx_rec rec[3];
	struct mock_event *evs;
	unsigned n;
	int b_busy, b_ok, c_first;

	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 0, bufs[0], 4096));
	mock_script(m, &busy, 1);
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, 64, bufs[1], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[2], RQ_OP_WRITE, 128, bufs[2], 4096));
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(mock_wait_held(m, 2, 10000));
	n = mock_copy_events(m, MOCK_QUEUE_RQ, &evs);
	b_busy = find_sector(evs, n, 0, 64, RQ_STS_RESOURCE);
	b_ok = find_sector(evs, n, 0, 64, RQ_STS_OK);
	c_first = find_sector(evs, n, 0, 128, -1);
	assert_true(b_busy >= 0);
	assert_true(b_ok > b_busy);
	assert_true(c_first > b_ok);
	free(evs);
	assert_int_equal(mock_held(m, 0)->sector, 64);
	assert_int_equal(mock_held(m, 1)->sector, 128);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(rec, 3, 10000));
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 3);
	mock_destroy(m);
}

/* Submit @n 4 KiB writes at sectors 0, 64, 128 ... under one plug. */
static void submit_plugged(struct mock_dev *m, struct fx_rec *rec, unsigned n)
{
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	rq_finish_plug(&plug);
}

/* Index of the first recorded @call (at @sector, for queue_rq), or -1. */
static int first_event_at(struct mock_dev *m, enum mock_call call, uint64_t sector)
{
	unsigned nev = mock_nr_events(m);

	for (unsigned i = 0; i < nev; i++) {
		struct mock_event ev = mock_event(m, i);

		if (ev.call == call && (call != MOCK_QUEUE_RQ || ev.sector == sector))
			return (int)i;
	}
	return -1;
}

/* A plugged batch that stops early (RESOURCE after a request went with
 * last=false) is followed by commit_rqs; the rest are issued later, in
 * order, and every bio ends once. */
static void test_commit_rqs_on_early_stop(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	const rq_status_t sts[] = { RQ_STS_OK, RQ_STS_RESOURCE };
	struct fx_rec rec[3];
	struct mock_event e0, e1;
	int commit_at, busy_at;
	unsigned done = 0;
	uint64_t end;

	mock_script(m, sts, 2);
	submit_plugged(m, rec, 3);

	assert_true(mock_find(m, MOCK_QUEUE_RQ, 0, &e0));
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 1, &e1));
	assert_int_equal(e0.sector, 0);
	assert_false(e0.last);
	assert_int_equal(e1.sector, 64);
	assert_int_equal(e1.ret, RQ_STS_RESOURCE);
	assert_false(e1.last);
	assert_true(mock_count(m, MOCK_COMMIT_RQS) >= 1);
	/* commit_rqs came after the busy answer */
	busy_at = first_event_at(m, MOCK_QUEUE_RQ, 64);
	commit_at = first_event_at(m, MOCK_COMMIT_RQS, 0);
	assert_true(busy_at >= 0);
	assert_true(commit_at > busy_at);

	end = fixture_now_ms() + 10000;
	while (done < 3 && fixture_now_ms() < end) {
		if (mock_nr_held(m))
			done += mock_complete_all(m, RQ_STS_OK);
		else
			fx_poll_pause();
	}
	assert_int_equal(done, 3);
	assert_true(fx_wait(rec, 3, 10000));
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	/* B was re-issued before C */
	{
		struct mock_event *evs;
		unsigned n = mock_copy_events(m, MOCK_QUEUE_RQ, &evs);
		int b_ok = find_sector(evs, n, 0, 64, RQ_STS_OK);
		int c_ok = find_sector(evs, n, 0, 128, RQ_STS_OK);

		assert_true(b_ok >= 0 && c_ok > b_ok);
		free(evs);
	}
	fx_put(rec, 3);
	mock_destroy(m);
}

struct storm_arg {
	struct mock_dev *m;
	struct fx_rec *rec;
	unsigned first, n;
	unsigned seed;
};

static void *storm(void *p)
{
	struct storm_arg *a = p;
	unsigned i = 0;

	while (i < a->n) {
		struct rq_plug plug;
		unsigned batch = 1 + rand_r(&a->seed) % 16;

		rq_start_plug(&plug);
		for (unsigned k = 0; k < batch && i < a->n; k++, i++) {
			unsigned idx = a->first + i;

			rq_submit_bio(a->m->q, fx_bio(&a->rec[idx], (idx & 1) ? RQ_OP_READ
									   : RQ_OP_WRITE,
						      (uint64_t)idx * 16, bufs[idx % 16], 4096));
		}
		rq_finish_plug(&plug);
	}
	return NULL;
}

/* 10000 bios from 2 threads in plugs of random size while queue_rq answers
 * RESOURCE 30% of the time (thread completion): every bio ends exactly
 * once, OK, and all reached the driver. */
static void test_random_resource_storm(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_THREAD, .resource_permille = 300,
				   .nr_hw_queues = 2, .queue_depth = 32 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	enum { N = 10000 };
	struct fx_rec *rec = calloc(N, sizeof(*rec));
	struct storm_arg a[2] = { { m, rec, 0, N / 2, 1 }, { m, rec, N / 2, N / 2, 2 } };
	pthread_t t[2];
	struct rq_queue_stats st;
	unsigned bad = 0;

	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, storm, &a[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_true(fx_wait(rec, N, 10000));
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_true(st.resource > 0);
	assert_int_equal(st.completed, st.requests);
	assert_int_equal(st.errors, 0);
	/* exactly once, checked after destroy: no late end_io can come then */
	mock_destroy(m);
	for (unsigned i = 0; i < N; i++)
		bad += fx_done(&rec[i]) != 1 || rec[i].status != RQ_STS_OK;
	assert_int_equal(bad, 0);
	fx_put(rec, N);
	free(rec);
}

/*
 * A plugged pair whose last request (issued with last=true) fails with an
 * error: the first went with last=false and the driver was never told the
 * batch ended, so commit_rqs must follow the error (the kernel calls it
 * whenever it queued something and stopped without honouring last).  The
 * failed bio ends with the driver's status, the other once, OK.
 */
static void test_commit_rqs_after_error_on_last(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	const rq_status_t sts[] = { RQ_STS_OK, RQ_STS_IOERR };
	struct fx_rec rec[2];
	struct mock_event e0, e1;
	int commit_at, err_at;

	(void)state;
	mock_script(m, sts, 2);
	submit_plugged(m, rec, 2);

	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 0, &e0));
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 1, &e1));
	assert_false(e0.last);
	assert_int_equal(e0.ret, RQ_STS_OK);
	assert_true(e1.last);
	assert_int_equal(e1.ret, RQ_STS_IOERR);
	assert_int_equal(mock_count(m, MOCK_COMMIT_RQS), 1);
	/* commit_rqs came after the error */
	err_at = first_event_at(m, MOCK_QUEUE_RQ, 64);
	commit_at = first_event_at(m, MOCK_COMMIT_RQS, 0);
	assert_true(err_at >= 0);
	assert_true(commit_at > err_at);
	assert_true(fx_wait(&rec[1], 1, 10000));
	assert_int_equal(rec[1].status, RQ_STS_IOERR);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 1);
	assert_true(fx_wait(&rec[0], 1, 10000));
	assert_int_equal(rec[0].status, RQ_STS_OK);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 2);
	mock_destroy(m);
}

/* A batch whose every request the driver took, the last with last=true: no commit_rqs. */
static void test_no_commit_rqs_when_last_honoured(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	const rq_status_t sts[] = { RQ_STS_IOERR, RQ_STS_OK };
	struct fx_rec rec[2];

	(void)state;
	mock_script(m, sts, 2);
	submit_plugged(m, rec, 2);
	assert_true(fx_wait(rec, 2, 10000));
	assert_int_equal(rec[0].status, RQ_STS_IOERR);
	assert_int_equal(rec[1].status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_COMMIT_RQS), 0);
	fx_put(rec, 2);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resource_alone),
		cmocka_unit_test(test_resource_rerun_on_completion),
		cmocka_unit_test(test_dev_resource_rerun_on_completion),
		cmocka_unit_test(test_dev_resource_alone),
		cmocka_unit_test(test_parked_before_newer),
		cmocka_unit_test(test_commit_rqs_on_early_stop),
		cmocka_unit_test(test_commit_rqs_after_error_on_last),
		cmocka_unit_test(test_no_commit_rqs_when_last_honoured),
		cmocka_unit_test(test_random_resource_storm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
