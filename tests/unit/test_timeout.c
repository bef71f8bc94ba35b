/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Request timeouts (doc/semantics-draft.md, "Timeouts"): the driver's
 * timeout hook runs for a request held past io_timeout; RESET_TIMER arms a
 * new deadline, DONE leaves the request to the driver; requests completed
 * in time never see the hook; stats.timeouts counts the calls.
 */
#define _GNU_SOURCE
#include <errno.h>
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

static struct mock_dev *timeout_dev(bool use_timeout, enum rq_timeout_ret ret,
				    const char *io_timeout)
{
	struct mock_config cfg;
	struct mock_dev *m;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = MOCK_COMPLETE_DEFER;
	cfg.use_timeout = use_timeout;
	cfg.timeout_ret = ret;
	m = mock_create(&cfg, NULL);
	assert_int_equal(rq_queue_attr_set(m->q, "io_timeout", io_timeout), 0);
	return m;
}

static int io_done(struct mock_io *io)
{
	int d;

	pthread_mutex_lock(&io->lock);
	d = io->done;
	pthread_mutex_unlock(&io->lock);
	return d;
}

static uint64_t stat_timeouts(struct mock_dev *m)
{
	struct rq_queue_stats st;

	rq_queue_get_stats(m->q, &st, sizeof(st));
	return st.timeouts;
}

/* Submit a 4 KiB write at @sector and wait until the driver holds @held requests. */
static void submit_held(struct mock_dev *m, struct mock_io *io, uint64_t sector, void *buf,
			unsigned held)
{
	rq_submit_bio(m->q, mock_bio(io, RQ_OP_WRITE, sector, buf, 4096));
	assert_true(mock_wait_held(m, held, 10000));
}

/*
 * RQ_EH_DONE: the hook runs for a request held past io_timeout (100 ms),
 * the core does not end the request itself; when the driver then ends it,
 * end_io runs exactly once with the driver's status.  stats.timeouts equals
 * the hook calls.
 */
static void test_timeout_done(void **state)
{
	struct mock_dev *m = timeout_dev(true, RQ_EH_DONE, "100");
	struct mock_event ev;
	struct mock_io io;
	char buf[4096] = { 0 };

	submit_held(m, &io, 24, buf, 1);
	assert_true(mock_wait_count(m, MOCK_TIMEOUT, 1, 10000));
	assert_true(mock_find(m, MOCK_TIMEOUT, 0, &ev));
	assert_int_equal(ev.op, RQ_OP_WRITE);
	assert_int_equal(ev.sector, 24);
	/* DONE: the request is still the driver's */
	assert_int_equal(io_done(&io), 0);
	assert_int_equal(mock_nr_held(m), 1);

	mock_complete_one(m, 0, RQ_STS_TIMEOUT);
	mock_wait(&io); /* exactly once */
	assert_int_equal(io.status, RQ_STS_TIMEOUT);
	assert_true(mock_count(m, MOCK_TIMEOUT) >= 1);
	assert_int_equal(stat_timeouts(m), mock_count(m, MOCK_TIMEOUT));
	mock_destroy(m);
}

/*
 * RQ_EH_RESET_TIMER: the hook runs again after the new deadline, the
 * request stays in flight meanwhile, and a late OK completion ends the bio
 * once with OK.  stats.timeouts counts every call.
 */
static void test_timeout_reset_timer(void **state)
{
	struct mock_dev *m = timeout_dev(true, RQ_EH_RESET_TIMER, "100");
	struct mock_event ev0, ev1;
	struct mock_io io;
	char buf[4096] = { 0 };
	unsigned calls;

	submit_held(m, &io, 40, buf, 1);
	assert_true(mock_wait_count(m, MOCK_TIMEOUT, 2, 10000));
	assert_true(mock_find(m, MOCK_TIMEOUT, 0, &ev0));
	assert_true(mock_find(m, MOCK_TIMEOUT, 1, &ev1));
	assert_int_equal(ev0.sector, 40);
	assert_int_equal(ev1.sector, 40);
	assert_int_equal(ev0.tag, ev1.tag);
	assert_int_equal(io_done(&io), 0);
	assert_int_equal(mock_nr_held(m), 1);

	mock_complete_one(m, 0, RQ_STS_OK);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	calls = mock_count(m, MOCK_TIMEOUT);
	assert_true(calls >= 2);
	assert_int_equal(stat_timeouts(m), calls);
	mock_destroy(m);
}

/*
 * A request completed well before its deadline (io_timeout 1000 ms) never
 * sees the hook: a later request held past its own (later) deadline does,
 * and by then every hook call names only that later request.
 */
static void test_completed_in_time_no_timeout(void **state)
{
	struct mock_dev *m = timeout_dev(true, RQ_EH_DONE, "1000");
	struct mock_io early, late;
	char buf[4096] = { 0 };
	unsigned calls;

	submit_held(m, &early, 8, buf, 1);
	mock_complete_one(m, 0, RQ_STS_OK);
	mock_wait(&early);
	assert_int_equal(early.status, RQ_STS_OK);

	submit_held(m, &late, 800, buf, 1);
	assert_true(mock_wait_count(m, MOCK_TIMEOUT, 1, 10000));
	calls = mock_count(m, MOCK_TIMEOUT);
	for (unsigned i = 0; i < calls; i++) {
		struct mock_event ev;

		assert_true(mock_find(m, MOCK_TIMEOUT, i, &ev));
		assert_int_equal(ev.sector, 800);
	}
	mock_complete_one(m, 0, RQ_STS_OK);
	mock_wait(&late);
	assert_int_equal(late.status, RQ_STS_OK);
	mock_destroy(m);
}

/*
 * Only requests past their deadline are reported: with two requests held
 * and one ended early, the hook sees the one still held, never the ended one.
 */
static void test_timeout_only_in_flight(void **state)
{
	struct mock_dev *m = timeout_dev(true, RQ_EH_DONE, "100");
	struct mock_io a, b;
	char buf[4096] = { 0 };
	unsigned calls;

	rq_submit_bio(m->q, mock_bio(&a, RQ_OP_WRITE, 1000, buf, sizeof(buf)));
	rq_submit_bio(m->q, mock_bio(&b, RQ_OP_WRITE, 3000, buf, sizeof(buf)));
	assert_true(mock_wait_held(m, 2, 10000));
	/* end the request at sector 1000 at once, keep the other */
	for (unsigned i = 0; i < 2; i++) {
		if (mock_held(m, i)->sector == 1000) {
			mock_complete_one(m, i, RQ_STS_OK);
			break;
		}
	}
	mock_wait(&a);
	assert_true(mock_wait_count(m, MOCK_TIMEOUT, 1, 10000));
	calls = mock_count(m, MOCK_TIMEOUT);
	for (unsigned i = 0; i < calls; i++) {
		struct mock_event ev;

		assert_true(mock_find(m, MOCK_TIMEOUT, i, &ev));
		assert_int_equal(ev.sector, 3000);
	}
	mock_complete_all(m, RQ_STS_OK);
	mock_wait(&b);
	assert_int_equal(b.status, RQ_STS_OK);
	mock_destroy(m);
}

/*
 * Without ops->timeout the timer is just reset: a request held for several
 * io_timeout periods is not ended by the core, and the driver's late OK
 * completion reaches the bio once.
 */
static void test_no_hook_resets(void **state)
{
	struct mock_dev *m = timeout_dev(false, RQ_EH_DONE, "100");
	struct mock_io io;
	char buf[4096] = { 0 };

	submit_held(m, &io, 16, buf, 1);
	fixture_sleep_us(400 * 1000); /* four periods: a wrong core would act here */
	assert_int_equal(io_done(&io), 0);
	assert_int_equal(mock_nr_held(m), 1);
	mock_complete_one(m, 0, RQ_STS_OK);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timeout_done),
		cmocka_unit_test(test_timeout_reset_timer),
		cmocka_unit_test(test_completed_in_time_no_timeout),
		cmocka_unit_test(test_timeout_only_in_flight),
		cmocka_unit_test(test_no_hook_resets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
