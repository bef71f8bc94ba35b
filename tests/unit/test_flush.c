/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Flush sequencing (doc/semantics-draft.md, "Flush"): what the driver sees
 * for FLUSH bios and for writes with RQ_BIO_PREFLUSH / RQ_BIO_FUA, with and
 * without a volatile write cache and with and without FUA support; errors in
 * any step; coalescing never serving a PREFLUSH with an older flush; many
 * concurrent PREFLUSH bios; stats.flushes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

#define MEM_BYTES (1u << 20)
#define NOCACHE 0u
#define WC_FUA (RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA)
#define WC_NOFUA RQ_FEAT_WRITE_CACHE

/* A mock over @features with scheduler @sched (NULL: the default), @c. */
static struct mock_dev *flush_dev_sched_c(uint32_t features, const char *sched,
					  enum mock_completion c)
{
	struct rq_queue_limits lim;
	struct rq_queue_config qc;
	struct mock_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = c;
	cfg.mem_bytes = MEM_BYTES;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	rq_queue_limits_default(&lim);
	lim.features = features;
	qc.limits = &lim;
	qc.scheduler = sched;
	return mock_create(&cfg, &qc);
}

static struct mock_dev *flush_dev(uint32_t features, enum mock_completion c)
{
	return flush_dev_sched_c(features, NULL, c);
}

/* As flush_dev(), with scheduler @sched and requests held (DEFER). */
static struct mock_dev *flush_dev_sched(uint32_t features, const char *sched)
{
	return flush_dev_sched_c(features, sched, MOCK_COMPLETE_DEFER);
}

static int io_done(struct mock_io *io)
{
	int d;

	pthread_mutex_lock(&io->lock);
	d = io->done;
	pthread_mutex_unlock(&io->lock);
	return d;
}

/* Submit a WRITE of @buf with @opf and wait for it (exactly one end_io). */
static rq_status_t write_opf(struct mock_dev *m, uint64_t sector, uint32_t opf, void *buf,
			     uint32_t len)
{
	struct mock_io io;
	struct rq_bio *bio = mock_bio(&io, RQ_OP_WRITE, sector, buf, len);

	bio->opf = opf;
	rq_submit_bio(m->q, bio);
	mock_wait(&io);
	return io.status;
}

/* Submit an empty RQ_OP_FLUSH bio and wait for it. */
static rq_status_t flush_bio(struct mock_dev *m)
{
	struct mock_io io;

	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_FLUSH, 0, NULL, 0));
	mock_wait(&io);
	return io.status;
}

/* One step the driver must see: its op, flags it must and must not carry. */
struct step {
	int op;
	uint32_t set;
	uint32_t clear;
};

#define FLUSH_STEP { RQ_OP_FLUSH, 0, 0 }

/*
 * The queue_rq calls recorded must be exactly @st, in order; FLUSH steps
 * carry no data, WRITE steps are the whole write at @sector of @len bytes.
 */
static void expect_steps(struct mock_dev *m, const struct step *st, unsigned n,
			 uint64_t sector, uint32_t len)
{
	struct mock_event *ev;
	unsigned nr = mock_copy_events(m, MOCK_QUEUE_RQ, &ev);

	assert_int_equal(nr, n);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(ev[i].op, st[i].op);
		assert_int_equal(ev[i].opf & st[i].set, st[i].set);
		assert_int_equal(ev[i].opf & st[i].clear, 0);
		if (st[i].op == RQ_OP_FLUSH) {
			assert_int_equal(ev[i].bytes, 0);
		} else {
			assert_int_equal(ev[i].sector, sector);
			assert_int_equal(ev[i].bytes, len);
		}
	}
	free(ev);
}

static uint64_t stat_flushes(struct mock_dev *m)
{
	struct rq_queue_stats st;

	rq_queue_get_stats(m->q, &st, sizeof(st));
	return st.flushes;
}

/* Read back @len bytes at @sector and compare with @expect. */
static void expect_data(struct mock_dev *m, uint64_t sector, const void *expect, uint32_t len)
{
	void *buf = calloc(1, len);

	assert_non_null(buf);
	assert_int_equal(mock_rw(m, RQ_OP_READ, sector, buf, len), RQ_STS_OK);
	assert_memory_equal(buf, expect, len);
	free(buf);
}

/* No write cache: an empty FLUSH bio ends OK at once and never reaches the driver. */
static void test_nocache_flush_bio(void **state)
{
	struct mock_dev *m = flush_dev(NOCACHE, MOCK_COMPLETE_INLINE);

	assert_int_equal(flush_bio(m), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	assert_int_equal(stat_flushes(m), 0);
	mock_destroy(m);
}

/*
 * No write cache: PREFLUSH and FUA are stripped; a PREFLUSH|FUA write, a
 * FUA write and a PREFLUSH write each reach the driver as one plain WRITE,
 * and the data lands.
 */
static void test_nocache_write_flags_stripped(void **state)
{
	static const uint32_t flags[] = {
		RQ_BIO_PREFLUSH | RQ_BIO_FUA, RQ_BIO_FUA, RQ_BIO_PREFLUSH,
	};
	const struct step plain[] = {
		{ RQ_OP_WRITE, 0, RQ_BIO_PREFLUSH | RQ_BIO_FUA },
	};
	char buf[4096];

	for (unsigned i = 0; i < 3; i++) {
		struct mock_dev *m = flush_dev(NOCACHE, MOCK_COMPLETE_INLINE);

		fixture_fill(buf, sizeof(buf), 11 + i, 0);
		assert_int_equal(write_opf(m, 64, flags[i], buf, sizeof(buf)), RQ_STS_OK);
		expect_steps(m, plain, 1, 64, sizeof(buf));
		assert_int_equal(stat_flushes(m), 0);
		expect_data(m, 64, buf, sizeof(buf));
		mock_destroy(m);
	}
}

/* Write cache: an empty FLUSH bio is one FLUSH request of 0 bytes (with or without FUA). */
static void test_wc_flush_bio(void **state)
{
	static const uint32_t feats[] = { WC_FUA, WC_NOFUA };
	const struct step one[] = { FLUSH_STEP };

	for (unsigned i = 0; i < 2; i++) {
		struct mock_dev *m = flush_dev(feats[i], MOCK_COMPLETE_INLINE);

		assert_int_equal(flush_bio(m), RQ_STS_OK);
		expect_steps(m, one, 1, 0, 0);
		assert_int_equal(stat_flushes(m), 1);
		mock_destroy(m);
	}
}

/* Write cache with FUA: WRITE|PREFLUSH|FUA -> FLUSH, then WRITE carrying FUA (not PREFLUSH). */
static void test_wc_fua_preflush_fua(void **state)
{
	struct mock_dev *m = flush_dev(WC_FUA, MOCK_COMPLETE_INLINE);
	const struct step seq[] = {
		FLUSH_STEP,
		{ RQ_OP_WRITE, RQ_BIO_FUA, RQ_BIO_PREFLUSH },
	};
	char buf[8192];

	fixture_fill(buf, sizeof(buf), 21, 0);
	assert_int_equal(write_opf(m, 128, RQ_BIO_PREFLUSH | RQ_BIO_FUA, buf, sizeof(buf)),
			 RQ_STS_OK);
	expect_steps(m, seq, 2, 128, sizeof(buf));
	assert_int_equal(stat_flushes(m), 1);
	expect_data(m, 128, buf, sizeof(buf));
	mock_destroy(m);
}

/* Write cache with FUA: a FUA-only write goes straight to the driver with FUA, no flush. */
static void test_wc_fua_fua_only(void **state)
{
	struct mock_dev *m = flush_dev(WC_FUA, MOCK_COMPLETE_INLINE);
	const struct step seq[] = {
		{ RQ_OP_WRITE, RQ_BIO_FUA, RQ_BIO_PREFLUSH },
	};
	char buf[4096];

	fixture_fill(buf, sizeof(buf), 22, 0);
	assert_int_equal(write_opf(m, 8, RQ_BIO_FUA, buf, sizeof(buf)), RQ_STS_OK);
	expect_steps(m, seq, 1, 8, sizeof(buf));
	assert_int_equal(stat_flushes(m), 0);
	mock_destroy(m);
}

/* Write cache (FUA or not): a PREFLUSH-only write -> FLUSH, then a WRITE without PREFLUSH/FUA. */
static void test_wc_preflush_only(void **state)
{
	static const uint32_t feats[] = { WC_FUA, WC_NOFUA };
	const struct step seq[] = {
		FLUSH_STEP,
		{ RQ_OP_WRITE, 0, RQ_BIO_PREFLUSH | RQ_BIO_FUA },
	};
	char buf[4096];

	for (unsigned i = 0; i < 2; i++) {
		struct mock_dev *m = flush_dev(feats[i], MOCK_COMPLETE_INLINE);

		fixture_fill(buf, sizeof(buf), 23 + i, 0);
		assert_int_equal(write_opf(m, 16, RQ_BIO_PREFLUSH, buf, sizeof(buf)), RQ_STS_OK);
		expect_steps(m, seq, 2, 16, sizeof(buf));
		assert_int_equal(stat_flushes(m), 1);
		expect_data(m, 16, buf, sizeof(buf));
		mock_destroy(m);
	}
}

/* Write cache without FUA: WRITE|FUA -> WRITE (FUA stripped), then FLUSH. */
static void test_wc_nofua_fua(void **state)
{
	struct mock_dev *m = flush_dev(WC_NOFUA, MOCK_COMPLETE_INLINE);
	const struct step seq[] = {
		{ RQ_OP_WRITE, 0, RQ_BIO_PREFLUSH | RQ_BIO_FUA },
		FLUSH_STEP,
	};
	char buf[4096];

	fixture_fill(buf, sizeof(buf), 31, 0);
	assert_int_equal(write_opf(m, 256, RQ_BIO_FUA, buf, sizeof(buf)), RQ_STS_OK);
	expect_steps(m, seq, 2, 256, sizeof(buf));
	assert_int_equal(stat_flushes(m), 1);
	expect_data(m, 256, buf, sizeof(buf));
	mock_destroy(m);
}

/* Write cache without FUA: WRITE|PREFLUSH|FUA -> FLUSH, WRITE (no flags), FLUSH. */
static void test_wc_nofua_preflush_fua(void **state)
{
	struct mock_dev *m = flush_dev(WC_NOFUA, MOCK_COMPLETE_INLINE);
	const struct step seq[] = {
		FLUSH_STEP,
		{ RQ_OP_WRITE, 0, RQ_BIO_PREFLUSH | RQ_BIO_FUA },
		FLUSH_STEP,
	};
	char buf[16384];

	fixture_fill(buf, sizeof(buf), 32, 0);
	assert_int_equal(write_opf(m, 512, RQ_BIO_PREFLUSH | RQ_BIO_FUA, buf, sizeof(buf)),
			 RQ_STS_OK);
	expect_steps(m, seq, 3, 512, sizeof(buf));
	assert_int_equal(stat_flushes(m), 2);
	expect_data(m, 512, buf, sizeof(buf));
	mock_destroy(m);
}

/*
 * The bio of a PREFLUSH|FUA write (write cache, no FUA) ends exactly once
 * with the error of the step that failed: the pre-flush, the data write or
 * the post-flush.  Afterwards the queue still sequences flushes normally.
 */
static void test_flush_step_errors(void **state)
{
	static const struct {
		rq_status_t script[3];
		unsigned n;
		rq_status_t expect;
	} cases[] = {
		{ { RQ_STS_IOERR }, 1, RQ_STS_IOERR },                        /* pre-flush */
		{ { RQ_STS_OK, RQ_STS_MEDIUM }, 2, RQ_STS_MEDIUM },           /* data */
		{ { RQ_STS_OK, RQ_STS_OK, RQ_STS_TRANSPORT }, 3, RQ_STS_TRANSPORT }, /* post */
	};
	const struct step seq[] = {
		FLUSH_STEP,
		{ RQ_OP_WRITE, 0, RQ_BIO_PREFLUSH | RQ_BIO_FUA },
		FLUSH_STEP,
	};
	char buf[4096];

	fixture_fill(buf, sizeof(buf), 41, 0);
	for (unsigned i = 0; i < 3; i++) {
		struct mock_dev *m = flush_dev(WC_NOFUA, MOCK_COMPLETE_INLINE);
		struct mock_io io;
		struct rq_bio *bio;

		mock_script(m, cases[i].script, cases[i].n);
		bio = mock_bio(&io, RQ_OP_WRITE, 32, buf, sizeof(buf));
		bio->opf = RQ_BIO_PREFLUSH | RQ_BIO_FUA;
		rq_submit_bio(m->q, bio);
		mock_wait(&io); /* asserts exactly one end_io */
		assert_int_equal(io.status, cases[i].expect);
		/* the failing step was issued: the driver saw at least that many calls */
		assert_true(mock_count(m, MOCK_QUEUE_RQ) >= cases[i].n);

		/* the queue keeps working: a fresh PREFLUSH|FUA write sequences fully */
		mock_reset_events(m);
		assert_int_equal(write_opf(m, 96, RQ_BIO_PREFLUSH | RQ_BIO_FUA, buf, sizeof(buf)),
				 RQ_STS_OK);
		expect_steps(m, seq, 3, 96, sizeof(buf));
		mock_destroy(m);
	}
}

/*
 * Coalescing never serves a PREFLUSH with a flush issued before the bio was
 * submitted: while A's pre-flush is held by the driver, B (PREFLUSH) is
 * submitted; some FLUSH must be issued after B's submission and before B's
 * data write.  Both end once with OK.
 */
static void test_preflush_not_served_by_older_flush(void **state)
{
	struct mock_dev *m = flush_dev(WC_FUA, MOCK_COMPLETE_DEFER);
	struct mock_io ia, ib;
	struct rq_bio *a, *b;
	unsigned nr, mark, b_write = ~0u;
	bool flush_between = false;
	char bufa[4096], bufb[4096];

	fixture_fill(bufa, sizeof(bufa), 51, 0);
	fixture_fill(bufb, sizeof(bufb), 52, 0);
	a = mock_bio(&ia, RQ_OP_WRITE, 0, bufa, sizeof(bufa));
	a->opf = RQ_BIO_PREFLUSH;
	rq_submit_bio(m->q, a);
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(mock_held(m, 0)->op, RQ_OP_FLUSH);

	mark = mock_nr_events(m);
	b = mock_bio(&ib, RQ_OP_WRITE, 800, bufb, sizeof(bufb));
	b->opf = RQ_BIO_PREFLUSH;
	rq_submit_bio(m->q, b);

	/* play the device: complete whatever is held until both bios ended */
	assert_true(FX_WAIT_FOR(((void)mock_complete_all(m, RQ_STS_OK),
			      io_done(&ia) && io_done(&ib)), 10000));
	mock_wait(&ia);
	mock_wait(&ib);
	assert_int_equal(ia.status, RQ_STS_OK);
	assert_int_equal(ib.status, RQ_STS_OK);

	/* all events are recorded in order: look between B's submission and B's data */
	nr = mock_nr_events(m);
	for (unsigned i = 0; i < nr; i++) {
		struct mock_event e = mock_event(m, i);

		if (e.call == MOCK_QUEUE_RQ && e.op == RQ_OP_WRITE && e.sector == 800) {
			b_write = i;
			break;
		}
	}
	assert_true(b_write != ~0u);
	for (unsigned i = mark; i < b_write; i++) {
		struct mock_event e = mock_event(m, i);

		if (e.call == MOCK_QUEUE_RQ && e.op == RQ_OP_FLUSH && e.ret == RQ_STS_OK)
			flush_between = true;
	}
	assert_true(flush_between);
	mock_destroy(m);
}

/* ---------------------------------------------------- concurrent flushes */

#define CONC_THREADS 2
#define CONC_BIOS 1500

struct conc {
	struct mock_dev *m;
	atomic_uint ends[CONC_THREADS * CONC_BIOS];
	atomic_uint bad_status;
	atomic_uint finished;
	atomic_uint alloc_fail;
	char buf[CONC_THREADS][4096];
};

static struct conc *conc_state;

static void conc_end_io(struct rq_bio *bio)
{
	uintptr_t idx = (uintptr_t)bio->private_data;

	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&conc_state->bad_status, 1);
	atomic_fetch_add(&conc_state->ends[idx], 1);
	atomic_fetch_add(&conc_state->finished, 1);
	rq_bio_put(bio);
}

static void *conc_thread(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;
	struct conc *c = conc_state;

	for (unsigned i = 0; i < CONC_BIOS; i++) {
		struct rq_bio *bio = rq_bio_alloc(1);

		if (!bio || rq_bio_add_vec(bio, c->buf[t], sizeof(c->buf[t]))) {
			atomic_fetch_add(&c->alloc_fail, 1);
			break;
		}
		bio->op = RQ_OP_WRITE;
		bio->opf = RQ_BIO_PREFLUSH | RQ_BIO_FUA;
		bio->iter.sector = (uint64_t)t * 1024 + (uint64_t)(i % 128) * 8; /* within 1 MiB */
		bio->iter.size = sizeof(c->buf[t]);
		bio->end_io = conc_end_io;
		bio->private_data = (void *)(uintptr_t)(t * CONC_BIOS + i);
		rq_submit_bio(c->m->q, bio);
	}
	return NULL;
}

/*
 * Many PREFLUSH|FUA writes from 2 threads (write cache, no FUA, completion
 * on the mock's thread): every bio ends exactly once with OK, and
 * stats.flushes equals the FLUSH requests the driver accepted.  Exactly
 * once is checked again after destroy, when no late end_io can come.
 */
static void test_concurrent_preflush(void **state)
{
	struct conc *c = calloc(1, sizeof(*c));
	pthread_t th[CONC_THREADS];
	struct mock_event *ev;
	unsigned nr, flushes = 0, writes = 0;

	assert_non_null(c);
	conc_state = c;
	c->m = flush_dev(WC_NOFUA, MOCK_COMPLETE_THREAD);
	for (unsigned t = 0; t < CONC_THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, conc_thread, (void *)(uintptr_t)t), 0);
	for (unsigned t = 0; t < CONC_THREADS; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(atomic_load(&c->alloc_fail), 0);
	assert_true(FX_WAIT_FOR(atomic_load(&c->finished) >= CONC_THREADS * CONC_BIOS, 10000));
	for (unsigned i = 0; i < CONC_THREADS * CONC_BIOS; i++)
		assert_int_equal(atomic_load(&c->ends[i]), 1);
	assert_int_equal(atomic_load(&c->bad_status), 0);

	nr = mock_copy_events(c->m, MOCK_QUEUE_RQ, &ev);
	for (unsigned i = 0; i < nr; i++) {
		if (ev[i].ret != RQ_STS_OK)
			continue;
		if (ev[i].op == RQ_OP_FLUSH) {
			flushes++;
			assert_int_equal(ev[i].bytes, 0);
		} else {
			assert_int_equal(ev[i].op, RQ_OP_WRITE);
			assert_int_equal(ev[i].opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA), 0);
			writes++;
		}
	}
	free(ev);
	assert_int_equal(writes, CONC_THREADS * CONC_BIOS); /* FUA/PREFLUSH writes never merge */
	assert_true(flushes >= 1);
	assert_true(flushes <= 2 * CONC_THREADS * CONC_BIOS);
	assert_int_equal(stat_flushes(c->m), flushes);
	mock_destroy(c->m);
	/* after destroy no end_io can come: a late second one shows here */
	for (unsigned i = 0; i < CONC_THREADS * CONC_BIOS; i++)
		assert_int_equal(atomic_load(&c->ends[i]), 1);
	conc_state = NULL;
	free(c);
}

/*
 * Write cache without FUA, with a scheduler, as Linux 6.x (blk_insert_flush
 * hands a DATA|POSTFLUSH write back to blk_mq_submit_bio): a FUA write goes
 * through the plug and the scheduler like any write (mq-deadline sorts it
 * after the two plain writes below it), reaches the driver without FUA and
 * with SYNC, and its completion issues the post-flush; the bio ends only
 * after the flush.
 */
static void test_wc_nofua_fua_through_scheduler(void **state)
{
	static const uint64_t want[] = { 100, 200, 500 };
	struct mock_dev *m = flush_dev_sched(WC_NOFUA, "mq-deadline");
	static char buf[3][4096];
	struct mock_io io[3];
	struct mock_event ev;
	struct rq_plug plug;

	(void)state;
	rq_start_plug(&plug);
	rq_submit_bio(m->q, mock_bio(&io[0], RQ_OP_WRITE, 100, buf[0], 4096));
	{
		struct rq_bio *bio = mock_bio(&io[1], RQ_OP_WRITE, 500, buf[1], 4096);

		bio->opf = RQ_BIO_FUA;
		rq_submit_bio(m->q, bio);
	}
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0); /* held in the plug */
	rq_submit_bio(m->q, mock_bio(&io[2], RQ_OP_WRITE, 200, buf[2], 4096));
	rq_finish_plug(&plug);
	assert_true(mock_wait_held(m, 3, 10000));
	for (unsigned i = 0; i < 3; i++) {
		assert_true(mock_find(m, MOCK_QUEUE_RQ, i, &ev));
		assert_int_equal(ev.op, RQ_OP_WRITE);
		assert_int_equal(ev.sector, want[i]);
	}
	assert_int_equal(ev.opf & (RQ_BIO_FUA | RQ_BIO_PREFLUSH), 0);
	assert_int_equal(ev.opf & RQ_BIO_SYNC, RQ_BIO_SYNC);
	for (unsigned i = 0; i < 3; i++)
		mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(mock_wait_held(m, 1, 10000));
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 3, &ev));
	assert_int_equal(ev.op, RQ_OP_FLUSH);
	assert_int_equal(io_done(&io[1]), 0); /* ends with the post-flush */
	mock_complete_one(m, 0, RQ_STS_OK);
	for (unsigned i = 0; i < 3; i++) {
		mock_wait(&io[i]);
		assert_int_equal(io[i].status, RQ_STS_OK);
	}
	assert_int_equal(stat_flushes(m), 1);
	mock_destroy(m);
}

/*
 * A post-flush waits while other sequenced data steps are with the device
 * (the kernel's C2): two FUA writes in flight together share one flush,
 * issued when the second completes; with a scheduler and without one.
 */
static void test_fua_writes_share_postflush(void **state)
{
	static const char *const scheds[] = { "mq-deadline", "none" };

	(void)state;
	for (unsigned k = 0; k < 2; k++) {
		struct mock_dev *m = flush_dev_sched(WC_NOFUA, scheds[k]);
		static char buf[2][4096];
		struct mock_io io[2];
		struct mock_event ev;
		struct rq_plug plug;

		rq_start_plug(&plug);
		for (unsigned i = 0; i < 2; i++) {
			struct rq_bio *bio = mock_bio(&io[i], RQ_OP_WRITE, 100 + 8 * i, buf[i], 4096);

			bio->opf = RQ_BIO_FUA;
			rq_submit_bio(m->q, bio);
		}
		rq_finish_plug(&plug);
		assert_true(mock_wait_held(m, 2, 10000)); /* not merged: two requests */
		mock_complete_one(m, 0, RQ_STS_OK);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2); /* no flush yet */
		mock_complete_one(m, 0, RQ_STS_OK);
		assert_true(mock_wait_held(m, 1, 10000));
		assert_true(mock_find(m, MOCK_QUEUE_RQ, 2, &ev));
		assert_int_equal(ev.op, RQ_OP_FLUSH);
		mock_complete_one(m, 0, RQ_STS_OK);
		for (unsigned i = 0; i < 2; i++) {
			mock_wait(&io[i]);
			assert_int_equal(io[i].status, RQ_STS_OK);
		}
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
		assert_int_equal(stat_flushes(m), 1);
		mock_destroy(m);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nocache_flush_bio),
		cmocka_unit_test(test_nocache_write_flags_stripped),
		cmocka_unit_test(test_wc_flush_bio),
		cmocka_unit_test(test_wc_fua_preflush_fua),
		cmocka_unit_test(test_wc_fua_fua_only),
		cmocka_unit_test(test_wc_preflush_only),
		cmocka_unit_test(test_wc_nofua_fua),
		cmocka_unit_test(test_wc_nofua_preflush_fua),
		cmocka_unit_test(test_flush_step_errors),
		cmocka_unit_test(test_preflush_not_served_by_older_flush),
		cmocka_unit_test(test_concurrent_preflush),
		cmocka_unit_test(test_wc_nofua_fua_through_scheduler),
		cmocka_unit_test(test_fua_writes_share_postflush),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
