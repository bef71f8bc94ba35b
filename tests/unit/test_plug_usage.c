/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue usage taken ahead by a plug (lib/plug.c, plug_queue_enter()): a
 * plugged thread takes its bios' usage references in batches, and a bio
 * merged away gives its reference back to the batch.  What must hold:
 *   - every reference goes back: once the plug is finished and the
 *     requests have ended, a freeze returns (it would wait for ever on a
 *     reference left behind);
 *   - a freeze waits while another thread's plug holds a stock, and no bio
 *     takes a reference from a stock once a freeze has begun: a NOWAIT bio
 *     then ends with RQ_STS_AGAIN and never reaches the driver, even though
 *     its thread holds references taken before;
 *   - a bio split under a plug: each piece holds a reference of its own,
 *     and all go back.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

static char buf[64 * 1024];

static struct mock_dev *dev(enum mock_completion c)
{
	struct mock_config cfg;
	struct rq_queue_config qc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = c;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.scheduler = "none";
	return mock_create(&cfg, &qc);
}

struct freezer {
	struct mock_dev *m;
	int returned;        /* atomic: rq_queue_freeze returned */
	pid_t tid;           /* atomic: the freezing thread (fx_wait_blocked) */
};

static void *freeze_thread(void *arg)
{
	struct freezer *f = arg;

	__atomic_store_n(&f->tid, fx_gettid(), __ATOMIC_RELEASE);
	rq_queue_freeze(f->m->q);
	__atomic_store_n(&f->returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Freeze in a second thread; true if it returned within 10 s. */
static bool freeze_returns(struct mock_dev *m)
{
	struct freezer f = { .m = m };
	pthread_t th;
	bool ok;

	assert_int_equal(pthread_create(&th, NULL, freeze_thread, &f), 0);
	ok = FX_WAIT_FOR(__atomic_load_n(&f.returned, __ATOMIC_ACQUIRE) == 1, 10000);
	if (ok)
		pthread_join(th, NULL);
	else
		pthread_detach(th);
	return ok;
}

/*
 * Bios under one plug, three of them merged away into the first (their
 * references go back to the stock), then more than a stock's worth:
 * after the plug and the driver are done, a freeze returns.
 */
static void test_stock_goes_back(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	struct mock_io io[20];
	struct rq_plug plug;
	unsigned i;

	rq_start_plug(&plug);
	for (i = 0; i < 4; i++) /* one request: 3 back merges on the plug */
		rq_submit_bio(m->q, mock_bio(&io[i], RQ_OP_WRITE, i * 8, buf, 4096));
	for (i = 4; i < 20; i++) /* apart: a request each */
		rq_submit_bio(m->q, mock_bio(&io[i], RQ_OP_READ, 1000 + i * 64, buf, 4096));
	rq_finish_plug(&plug);
	assert_true(mock_wait_held(m, 17, 10000));
	mock_complete_all(m, RQ_STS_OK);
	for (i = 0; i < 20; i++) {
		mock_wait(&io[i]);
		assert_int_equal(io[i].status, RQ_STS_OK);
	}
	assert_true(freeze_returns(m));
	rq_queue_unfreeze(m->q);
	mock_destroy(m);
}

struct holder {
	struct mock_dev *m;
	struct mock_io first, late;
	int stage;           /* atomic: 1 plug holds a stock, 2 go on, 3 done */
};

/* Hold a plug with a stock until told, then submit a NOWAIT bio and finish. */
static void *holder_thread(void *arg)
{
	struct holder *h = arg;
	struct rq_plug plug;
	struct rq_bio *bio;

	rq_start_plug(&plug);
	rq_submit_bio(h->m->q, mock_bio(&h->first, RQ_OP_WRITE, 0, buf, 4096));
	__atomic_store_n(&h->stage, 1, __ATOMIC_RELEASE);
	FX_WAIT_FOR(__atomic_load_n(&h->stage, __ATOMIC_ACQUIRE) == 2, 10000);
	bio = mock_bio(&h->late, RQ_OP_READ, 4096, buf, 4096);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(h->m->q, bio);
	rq_finish_plug(&plug);
	__atomic_store_n(&h->stage, 3, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A freeze begins while another thread's plug holds a stock: the freeze
 * waits for that plug; the NOWAIT bio the thread submits meanwhile ends
 * with AGAIN without reaching the driver (it may not use the stock); the
 * plugged request goes through and the freeze returns after it.
 */
static void test_no_stock_once_freezing(void **state)
{
	struct holder h = { .m = dev(MOCK_COMPLETE_INLINE) };
	struct freezer f = { .m = h.m };
	pthread_t th, fz;

	assert_int_equal(pthread_create(&th, NULL, holder_thread, &h), 0);
	assert_true(FX_WAIT_FOR(__atomic_load_n(&h.stage, __ATOMIC_ACQUIRE) == 1, 10000));

	assert_int_equal(pthread_create(&fz, NULL, freeze_thread, &f), 0);
	/* the plugged request and the stock hold the queue: the freezer sleeps */
	assert_true(fx_wait_blocked(&f.tid, &f.returned, 10000));

	__atomic_store_n(&h.stage, 2, __ATOMIC_RELEASE);
	assert_true(FX_WAIT_FOR(__atomic_load_n(&h.stage, __ATOMIC_ACQUIRE) == 3, 10000));
	pthread_join(th, NULL);
	mock_wait(&h.late);
	assert_int_equal(h.late.status, RQ_STS_AGAIN);
	mock_wait(&h.first);
	assert_int_equal(h.first.status, RQ_STS_OK);
	assert_int_equal(mock_count(h.m, MOCK_QUEUE_RQ), 1);

	assert_true(FX_WAIT_FOR(__atomic_load_n(&f.returned, __ATOMIC_ACQUIRE) == 1, 10000));
	pthread_join(fz, NULL);
	rq_queue_unfreeze(h.m->q);
	mock_destroy(h.m);
}

/*
 * A bio split under a plug: each piece holds a reference of its own and
 * every one goes back; the freeze afterwards returns.
 */
static void test_split_pieces_under_plug(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	struct mock_io io;
	struct rq_plug plug;

	/* 64 KiB in one vector, requests of at most 16 KiB: four pieces */
	assert_int_equal(rq_queue_attr_set(m->q, "max_sectors_kb", "16"), 0);
	rq_start_plug(&plug);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 0, buf, 64 * 1024));
	rq_finish_plug(&plug);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	assert_true(freeze_returns(m));
	rq_queue_unfreeze(m->q);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stock_goes_back),
		cmocka_unit_test(test_no_stock_once_freezing),
		cmocka_unit_test(test_split_pieces_under_plug),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
