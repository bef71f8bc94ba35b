/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Merging: bios joining requests on a plug and in a scheduler, the limits
 * and flags that prevent it, the nomerges attribute, and the kernel
 * fidelity cases from doc/semantics-draft.md.
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

#define NBUF 16
/* 8 KiB apart: the 4 KiB buffers are never memory-contiguous. */
static uint8_t bufs[NBUF][8192];

struct devopts {
	enum mock_completion completion;
	uint32_t max_sectors, max_hw_sectors, max_segments;
	uint32_t max_discard_sectors;
	uint32_t features;
	const char *sched;
	uint64_t mem;
};

static struct mock_dev *make_dev(const struct devopts *o)
{
	struct mock_config cfg = { .completion = o->completion, .mem_bytes = o->mem,
				   .queue_depth = 128 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = o->sched };

	rq_queue_limits_default(&lim);
	if (o->max_hw_sectors)
		lim.max_hw_sectors = o->max_hw_sectors;
	if (o->max_sectors)
		lim.max_sectors = o->max_sectors;
	if (o->max_segments)
		lim.max_segments = o->max_segments;
	lim.max_discard_sectors = o->max_discard_sectors;
	lim.features = o->features;
	return mock_create(&cfg, &qc);
}

/* Submit n 4 KiB bios of @op at the given sectors on one plug. */
static void plugged(struct mock_dev *m, struct fx_rec *rec, unsigned n, unsigned op,
		    const uint64_t *sectors, const uint32_t *opf)
{
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++) {
		struct rq_bio *bio = fx_bio(&rec[i], op, sectors[i], bufs[i], 4096);

		if (opf)
			bio->opf = opf[i];
		rq_submit_bio(m->q, bio);
	}
	rq_finish_plug(&plug);
}

static void end_all_ok(struct mock_dev *m, struct fx_rec *rec, unsigned n)
{
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(rec, n, 10000));
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, n);
}

static struct mock_event issued(struct mock_dev *m, unsigned i)
{
	struct mock_event ev;

	assert_true(mock_find(m, MOCK_QUEUE_RQ, i, &ev));
	return ev;
}

/* Two bios where the second starts at the first's end back-merge on the
 * plug: one request at sector 0 of 8 KiB, 2 segments; merges_back and
 * plug_merges count it; one request allocated. */
static void test_plug_back_merge(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8 };
	struct fx_rec rec[2];
	struct rq_queue_stats st;
	struct mock_event ev;

	plugged(m, rec, 2, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	ev = issued(m, 0);
	assert_int_equal(ev.sector, 0);
	assert_int_equal(ev.bytes, 8192);
	assert_int_equal(ev.nr_segments, 2);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back, 1);
	assert_int_equal(st.merges_front, 0);
	assert_int_equal(st.plug_merges, 1);
	assert_int_equal(st.requests, 1);
	end_all_ok(m, rec, 2);
	mock_destroy(m);
}

/* A bio ending where the plugged request starts front-merges: one request
 * at the bio's sector covering both; merges_front counts it. */
static void test_plug_front_merge(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 8, 0 };
	struct fx_rec rec[2];
	struct rq_queue_stats st;
	struct mock_event ev;

	plugged(m, rec, 2, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	ev = issued(m, 0);
	assert_int_equal(ev.sector, 0);
	assert_int_equal(ev.bytes, 8192);
	assert_int_equal(ev.nr_segments, 2);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.merges_front, 1);
	assert_int_equal(st.merges_back, 0);
	assert_int_equal(st.plug_merges, 1);
	end_all_ok(m, rec, 2);
	mock_destroy(m);
}

/* Merging stops at max_sectors: with max_sectors 16 three contiguous 4 KiB
 * bios make an 8 KiB request and a 4 KiB one. */
static void test_no_merge_past_max_sectors(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER, .max_sectors = 16 };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8, 16 };
	struct fx_rec rec[3];

	plugged(m, rec, 3, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	assert_int_equal(issued(m, 0).sector, 0);
	assert_int_equal(issued(m, 0).bytes, 8192);
	assert_int_equal(issued(m, 1).sector, 16);
	assert_int_equal(issued(m, 1).bytes, 4096);
	end_all_ok(m, rec, 3);
	mock_destroy(m);
}

/* Merging stops at max_segments: with max_segments 2 three contiguous bios
 * of one segment each make a 2-segment request and a 1-segment one. */
static void test_no_merge_past_max_segments(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER, .max_segments = 2 };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8, 16 };
	struct fx_rec rec[3];

	plugged(m, rec, 3, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	assert_int_equal(issued(m, 0).bytes, 8192);
	assert_int_equal(issued(m, 0).nr_segments, 2);
	assert_int_equal(issued(m, 1).bytes, 4096);
	assert_int_equal(issued(m, 1).nr_segments, 1);
	end_all_ok(m, rec, 3);
	mock_destroy(m);
}

/* A contiguous bio of another op never merges. */
static void test_no_merge_different_op(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	struct fx_rec rec[2];
	struct rq_plug plug;
	struct rq_queue_stats st;

	rq_start_plug(&plug);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 0, bufs[0], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_READ, 8, bufs[1], 4096));
	rq_finish_plug(&plug);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	assert_int_equal(issued(m, 0).op, RQ_OP_WRITE);
	assert_int_equal(issued(m, 1).op, RQ_OP_READ);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back + st.merges_front, 0);
	end_all_ok(m, rec, 2);
	mock_destroy(m);
}

/* RQ_BIO_NOMERGE on the second bio, or on the first, prevents the merge. */
static void test_no_merge_nomerge_flag(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8, 100, 108 };
	uint32_t opf[] = { 0, RQ_BIO_NOMERGE, RQ_BIO_NOMERGE, 0 };
	struct fx_rec rec[4];
	struct rq_queue_stats st;

	plugged(m, rec, 4, RQ_OP_WRITE, sec, opf);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(issued(m, i).sector, sec[i]);
		assert_int_equal(issued(m, i).bytes, 4096);
	}
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back + st.merges_front, 0);
	end_all_ok(m, rec, 4);
	mock_destroy(m);
}

/* FUA and PREFLUSH bios never merge (device with write cache and FUA):
 * no WRITE the driver sees is larger than one bio. */
static void test_no_merge_fua_preflush(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_INLINE,
			     .features = RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8, 100, 108, 200, 208 };
	uint32_t opf[] = { 0, RQ_BIO_FUA, RQ_BIO_FUA, 0, 0, RQ_BIO_PREFLUSH };
	struct fx_rec rec[6];
	struct mock_event *evs;
	unsigned n, writes = 0;
	struct rq_queue_stats st;

	plugged(m, rec, 6, RQ_OP_WRITE, sec, opf);
	assert_true(fx_wait(rec, 6, 10000));
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	n = mock_copy_events(m, MOCK_QUEUE_RQ, &evs);
	for (unsigned i = 0; i < n; i++) {
		if (evs[i].op != RQ_OP_WRITE)
			continue;
		writes++;
		assert_int_equal(evs[i].bytes, 4096);
	}
	free(evs);
	assert_int_equal(writes, 6);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back + st.merges_front, 0);
	fx_put(rec, 6);
	mock_destroy(m);
}

/* Bios that are not contiguous (a gap, or an overlap) do not merge. */
static void test_no_merge_not_contiguous(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 9, 40, 36 };
	struct fx_rec rec[4];

	plugged(m, rec, 4, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(issued(m, i).bytes, 4096);
	end_all_ok(m, rec, 4);
	mock_destroy(m);
}

/* Contiguous discards merge up to max_discard_sectors: with 24 sectors,
 * three 8-sector discards make one 24-sector request, a fourth starts a new
 * one. */
static void test_discard_merge_within_limit(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER, .max_discard_sectors = 24 };
	struct mock_dev *m = make_dev(&o);
	struct fx_rec rec[4];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_DISCARD, i * 8, NULL, 4096));
	rq_finish_plug(&plug);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	assert_int_equal(issued(m, 0).op, RQ_OP_DISCARD);
	assert_int_equal(issued(m, 0).sector, 0);
	assert_int_equal(issued(m, 0).bytes, 24 * 512);
	assert_int_equal(issued(m, 1).sector, 24);
	assert_int_equal(issued(m, 1).bytes, 4096);
	end_all_ok(m, rec, 4);
	mock_destroy(m);
}

/* nomerges=2: no merges at all, even on a plug. */
static void test_nomerges_2(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8, 16 };
	struct fx_rec rec[3];
	struct rq_queue_stats st;
	char buf[16];

	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "2"), 0);
	assert_true(rq_queue_attr_get(m->q, "nomerges", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "2\n");
	plugged(m, rec, 3, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.merges_back + st.merges_front + st.plug_merges + st.merges_rq, 0);
	end_all_ok(m, rec, 3);
	mock_destroy(m);
}

/* nomerges=1 keeps plug merges. */
static void test_nomerges_1_keeps_plug_merges(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	uint64_t sec[] = { 0, 8, 16 };
	struct fx_rec rec[3];
	struct rq_queue_stats st;

	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "1"), 0);
	plugged(m, rec, 3, RQ_OP_WRITE, sec, NULL);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	assert_int_equal(issued(m, 0).bytes, 3 * 4096);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.plug_merges, 2);
	assert_int_equal(st.merges_back, 2);
	end_all_ok(m, rec, 3);
	mock_destroy(m);
}

/*
 * Fidelity: 16384 sequential 4 KiB writes, each one vector, buffers never
 * memory-contiguous, max_segments 128, max_sectors_kb 1280; @per_plug bios per
 * plug.  Expect exactly @nr_expected requests of @bytes_expected each.
 */
static void fidelity(unsigned per_plug, unsigned nr_expected, uint32_t bytes_expected)
{
	struct devopts o = { .completion = MOCK_COMPLETE_INLINE, .max_hw_sectors = 2560,
			     .max_sectors = 2560, .max_segments = 128 };
	struct mock_dev *m = make_dev(&o);
	const unsigned total = 16384;
	struct fx_rec *rec = calloc(total, sizeof(*rec));
	uint8_t *area = malloc((size_t)per_plug * 8192);
	struct mock_event *evs;
	unsigned n;

	assert_non_null(rec);
	assert_non_null(area);
	memset(area, 0xab, (size_t)per_plug * 8192);
	for (unsigned i = 0; i < total; i += per_plug) {
		struct rq_plug plug;

		rq_start_plug(&plug);
		for (unsigned k = 0; k < per_plug; k++)
			rq_submit_bio(m->q, fx_bio(&rec[i + k], RQ_OP_WRITE, (uint64_t)(i + k) * 8,
						   area + (size_t)k * 8192, 4096));
		rq_finish_plug(&plug);
		/* inline completion: the batch is done; put its bios back */
		assert_true(fx_wait(&rec[i], per_plug, 10000));
		for (unsigned k = 0; k < per_plug; k++)
			assert_int_equal(fx_done(&rec[i + k]), 1);
		fx_put(&rec[i], per_plug);
	}
	n = mock_copy_events(m, MOCK_QUEUE_RQ, &evs);
	assert_int_equal(n, nr_expected);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(evs[i].op, RQ_OP_WRITE);
		assert_int_equal(evs[i].bytes, bytes_expected);
		assert_int_equal(evs[i].sector, (uint64_t)i * (bytes_expected >> 9));
		assert_int_equal(evs[i].ret, RQ_STS_OK);
	}
	free(evs);
	for (unsigned i = 0; i < total; i++)
		assert_int_equal(rec[i].status, RQ_STS_OK);
	free(area);
	free(rec);
	mock_destroy(m);
}

/* Fidelity: 256 per plug -> exactly 128 requests of 512 KiB. */
static void test_fidelity_256_per_plug(void **state)
{
	fidelity(256, 128, 512 * 1024);
}

/* Fidelity: 64 per plug -> exactly 256 requests of 256 KiB. */
static void test_fidelity_64_per_plug(void **state)
{
	fidelity(64, 256, 256 * 1024);
}

/*
 * With the test-fifo scheduler and a quiesced queue, bios merge into queued
 * requests: B back-merges into A, D front-merges into C, and E fills the gap
 * so A and C merge (merges_rq).  After unquiesce the driver sees a single
 * request [0, 40) with 5 segments; every bio ends once.
 */
static void test_sched_merges_queued(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_INLINE, .sched = FIXTURE_FIFO_NAME };
	struct mock_dev *m;
	struct fx_rec rec[5];
	/* A, B, C, D, E */
	const uint64_t sec[] = { 0, 8, 32, 24, 16 };
	struct rq_queue_stats st;
	struct mock_event ev;

	assert_int_equal(fixture_register_fifo(), 0);
	m = make_dev(&o);
	rq_queue_quiesce(m->q);
	for (unsigned i = 0; i < 5; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, sec[i], bufs[i], 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.requests, 2);
	assert_int_equal(st.merges_back + st.merges_front, 3);
	assert_true(st.merges_back >= 1);
	assert_true(st.merges_front >= 1);
	assert_int_equal(st.merges_rq, 1);
	assert_int_equal(st.plug_merges, 0);

	rq_queue_unquiesce(m->q);
	assert_true(fx_wait(rec, 5, 10000));
	for (unsigned i = 0; i < 5; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 0, &ev));
	assert_int_equal(ev.sector, 0);
	assert_int_equal(ev.bytes, 5 * 4096);
	assert_int_equal(ev.nr_segments, 5);
	fx_put(rec, 5);
	mock_destroy(m);
}

/* With the scheduler, nomerges=2 stops every merge with queued requests:
 * three contiguous bios on a quiesced queue stay three requests. */
static void test_sched_nomerges_2(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_INLINE, .sched = FIXTURE_FIFO_NAME };
	struct mock_dev *m;
	struct fx_rec rec[3];
	struct rq_queue_stats st;

	assert_int_equal(fixture_register_fifo(), 0);
	m = make_dev(&o);
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "2"), 0);
	rq_queue_quiesce(m->q);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 8, bufs[i], 4096));
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(st.requests, 3);
	assert_int_equal(st.merges_back + st.merges_front + st.merges_rq, 0);
	rq_queue_unquiesce(m->q);
	assert_true(fx_wait(rec, 3, 10000));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 3);
	mock_destroy(m);
}

/*
 * nomerges 1 leaves the one-hit cache as the only merge path with queued
 * requests, and mq-deadline and bfq make an inserted request the cache when
 * it is empty (rq_sched_last_merge_fill(), as the kernel's inserts do): of a
 * plug holding A [0, 8), X [100, 108), B [8, 16) (B met only X, the plug's
 * newest, so it stayed a request), A is inserted first and becomes the
 * cache, and B joins it at insert: the driver sees [0, 16) and X.
 */
static void test_insert_merge_through_cache(void **state)
{
	static const char *const scheds[] = { "mq-deadline", "bfq" };
	const uint64_t sec[] = { 0, 100, 8 };

	(void)state;
	for (unsigned k = 0; k < 2; k++) {
		struct devopts o = { .completion = MOCK_COMPLETE_DEFER, .sched = scheds[k] };
		struct mock_dev *m = make_dev(&o);
		struct rq_queue_stats st;
		struct fx_rec rec[3];

		assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "1"), 0);
		rq_queue_quiesce(m->q);
		plugged(m, rec, 3, RQ_OP_WRITE, sec, NULL);
		rq_queue_get_stats(m->q, &st, sizeof(st));
		assert_int_equal(st.merges_rq, 1);
		rq_queue_unquiesce(m->q);
		assert_true(mock_wait_held(m, 2, 10000));
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
		for (unsigned i = 0; i < 2; i++) {
			struct mock_event ev = issued(m, i);

			assert_int_equal(ev.bytes, ev.sector == 0 ? 8192 : 4096);
		}
		end_all_ok(m, rec, 3);
		mock_destroy(m);
	}
}

/*
 * The plug flushes early on size only when its FIRST request is 128 KiB or
 * more (6.12+ blk_add_rq_to_plug() peeks the head of its FIFO list), and
 * not at all for size with nomerges 2: a large request in the middle of
 * the batch keeps the plug going, so later requests still meet earlier
 * ones at the flush.
 */
static void test_plug_size_flush_looks_at_first(void **state)
{
	static uint8_t big[256 * 1024];
	static const struct {
		uint32_t first_len;
		const char *nomerges;
		unsigned before_finish;
	} cases[] = {
		{ 4096, "0", 0 },       /* large second request: no early flush */
		{ sizeof(big), "0", 1 }, /* large first request: flushed before the second */
		{ sizeof(big), "2", 0 }, /* nomerges 2: no size flush */
	};

	(void)state;
	for (unsigned c = 0; c < 3; c++) {
		struct devopts o = { .completion = MOCK_COMPLETE_DEFER, .max_hw_sectors = 2560,
				     .max_sectors = 2560 };
		struct mock_dev *m = make_dev(&o);
		const uint32_t len[3] = { cases[c].first_len,
					  cases[c].first_len == 4096 ? sizeof(big) : 4096, 4096 };
		const uint64_t sec[3] = { 0, 4096, 8192 };
		struct fx_rec rec[3];
		struct rq_plug plug;
		unsigned before;

		assert_int_equal(rq_queue_attr_set(m->q, "nomerges", cases[c].nomerges), 0);
		rq_start_plug(&plug);
		for (unsigned i = 0; i < 3; i++)
			rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, sec[i],
						   len[i] == 4096 ? bufs[i] : big, len[i]));
		before = mock_count(m, MOCK_QUEUE_RQ);
		rq_finish_plug(&plug); /* before any assertion: no plug left behind */
		assert_int_equal(before, cases[c].before_finish);
		assert_true(mock_wait_held(m, 3, 10000));
		end_all_ok(m, rec, 3);
		mock_destroy(m);
	}
}

/* Requests already issued to the driver never take more bios: with a
 * request held by the driver, a contiguous bio makes a new request. */
static void test_no_merge_into_issued(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_DEFER };
	struct mock_dev *m = make_dev(&o);
	struct fx_rec rec[2];

	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 0, bufs[0], 4096));
	assert_int_equal(mock_nr_held(m), 1);
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, 8, bufs[1], 4096));
	assert_true(mock_wait_held(m, 2, 10000));
	assert_int_equal(issued(m, 0).bytes, 4096);
	assert_int_equal(issued(m, 1).bytes, 4096);
	end_all_ok(m, rec, 2);
	mock_destroy(m);
}

/*
 * Data integrity through merges: write a pattern with back-merged bios, then
 * front-merged bios (submitted in reverse), read it back through merged
 * reads into separate buffers; the device and read buffers hold the pattern.
 */
static void test_merge_data_integrity(void **state)
{
	struct devopts o = { .completion = MOCK_COMPLETE_INLINE, .mem = 1 << 20 };
	struct mock_dev *m = make_dev(&o);
	static uint8_t expect[NBUF * 4096];
	struct fx_rec rec[NBUF];
	struct rq_queue_stats st;
	struct rq_plug plug;
	const uint64_t base = 64;

	fixture_fill(expect, sizeof(expect), 42, 0);
	/* first half: ascending -> back merges */
	rq_start_plug(&plug);
	for (unsigned i = 0; i < NBUF / 2; i++) {
		memcpy(bufs[i], expect + i * 4096, 4096);
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, base + i * 8, bufs[i], 4096));
	}
	rq_finish_plug(&plug);
	/* second half: descending -> front merges */
	rq_start_plug(&plug);
	for (unsigned i = NBUF; i-- > NBUF / 2;) {
		memcpy(bufs[i], expect + i * 4096, 4096);
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, base + i * 8, bufs[i], 4096));
	}
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, NBUF, 10000));
	for (unsigned i = 0; i < NBUF; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, NBUF);
	assert_memory_equal(m->mem + base * 512, expect, sizeof(expect));
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_true(st.merges_back >= NBUF / 2 - 1);
	assert_true(st.merges_front >= NBUF / 2 - 1);

	/* read back, merged */
	memset(bufs, 0, sizeof(bufs));
	rq_start_plug(&plug);
	for (unsigned i = 0; i < NBUF; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_READ, base + i * 8, bufs[i], 4096));
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, NBUF, 10000));
	for (unsigned i = 0; i < NBUF; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
		assert_memory_equal(bufs[i], expect + i * 4096, 4096);
	}
	fx_put(rec, NBUF);
	assert_true(mock_count(m, MOCK_QUEUE_RQ) <= 2 + 1);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plug_back_merge),
		cmocka_unit_test(test_plug_front_merge),
		cmocka_unit_test(test_no_merge_past_max_sectors),
		cmocka_unit_test(test_no_merge_past_max_segments),
		cmocka_unit_test(test_no_merge_different_op),
		cmocka_unit_test(test_no_merge_nomerge_flag),
		cmocka_unit_test(test_no_merge_fua_preflush),
		cmocka_unit_test(test_no_merge_not_contiguous),
		cmocka_unit_test(test_discard_merge_within_limit),
		cmocka_unit_test(test_nomerges_2),
		cmocka_unit_test(test_nomerges_1_keeps_plug_merges),
		cmocka_unit_test(test_fidelity_256_per_plug),
		cmocka_unit_test(test_fidelity_64_per_plug),
		cmocka_unit_test(test_sched_merges_queued),
		cmocka_unit_test(test_sched_nomerges_2),
		cmocka_unit_test(test_insert_merge_through_cache),
		cmocka_unit_test(test_plug_size_flush_looks_at_first),
		cmocka_unit_test(test_no_merge_into_issued),
		cmocka_unit_test(test_merge_data_integrity),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
