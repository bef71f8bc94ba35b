/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The single-queue schedulers noop and deadline, and the single-queue front
 * end driven through noop, against the simulated device of
 * tests/common/sq_driver.h.
 *
 * Nothing here depends on wall-clock time: the library's clock is the
 * device's virtual clock, and requests end when a test says so (or on the
 * virtual clock).  Where a test must wait for another thread or the service
 * thread it waits for an event, with a generous bound that only a broken
 * library reaches.
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
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixtures.h"
#include "sq_driver.h"

#define MS (1000000ull)

/* Data buffers: ordering tests share one (the device moves no data). */
static uint8_t scratch[1u << 20];

static struct rq_bio *bio_at(struct fx_rec *rec, unsigned op, uint64_t sector, unsigned sectors)
{
	if (!rq_op_has_data(op))
		return fx_bio(rec, op, sector, NULL, sectors << 9);
	return fx_bio(rec, op, sector, scratch, sectors << 9);
}

static void submit(struct sq_dev *d, struct fx_rec *rec, unsigned op, uint64_t sector,
		   unsigned sectors)
{
	rq_submit_bio(d->q, bio_at(rec, op, sector, sectors));
}

static struct sq_dev *make(enum sq_mode mode, const char *sched, unsigned depth)
{
	struct sq_config c = { .mode = mode, .scheduler = sched, .depth = depth };

	return sq_create(&c);
}

static void set_attr(struct sq_dev *d, const char *name, const char *val)
{
	int ret = rq_queue_attr_set(d->q, name, val);

	if (ret)
		fail_msg("setting %s to %s: %d", name, val, ret);
}

/* Every record ended exactly once with @status. */
static void expect_ended(struct fx_rec *recs, unsigned n, int status)
{
	assert_true(fx_wait(recs, n, 10000));
	for (unsigned i = 0; i < n; i++) {
		if (fx_done(&recs[i]) != 1 || recs[i].status != status)
			fail_msg("bio %u: ended %d times, status %d (want once, %d)", i,
				 fx_done(&recs[i]), recs[i].status, status);
	}
}

/*
 * The directions of the recorded dispatches as runs: "R32 W16 R8 W24".
 * Discards and write-zeroes count as writes (the data direction).
 */
static void dir_runs(struct sq_dev *d, char *out, size_t len)
{
	struct mock_event *ev;
	unsigned n = sq_copy_events(d, &ev);
	size_t pos = 0;

	out[0] = 0;
	for (unsigned i = 0; i < n;) {
		bool rd = ev[i].op == RQ_OP_READ;
		unsigned k = i;

		while (k < n && (ev[k].op == RQ_OP_READ) == rd)
			k++;
		pos += (size_t)snprintf(out + pos, len - pos, "%s%c%u", pos ? " " : "",
					rd ? 'R' : 'W', k - i);
		i = k;
	}
	free(ev);
}

static void expect_event(struct sq_dev *d, unsigned i, unsigned op, uint64_t sector,
			 unsigned sectors)
{
	struct mock_event ev = sq_event(d, i);

	if (ev.op != op || ev.sector != sector || ev.bytes != sectors << 9)
		fail_msg("dispatch %u: op %u sector %llu %u sectors; want op %u sector %llu %u sectors",
			 i, ev.op, (unsigned long long)ev.sector, ev.bytes >> 9, op,
			 (unsigned long long)sector, sectors);
}

/* ================================================================ noop */

/* noop hands requests over in arrival order, reads and writes alike. */
static void test_noop_fifo_order(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 1);
	static const struct { unsigned op; uint64_t sector; } plan[] = {
		{ RQ_OP_WRITE, 1000 }, { RQ_OP_READ, 500 }, { RQ_OP_WRITE, 10 },
		{ RQ_OP_READ, 2000 }, { RQ_OP_WRITE, 64 }, { RQ_OP_READ, 8 },
	};
	enum { N = sizeof(plan) / sizeof(plan[0]) };
	struct fx_rec rec[N];

	sq_pause(d, true);
	for (unsigned i = 0; i < N; i++)
		submit(d, &rec[i], plan[i].op, plan[i].sector, 4);
	assert_int_equal(sq_nr_events(d), 0);
	sq_pause(d, false);
	for (unsigned i = 0; i < N; i++) {
		assert_true(sq_wait_held(d, 1, 5000));
		expect_event(d, i, plan[i].op, plan[i].sector, 4);
		assert_true(sq_complete_next(d, RQ_STS_OK));
	}
	expect_ended(rec, N, RQ_STS_OK);
	fx_put(rec, N);
	sq_destroy(d);
}

/* noop merges at the back (hash), at the front (its sorted tree), and
 * joins FIFO neighbours that became contiguous; never different ops. */
static void test_noop_merges(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 8);
	struct rq_queue_stats st;
	struct fx_rec rec[7];

	sq_pause(d, true);
	submit(d, &rec[0], RQ_OP_WRITE, 100, 8);   /* A: 100..108 */
	submit(d, &rec[1], RQ_OP_WRITE, 108, 8);   /* back into A */
	submit(d, &rec[2], RQ_OP_WRITE, 92, 8);    /* front into A: 92..116 */
	submit(d, &rec[3], RQ_OP_READ, 116, 8);    /* contiguous, other op: own */
	submit(d, &rec[4], RQ_OP_WRITE, 200, 8);   /* B */
	submit(d, &rec[5], RQ_OP_WRITE, 216, 8);   /* C */
	submit(d, &rec[6], RQ_OP_WRITE, 208, 8);   /* joins B, then B+C */
	sq_pause(d, false);
	assert_true(sq_wait_held(d, 3, 5000));
	assert_int_equal(sq_nr_events(d), 3);
	expect_event(d, 0, RQ_OP_WRITE, 92, 24);
	expect_event(d, 1, RQ_OP_READ, 116, 8);
	expect_event(d, 2, RQ_OP_WRITE, 200, 24);
	rq_queue_get_stats(d->q, &st, sizeof(st));
	assert_true(st.merges_back >= 2);
	assert_true(st.merges_front >= 1);
	assert_int_equal(st.merges_rq, 1);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 7, RQ_STS_OK);
	fx_put(rec, 7);
	sq_destroy(d);
}

/* A request-request merge in noop never moves a request past another: the
 * candidates are FIFO neighbours, not sector neighbours. */
static void test_noop_no_reorder_by_merge(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 8);
	struct fx_rec rec[4];

	sq_pause(d, true);
	submit(d, &rec[0], RQ_OP_WRITE, 0, 8);     /* W1 */
	submit(d, &rec[1], RQ_OP_READ, 100, 8);    /* R */
	submit(d, &rec[2], RQ_OP_WRITE, 16, 8);    /* W2, after R */
	submit(d, &rec[3], RQ_OP_WRITE, 8, 8);     /* joins W1; W2 must stay behind R */
	sq_pause(d, false);
	assert_true(sq_wait_held(d, 3, 5000));
	expect_event(d, 0, RQ_OP_WRITE, 0, 16);
	expect_event(d, 1, RQ_OP_READ, 100, 8);
	expect_event(d, 2, RQ_OP_WRITE, 16, 8);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 4, RQ_STS_OK);
	fx_put(rec, 4);
	sq_destroy(d);
}

/* ============================================================ deadline */

/* Without expiry, a batch walks the sorted tree from the oldest request. */
static void test_deadline_sector_order(void **state)
{
	struct sq_dev *d = make(SQ_MODE_INLINE, "deadline", 1);
	static const uint64_t sectors[] = { 5000, 1000, 3000, 2000, 4000 };
	struct fx_rec rec[5];

	sq_pause(d, true);
	for (unsigned i = 0; i < 5; i++)
		submit(d, &rec[i], RQ_OP_READ, sectors[i], 8);
	sq_pause(d, false);
	expect_ended(rec, 5, RQ_STS_OK);
	/* the oldest starts the batch; it has no successor, so the next batch
	   starts at the (new) oldest and walks up */
	expect_event(d, 0, RQ_OP_READ, 5000, 8);
	expect_event(d, 1, RQ_OP_READ, 1000, 8);
	expect_event(d, 2, RQ_OP_READ, 2000, 8);
	expect_event(d, 3, RQ_OP_READ, 3000, 8);
	expect_event(d, 4, RQ_OP_READ, 4000, 8);
	fx_put(rec, 5);
	sq_destroy(d);
}

/*
 * Queue A(100) at t, X(9000) at t+10ms, B(200), C(300) at t+20ms, with
 * fifo_batch 1 so every request starts a batch.  The device takes A; if it
 * finishes A after X's read_expire has passed, X goes next, ahead of the
 * sector order; otherwise the walk goes on: B, C, then X.
 */
static void run_expiry(bool expire, unsigned fifo_batch, const uint64_t *want)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "deadline", 1);
	struct fx_rec rec[4];
	char val[16];

	snprintf(val, sizeof(val), "%u", fifo_batch);
	set_attr(d, "iosched/fifo_batch", val);
	sq_pause(d, true);
	submit(d, &rec[0], RQ_OP_READ, 100, 8);
	sq_clock_advance(10 * MS);
	submit(d, &rec[1], RQ_OP_READ, 9000, 8);
	sq_clock_advance(10 * MS);
	submit(d, &rec[2], RQ_OP_READ, 200, 8);
	submit(d, &rec[3], RQ_OP_READ, 300, 8);
	sq_pause(d, false);
	assert_true(sq_wait_held(d, 1, 5000));
	expect_event(d, 0, RQ_OP_READ, 100, 8);
	if (expire)
		sq_clock_advance(600 * MS);
	for (unsigned i = 1; i < 4; i++) {
		assert_true(sq_complete_next(d, RQ_STS_OK));
		assert_true(sq_wait_held(d, 1, 5000));
		expect_event(d, i, RQ_OP_READ, want[i], 8);
	}
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 4, RQ_STS_OK);
	fx_put(rec, 4);
	sq_destroy(d);
}

static void test_deadline_expired_first(void **state)
{
	static const uint64_t expired[] = { 100, 9000, 200, 300 };
	static const uint64_t in_time[] = { 100, 200, 300, 9000 };

	run_expiry(true, 1, expired);
	run_expiry(false, 1, in_time);
	/* expiry is looked at between batches: a batch of 16 goes on */
	run_expiry(true, 16, in_time);
}

/* Queue @nr reads and @nr writes alternately (no merges), then let the
 * device take all of them inline: the runs of directions it saw. */
static void run_mix(const char *writes_starved, const char *fifo_batch, unsigned nr, char *runs,
		    size_t len)
{
	struct sq_dev *d = make(SQ_MODE_INLINE, "deadline", 1);
	struct fx_rec *rec = calloc(2 * nr, sizeof(*rec));

	assert_non_null(rec);
	if (writes_starved)
		set_attr(d, "iosched/writes_starved", writes_starved);
	if (fifo_batch)
		set_attr(d, "iosched/fifo_batch", fifo_batch);
	sq_pause(d, true);
	for (unsigned i = 0; i < nr; i++) {
		submit(d, &rec[2 * i], RQ_OP_READ, i * 16, 8);
		submit(d, &rec[2 * i + 1], RQ_OP_WRITE, 100000 + i * 16, 8);
	}
	sq_pause(d, false);
	expect_ended(rec, 2 * nr, RQ_STS_OK);
	assert_int_equal(sq_nr_events(d), 2 * nr);
	dir_runs(d, runs, len);
	fx_put(rec, 2 * nr);
	free(rec);
	sq_destroy(d);
}

/*
 * 40 reads and 40 writes with the defaults (fifo_batch 16, writes_starved
 * 2): two read batches, then writes get one; reads again (the 8 left), then
 * the writes that remain.
 */
static void test_deadline_writes_starved(void **state)
{
	char runs[256];

	run_mix(NULL, NULL, 40, runs, sizeof(runs));
	assert_string_equal(runs, "R32 W16 R8 W24");
	run_mix("1", NULL, 40, runs, sizeof(runs));
	assert_string_equal(runs, "R16 W16 R16 W16 R8 W8");
	/* 0: a waiting write always wins */
	run_mix("0", NULL, 40, runs, sizeof(runs));
	assert_string_equal(runs, "W40 R40");
}

/* fifo_batch bounds every batch. */
static void test_deadline_fifo_batch(void **state)
{
	char runs[256];

	run_mix("1", "4", 12, runs, sizeof(runs));
	assert_string_equal(runs, "R4 W4 R4 W4 R4 W4");
	run_mix("1", "5", 12, runs, sizeof(runs));
	assert_string_equal(runs, "R5 W5 R5 W5 R2 W2");
}

/*
 * Front merges through the sort tree, and front_merges 0 turning them off.
 * A back merge into W2 first makes W2 the one-hit merge candidate, so the
 * front-contiguous bio can only find W1 through the scheduler.
 */
static void run_front(const char *front_merges, bool expect_merge)
{
	struct sq_dev *d = make(SQ_MODE_INLINE, "deadline", 1);
	struct rq_queue_stats st;
	struct mock_event *ev;
	struct fx_rec rec[4];
	bool saw_merged = false, saw_w1 = false, saw_front = false;
	unsigned n;

	set_attr(d, "iosched/front_merges", front_merges);
	sq_pause(d, true);
	submit(d, &rec[0], RQ_OP_WRITE, 100, 8);   /* W1 */
	submit(d, &rec[1], RQ_OP_WRITE, 5000, 8);  /* W2 */
	submit(d, &rec[2], RQ_OP_WRITE, 5008, 8);  /* back into W2 */
	submit(d, &rec[3], RQ_OP_WRITE, 92, 8);    /* front of W1? */
	sq_pause(d, false);
	expect_ended(rec, 4, RQ_STS_OK);
	n = sq_copy_events(d, &ev);
	for (unsigned i = 0; i < n; i++) {
		saw_merged |= ev[i].sector == 92 && ev[i].bytes == 16 << 9;
		saw_w1 |= ev[i].sector == 100 && ev[i].bytes == 8 << 9;
		saw_front |= ev[i].sector == 92 && ev[i].bytes == 8 << 9;
	}
	free(ev);
	rq_queue_get_stats(d->q, &st, sizeof(st));
	if (expect_merge) {
		assert_int_equal(n, 2);
		assert_true(saw_merged);
		assert_int_equal(st.merges_front, 1);
	} else {
		assert_int_equal(n, 3);
		assert_true(saw_w1 && saw_front);
		assert_int_equal(st.merges_front, 0);
	}
	assert_int_equal(st.merges_back, 1);
	fx_put(rec, 4);
	sq_destroy(d);
}

static void test_deadline_front_merges(void **state)
{
	run_front("1", true);
	run_front("0", false);
}

/*
 * When two queued requests merge, the survivor keeps the earlier expiry
 * and FIFO place.  Rb (116..124) is queued first, X (9000) next, Ra
 * (100..108) last; a bio 108..116 joins them into Ra+Rb.  The first batch
 * starts at the FIFO head: Ra+Rb (Rb's place), not X.
 */
static void test_deadline_merge_keeps_earlier(void **state)
{
	struct sq_dev *d = make(SQ_MODE_INLINE, "deadline", 1);
	struct rq_queue_stats st;
	struct fx_rec rec[4];

	sq_pause(d, true);
	submit(d, &rec[0], RQ_OP_READ, 116, 8);
	sq_clock_advance(50 * MS);
	submit(d, &rec[1], RQ_OP_READ, 9000, 8);
	sq_clock_advance(50 * MS);
	submit(d, &rec[2], RQ_OP_READ, 100, 8);
	sq_clock_advance(50 * MS);
	submit(d, &rec[3], RQ_OP_READ, 108, 8);
	sq_pause(d, false);
	expect_ended(rec, 4, RQ_STS_OK);
	rq_queue_get_stats(d->q, &st, sizeof(st));
	assert_int_equal(st.merges_rq, 1);
	assert_int_equal(sq_nr_events(d), 2);
	expect_event(d, 0, RQ_OP_READ, 100, 24);
	expect_event(d, 1, RQ_OP_READ, 9000, 8);
	fx_put(rec, 4);
	sq_destroy(d);
}

/* Tunables: defaults with their units, round trips, rejections. */
static void test_deadline_tunables(void **state)
{
	struct sq_dev *d = make(SQ_MODE_INLINE, "deadline", 1);
	static const struct { const char *name, *def, *good, *bad[6]; } t[] = {
		{ "read_expire", "500\n", "250", { "-1", "abc", "12x", "", "99999999999", NULL } },
		{ "write_expire", "5000\n", "100\n", { "-5", "5 0", "0x10", NULL } },
		{ "writes_starved", "2\n", "7", { "-1", "two", NULL } },
		{ "front_merges", "1\n", "0", { "2", "-1", "yes", NULL } },
		{ "fifo_batch", "16\n", "1", { "-3", "1.5", NULL } },
	};
	char buf[64], list[2048], name[64];

	assert_true(rq_queue_attr_list(d->q, list, sizeof(list)) > 0);
	for (unsigned i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char want[32];

		snprintf(name, sizeof(name), "iosched/%s", t[i].name);
		if (!strstr(list, name))
			fail_msg("%s missing from the attribute list", name);
		assert_true(rq_queue_attr_get(d->q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, t[i].def);
		for (unsigned b = 0; t[i].bad[b]; b++) {
			if (rq_queue_attr_set(d->q, name, t[i].bad[b]) != -EINVAL)
				fail_msg("%s accepted \"%s\"", name, t[i].bad[b]);
			assert_true(rq_queue_attr_get(d->q, name, buf, sizeof(buf)) > 0);
			assert_string_equal(buf, t[i].def);
		}
		assert_int_equal(rq_queue_attr_set(d->q, name, t[i].good), 0);
		snprintf(want, sizeof(want), "%u\n", (unsigned)strtoul(t[i].good, NULL, 10));
		assert_true(rq_queue_attr_get(d->q, name, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, want);
	}
	assert_int_equal(rq_queue_attr_set(d->q, "iosched/no_such", "1"), -EINVAL);
	sq_destroy(d);
}

/*
 * On the virtual clock: a device taking 1 ms per request plus 4 ms per seek
 * serves 16 scattered reads one after another, each taken when the one
 * before finished.
 */
static void test_deadline_clock_device(void **state)
{
	struct sq_config c = { .mode = SQ_MODE_CLOCK, .scheduler = "deadline", .depth = 1,
			       .service_ns = 1 * MS, .seek_ns = 4 * MS };
	struct sq_dev *d = sq_create(&c);
	struct fx_rec rec[16];
	uint64_t t0, used;

	sq_pause(d, true);
	for (unsigned i = 0; i < 16; i++)
		submit(d, &rec[i], RQ_OP_READ, 1000 + ((i * 7) % 16) * 64, 8);
	t0 = sq_clock_now();
	sq_pause(d, false);
	used = sq_run_until_idle(d, 10000 * MS);
	expect_ended(rec, 16, RQ_STS_OK);
	assert_int_equal(sq_nr_events(d), 16);
	assert_int_equal(used, 16 * 5 * MS);
	for (unsigned i = 0; i < 16; i++)
		assert_int_equal(sq_event(d, i).when_ns, t0 + i * 5 * MS);
	fx_put(rec, 16);
	sq_destroy(d);
}

/* ========================================== the front end, through noop */

/* request_fn runs when a request is inserted. */
static void test_fe_runs_on_insert(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 4);
	unsigned long calls = sq_request_fn_calls(d);
	struct fx_rec rec;

	submit(d, &rec, RQ_OP_WRITE, 0, 8);
	assert_true(sq_wait_held(d, 1, 5000));
	assert_true(sq_request_fn_calls(d) > calls);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(&rec, 1, RQ_STS_OK);
	fx_put(&rec, 1);
	sq_destroy(d);
}

/* A plug keeps requests until it is finished; then request_fn runs. */
static void test_fe_runs_on_unplug(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 4);
	unsigned long calls = sq_request_fn_calls(d);
	struct fx_rec rec[3];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 3; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	assert_int_equal(sq_nr_held(d), 0);
	assert_int_equal(sq_request_fn_calls(d), calls);
	rq_finish_plug(&plug);
	assert_true(sq_wait_held(d, 3, 5000));
	assert_true(sq_request_fn_calls(d) > calls);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 3, RQ_STS_OK);
	fx_put(rec, 3);
	sq_destroy(d);
}

/* A stopped queue calls no request_fn; starting it runs the queue. */
static void test_fe_stop_start(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 4);
	unsigned long calls;
	struct fx_rec rec;

	rq_sq_lock(d->q);
	rq_sq_stop_queue(d->q);
	assert_true(rq_sq_queue_stopped(d->q));
	rq_sq_unlock(d->q);
	calls = sq_request_fn_calls(d);
	submit(d, &rec, RQ_OP_WRITE, 0, 8);
	rq_sq_run_queue(d->q);
	assert_int_equal(sq_request_fn_calls(d), calls);
	assert_int_equal(sq_nr_held(d), 0);
	assert_int_equal(fx_done(&rec), 0);
	rq_sq_lock(d->q);
	rq_sq_start_queue(d->q);
	assert_false(rq_sq_queue_stopped(d->q));
	rq_sq_unlock(d->q);
	assert_true(sq_wait_held(d, 1, 5000));
	assert_true(sq_request_fn_calls(d) > calls);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(&rec, 1, RQ_STS_OK);
	fx_put(&rec, 1);
	sq_destroy(d);
}

/* A driver that finds itself busy delays the queue; the service thread
 * runs it again later. */
static void test_fe_delay_queue(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 4);
	unsigned long calls = sq_request_fn_calls(d);
	struct fx_rec rec;

	sq_set_busy(d, 1, 2);
	submit(d, &rec, RQ_OP_WRITE, 0, 8);
	assert_true(sq_wait_held(d, 1, 10000));
	assert_true(sq_request_fn_calls(d) >= calls + 2);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(&rec, 1, RQ_STS_OK);
	fx_put(&rec, 1);
	sq_destroy(d);
}

/* peek leaves the request on the dispatch queue, start takes it, fetch is
 * both; a request that was only peeked cannot be ended. */
static void test_fe_peek_start_fetch(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 4);
	struct rq_request *a, *b, *c;
	struct fx_rec rec[3];

	sq_pause(d, true);
	submit(d, &rec[0], RQ_OP_WRITE, 0, 8);
	submit(d, &rec[1], RQ_OP_READ, 100, 8);
	submit(d, &rec[2], RQ_OP_WRITE, 200, 8);
	rq_sq_lock(d->q);
	a = rq_sq_peek_request(d->q);
	assert_non_null(a);
	assert_int_equal(a->sector, 0);
	assert_ptr_equal(rq_sq_peek_request(d->q), a);
	rq_sq_start_request(a);
	b = rq_sq_peek_request(d->q);
	assert_non_null(b);
	assert_int_equal(b->sector, 100);
	assert_ptr_equal(rq_sq_fetch_request(d->q), b);
	c = rq_sq_peek_request(d->q);
	assert_non_null(c);
	assert_int_equal(c->sector, 200);
	assert_int_equal(rq_sq_in_flight(d->q, true), 1);  /* the read */
	assert_int_equal(rq_sq_in_flight(d->q, false), 1); /* the write */
	rq_sq_unlock(d->q);

	/* c is only peeked: ending it does nothing */
	rq_sq_end_request_all(c, RQ_STS_OK);
	assert_int_equal(fx_done(&rec[2]), 0);

	rq_sq_end_request_all(a, RQ_STS_OK);
	rq_sq_end_request_all(b, RQ_STS_IOERR);
	assert_true(fx_wait(rec, 2, 5000));
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(rec[0].status, RQ_STS_OK);
	assert_int_equal(fx_done(&rec[1]), 1);
	assert_int_equal(rec[1].status, RQ_STS_IOERR);

	rq_sq_lock(d->q);
	assert_ptr_equal(rq_sq_fetch_request(d->q), c);
	assert_null(rq_sq_peek_request(d->q));
	rq_sq_unlock(d->q);
	rq_sq_end_request_all(c, RQ_STS_OK);
	expect_ended(&rec[2], 1, RQ_STS_OK);
	fx_put(rec, 3);
	sq_pause(d, false);
	sq_destroy(d);
}

/* Ending by bytes: a request ends once all its bytes are done; bios of a
 * merged request end one by one as their bytes complete. */
static void test_fe_partial_completion(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 1);
	struct fx_rec rec[3];
	struct rq_request *rq;
	struct rq_plug plug;

	submit(d, &rec[0], RQ_OP_WRITE, 1000, 32);
	assert_true(sq_wait_held(d, 1, 5000));
	rq = sq_held(d, 0);
	assert_true(sq_complete_bytes(d, 0, 4096, RQ_STS_OK));
	assert_int_equal(rq->bytes, 12288);
	assert_int_equal(rq->sector, 1008);
	assert_int_equal(fx_done(&rec[0]), 0);
	assert_true(sq_complete_bytes(d, 0, 8192, RQ_STS_OK));
	assert_int_equal(fx_done(&rec[0]), 0);
	assert_false(sq_complete_bytes(d, 0, 4096, RQ_STS_OK));
	expect_ended(&rec[0], 1, RQ_STS_OK);
	assert_int_equal(sq_nr_held(d), 0);

	/* two bios in one request */
	rq_start_plug(&plug);
	submit(d, &rec[1], RQ_OP_WRITE, 2000, 8);
	submit(d, &rec[2], RQ_OP_WRITE, 2008, 8);
	rq_finish_plug(&plug);
	assert_true(sq_wait_held(d, 1, 5000));
	assert_int_equal(sq_held(d, 0)->bytes, 8192);
	assert_true(sq_complete_bytes(d, 0, 4096, RQ_STS_OK));
	expect_ended(&rec[1], 1, RQ_STS_OK);
	assert_int_equal(fx_done(&rec[2]), 0);
	assert_false(sq_complete_bytes(d, 0, 4096, RQ_STS_MEDIUM));
	expect_ended(&rec[2], 1, RQ_STS_MEDIUM);
	fx_put(rec, 3);
	sq_destroy(d);
}

/* A requeued request goes to the front: the device gets it again first. */
static void test_fe_requeue_front(void **state)
{
	struct sq_dev *d = make(SQ_MODE_HOLD, "noop", 1);
	struct fx_rec rec[3];

	submit(d, &rec[0], RQ_OP_WRITE, 0, 8);
	submit(d, &rec[1], RQ_OP_WRITE, 100, 8);
	submit(d, &rec[2], RQ_OP_READ, 200, 8);
	assert_true(sq_wait_held(d, 1, 5000));
	expect_event(d, 0, RQ_OP_WRITE, 0, 8);
	assert_true(sq_requeue(d, 0));
	assert_int_equal(fx_done(&rec[0]), 0);
	rq_sq_run_queue(d->q);
	assert_true(sq_wait_held(d, 1, 5000));
	expect_event(d, 1, RQ_OP_WRITE, 0, 8);
	for (unsigned i = 2; i < 4; i++) {
		assert_true(sq_complete_next(d, RQ_STS_OK));
		assert_true(sq_wait_held(d, 1, 5000));
	}
	expect_event(d, 2, RQ_OP_WRITE, 100, 8);
	expect_event(d, 3, RQ_OP_READ, 200, 8);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 3, RQ_STS_OK);
	{
		struct rq_queue_stats st;

		rq_queue_get_stats(d->q, &st, sizeof(st));
		assert_int_equal(st.requeues, 1);
	}
	fx_put(rec, 3);
	sq_destroy(d);
}

/* --------------------------------------------------------- request pool */

struct waiter {
	struct sq_dev *d;
	struct fx_rec rec;
	uint64_t sector;
	pid_t tid;
	int returned;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	__atomic_store_n(&w->tid, fx_gettid(), __ATOMIC_RELEASE);
	rq_submit_bio(w->d->q, bio_at(&w->rec, RQ_OP_WRITE, w->sector, 8));
	__atomic_store_n(&w->returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Start a waiter and wait until it sleeps inside rq_submit_bio. */
static void start_waiter(struct waiter *w, pthread_t *t)
{
	assert_int_equal(pthread_create(t, NULL, waiter_main, w), 0);
	/* asleep several times in a row, and not returned: blocked */
	if (!fx_wait_blocked(&w->tid, &w->returned, 10000))
		fail_msg("the waiter returned or never went to sleep");
}

/*
 * With nr_requests 4 and all four held by the device, a fifth bio waits
 * (and so does a sixth, behind it); as requests free up they are served in
 * the order they waited.  Writes only, so the sync/async split of a pool
 * cannot matter.
 */
static void test_fe_pool_bounded(void **state)
{
	struct sq_config c = { .mode = SQ_MODE_HOLD, .scheduler = "noop", .depth = 8,
			       .nr_requests = 4 };
	struct sq_dev *d = sq_create(&c);
	struct waiter w[2] = { { .d = d, .sector = 5000 }, { .d = d, .sector = 6000 } };
	struct fx_rec rec[4];
	pthread_t t[2];
	char buf[32];

	assert_true(rq_queue_attr_get(d->q, "nr_requests", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "4\n");
	for (unsigned i = 0; i < 4; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	assert_true(sq_wait_held(d, 4, 5000));
	start_waiter(&w[0], &t[0]);
	start_waiter(&w[1], &t[1]);
	assert_int_equal(sq_nr_events(d), 4);

	assert_true(sq_complete_next(d, RQ_STS_OK));
	assert_true(sq_wait_held(d, 4, 10000));
	pthread_join(t[0], NULL);
	assert_int_equal(sq_nr_events(d), 5);
	expect_event(d, 4, RQ_OP_WRITE, 5000, 8);
	assert_false(__atomic_load_n(&w[1].returned, __ATOMIC_ACQUIRE));

	assert_true(sq_complete_next(d, RQ_STS_OK));
	pthread_join(t[1], NULL);
	assert_true(sq_wait_held(d, 4, 10000));
	assert_int_equal(sq_nr_events(d), 6);
	expect_event(d, 5, RQ_OP_WRITE, 6000, 8);

	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 4, RQ_STS_OK);
	expect_ended(&w[0].rec, 1, RQ_STS_OK);
	expect_ended(&w[1].rec, 1, RQ_STS_OK);
	fx_put(rec, 4);
	fx_put(&w[0].rec, 1);
	fx_put(&w[1].rec, 1);
	sq_destroy(d);
}

/* A NOWAIT bio finding the pool empty ends at once with AGAIN. */
static void test_fe_nowait_again(void **state)
{
	struct sq_config c = { .mode = SQ_MODE_HOLD, .scheduler = "noop", .depth = 8,
			       .nr_requests = 4 };
	struct sq_dev *d = sq_create(&c);
	struct fx_rec rec[5];
	struct rq_bio *bio;

	for (unsigned i = 0; i < 4; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	assert_true(sq_wait_held(d, 4, 5000));
	bio = bio_at(&rec[4], RQ_OP_WRITE, 1000, 8);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(d->q, bio);
	expect_ended(&rec[4], 1, RQ_STS_AGAIN);
	assert_int_equal(sq_nr_events(d), 4);
	sq_complete_all(d, RQ_STS_OK);
	expect_ended(rec, 4, RQ_STS_OK);
	fx_put(rec, 5);
	sq_destroy(d);
}

/* ---------------------------------------------------- tagged queueing */

static void test_fe_tags(void **state)
{
	struct sq_config c = { .mode = SQ_MODE_HOLD, .scheduler = "noop", .depth = 4,
			       .tagged = true };
	struct sq_dev *d = sq_create(&c);
	struct fx_rec rec[12];
	unsigned seen = 0, freed_tag;
	struct rq_request *rq;

	for (unsigned i = 0; i < 6; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	assert_true(sq_wait_held(d, 4, 5000));
	assert_int_equal(sq_nr_held(d), 4);
	rq_sq_lock(d->q);
	for (unsigned i = 0; i < 4; i++) {
		rq = sq_held(d, i);
		assert_true(rq->tag >= 0 && rq->tag < 4);
		assert_false(seen & (1u << rq->tag));
		seen |= 1u << rq->tag;
		assert_ptr_equal(rq_sq_find_tag(d->q, (unsigned)rq->tag), rq);
	}
	assert_null(rq_sq_find_tag(d->q, 7));
	/* shrinking below the tags in use is refused; bad depths too */
	assert_int_equal(rq_sq_resize_tags(d->q, 2), -EBUSY);
	assert_int_equal(rq_sq_resize_tags(d->q, 0), -EINVAL);
	assert_int_equal(rq_sq_resize_tags(d->q, 5000), -EINVAL);
	rq_sq_unlock(d->q);

	/* a freed tag goes to the next request */
	freed_tag = (unsigned)sq_held(d, 1)->tag;
	assert_true(sq_complete_one(d, 1, RQ_STS_OK));
	assert_true(sq_wait_held(d, 4, 5000));
	assert_int_equal(sq_event(d, 4).tag, (int)freed_tag);

	/* a tag released early: the request is no longer found by it */
	rq_sq_lock(d->q);
	rq = sq_held(d, 0);
	freed_tag = (unsigned)rq->tag;
	rq_sq_end_tag(d->q, rq);
	assert_null(rq_sq_find_tag(d->q, freed_tag));
	rq_sq_unlock(d->q);
	sq_drain(d, rec, 6);
	expect_ended(rec, 6, RQ_STS_OK);

	/* shrink to 2: only two in the device */
	rq_sq_lock(d->q);
	assert_int_equal(rq_sq_resize_tags(d->q, 2), 0);
	rq_sq_unlock(d->q);
	for (unsigned i = 6; i < 10; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	assert_true(sq_wait_held(d, 2, 5000));
	assert_int_equal(sq_nr_held(d), 2);
	/* grow to 8: the waiting two go in */
	rq_sq_lock(d->q);
	assert_int_equal(rq_sq_resize_tags(d->q, 8), 0);
	rq_sq_unlock(d->q);
	rq_sq_run_queue(d->q);
	assert_true(sq_wait_held(d, 4, 5000));
	sq_drain(d, &rec[6], 4);
	expect_ended(&rec[6], 4, RQ_STS_OK);
	fx_put(rec, 10);
	sq_destroy(d);
}

/* ------------------------------------------------- scheduler switching */

/*
 * Switching between noop and deadline while bios are in flight loses none:
 * the switch drains the queue (a device thread keeps ending requests), and
 * a failed switch leaves the scheduler in place.
 */
static void test_switch_in_flight(void **state)
{
	struct sq_dev *d = make(SQ_MODE_THREAD, "noop", 2);
	struct fx_rec rec[24];
	char buf[256];

	for (unsigned i = 0; i < 8; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	set_attr(d, "scheduler", "deadline");
	assert_true(rq_queue_attr_get(d->q, "scheduler", buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "[deadline]"));
	assert_non_null(strstr(buf, "noop"));
	for (unsigned i = 8; i < 16; i++)
		submit(d, &rec[i], RQ_OP_READ, i * 100, 8);
	set_attr(d, "scheduler", "noop");
	for (unsigned i = 16; i < 24; i++)
		submit(d, &rec[i], RQ_OP_WRITE, i * 100, 8);
	expect_ended(rec, 24, RQ_STS_OK);
	assert_int_equal(rq_queue_attr_set(d->q, "scheduler", "no-such"), -EINVAL);
	assert_true(rq_queue_attr_get(d->q, "scheduler", buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "[noop]"));
	fx_put(rec, 24);
	sq_destroy(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_noop_fifo_order),
		cmocka_unit_test(test_noop_merges),
		cmocka_unit_test(test_noop_no_reorder_by_merge),
		cmocka_unit_test(test_deadline_sector_order),
		cmocka_unit_test(test_deadline_expired_first),
		cmocka_unit_test(test_deadline_writes_starved),
		cmocka_unit_test(test_deadline_fifo_batch),
		cmocka_unit_test(test_deadline_front_merges),
		cmocka_unit_test(test_deadline_merge_keeps_earlier),
		cmocka_unit_test(test_deadline_tunables),
		cmocka_unit_test(test_deadline_clock_device),
		cmocka_unit_test(test_fe_runs_on_insert),
		cmocka_unit_test(test_fe_runs_on_unplug),
		cmocka_unit_test(test_fe_stop_start),
		cmocka_unit_test(test_fe_delay_queue),
		cmocka_unit_test(test_fe_peek_start_fetch),
		cmocka_unit_test(test_fe_partial_completion),
		cmocka_unit_test(test_fe_requeue_front),
		cmocka_unit_test(test_fe_pool_bounded),
		cmocka_unit_test(test_fe_nowait_again),
		cmocka_unit_test(test_fe_tags),
		cmocka_unit_test(test_switch_in_flight),
	};

	if (!rq_sched_exists("noop") || !rq_sched_exists("deadline")) {
		fprintf(stderr, "noop or deadline not registered: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
