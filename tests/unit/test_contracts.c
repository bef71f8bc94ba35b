/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The API contracts the public headers state (issue 17 item 3), each
 * checked as written:
 *   - rq_bio_add_vec(): every -EINVAL case, in the documented order (bio.h);
 *   - discard / write-zeroes / flush bios built without vectors reach the
 *     driver with the sector and bytes given; a READ/WRITE without vectors
 *     is refused (struct rq_bio, bio.h);
 *   - what bio->iter holds when end_io runs (rq_bio_end_io_t, bio.h);
 *   - the identities between the statistics counters (struct
 *     rq_queue_stats, stats.h);
 *   - the recommended shutdown: freeze waits for in-flight I/O, destroy
 *     after it fails nothing (rq_queue_destroy(), queue.h);
 *   - rq_queue_attr_list()'s format, and every name it lists readable with
 *     rq_queue_attr_get(), on both front ends and every scheduler (attr.h,
 *     doc/attributes.md).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"
#include "sq_driver.h"

/* Addresses rq_bio_add_vec() stores but never reads. */
#define FAKE(a) ((void *)(uintptr_t)(a))

static uint8_t buf[6][8192];
static uint8_t big[16384];

/* ------------------------------------------------------ rq_bio_add_vec */

/* The bio is unchanged: same vector count and size. */
static void assert_unchanged(const struct rq_bio *bio, unsigned vcnt, uint32_t size)
{
	assert_int_equal(bio->vcnt, vcnt);
	assert_int_equal(bio->iter.size, size);
}

/*
 * Case 1: a zero length or one that is not a multiple of 512 is -EINVAL,
 * and the length check comes before the -ENOSPC one.
 */
static void test_add_vec_bad_length(void **state)
{
	static const uint32_t bad[] = { 0, 1, 256, 511, 513, 1000, 4095, 4097, 0xffffffffu };
	struct rq_bvec vecs[2];
	struct rq_bio bio;

	(void)state;
	rq_bio_init(&bio, vecs, 2);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x1000), bad[i]), -EINVAL);
		assert_unchanged(&bio, 0, 0);
	}
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x1000), 512), 0);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x2000), 4096), 0);
	assert_unchanged(&bio, 2, 4608);
	/* full: a good length is -ENOSPC, a bad one still -EINVAL */
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x3000), 512), -ENOSPC);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x3000), 0), -EINVAL);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x3000), 100), -EINVAL);
	assert_unchanged(&bio, 2, 4608);
}

/* Case 1: a piece made by rq_bio_split() is -EINVAL, not -ENOSPC. */
static void test_add_vec_split_piece(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(4), *front;

	(void)state;
	bio->op = RQ_OP_WRITE;
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x10000), 8192), 0);
	front = rq_bio_split(bio, 8);
	assert_non_null(front);
	/*
	 * A piece shares its parent's vectors and has no room of its own: were
	 * the piece check missing, this good length would give -ENOSPC.
	 */
	assert_int_equal(rq_bio_add_vec(front, FAKE(0x20000), 512), -EINVAL);
	assert_int_equal(front->iter.size, 4096);
	/* the rest is a bio of the caller's and still takes vectors */
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x20000), 512), 0);
	rq_bio_endio(front);
	rq_bio_endio(bio);
	rq_bio_put(bio);
}

/* Case 3: a size past UINT32_MAX is -EINVAL (after the -ENOSPC check). */
static void test_add_vec_size_overflow(void **state)
{
	struct rq_bvec vecs[3];
	struct rq_bio bio;

	(void)state;
	rq_bio_init(&bio, vecs, 3);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x1000), 0xfffffc00u), 0);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x2000), 512), 0); /* 0xfffffe00: fits */
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x3000), 512), -EINVAL);
	assert_unchanged(&bio, 2, 0xfffffe00u);

	/* full and overflowing: -ENOSPC, checked first */
	rq_bio_init(&bio, vecs, 2);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x1000), 0xfffffc00u), 0);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x2000), 512), 0);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x3000), 512), -ENOSPC);
}

/* ------------------------------------------------- data-less bios */

static struct mock_dev *make_dev(enum mock_completion completion, uint32_t max_sectors,
				 uint32_t features, uint32_t discard_sectors)
{
	struct mock_config cfg = { .completion = completion, .queue_depth = 64 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = "none" };

	rq_queue_limits_default(&lim);
	if (max_sectors)
		lim.max_sectors = max_sectors;
	lim.max_discard_sectors = discard_sectors;
	lim.max_write_zeroes_sectors = discard_sectors;
	lim.features = features;
	return mock_create(&cfg, &qc);
}

static struct rq_queue_stats stats_of(struct rq_queue *q)
{
	struct rq_queue_stats st;

	assert_int_equal(rq_queue_get_stats(q, &st, sizeof(st)), 0);
	return st;
}

/* Submit @bio and wait for its end_io; the status it ended with. */
static int submit_wait(struct mock_dev *m, struct fx_rec *rec, struct rq_bio *bio)
{
	rq_submit_bio(m->q, bio);
	assert_true(fx_wait(rec, 1, 10000));
	assert_int_equal(fx_done(rec), 1);
	return rec->status;
}

/* The last queue_rq the driver saw. */
static struct mock_event last_queue_rq(struct mock_dev *m)
{
	struct mock_event ev;
	unsigned n = mock_count(m, MOCK_QUEUE_RQ);

	assert_true(n > 0);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, n - 1, &ev));
	return ev;
}

/*
 * Build a bio of data-less @op as struct rq_bio says: no vectors,
 * iter.sector and iter.size by hand.  It ends OK and the last request the
 * driver saw has that op and @bytes, at @sector unless @any_sector.
 */
static void dataless_reaches(struct mock_dev *m, unsigned op, uint64_t sector, uint32_t bytes,
			     bool any_sector)
{
	struct fx_rec rec;
	struct mock_event ev;
	struct rq_bio *bio = fx_bio(&rec, op, sector, NULL, 0);

	bio->iter.size = bytes;
	assert_int_equal(bio->vcnt, 0);
	assert_int_equal(submit_wait(m, &rec, bio), RQ_STS_OK);
	ev = last_queue_rq(m);
	assert_int_equal(ev.op, op);
	if (!any_sector)
		assert_int_equal(ev.sector, sector);
	assert_int_equal(ev.bytes, bytes);
	fx_put(&rec, 1);
}

/*
 * Discard, write-zeroes and flush bios built as struct rq_bio says (no
 * vectors; iter.sector and iter.size by hand) reach the driver with that
 * op, sector and byte count.
 */
static void test_dataless_bios_reach_driver(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, 0, RQ_FEAT_WRITE_CACHE, 2048);

	(void)state;
	dataless_reaches(m, RQ_OP_DISCARD, 64, 16384, false);
	dataless_reaches(m, RQ_OP_WRITE_ZEROES, 4096, 8192, false);
	dataless_reaches(m, RQ_OP_FLUSH, 12345, 0, true); /* a flush's sector is ignored */
	mock_destroy(m);
}

/*
 * A READ or WRITE without vectors (size 0, or a size set by hand that no
 * vector covers) and a discard with a vector end with RQ_STS_INVAL; the
 * driver never sees them and stats.invalid counts them.
 */
static void test_dataless_read_write_refused(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, 0, 0, 2048);
	unsigned calls = mock_count(m, MOCK_QUEUE_RQ);
	struct fx_rec rec;
	struct rq_bio *bio;

	(void)state;
	bio = fx_bio(&rec, RQ_OP_READ, 0, NULL, 0);
	assert_int_equal(submit_wait(m, &rec, bio), RQ_STS_INVAL);
	fx_put(&rec, 1);

	bio = fx_bio(&rec, RQ_OP_WRITE, 8, NULL, 0);
	bio->iter.size = 4096;
	assert_int_equal(submit_wait(m, &rec, bio), RQ_STS_INVAL);
	fx_put(&rec, 1);

	bio = fx_bio(&rec, RQ_OP_READ, 8, NULL, 0);
	bio->iter.size = 4096;
	assert_int_equal(submit_wait(m, &rec, bio), RQ_STS_INVAL);
	fx_put(&rec, 1);

	bio = fx_bio(&rec, RQ_OP_DISCARD, 8, buf[0], 4096);
	assert_int_equal(submit_wait(m, &rec, bio), RQ_STS_INVAL);
	fx_put(&rec, 1);

	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), calls);
	assert_int_equal(stats_of(m->q).invalid, 4);
	mock_destroy(m);
}

/* ------------------------------------------------- iter at end_io */

struct end_seen {
	int calls;
	struct rq_bvec_iter iter;
	uint8_t op, vcnt;
	uint32_t opf;
	struct rq_bvec *vecs;
	void *private_data;
	rq_status_t status;
};

static void seen_end_io(struct rq_bio *bio)
{
	struct end_seen *s = bio->private_data;

	s->iter = bio->iter;
	s->op = bio->op;
	s->vcnt = bio->vcnt;
	s->opf = bio->opf;
	s->vecs = bio->vecs;
	s->private_data = bio->private_data;
	s->status = bio->status;
	__atomic_fetch_add(&s->calls, 1, __ATOMIC_SEQ_CST);
}

static int seen_calls(struct end_seen *s)
{
	return __atomic_load_n(&s->calls, __ATOMIC_SEQ_CST);
}

/* A WRITE of @nvec 8 KiB vectors at @sector that records what end_io sees. */
static struct rq_bio *seen_bio(struct end_seen *s, uint64_t sector, unsigned nvec)
{
	struct rq_bio *bio = rq_bio_alloc(nvec);

	assert_non_null(bio);
	memset(s, 0, sizeof(*s));
	bio->op = RQ_OP_WRITE;
	bio->opf = RQ_BIO_SYNC;
	bio->iter.sector = sector;
	for (unsigned i = 0; i < nvec; i++)
		assert_int_equal(rq_bio_add_vec(bio, buf[i], 8192), 0);
	bio->end_io = seen_end_io;
	bio->private_data = s;
	return bio;
}

/* What end_io sees besides iter is as the submitter left it. */
static void assert_rest_kept(const struct end_seen *s, const struct rq_bio *bio, unsigned nvec)
{
	assert_int_equal(s->calls, 1);
	assert_int_equal(s->status, RQ_STS_OK);
	assert_int_equal(s->op, RQ_OP_WRITE);
	assert_int_equal(s->opf, RQ_BIO_SYNC);
	assert_int_equal(s->vcnt, nvec);
	assert_ptr_equal(s->vecs, bio->vecs);
	assert_ptr_equal(s->private_data, s);
	for (unsigned i = 0; i < nvec; i++) {
		assert_ptr_equal(bio->vecs[i].base, buf[i]);
		assert_int_equal(bio->vecs[i].len, 8192);
	}
}

/*
 * Wait for @bio's end_io; it saw iter advanced to the end (size 0 at
 * @end_sector), the rest kept.  Gives the bio back.
 */
static void assert_ended_at_end(struct end_seen *s, struct rq_bio *bio, unsigned nvec,
				uint64_t end_sector)
{
	assert_true(FX_WAIT_FOR(seen_calls(s) == 1, 10000));
	assert_rest_kept(s, bio, nvec);
	assert_int_equal(s->iter.size, 0);
	assert_int_equal(s->iter.sector, end_sector);
	rq_bio_put(bio);
}

/*
 * Multi-queue, request ended whole: the bio keeps its iter.  Split to
 * max_sectors 16: end_io sees the last piece's position.
 */
static void test_end_io_iter_whole_and_split(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, 16, 0, 0);
	struct end_seen s;
	struct rq_bio *bio;

	(void)state;
	bio = seen_bio(&s, 100, 1); /* 16 sectors: fits */
	rq_submit_bio(m->q, bio);
	assert_true(FX_WAIT_FOR(seen_calls(&s) == 1, 10000));
	assert_rest_kept(&s, bio, 1);
	assert_int_equal(s.iter.sector, 100);
	assert_int_equal(s.iter.size, 8192);
	assert_int_equal(s.iter.idx, 0);
	assert_int_equal(s.iter.done, 0);
	rq_bio_put(bio);

	bio = seen_bio(&s, 200, 3); /* 48 sectors: pieces of 16 at 200, 216, 232 */
	rq_submit_bio(m->q, bio);
	assert_true(FX_WAIT_FOR(seen_calls(&s) == 1, 10000));
	assert_rest_kept(&s, bio, 3);
	assert_int_equal(stats_of(m->q).splits, 2);
	assert_int_equal(s.iter.sector, 232);
	assert_int_equal(s.iter.size, 8192);
	assert_int_equal(s.iter.idx, 2);
	assert_int_equal(s.iter.done, 0);
	rq_bio_put(bio);
	mock_destroy(m);
}

/* Completed by bytes (rq_mq_update_request()): advanced to its end. */
static void test_end_io_iter_by_bytes(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_DEFER, 0, 0, 0);
	struct end_seen s;
	struct rq_bio *bio = seen_bio(&s, 300, 2);
	struct rq_request *rq;

	(void)state;
	rq_submit_bio(m->q, bio);
	assert_true(mock_wait_held(m, 1, 10000));
	rq = mock_take_held(m, 0);
	assert_non_null(rq);
	assert_true(rq_mq_update_request(rq, RQ_STS_OK, 8192));  /* half: more remains */
	assert_int_equal(seen_calls(&s), 0);
	assert_false(rq_mq_update_request(rq, RQ_STS_OK, 8192)); /* all done */
	rq_mq_end_request(rq, RQ_STS_OK);
	assert_ended_at_end(&s, bio, 2, 300 + 32);
	mock_destroy(m);
}

/*
 * Single-queue: every driver completion counts bytes, so iter is at the
 * end, its vector position too, as bio_advance() leaves it: one vector, three
 * (one request), and split to max_sectors 12 (6 KiB pieces of 8 KiB
 * vectors: the last piece starts inside the last vector).
 */
static void test_end_io_iter_sq(void **state)
{
	struct rq_queue_limits lim;
	struct sq_config cfg = { .mode = SQ_MODE_INLINE, .depth = 4 };
	struct sq_dev *d = sq_create(&cfg);
	struct end_seen s;
	struct rq_bio *bio = seen_bio(&s, 400, 1);

	(void)state;
	rq_submit_bio(d->q, bio);
	assert_true(FX_WAIT_FOR(seen_calls(&s) == 1, 10000));
	assert_int_equal(s.iter.idx, 1);
	assert_int_equal(s.iter.done, 0);
	assert_ended_at_end(&s, bio, 1, 400 + 16);

	bio = seen_bio(&s, 500, 3);
	rq_submit_bio(d->q, bio);
	assert_true(FX_WAIT_FOR(seen_calls(&s) == 1, 10000));
	assert_int_equal(s.iter.idx, 3);
	assert_int_equal(s.iter.done, 0);
	assert_ended_at_end(&s, bio, 3, 500 + 48);
	sq_destroy(d);

	rq_queue_limits_default(&lim);
	lim.max_sectors = 12;
	cfg.limits = &lim;
	d = sq_create(&cfg);
	bio = seen_bio(&s, 600, 3);
	rq_submit_bio(d->q, bio);
	assert_true(FX_WAIT_FOR(seen_calls(&s) == 1, 10000));
	assert_int_equal(stats_of(d->q).splits, 3);
	assert_int_equal(s.iter.idx, 3);
	assert_int_equal(s.iter.done, 0);
	assert_ended_at_end(&s, bio, 3, 600 + 48);
	sq_destroy(d);
}

/* ------------------------------------------------------- statistics */

/*
 * The identities struct rq_queue_stats states, on a workload with plug
 * merges, a split, invalid bios, an error answer from queue_rq and an error
 * completion; the exact counts are checked too, so a counter that drifts
 * while the identities still hold is caught.
 */
static void test_stats_identities(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_DEFER, 16, 0, 0);
	struct fx_rec plugged[4], split, bad[2], refused;
	struct rq_queue_stats st;
	struct rq_plug plug;
	rq_status_t ioerr = RQ_STS_IOERR;

	(void)state;
	/* four sequential 4 KiB writes on a plug: two 8 KiB requests, two back merges */
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(m->q, fx_bio(&plugged[i], RQ_OP_WRITE, i * 8, buf[i], 4096));
	rq_finish_plug(&plug);
	/* a 16 KiB write over max_sectors 16: one split, two requests */
	rq_submit_bio(m->q, fx_bio(&split, RQ_OP_WRITE, 1000, big, sizeof(big)));
	/* two invalid bios: no vectors; past capacity */
	rq_submit_bio(m->q, fx_bio(&bad[0], RQ_OP_READ, 0, NULL, 0));
	rq_submit_bio(m->q, fx_bio(&bad[1], RQ_OP_WRITE, rq_queue_capacity(m->q), buf[5], 4096));
	assert_true(fx_wait(bad, 2, 10000));
	/* queue_rq answers IOERR: completed with an error, never dispatched */
	mock_script(m, &ioerr, 1);
	rq_submit_bio(m->q, fx_bio(&refused, RQ_OP_WRITE, 5000, buf[5], 4096));
	assert_true(fx_wait(&refused, 1, 10000));
	assert_int_equal(refused.status, RQ_STS_IOERR);

	st = stats_of(m->q);
	assert_int_equal(st.requests - st.completed - st.merges_rq, mock_nr_held(m));

	/* the driver ends the oldest with an error, the rest OK */
	assert_int_equal(mock_nr_held(m), 4);
	mock_complete_one(m, 0, RQ_STS_IOERR);
	mock_complete_all(m, RQ_STS_OK);
	assert_true(fx_wait(plugged, 4, 10000));
	assert_true(fx_wait(&split, 1, 10000));

	st = stats_of(m->q);
	/* the identities, once nothing is in flight */
	assert_int_equal(st.bios, st.requests + st.merges_back + st.merges_front);
	assert_int_equal(st.requests, st.completed + st.merges_rq);
	assert_true(st.plug_merges <= st.merges_back + st.merges_front);
	assert_true(st.errors <= st.completed);
	/* one request completed without the driver accepting it; no requeues */
	assert_int_equal(st.dispatched, st.completed - 1 + st.requeues);
	/* bios = bios that passed the checks (4 + 1 + 1) + splits */
	assert_int_equal(st.bios, 6 + st.splits);

	/* and the counts themselves */
	assert_int_equal(st.invalid, 2);
	assert_int_equal(st.splits, 1);
	assert_int_equal(st.bios, 7);
	assert_int_equal(st.requests, 5);
	assert_int_equal(st.merges_back, 2);
	assert_int_equal(st.merges_front, 0);
	assert_int_equal(st.plug_merges, 2);
	assert_int_equal(st.merges_rq, 0);
	assert_int_equal(st.dispatched, 4);
	assert_int_equal(st.completed, 5);
	assert_int_equal(st.errors, 2);
	assert_int_equal(st.requeues, 0);
	assert_int_equal(st.flushes, 0);

	fx_put(plugged, 4);
	fx_put(&split, 1);
	fx_put(bad, 2);
	fx_put(&refused, 1);
	mock_destroy(m);
}

/*
 * With the write cache on (no FUA), the flush requests the library issues
 * are in flushes and dispatched, never in requests or completed: an
 * RQ_OP_FLUSH bio is one request served by one FLUSH; a WRITE with
 * PREFLUSH | FUA is one request served by FLUSH, WRITE, FLUSH.
 */
static void test_stats_flushes(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, 0, RQ_FEAT_WRITE_CACHE, 0);
	struct fx_rec rec[2];
	struct rq_queue_stats st;
	struct rq_bio *bio;

	(void)state;
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_FLUSH, 0, NULL, 0));
	bio = fx_bio(&rec[1], RQ_OP_WRITE, 0, buf[0], 4096);
	bio->opf = RQ_BIO_PREFLUSH | RQ_BIO_FUA;
	rq_submit_bio(m->q, bio);
	assert_true(fx_wait(rec, 2, 10000));
	assert_int_equal(rec[0].status, RQ_STS_OK);
	assert_int_equal(rec[1].status, RQ_STS_OK);

	st = stats_of(m->q);
	assert_int_equal(st.bios, st.requests + st.merges_back + st.merges_front);
	assert_int_equal(st.requests, 2);
	assert_int_equal(st.completed, 2);
	assert_int_equal(st.errors, 0);
	assert_int_equal(st.flushes, 3);
	assert_int_equal(st.dispatched, 1 + st.flushes); /* the WRITE and the flushes */
	assert_int_equal(st.dispatched, mock_count(m, MOCK_QUEUE_RQ));
	fx_put(rec, 2);
	mock_destroy(m);
}

/* ---------------------------------------------------------- shutdown */

struct freezer {
	struct rq_queue *q;
	pid_t tid;     /* atomic */
	int returned;  /* atomic */
};

static void *freeze_thread(void *arg)
{
	struct freezer *f = arg;

	__atomic_store_n(&f->tid, fx_gettid(), __ATOMIC_SEQ_CST);
	rq_queue_freeze(f->q);
	__atomic_store_n(&f->returned, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * The shutdown rq_queue_destroy() recommends: with I/O in flight,
 * rq_queue_freeze() waits until the driver has ended all of it; a destroy
 * after the freeze then fails nothing and runs no end_io.
 */
static void test_shutdown_freeze_then_destroy(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_DEFER, 0, 0, 0);
	struct freezer f = { .q = m->q };
	struct fx_rec rec[3];
	struct rq_queue_stats st;
	struct rq_queue_config qc;
	pthread_t t;

	(void)state;
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(m->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, buf[i], 4096));
	assert_true(mock_wait_held(m, 3, 10000));

	assert_int_equal(pthread_create(&t, NULL, freeze_thread, &f), 0);
	assert_true(fx_wait_blocked(&f.tid, &f.returned, 10000)); /* waits for the I/O */
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 0);

	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 3);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(__atomic_load_n(&f.returned, __ATOMIC_SEQ_CST), 1);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	st = stats_of(m->q);
	assert_int_equal(st.requests, st.completed);
	assert_int_equal(st.errors, 0);

	rq_queue_destroy(m->q); /* still frozen */
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);

	/* a fresh queue for mock_destroy() */
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.queuedata = m;
	qc.scheduler = "none";
	assert_int_equal(rq_mq_alloc_queue(m->set, &qc, &m->q), 0);
	fx_put(rec, 3);
	mock_destroy(m);
}

/*
 * The same on the single-queue front end: the freeze waits for what the
 * device holds, and sq_destroy() (rq_queue_destroy() on the frozen queue)
 * then fails nothing.
 */
static void test_shutdown_freeze_then_destroy_sq(void **state)
{
	struct sq_config cfg = { .mode = SQ_MODE_HOLD, .depth = 4 };
	struct sq_dev *d = sq_create(&cfg);
	struct freezer f = { .q = d->q };
	struct fx_rec rec[3];
	pthread_t t;

	(void)state;
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(d->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, buf[i], 4096));
	assert_true(sq_wait_held(d, 3, 10000));

	assert_int_equal(pthread_create(&t, NULL, freeze_thread, &f), 0);
	assert_true(fx_wait_blocked(&f.tid, &f.returned, 10000));
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(fx_done(&rec[i]), 0);

	assert_int_equal(sq_complete_all(d, RQ_STS_OK), 3);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	assert_int_equal(stats_of(d->q).errors, 0);

	sq_destroy(d); /* the queue still frozen */
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, 3);
}

/* -------------------------------------------------------- attributes */

/* The queue attributes, in rq_queue_attr_list()'s order (doc/attributes.md). */
static const char *const queue_attr_names[] = {
	"scheduler", "nr_requests", "nomerges", "max_sectors_kb", "max_hw_sectors_kb",
	"max_segments", "chunk_sectors", "max_segment_size", "logical_block_size", "physical_block_size",
	"discard_max_bytes", "write_zeroes_max_bytes", "rotational", "rq_affinity",
	"io_timeout", "write_cache", "stat", "nr_hw_queues", "counters", "inflight", "iostats",
	"latency_hist", "trace", "trace_dropped", "trace_actions",
};
#define NR_QUEUE_ATTRS (sizeof(queue_attr_names) / sizeof(queue_attr_names[0]))

/*
 * rq_queue_attr_list() on @q: NUL-terminated, one name per newline-ended
 * line, the queue attributes first in the documented order, then
 * "iosched/" names only (none without a scheduler); every name reads with
 * rq_queue_attr_get() as newline-ended text.  Return: iosched names seen.
 */
static unsigned check_attr_list(struct rq_queue *q, bool sched)
{
	char list[4096], val[512], small[16];
	unsigned line = 0, iosched = 0;
	int n = rq_queue_attr_list(q, list, sizeof(list));
	char *p = list;

	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(list));
	assert_int_equal(list[n - 1], '\n');
	while (*p) {
		char *nl = strchr(p, '\n');
		int r;

		assert_non_null(nl);
		*nl = '\0';
		assert_true(nl > p);
		assert_null(strpbrk(p, " \t"));
		if (line < NR_QUEUE_ATTRS) {
			assert_string_equal(p, queue_attr_names[line]);
		} else {
			assert_int_equal(strncmp(p, "iosched/", 8), 0);
			assert_true(p[8] != '\0');
			iosched++;
		}
		r = rq_queue_attr_get(q, p, val, sizeof(val));
		if (r <= 0)
			fail_msg("attribute \"%s\" listed but not readable: %d", p, r);
		assert_int_equal(val[r - 1], '\n');
		line++;
		p = nl + 1;
	}
	assert_true(line >= NR_QUEUE_ATTRS);
	if (!sched)
		assert_int_equal(iosched, 0);
	assert_int_equal(rq_queue_attr_list(q, small, sizeof(small)), -ENOSPC);
	assert_int_equal(rq_queue_attr_list(q, NULL, 16), -EINVAL);
	return iosched;
}

/* Multi-queue: none, mq-deadline, kyber, bfq. */
static void test_attr_list_mq(void **state)
{
	struct mock_dev *m = make_dev(MOCK_COMPLETE_INLINE, 0, 0, 0);
	static const char *const scheds[] = { "mq-deadline", "kyber", "bfq" };

	(void)state;
	check_attr_list(m->q, false);
	for (size_t i = 0; i < sizeof(scheds) / sizeof(scheds[0]); i++) {
		assert_int_equal(rq_queue_attr_set(m->q, "scheduler", scheds[i]), 0);
		assert_true(check_attr_list(m->q, true) > 0);
	}
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	check_attr_list(m->q, false);
	mock_destroy(m);
}

/* Single-queue: noop (no tunables), deadline, cfq. */
static void test_attr_list_sq(void **state)
{
	static const char *const scheds[] = { "noop", "deadline", "cfq" };

	(void)state;
	for (size_t i = 0; i < sizeof(scheds) / sizeof(scheds[0]); i++) {
		struct sq_config cfg = { .mode = SQ_MODE_INLINE, .depth = 4,
					 .scheduler = scheds[i] };
		struct sq_dev *d = sq_create(&cfg);
		unsigned n = check_attr_list(d->q, true);

		char val[16];

		if (!strcmp(scheds[i], "noop"))
			assert_int_equal(n, 0);
		else
			assert_true(n > 0);
		/* doc/attributes.md: a single-queue queue has no hardware queues */
		assert_int_equal(rq_queue_attr_get(d->q, "nr_hw_queues", val, sizeof(val)), 2);
		assert_string_equal(val, "0\n");
		sq_destroy(d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_vec_bad_length),
		cmocka_unit_test(test_add_vec_split_piece),
		cmocka_unit_test(test_add_vec_size_overflow),
		cmocka_unit_test(test_dataless_bios_reach_driver),
		cmocka_unit_test(test_dataless_read_write_refused),
		cmocka_unit_test(test_end_io_iter_whole_and_split),
		cmocka_unit_test(test_end_io_iter_by_bytes),
		cmocka_unit_test(test_end_io_iter_sq),
		cmocka_unit_test(test_stats_identities),
		cmocka_unit_test(test_stats_flushes),
		cmocka_unit_test(test_shutdown_freeze_then_destroy),
		cmocka_unit_test(test_shutdown_freeze_then_destroy_sq),
		cmocka_unit_test(test_attr_list_mq),
		cmocka_unit_test(test_attr_list_sq),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
