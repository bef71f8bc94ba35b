/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mq-deadline's run streaks keep the kernel's batch decisions.
 *
 * A plugged batch inserted into an empty hardware queue becomes a sorted
 * run, and dispatch hands out the run's requests in a streak, going on
 * into a new batch (fifo_batch) without the full decision when that
 * decision is foregone.  These tests build runs (one plug each, the queue
 * quiesced so everything waits in the scheduler) and check the order the
 * driver sees against the order the kernel's rules give:
 *  - a run goes out in ascending sector order across batch boundaries;
 *  - FIFO heads past their deadline start each new batch, even in the
 *    middle of a run's streak;
 *  - a queued write stops a read streak at a batch boundary
 *    (writes_starved counts read batches), and a write is not skipped.
 * Each fails if a streak crosses a batch boundary without looking at the
 * FIFO deadline or at the other direction.  The clock is virtual.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

#define MAX_RECS 64

static uint64_t vclock_ns;
static uint8_t data_buf[4096];

static uint64_t vclock(void *arg)
{
	(void)arg;
	return __atomic_load_n(&vclock_ns, __ATOMIC_ACQUIRE);
}

static void vclock_set_ms(uint64_t ms)
{
	__atomic_store_n(&vclock_ns, ms * 1000000ull, __ATOMIC_RELEASE);
}

struct dev {
	struct mock_dev *m;
	struct fx_rec recs[MAX_RECS];
	unsigned nr;
};

static struct dev *dev_create(const char *fifo_batch, const char *writes_starved)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = 64 };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "mq-deadline" };
	struct dev *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	vclock_set_ms(0);
	d->m = mock_create(&cfg, &qc);
	assert_int_equal(rq_queue_attr_set(d->m->q, "iosched/fifo_batch", fifo_batch), 0);
	assert_int_equal(rq_queue_attr_set(d->m->q, "iosched/writes_starved", writes_starved), 0);
	return d;
}

static void dev_destroy(struct dev *d)
{
	mock_destroy(d->m);
	assert_true(fx_wait(d->recs, d->nr, 10000));
	for (unsigned i = 0; i < d->nr; i++)
		assert_int_equal(fx_done(&d->recs[i]), 1);
	fx_put(d->recs, d->nr);
	free(d);
}

/* One plug of 4 KiB bios at @sectors (@ops[i]: RQ_OP_READ or _WRITE). */
static void submit_plugged(struct dev *d, const uint64_t *sectors, const unsigned *ops,
			   unsigned n)
{
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++) {
		struct fx_rec *rec;
		struct rq_bio *bio;

		assert_true(d->nr < MAX_RECS);
		rec = &d->recs[d->nr++];
		bio = fx_bio(rec, ops ? ops[i] : RQ_OP_READ, sectors[i], data_buf, 4096);
		rq_submit_bio(d->m->q, bio);
	}
	rq_finish_plug(&plug);
}

/* Unquiesce at @at_ms and check the driver got @want in that order. */
static void expect_order(struct dev *d, uint64_t at_ms, const uint64_t *want, unsigned n)
{
	struct mock_event *ev;
	unsigned got;

	vclock_set_ms(at_ms);
	rq_queue_unquiesce(d->m->q);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, n, 10000));
	got = mock_copy_events(d->m, MOCK_QUEUE_RQ, &ev);
	if (got != n) {
		free(ev);
		fail_msg("%u requests dispatched, expected %u", got, n);
	}
	for (unsigned i = 0; i < n; i++) {
		if (ev[i].sector == want[i])
			continue;
		for (unsigned j = 0; j < n; j++)
			print_message("  #%u: sector %llu (expected %llu)\n", j,
				      (unsigned long long)ev[j].sector,
				      (unsigned long long)want[j]);
		free(ev);
		fail_msg("dispatch #%u was sector %llu, expected %llu", i,
			 (unsigned long long)ev[i].sector, (unsigned long long)want[i]);
	}
	free(ev);
}

/* Arrival order differs from sector order, so FIFO and sort disagree. */
static const uint64_t arrival[] = { 9000, 1000, 7000, 2000, 6000, 3000, 8000, 4000, 5000 };
#define NR_ARRIVAL (sizeof(arrival) / sizeof(arrival[0]))

/*
 * Before any deadline, a run of 9 goes out in sector order through
 * batches of 2: every new batch continues at the next sector.  Also a
 * 32-request run of scattered sectors (the bucket sort's buckets shared
 * and not) comes out sorted.
 */
static void test_run_in_sector_order(void **state)
{
	static const uint64_t sorted[] = { 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000 };
	uint64_t big[32], big_sorted[32];
	struct dev *d = dev_create("2", "2");

	(void)state;
	rq_queue_quiesce(d->m->q);
	submit_plugged(d, arrival, NULL, NR_ARRIVAL);
	expect_order(d, 1, sorted, NR_ARRIVAL);
	dev_destroy(d);

	/*
	 * 32 sectors in scrambled order ((i * 13) % 32 is a permutation): the
	 * odd ones packed below 512 (one bucket of the sort), the even ones
	 * spread over a million sectors.
	 */
	for (unsigned i = 0; i < 32; i++) {
		uint64_t r = (i * 13u) % 32u;

		big[i] = i & 1 ? 16 * r : 500000 + 16000 * r;
	}
	memcpy(big_sorted, big, sizeof(big));
	for (unsigned i = 1; i < 32; i++)
		for (unsigned j = i; j && big_sorted[j - 1] > big_sorted[j]; j--) {
			uint64_t t = big_sorted[j];

			big_sorted[j] = big_sorted[j - 1];
			big_sorted[j - 1] = t;
		}
	for (unsigned i = 1; i < 32; i++)
		assert_true(big_sorted[i - 1] + 8 < big_sorted[i]); /* no merges, no touching */
	d = dev_create("16", "2");
	rq_queue_quiesce(d->m->q);
	submit_plugged(d, big, NULL, 32);
	expect_order(d, 1, big_sorted, 32);
	dev_destroy(d);
}

/*
 * Past read_expire (500 ms) every new batch starts at the FIFO head, also
 * where the run's streak would go on in sector order: with fifo_batch 2,
 * the kernel's order is head, its successor, next head, ...  (a head with
 * nothing above it makes a batch of one).
 */
static void test_expired_head_preempts_streak(void **state)
{
	static const uint64_t want[] = { 9000, 1000, 2000, 7000, 8000, 6000, 3000, 4000, 5000 };
	struct dev *d = dev_create("2", "2");

	(void)state;
	rq_queue_quiesce(d->m->q);
	submit_plugged(d, arrival, NULL, NR_ARRIVAL);
	expect_order(d, 600, want, NR_ARRIVAL);
	dev_destroy(d);
}

/*
 * With writes queued a read batch boundary is a real decision: after
 * writes_starved (2) read batches of fifo_batch (2) the oldest write
 * goes, then reads again.  The first batch is a write batch (a fresh
 * scheduler's last direction is write, as in the kernel).
 */
static void test_write_stops_read_streak(void **state)
{
	static const uint64_t sectors[] = { 5000, 6000, 7000, 100, 200, 300, 400, 500, 600, 700,
					    800 };
	static const unsigned ops[] = { RQ_OP_WRITE, RQ_OP_WRITE, RQ_OP_WRITE, RQ_OP_READ,
					RQ_OP_READ,  RQ_OP_READ,  RQ_OP_READ,  RQ_OP_READ,
					RQ_OP_READ,  RQ_OP_READ,  RQ_OP_READ };
	static const uint64_t want[] = { 5000, 6000, 100, 200, 300, 400, 7000, 500, 600, 700, 800 };
	struct dev *d = dev_create("2", "2");

	(void)state;
	rq_queue_quiesce(d->m->q);
	submit_plugged(d, sectors, ops, 11);
	expect_order(d, 1, want, 11);
	dev_destroy(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_in_sector_order),
		cmocka_unit_test(test_expired_head_preempts_streak),
		cmocka_unit_test(test_write_stops_read_streak),
	};

	rq_clock_set_source(vclock, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
