/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scheduler conformance: the same scenarios for every scheduler.
 *
 * Usage: test_conformance <scheduler>   ("none", "test-fifo", ...)
 *
 * The scenarios are the ones the single-queue suite runs too
 * (tests/common/workload.h), here over the multi-queue mock driver: the
 * scheduler is set at queue creation and, in a second run, switched to
 * through the "scheduler" attribute.  A memory-backed mock with thread
 * completion takes mixed reads, writes, discards, write-zeroes and flushes
 * from 2 threads in plugs of random size; every bio must end exactly once
 * with OK, every request must respect the limits, and the device must end up
 * equal to the shadow copies the threads keep.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"
#include "workload.h"

static const char *sched_name = "none";

/* The conformance device over the mock, @create_with at creation; *@wl: its
 * view for the shared scenarios (if not NULL). */
static struct mock_dev *make_dev(const char *create_with, enum mock_completion c,
				 struct wl_dev *wl)
{
	struct mock_config cfg = { .completion = c, .mem_bytes = WL_MEM_BYTES, .queue_depth = 32,
				   .nr_hw_queues = 2 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = create_with };
	struct mock_dev *m;

	wl_limits(&lim);
	m = mock_create(&cfg, &qc);
	if (wl)
		*wl = (struct wl_dev){ .sched = sched_name, .q = m->q, .mem = m->mem,
				       .rec = &m->rec };
	return m;
}

/* Mixed workload, scheduler chosen at queue creation. */
static void test_mixed_created(void **state)
{
	struct wl_dev wl;
	struct mock_dev *m = make_dev(sched_name, MOCK_COMPLETE_THREAD, &wl);

	wl_mixed_created(&wl, 300);
	mock_destroy(m);
}

/* Mixed workload, scheduler switched to through the attribute. */
static void test_mixed_switched(void **state)
{
	struct wl_dev wl;
	struct mock_dev *m = make_dev("none", MOCK_COMPLETE_THREAD, &wl);

	wl_mixed_switched(&wl, "none", 300);
	mock_destroy(m);
}

/* Sequential bios on a plug merge: 4 contiguous 4 KiB writes reach the
 * driver as one 16 KiB request; merge stats are counted. */
static void test_sequential_plug_merges(void **state)
{
	struct wl_dev wl;
	struct mock_dev *m = make_dev(sched_name, MOCK_COMPLETE_INLINE, &wl);

	wl_sequential_plug_merges(&wl);
	mock_destroy(m);
}

/* NOMERGE bios never merge: 4 contiguous NOMERGE writes on a plug reach
 * the driver as 4 requests of 4 KiB; no merge is counted. */
static void test_nomerge_never_merges(void **state)
{
	struct wl_dev wl;
	struct mock_dev *m = make_dev(sched_name, MOCK_COMPLETE_INLINE, &wl);

	wl_nomerge_never_merges(&wl);
	mock_destroy(m);
}

/* Teardown with the scheduler in place and requests held by the driver:
 * everything ends exactly once. */
static void test_destroy_with_held(void **state)
{
	struct mock_dev *m = make_dev(sched_name, MOCK_COMPLETE_DEFER, NULL);
	static uint8_t bufs[6][8192];
	struct fx_rec rec[6];

	for (unsigned i = 0; i < 6; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	assert_true(mock_wait_held(m, 6, 10000));
	mock_destroy(m);
	for (unsigned i = 0; i < 6; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 6);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential_plug_merges),
		cmocka_unit_test(test_nomerge_never_merges),
		cmocka_unit_test(test_mixed_created),
		cmocka_unit_test(test_mixed_switched),
		cmocka_unit_test(test_destroy_with_held),
	};

	if (argc > 1)
		sched_name = argv[1];
	if (!strcmp(sched_name, FIXTURE_FIFO_NAME) && fixture_register_fifo()) {
		fprintf(stderr, "cannot register %s\n", sched_name);
		return 1;
	}
	if (!rq_sched_exists(sched_name)) {
		fprintf(stderr, "scheduler %s is not available: skipped\n", sched_name);
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
