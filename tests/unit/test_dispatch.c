/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Dispatch: direct issue, hardware queue choice, invalid bios, splits,
 * budget hooks, and driver errors reaching the submitter.
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
static uint8_t big[65536];

static struct mock_dev *defer_dev(void)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER };

	return mock_create(&cfg, NULL);
}

/* Without a plug or scheduler, queue_rq runs on the submitting thread
 * before rq_submit_bio returns, with last=true and the bio's fields. */
static void test_direct_issue(void **state)
{
	struct mock_dev *m = defer_dev();
	struct fx_rec rec;
	struct mock_event ev;
	struct rq_queue_stats st;

	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 24, bufs[0], 4096));
	assert_int_equal(m->queue_rq_calls, 1);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 0, &ev));
	assert_true(ev.last);
	assert_int_equal(ev.op, RQ_OP_WRITE);
	assert_int_equal(ev.sector, 24);
	assert_int_equal(ev.bytes, 4096);
	assert_int_equal(ev.nr_segments, 1);
	assert_int_equal(ev.hctx, 0);
	assert_true(ev.tag >= 0 && ev.tag < 64);
	assert_int_equal(fx_done(&rec), 0);
	assert_int_equal(mock_nr_held(m), 1);
	assert_int_equal(mock_held(m, 0)->tag, ev.tag);

	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	assert_int_equal(rec.status, RQ_STS_OK);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.dispatched, 1);
	assert_int_equal(st.completed, 1);
	assert_int_equal(st.errors, 0);
	fx_put(&rec, 1);
	mock_destroy(m);
}

struct hw_thread_arg {
	struct mock_dev *m;
	struct fx_rec *rec;
	unsigned first, n;
};

static void *hw_submitter(void *p)
{
	struct hw_thread_arg *a = p;

	for (unsigned i = 0; i < a->n; i++) {
		unsigned k = a->first + i;

		rq_submit_bio(a->m->q, fx_bio(&a->rec[k], RQ_OP_WRITE, (uint64_t)k * 16,
					      bufs[k % 16], 4096));
	}
	return NULL;
}

/* With 4 hardware queues, each set up once (init_hctx), every request lands
 * on a valid hctx whose index the request carries; bios from 2 threads all
 * end once. */
static void test_multiple_hw_queues(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE, .nr_hw_queues = 4 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	enum { N = 400 };
	struct fx_rec *rec = calloc(N, sizeof(*rec));
	struct hw_thread_arg a[2] = { { m, rec, 0, N / 2 }, { m, rec, N / 2, N / 2 } };
	pthread_t t[2];
	struct mock_event *evs;
	unsigned n;

	assert_int_equal(rq_queue_nr_hw_queues(m->q), 4);
	assert_int_equal(mock_count(m, MOCK_INIT_HCTX), 4);
	for (unsigned i = 0; i < 4; i++) {
		assert_non_null(rq_queue_hctx(m->q, i));
		assert_int_equal(rq_hctx_index(rq_queue_hctx(m->q, i)), i);
		assert_ptr_equal(rq_hctx_queue(rq_queue_hctx(m->q, i)), m->q);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hw_submitter, &a[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_true(fx_wait(rec, N, 10000));
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	n = mock_copy_events(m, MOCK_QUEUE_RQ, &evs);
	assert_int_equal(n, N);
	for (unsigned i = 0; i < n; i++)
		assert_true(evs[i].hctx < 4);
	free(evs);
	fx_put(rec, N);
	free(rec);
	mock_destroy(m);
}

struct invalid_case {
	unsigned op;
	uint64_t sector;
	void *buf;
	uint32_t len;
	rq_status_t expect;
};

/* Submit each case; each must end before rq_submit_bio returns with its
 * status, the driver must see none, and stats.invalid must count them. */
static void run_invalid(struct mock_dev *m, const struct invalid_case *cases, unsigned n)
{
	struct fx_rec *rec = calloc(n, sizeof(*rec));
	struct rq_queue_stats st;
	struct fx_rec ok;

	for (unsigned i = 0; i < n; i++) {
		rq_submit_bio(m->q, fx_bio(&rec[i], cases[i].op, cases[i].sector, cases[i].buf,
					   cases[i].len));
		if (fx_done(&rec[i]) != 1)
			fail_msg("case %u: ended %d times at return", i, fx_done(&rec[i]));
		if (rec[i].status != cases[i].expect)
			fail_msg("case %u: status %d, expected %d", i, rec[i].status, cases[i].expect);
	}
	assert_int_equal(m->queue_rq_calls, 0);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.invalid, n);
	assert_int_equal(st.requests, 0);
	/* a valid bio still works */
	rq_submit_bio(m->q, fx_bio(&ok, RQ_OP_WRITE, 8, bufs[0], 4096));
	assert_int_equal(mock_nr_held(m), 1);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(&ok, 1, 10000));
	assert_int_equal(ok.status, RQ_STS_OK);
	fx_put(&ok, 1);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, n);
	free(rec);
}

/*
 * Every kind of malformed bio ends at once with RQ_STS_INVAL (RQ_STS_IOERR
 * past capacity), never reaches the driver, and is counted in stats.invalid.
 * Queue: 4 KiB logical blocks, capacity 1000 sectors, discard and
 * write-zeroes supported (so data on them is the only fault).
 */
static void test_invalid_bios(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .capacity = 1000 };
	const struct invalid_case cases[] = {
		{ RQ_OP_LAST, 0, bufs[0], 4096, RQ_STS_INVAL },        /* unknown op */
		{ 77, 0, bufs[0], 4096, RQ_STS_INVAL },                /* unknown op */
		{ RQ_OP_WRITE, 1, bufs[0], 4096, RQ_STS_INVAL },       /* misaligned sector */
		{ RQ_OP_READ, 0, bufs[0], 512, RQ_STS_INVAL },         /* size not a block */
		{ RQ_OP_WRITE, 0, bufs[0], 4096 + 512, RQ_STS_INVAL }, /* size not a block */
		{ RQ_OP_READ, 0, NULL, 0, RQ_STS_INVAL },              /* zero-size read */
		{ RQ_OP_WRITE, 0, NULL, 0, RQ_STS_INVAL },             /* zero-size write */
		{ RQ_OP_FLUSH, 0, bufs[0], 4096, RQ_STS_INVAL },       /* data on flush */
		{ RQ_OP_DISCARD, 0, bufs[0], 4096, RQ_STS_INVAL },     /* data on discard */
		{ RQ_OP_WRITE_ZEROES, 0, bufs[0], 4096, RQ_STS_INVAL }, /* data on w-zeroes */
		{ RQ_OP_WRITE, 1000, bufs[0], 4096, RQ_STS_IOERR },    /* past capacity */
		{ RQ_OP_READ, 992, bufs[0], 8192, RQ_STS_IOERR },      /* straddles the end */
	};
	struct mock_dev *m;

	rq_queue_limits_default(&lim);
	lim.logical_block_size = 4096;
	lim.physical_block_size = 4096;
	lim.max_discard_sectors = 64;
	lim.max_write_zeroes_sectors = 64;
	m = mock_create(&cfg, &qc);
	assert_int_equal(rq_queue_capacity(m->q), 1000);
	run_invalid(m, cases, sizeof(cases) / sizeof(cases[0]));
	mock_destroy(m);
}

/* Discard and write-zeroes on a queue whose limits for them are 0 end at
 * once with RQ_STS_NOTSUPP and never reach the driver. */
static void test_unsupported_ops(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim };
	const struct invalid_case cases[] = {
		{ RQ_OP_DISCARD, 0, NULL, 4096, RQ_STS_NOTSUPP },
		{ RQ_OP_WRITE_ZEROES, 0, NULL, 4096, RQ_STS_NOTSUPP },
	};
	struct mock_dev *m;

	rq_queue_limits_default(&lim);
	lim.max_discard_sectors = 0;
	lim.max_write_zeroes_sectors = 0;
	m = mock_create(&cfg, &qc);
	run_invalid(m, cases, 2);
	mock_destroy(m);
}

/* Check that the held requests cover [0, @sectors) exactly, each within
 * @max_sectors sectors and @max_segs segments; returns how many. */
static unsigned check_pieces(struct mock_dev *m, uint64_t sectors, unsigned max_sectors,
			     unsigned max_segs)
{
	unsigned nr = mock_nr_held(m);
	uint8_t *covered = calloc(sectors, 1);

	for (unsigned i = 0; i < nr; i++) {
		struct rq_request *rq = mock_held(m, i);

		assert_true(rq->bytes > 0);
		assert_true(rq_request_sectors(rq) <= max_sectors);
		assert_true(rq->nr_segments <= max_segs);
		assert_true(rq_request_end_sector(rq) <= sectors);
		for (uint64_t s = rq->sector; s < rq_request_end_sector(rq); s++) {
			assert_int_equal(covered[s], 0);
			covered[s] = 1;
		}
	}
	for (uint64_t s = 0; s < sectors; s++)
		assert_int_equal(covered[s], 1);
	free(covered);
	return nr;
}

/* A 64 KiB write over max_sectors 16 reaches the driver as 8 requests of
 * at most 16 sectors covering it exactly; the bio ends once, only after the
 * last piece, with the first error a piece saw. */
static void test_split_max_sectors(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim };
	struct mock_dev *m;
	struct fx_rec rec;
	struct rq_queue_stats st;
	unsigned nr;

	rq_queue_limits_default(&lim);
	lim.max_sectors = 16;
	m = mock_create(&cfg, &qc);
	rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 0, big, sizeof(big)));
	assert_true(mock_wait_held(m, 8, 10000));
	nr = check_pieces(m, 128, 16, 128);
	assert_int_equal(nr, 8);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_true(st.splits >= 1);

	/* all but one end: the bio waits; one of them fails */
	mock_complete_one(m, 0, RQ_STS_OK);
	mock_complete_one(m, 0, RQ_STS_MEDIUM);
	while (mock_nr_held(m) > 1)
		mock_complete_one(m, 0, RQ_STS_OK);
	assert_int_equal(fx_done(&rec), 0);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(&rec, 1, 10000));
	assert_int_equal(fx_done(&rec), 1);
	assert_int_equal(rec.status, RQ_STS_MEDIUM);
	fx_put(&rec, 1);
	mock_destroy(m);
}

/* A bio of 8 non-contiguous 4 KiB vectors over max_segments 2 reaches the
 * driver as 4 requests of at most 2 segments; it ends once, OK. */
static void test_split_max_segments(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim };
	struct mock_dev *m;
	struct mock_io io;
	struct rq_bio *bio;
	unsigned nr;

	rq_queue_limits_default(&lim);
	lim.max_segments = 2;
	m = mock_create(&cfg, &qc);
	mock_io_init(&io);
	bio = rq_bio_alloc(8);
	assert_non_null(bio);
	bio->op = RQ_OP_WRITE;
	bio->iter.sector = 0;
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(rq_bio_add_vec(bio, bufs[i], 4096), 0);
	bio->iter.size = 8 * 4096;
	bio->end_io = mock_io_end_fn();
	bio->private_data = &io;
	io.bio = bio;
	rq_submit_bio(m->q, bio);
	assert_true(mock_wait_held(m, 4, 10000));
	nr = check_pieces(m, 64, 64, 2);
	assert_int_equal(nr, 4);
	mock_complete_all(m, RQ_STS_OK);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	mock_destroy(m);
}

/*
 * Budget: with budget_depth 2 only two requests are with the driver at a
 * time; a refused get_budget delays the others without losing any; at the
 * end every granted budget was put back exactly once.
 */
static void test_budget(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .use_budget = true,
				   .budget_depth = 2 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	struct fx_rec rec[6];
	int used, min, max;
	unsigned completed = 0, granted = 0;
	struct mock_event *evs;
	unsigned n;
	uint64_t end;

	for (unsigned i = 0; i < 6; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	assert_int_equal(mock_nr_held(m), 2);
	end = fixture_now_ms() + 10000;
	while (completed < 6 && fixture_now_ms() < end) {
		if (mock_nr_held(m)) {
			assert_true(mock_nr_held(m) <= 2);
			mock_complete_one(m, 0, RQ_STS_OK);
			completed++;
		} else {
			fx_poll_pause();
		}
	}
	assert_int_equal(completed, 6);
	assert_true(fx_wait(rec, 6, 10000));
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	n = mock_copy_events(m, MOCK_GET_BUDGET, &evs);
	for (unsigned i = 0; i < n; i++)
		granted += evs[i].ret == RQ_STS_OK;
	free(evs);
	assert_true(granted >= 6);
	assert_true(n > granted); /* some were refused */
	assert_int_equal(mock_count(m, MOCK_PUT_BUDGET), granted);
	mock_budget_range(m, &used, &min, &max);
	assert_int_equal(used, 0);
	assert_true(min >= 0);
	assert_true(max <= 2);
	assert_int_equal(m->queue_rq_calls, 6);
	fx_put(rec, 6);
	mock_destroy(m);
}

/* Budget with a plug: a batch of 5 plugged requests with budget_depth 2 is
 * issued 2 at a time; every get has its put and nothing is lost. */
static void test_budget_plugged(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE, .use_budget = true,
				   .budget_depth = 2 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	struct fx_rec rec[5];
	struct rq_plug plug;
	struct mock_event *evs;
	unsigned n, granted = 0;
	int used, min, max;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 5; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, 5, 10000));
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	n = mock_copy_events(m, MOCK_GET_BUDGET, &evs);
	for (unsigned i = 0; i < n; i++)
		granted += evs[i].ret == RQ_STS_OK;
	free(evs);
	assert_int_equal(mock_count(m, MOCK_PUT_BUDGET), granted);
	mock_budget_range(m, &used, &min, &max);
	assert_int_equal(used, 0);
	assert_true(min >= 0);
	assert_true(max <= 2);
	fx_put(rec, 5);
	mock_destroy(m);
}

/* A status other than OK/RESOURCE from queue_rq ends the request with it:
 * end_io sees IOERR, MEDIUM, NOSPC; stats.errors counts them. */
static void test_queue_rq_error_status(void **state)
{
	struct mock_dev *m = defer_dev();
	const rq_status_t sts[] = { RQ_STS_IOERR, RQ_STS_MEDIUM, RQ_STS_NOSPC };
	struct fx_rec rec[3];
	struct rq_queue_stats st;

	mock_script(m, sts, 3);
	for (unsigned i = 0; i < 3; i++) {
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
		assert_true(fx_wait(&rec[i], 1, 10000));
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, sts[i]);
	}
	assert_int_equal(m->queue_rq_calls, 3);
	assert_int_equal(mock_nr_held(m), 0);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.errors, 3);
	assert_int_equal(st.dispatched, 0);
	fx_put(rec, 3);
	mock_destroy(m);
}

/* A driver that ends a request with an error status: end_io sees it. */
static void test_completion_error_status(void **state)
{
	struct mock_dev *m = defer_dev();
	struct fx_rec rec[2];
	struct rq_queue_stats st;

	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_READ, 0, bufs[0], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_READ, 64, bufs[1], 4096));
	assert_true(mock_wait_held(m, 2, 10000));
	mock_complete_one(m, 0, RQ_STS_TRANSPORT);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(rec, 2, 10000));
	assert_int_equal(rec[0].status, RQ_STS_TRANSPORT);
	assert_int_equal(rec[1].status, RQ_STS_OK);
	assert_int_equal(fx_done(&rec[0]), 1);
	assert_int_equal(fx_done(&rec[1]), 1);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.completed, 2);
	fx_put(rec, 2);
	mock_destroy(m);
}

/* A memory-backed round trip through direct issue: write, read back. */
static void test_direct_data_roundtrip(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE, .mem_bytes = 1 << 20 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	static uint8_t w[16384], r[16384];

	fixture_fill(w, sizeof(w), 3, 0);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 128, w, sizeof(w)), RQ_STS_OK);
	assert_memory_equal(m->mem + 128 * 512, w, sizeof(w));
	assert_int_equal(mock_rw(m, RQ_OP_READ, 128, r, sizeof(r)), RQ_STS_OK);
	assert_memory_equal(r, w, sizeof(w));
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_direct_issue),
		cmocka_unit_test(test_multiple_hw_queues),
		cmocka_unit_test(test_invalid_bios),
		cmocka_unit_test(test_unsupported_ops),
		cmocka_unit_test(test_split_max_sectors),
		cmocka_unit_test(test_split_max_segments),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_budget_plugged),
		cmocka_unit_test(test_queue_rq_error_status),
		cmocka_unit_test(test_completion_error_status),
		cmocka_unit_test(test_direct_data_roundtrip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
