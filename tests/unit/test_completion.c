/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Completion: partial completion, ops->complete, double ends, requeue, and
 * tag lookup.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

static uint8_t bufs[8][8192];

static struct mock_dev *dev(bool use_complete)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .use_complete = use_complete };

	return mock_create(&cfg, NULL);
}

/* Submit 3 contiguous 4 KiB writes on a plug at sector 0: one held request
 * of 12 KiB made of 3 bios. */
static struct rq_request *three_bio_request(struct mock_dev *m, struct fx_rec *rec)
{
	struct rq_plug plug;
	struct rq_request *rq;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 8, bufs[i], 4096));
	rq_finish_plug(&plug);
	assert_int_equal(mock_nr_held(m), 1);
	rq = mock_take_held(m, 0);
	assert_int_equal(rq->sector, 0);
	assert_int_equal(rq->bytes, 3 * 4096);
	return rq;
}

/*
 * rq_mq_update_request completes a request from its start: the first bio ends
 * when its 4 KiB are done (half of it is not enough), the request moves on
 * (sector, bytes) and the call returns true while bytes remain; the last
 * update returns false; rq_mq_end_request then finishes it and no bio ends
 * twice.
 */
static void test_partial_completion(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec[3];
	struct rq_request *rq = three_bio_request(m, rec);
	struct rq_queue_stats st;

	assert_true(rq_mq_update_request(rq, RQ_STS_OK, 2048));
	assert_int_equal(fx_done(&rec[0]), 0);
	assert_int_equal(rq->bytes, 3 * 4096 - 2048);
	assert_int_equal(rq->sector, 4);
	assert_true(rq_mq_update_request(rq, RQ_STS_OK, 2048));
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(rec[0].status, RQ_STS_OK);
	assert_int_equal(fx_done(&rec[1]), 0);
	assert_int_equal(rq->sector, 8);
	assert_int_equal(rq->bytes, 8192);

	assert_true(rq_mq_update_request(rq, RQ_STS_OK, 4096));
	assert_int_equal(fx_done(&rec[1]), 1);
	assert_int_equal(fx_done(&rec[2]), 0);
	assert_false(rq_mq_update_request(rq, RQ_STS_OK, 4096));
	assert_int_equal(fx_done(&rec[2]), 1);
	rq_mq_end_request(rq, RQ_STS_OK);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.completed, 1);
	fx_put(rec, 3);
	mock_destroy(m);
}

/* A partial completion with an error: the covered bio ends with it, the rest
 * end with the status given to rq_mq_end_request. */
static void test_partial_completion_error(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec[3];
	struct rq_request *rq = three_bio_request(m, rec);

	assert_true(rq_mq_update_request(rq, RQ_STS_MEDIUM, 4096));
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(rec[0].status, RQ_STS_MEDIUM);
	assert_int_equal(fx_done(&rec[1]), 0);
	rq_mq_end_request(rq, RQ_STS_OK);
	assert_true(fx_wait(rec, 3, 10000));
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(fx_done(&rec[1]), 1);
	assert_int_equal(fx_done(&rec[2]), 1);
	assert_int_equal(rec[1].status, RQ_STS_OK);
	assert_int_equal(rec[2].status, RQ_STS_OK);
	fx_put(rec, 3);
	mock_destroy(m);
}

/* rq_mq_complete_request calls ops->complete once (which ends the request
 * with the status given, read back with rq_mq_complete_status); a second
 * call returns false and changes nothing. */
static void test_complete_request_once(void **state)
{
	struct mock_dev *m = dev(true);
	struct fx_rec rec;
	struct rq_request *rq;

	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_READ, 0, bufs[0], 4096));
	assert_int_equal(mock_nr_held(m), 1);
	rq = mock_take_held(m, 0);
	assert_true(rq_mq_complete_request(rq, RQ_STS_PROTECTION));
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(mock_count(m, MOCK_COMPLETE), 1);
	assert_false(rq_mq_complete_request(rq, RQ_STS_OK));
	assert_int_equal(mock_count(m, MOCK_COMPLETE), 1);
	assert_int_equal(fx_done(&rec), 1);
	assert_int_equal(rec.status, RQ_STS_PROTECTION);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* The mock's own completion path with use_complete goes through
 * ops->complete for every request. */
static void test_complete_via_ops(void **state)
{
	struct mock_dev *m = dev(true);
	struct fx_rec rec[4];

	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 4);
	assert_true(fx_wait(rec, 4, 10000));
	assert_true(mock_wait_count(m, MOCK_COMPLETE, 4, 10000));
	assert_int_equal(mock_count(m, MOCK_COMPLETE), 4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 4);
	mock_destroy(m);
}

/* Ending a request twice: the second rq_mq_end_request is ignored (end_io
 * once, with the first status; one completion counted); the queue keeps
 * working. */
static void test_double_end_ignored(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec[2];
	struct rq_request *rq;
	struct rq_queue_stats st;

	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 0, bufs[0], 4096));
	rq = mock_take_held(m, 0);
	assert_non_null(rq);
	rq_mq_end_request(rq, RQ_STS_OK);
	rq_mq_end_request(rq, RQ_STS_IOERR);
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(rec[0].status, RQ_STS_OK);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.completed, 1);
	assert_int_equal(st.errors, 0);

	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, 64, bufs[1], 4096));
	assert_int_equal(mock_nr_held(m), 1);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(&rec[1], 1, 10000));
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(fx_done(&rec[1]), 1);
	fx_put(rec, 2);
	mock_destroy(m);
}

/* Requeue with kick: the request is issued again (same sector, bytes) and
 * completes once; stats.requeues counts it. */
static void test_requeue_kick(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec;
	struct rq_request *rq;
	struct mock_event ev;
	struct rq_queue_stats st;

	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 16, bufs[0], 8192));
	rq = mock_take_held(m, 0);
	assert_non_null(rq);
	rq_mq_requeue_request(rq, true);
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(m->queue_rq_calls, 2);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 1, &ev));
	assert_int_equal(ev.sector, 16);
	assert_int_equal(ev.bytes, 8192);
	assert_int_equal(fx_done(&rec), 0);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	assert_int_equal(rec.status, RQ_STS_OK);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.requeues, 1);
	assert_int_equal(st.completed, 1);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* Requeue without kick: nothing is issued until rq_mq_kick_requeue_list;
 * then it is issued again and completes once. */
static void test_requeue_waits_for_kick(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec;
	struct rq_request *rq;

	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 16, bufs[0], 4096));
	rq = mock_take_held(m, 0);
	rq_mq_requeue_request(rq, false);
	/* it must never come without a kick: ten virtual seconds of every
	 * service run the library asks for issue nothing */
	fx_serve_until(fx_vclock_now() + 10000000000ull);
	assert_int_equal(mock_nr_held(m), 0);
	assert_int_equal(m->queue_rq_calls, 1);
	rq_mq_kick_requeue_list(m->q);
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(m->queue_rq_calls, 2);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* rq_mq_tag_to_rq gives back each in-flight request for its driver tag;
 * tags are distinct and the one queue_rq saw. */
static void test_tag_to_rq(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec[3];

	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	assert_int_equal(mock_nr_held(m), 3);
	for (unsigned i = 0; i < 3; i++) {
		struct rq_request *rq = mock_held(m, i);
		struct mock_event ev;

		assert_true(rq->tag >= 0);
		assert_ptr_equal(rq_mq_tag_to_rq(rq->hctx, (unsigned)rq->tag), rq);
		assert_true(mock_find(m, MOCK_QUEUE_RQ, i, &ev));
		assert_int_equal(ev.tag, rq->tag);
		for (unsigned k = 0; k < i; k++)
			assert_int_not_equal(mock_held(m, k)->tag, rq->tag);
	}
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(rec, 3, 10000));
	fx_put(rec, 3);
	mock_destroy(m);
}

/* The driver payload follows the request and maps back to it. */
static void test_pdu(void **state)
{
	struct mock_dev *m = dev(false);
	struct fx_rec rec;
	struct rq_request *rq;

	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 0, bufs[0], 4096));
	rq = mock_held(m, 0);
	assert_ptr_equal(rq_request_from_pdu(rq_request_pdu(rq)), rq);
	assert_ptr_equal(rq->q, m->q);
	memset(rq_request_pdu(rq), 0xee, 16); /* cmd_size 16: ours to write */
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(&rec, 1, 10000));
	fx_put(&rec, 1);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_partial_completion),
		cmocka_unit_test(test_partial_completion_error),
		cmocka_unit_test(test_complete_request_once),
		cmocka_unit_test(test_complete_via_ops),
		cmocka_unit_test(test_double_end_ignored),
		cmocka_unit_test(test_requeue_kick),
		cmocka_unit_test(test_requeue_waits_for_kick),
		cmocka_unit_test(test_tag_to_rq),
		cmocka_unit_test(test_pdu),
	};

	/* before the first queue: the service runs only in fx_serve_until(),
	 * on a virtual clock only the test moves */
	if (rq_service_manual())
		return 1;
	fx_vclock_install(1000000000ull);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
