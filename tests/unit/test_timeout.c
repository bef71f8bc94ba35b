/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Request timeouts: the driver's timeout hook runs for a request held past
 * io_timeout; RESET_TIMER arms a new deadline, DONE leaves the request to
 * the driver; requests completed in time never see the hook; stats.timeouts
 * counts the calls.
 *
 * Every case runs on a virtual library clock (rq_clock_set_source) with
 * application-driven service (rq_service_manual(), set in main() before
 * the first queue): the test alone moves time and calls rq_service_run(),
 * so each case asserts the exact virtual nanosecond the hook runs at,
 * whatever the machine's speed.
 *
 * The window lib/service.c promises: a queue scans its in-flight requests
 * every scan interval I = io_timeout / 2 (clamped to [1 ms, 1 s]), starting
 * one interval after the queue registered, when the application calls
 * rq_service_run() at the times it returns.  The first scan at or after a
 * request's issue (s1) sets its deadline D = s1 + io_timeout; the hook runs
 * on the first scan at or after D, and for io_timeout = 2 I that scan is at
 * D itself.  So D lies in [issue + io_timeout, issue + io_timeout + I]:
 * issued just before a scan at the same virtual time, D = issue +
 * io_timeout (the window's start); issued just after a scan, D = issue +
 * io_timeout + I (its end).  The cases check both ends: nothing at D - 1 ns
 * with every service run the library asked for done, the hook at D.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

#define MS 1000000ull

/* A queue over the mock driver that holds requests, io_timeout @io_timeout ms. */
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

/* Submit a 4 KiB write at @sector: queue_rq keeps it at once (@held in all). */
static void submit_held(struct mock_dev *m, struct mock_io *io, uint64_t sector, void *buf,
			unsigned held)
{
	rq_submit_bio(m->q, mock_bio(io, RQ_OP_WRITE, sector, buf, 4096));
	assert_int_equal(mock_nr_held(m), held);
}

/*
 * The window's start, and RQ_EH_DONE: a request issued at a scan's virtual
 * time, before the scan runs (io_timeout 100 ms, I = 50 ms), is first seen
 * by that scan, so its deadline is issue + 100 ms exactly.  With every
 * service run the library asks for done up to issue + 100 ms - 1 ns, the
 * hook has not run; the run at issue + 100 ms calls it once.  DONE: the
 * core does not end the request itself, the hook is not called again for
 * this issue (checked a second past), and when the driver ends it, end_io
 * runs exactly once with the driver's status.  stats.timeouts equals the
 * hook calls.
 */
static void test_timeout_done(void **state)
{
	struct mock_dev *m;
	struct mock_event ev;
	struct mock_io io;
	char buf[4096] = { 0 };
	uint64_t v0 = fx_vclock_now(), issue;

	(void)state;
	m = timeout_dev(true, RQ_EH_DONE, "100");
	/* the queue's first scan falls due at v0 + 50 ms: issue just before it */
	fx_serve_until(v0 + 50 * MS - 1);
	fx_vclock_set(v0 + 50 * MS);
	issue = fx_vclock_now();
	submit_held(m, &io, 24, buf, 1);

	fx_serve_until(issue + 100 * MS - 1);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	fx_serve_until(issue + 100 * MS);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 1);
	assert_true(mock_find(m, MOCK_TIMEOUT, 0, &ev));
	assert_int_equal(ev.op, RQ_OP_WRITE);
	assert_int_equal(ev.sector, 24);
	/* DONE: the request is still the driver's, and is not reported again */
	fx_serve_until(issue + 1100 * MS);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 1);
	assert_int_equal(io_done(&io), 0);
	assert_int_equal(mock_nr_held(m), 1);

	mock_complete_one(m, 0, RQ_STS_TIMEOUT);
	mock_wait(&io); /* exactly once */
	assert_int_equal(io.status, RQ_STS_TIMEOUT);
	assert_int_equal(stat_timeouts(m), mock_count(m, MOCK_TIMEOUT));
	mock_destroy(m);
}

/*
 * The window's end, and RQ_EH_RESET_TIMER: a request issued just after a
 * scan (same virtual time) is first seen one interval later, so its
 * deadline is issue + 100 ms + 50 ms; not called at that - 1 ns, called at
 * it.  RESET_TIMER arms the next deadline one io_timeout after that call:
 * the second call comes exactly 100 ms later, never 1 ns sooner.  The
 * request stays in flight meanwhile (same tag, not ended), and a late OK
 * completion ends the bio once with OK.  stats.timeouts counts every call.
 */
static void test_timeout_reset_timer(void **state)
{
	struct mock_dev *m;
	struct mock_event ev0, ev1;
	struct mock_io io;
	char buf[4096] = { 0 };
	uint64_t v0 = fx_vclock_now(), issue, first;

	(void)state;
	m = timeout_dev(true, RQ_EH_RESET_TIMER, "100");
	fx_serve_until(v0 + 50 * MS); /* the queue's first scan has run */
	issue = fx_vclock_now();
	submit_held(m, &io, 40, buf, 1);

	first = issue + 150 * MS;
	fx_serve_until(first - 1);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	fx_serve_until(first);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 1);
	fx_serve_until(first + 100 * MS - 1);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 1);
	fx_serve_until(first + 100 * MS);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 2);

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
	assert_int_equal(stat_timeouts(m), 2);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 2);
	mock_destroy(m);
}

/*
 * A request completed before its deadline never sees the hook (io_timeout
 * 1000 ms, I = 500 ms): issued just before the first scan, ended 1 ns
 * before its deadline (issue + 1000 ms), then the clock runs two more
 * io_timeouts with no call.  A later request held past its own deadline
 * is reported exactly there (issued just after a scan: issue + 1500 ms),
 * and every hook call names only that later request.
 */
static void test_completed_in_time_no_timeout(void **state)
{
	struct mock_dev *m;
	struct mock_io early, late;
	char buf[4096] = { 0 };
	uint64_t v0 = fx_vclock_now(), issue;
	unsigned calls;

	(void)state;
	m = timeout_dev(true, RQ_EH_DONE, "1000");
	fx_serve_until(v0 + 500 * MS - 1);
	fx_vclock_set(v0 + 500 * MS);
	issue = fx_vclock_now();
	submit_held(m, &early, 8, buf, 1);
	fx_serve_until(issue + 1000 * MS - 1);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	mock_complete_one(m, 0, RQ_STS_OK);
	mock_wait(&early);
	assert_int_equal(early.status, RQ_STS_OK);
	fx_serve_until(issue + 3000 * MS);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);

	/* the scan at issue + 3000 ms has run: the next sees @late */
	issue = fx_vclock_now();
	submit_held(m, &late, 800, buf, 1);
	fx_serve_until(issue + 1500 * MS - 1);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	fx_serve_until(issue + 1500 * MS);
	calls = mock_count(m, MOCK_TIMEOUT);
	assert_int_equal(calls, 1);
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
 * Only requests past their deadline are reported: two requests issued
 * together (just before a scan, io_timeout 100 ms), the one at sector 1000
 * ended at once; at the shared deadline (issue + 100 ms) the hook sees the
 * one still held, exactly once, never the ended one, and not 1 ns before.
 */
static void test_timeout_only_in_flight(void **state)
{
	struct mock_dev *m;
	struct mock_io a, b;
	char buf[4096] = { 0 };
	uint64_t v0 = fx_vclock_now(), issue;
	struct mock_event ev;

	(void)state;
	m = timeout_dev(true, RQ_EH_DONE, "100");
	fx_serve_until(v0 + 50 * MS - 1);
	fx_vclock_set(v0 + 50 * MS);
	issue = fx_vclock_now();
	rq_submit_bio(m->q, mock_bio(&a, RQ_OP_WRITE, 1000, buf, sizeof(buf)));
	rq_submit_bio(m->q, mock_bio(&b, RQ_OP_WRITE, 3000, buf, sizeof(buf)));
	assert_int_equal(mock_nr_held(m), 2);
	/* end the request at sector 1000 at once, keep the other */
	for (unsigned i = 0; i < 2; i++) {
		if (mock_held(m, i)->sector == 1000) {
			mock_complete_one(m, i, RQ_STS_OK);
			break;
		}
	}
	mock_wait(&a);
	fx_serve_until(issue + 100 * MS - 1);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	fx_serve_until(issue + 100 * MS);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 1);
	assert_true(mock_find(m, MOCK_TIMEOUT, 0, &ev));
	assert_int_equal(ev.sector, 3000);
	mock_complete_all(m, RQ_STS_OK);
	mock_wait(&b);
	assert_int_equal(b.status, RQ_STS_OK);
	mock_destroy(m);
}

/*
 * Without ops->timeout the timer is just reset: a request held for four
 * io_timeout periods of virtual time, every service run the library asked
 * for done, is not ended by the core, and the driver's late OK
 * completion reaches the bio once.
 */
static void test_no_hook_resets(void **state)
{
	struct mock_dev *m;
	struct mock_io io;
	char buf[4096] = { 0 };
	uint64_t v0 = fx_vclock_now(), issue;

	(void)state;
	m = timeout_dev(false, RQ_EH_DONE, "100");
	fx_serve_until(v0 + 50 * MS - 1);
	fx_vclock_set(v0 + 50 * MS);
	issue = fx_vclock_now();
	submit_held(m, &io, 16, buf, 1);
	fx_serve_until(issue + 400 * MS); /* four periods: a wrong core would act here */
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

	/* before the first queue: no service thread, the virtual clock */
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	fx_vclock_install(1000 * MS);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
