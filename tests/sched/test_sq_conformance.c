/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scheduler conformance over the single-queue front end: the same scenarios
 * for every single-queue scheduler.
 *
 * Usage: test_sq_conformance <scheduler>...   ("noop", "deadline", "cfq")
 *
 * Each named scheduler that is registered gets the whole suite; names that
 * are not registered are reported and skipped (exit 77 when none is).
 *
 *  - every bio ends exactly once, with the status the device gave it (or
 *    the one the library gives an invalid bio, before any driver sees it);
 *  - every request the device sees respects max_sectors, max_segments,
 *    max_discard_sectors and max_write_zeroes_sectors, and its data walk
 *    adds up to its size;
 *  - merges happen where they are allowed (contiguous, same op and
 *    priority, within the limits) and never where they are forbidden
 *    (NOMERGE, other op, other priority, past max_sectors);
 *  - the mixed workload of the multi-queue suite from 2 threads, with the
 *    scheduler chosen at creation or switched to, leaves the memory-backed
 *    device equal to the threads' shadow copies.
 *
 * The scenarios the multi-queue suite runs too are in tests/common/workload.h.
 *
 * None of this depends on time, but a scheduler may wait for time to pass
 * (cfq idles, slices expire): the virtual clock ticks along with real time
 * during the suite (sq_clock_ticker).
 */
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
#include "workload.h"

static const char *sched_name = "noop";

/*
 * The conformance device, @create_with at creation, the device holding
 * @depth; with @driver_lock its own queue lock, dropped around the data
 * copy.  *@wl (if not NULL): its view for the shared scenarios.
 */
static struct sq_dev *make_dev(const char *create_with, enum sq_mode mode, unsigned depth,
			       bool driver_lock, struct wl_dev *wl)
{
	struct rq_queue_limits lim;
	struct sq_config c = { .mode = mode, .depth = depth, .mem_bytes = WL_MEM_BYTES,
			       .scheduler = create_with, .limits = &lim,
			       .driver_lock = driver_lock, .drop_lock = driver_lock };
	struct sq_dev *d;

	wl_limits(&lim);
	d = sq_create(&c);
	if (wl)
		*wl = (struct wl_dev){ .sched = sched_name, .q = d->q, .mem = d->mem,
				       .rec = &d->rec };
	return d;
}

/* Each of @recs ended exactly once, with @status. */
static void expect_once(struct fx_rec *recs, unsigned n, int status)
{
	for (unsigned i = 0; i < n; i++)
		if (fx_done(&recs[i]) != 1 || recs[i].status != status)
			fail_msg("bio %u ended %d times with %d; want once with %d", i,
				 fx_done(&recs[i]), recs[i].status, status);
}

/* Mixed workload, scheduler chosen at queue creation, device thread. */
static void test_mixed_created(void **state)
{
	struct wl_dev wl;
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_THREAD, 4, false, &wl);

	wl_mixed_created(&wl, 300);
	sq_destroy(d);
}

/* Mixed workload, switched to through the attribute; a device ending
 * requests inside request_fn with its own queue lock, dropped around the
 * data copy. */
static void test_mixed_switched(void **state)
{
	const char *first = strcmp(sched_name, "noop") ? "noop" : "deadline";
	struct wl_dev wl;
	struct sq_dev *d = make_dev(first, SQ_MODE_INLINE, 1, true, &wl);

	wl_mixed_switched(&wl, first, 200);
	sq_destroy(d);
}

/* 4 contiguous 4 KiB writes on a plug reach the device as one request. */
static void test_sequential_plug_merges(void **state)
{
	struct wl_dev wl;
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_INLINE, 1, false, &wl);

	wl_sequential_plug_merges(&wl);
	sq_destroy(d);
}

/*
 * Bios queued behind a busy device merge where the rules allow (back and
 * front, same op and priority, within max_sectors) and nowhere else.
 */
static void test_queued_merges(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_HOLD, 1, false, NULL);
	static uint8_t buf[64 << 9];
	static const struct {
		unsigned op;
		uint64_t sector;
		unsigned sectors;
		uint32_t opf;
		uint16_t ioprio;
	} plan[] = {
		{ RQ_OP_WRITE, 1000, 8, 0, 0 },             /* A */
		{ RQ_OP_WRITE, 1008, 8, 0, 0 },             /* back into A */
		{ RQ_OP_WRITE, 992, 8, 0, 0 },              /* front into A */
		{ RQ_OP_READ, 1016, 8, 0, 0 },              /* other op: alone */
		{ RQ_OP_WRITE, 2000, 8, RQ_BIO_NOMERGE, 0 }, /* NOMERGE: alone */
		{ RQ_OP_WRITE, 2008, 8, 0, 0 },             /* not into a NOMERGE one */
		{ RQ_OP_WRITE, 3000, 60, 0, 0 },
		{ RQ_OP_WRITE, 3060, 8, 0, 0 },             /* would pass max_sectors */
		{ RQ_OP_WRITE, 4000, 8, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0) },
		{ RQ_OP_WRITE, 4008, 8, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 7) }, /* other prio */
	};
	enum { N = sizeof(plan) / sizeof(plan[0]) };
	static const struct { uint64_t sector; unsigned sectors; } want[] = {
		{ 992, 24 }, { 1016, 8 }, { 2000, 8 }, { 2008, 8 }, { 3000, 60 }, { 3060, 8 },
		{ 4000, 8 }, { 4008, 8 },
	};
	enum { NW = sizeof(want) / sizeof(want[0]) };
	struct fx_rec rec[N];
	struct mock_event *ev;
	unsigned n;

	sq_pause(d, true);
	for (unsigned i = 0; i < N; i++) {
		struct rq_bio *bio = fx_bio(&rec[i], plan[i].op, plan[i].sector, buf,
					    plan[i].sectors << 9);

		bio->opf |= plan[i].opf;
		bio->ioprio = plan[i].ioprio;
		rq_submit_bio(d->q, bio);
	}
	sq_pause(d, false);
	sq_drain(d, rec, N);
	expect_once(rec, N, RQ_STS_OK);
	n = sq_copy_events(d, &ev);
	for (unsigned k = 0; k < NW; k++) {
		bool found = false;

		for (unsigned i = 0; i < n && !found; i++)
			found = ev[i].sector == want[k].sector && ev[i].bytes == want[k].sectors << 9;
		if (!found)
			fail_msg("no request of %u sectors at %llu reached the device",
				 want[k].sectors, (unsigned long long)want[k].sector);
	}
	assert_int_equal(n, NW);
	free(ev);
	fx_put(rec, N);
	sq_destroy(d);
}

/* NOMERGE bios never merge: 4 contiguous ones are 4 requests. */
static void test_nomerge_never_merges(void **state)
{
	struct wl_dev wl;
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_INLINE, 1, false, &wl);

	wl_nomerge_never_merges(&wl);
	sq_destroy(d);
}

/* Each bio ends once with the status its request ended with; a bio past
 * the capacity ends with IOERR before the device sees it. */
static void test_statuses(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_HOLD, 8, false, NULL);
	static const rq_status_t sts[] = { RQ_STS_OK, RQ_STS_IOERR, RQ_STS_MEDIUM, RQ_STS_NOSPC,
					   RQ_STS_TARGET };
	enum { N = sizeof(sts) / sizeof(sts[0]) };
	static uint8_t buf[4096];
	struct fx_rec rec[N + 1];

	for (unsigned i = 0; i < N; i++)
		rq_submit_bio(d->q, fx_bio(&rec[i], i & 1 ? RQ_OP_READ : RQ_OP_WRITE, i * 64, buf,
					   4096));
	/* end each request as it reaches the device (a scheduler may hold
	   some back while others are in flight) */
	for (unsigned i = 0; i < N; i++) {
		struct rq_request *rq;
		unsigned k;

		assert_true(sq_wait_held(d, 1, 10000));
		rq = sq_held(d, 0);
		k = (unsigned)(rq->sector / 64);
		assert_true(k < N);
		assert_true(sq_complete_next(d, sts[k]));
	}
	assert_true(fx_wait(rec, N, 10000));
	for (unsigned i = 0; i < N; i++)
		expect_once(&rec[i], 1, sts[i]);

	rq_submit_bio(d->q, fx_bio(&rec[N], RQ_OP_WRITE, (WL_MEM_BYTES >> 9) - 4, buf, 4096));
	assert_true(fx_wait(&rec[N], 1, 10000));
	expect_once(&rec[N], 1, RQ_STS_IOERR);
	assert_int_equal(sq_nr_events(d), N);
	fx_put(rec, N + 1);
	sq_destroy(d);
}

/* Teardown with requests held by the device and more queued: every bio
 * ends exactly once. */
static void test_destroy_with_held(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_HOLD, 4, false, NULL);
	static uint8_t bufs[8][4096];
	struct fx_rec rec[8];

	for (unsigned i = 0; i < 8; i++)
		rq_submit_bio(d->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	assert_true(sq_wait_held(d, 4, 10000));
	sq_destroy(d);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 8);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential_plug_merges),
		cmocka_unit_test(test_nomerge_never_merges),
		cmocka_unit_test(test_queued_merges),
		cmocka_unit_test(test_statuses),
		cmocka_unit_test(test_mixed_created),
		cmocka_unit_test(test_mixed_switched),
		cmocka_unit_test(test_destroy_with_held),
	};
	static const char *const defaults[] = { "noop", "deadline", "cfq" };
	const char *const *names = defaults;
	int nr = 3, ran = 0, failed = 0;

	if (argc > 1) {
		names = (const char *const *)&argv[1];
		nr = argc - 1;
	}
	for (int i = 0; i < nr; i++) {
		char group[64];

		if (!rq_sched_exists(names[i])) {
			fprintf(stderr, "scheduler %s is not available: skipped\n", names[i]);
			continue;
		}
		sched_name = names[i];
		sq_clock_ticker(true);
		snprintf(group, sizeof(group), "sq-conformance-%s", sched_name);
		failed += _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]),
						  NULL, NULL);
		sq_clock_ticker(false);
		ran++;
	}
	if (!ran)
		return 77;
	return failed ? 1 : 0;
}
