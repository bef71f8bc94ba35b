/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Freeze and quiesce (doc/semantics-draft.md, "Freeze"; queue.h):
 * rq_queue_freeze waits for requests in flight, holds new submissions until
 * unfreeze (NOWAIT ones end with RQ_STS_AGAIN) and nests; rq_queue_quiesce
 * stops queue_rq calls while submissions queue up, and unquiesce dispatches
 * them all.  Quiesce nesting is not documented, so it is not tested.
 * The usage references a plug takes ahead are given back and never used
 * once a freeze has begun (at the end).
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

static struct mock_dev *dev(enum mock_completion c, const char *sched)
{
	struct mock_config cfg;
	struct rq_queue_config qc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = c;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.scheduler = sched ? sched : "none";
	return mock_create(&cfg, &qc);
}

static int io_done(struct mock_io *io)
{
	int d;

	pthread_mutex_lock(&io->lock);
	d = io->done;
	pthread_mutex_unlock(&io->lock);
	return d;
}

/* Wait (bounded) for @io, assert it ended exactly once, drop its bio. */
static rq_status_t io_finish(struct mock_io *io)
{
	mock_wait(io);
	return io->status;
}

static char zero_buf[4096];

/* --------------------------------------------------------------- freeze */

struct freezer {
	struct mock_dev *m;
	int returned;        /* atomic: rq_queue_freeze returned */
	pid_t tid;           /* atomic: the freezing thread (fx_wait_blocked) */
};

static void *freeze_thread(void *arg)
{
	struct freezer *f = arg;

	__atomic_store_n(&f->tid, fx_gettid(), __ATOMIC_RELEASE);
	rq_queue_freeze(f->m->q);
	__atomic_store_n(&f->returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * rq_queue_freeze (in a second thread) does not return while a DEFER
 * driver holds requests; it returns once the test completes them.
 */
static void test_freeze_waits_for_in_flight(void **state)
{
	struct freezer f = { .m = dev(MOCK_COMPLETE_DEFER, NULL) };
	struct mock_io a, b;
	pthread_t th;

	rq_submit_bio(f.m->q, mock_bio(&a, RQ_OP_WRITE, 0, zero_buf, 4096));
	rq_submit_bio(f.m->q, mock_bio(&b, RQ_OP_WRITE, 512, zero_buf, 4096));
	assert_true(mock_wait_held(f.m, 2, 10000));

	assert_int_equal(pthread_create(&th, NULL, freeze_thread, &f), 0);
	/* blocked inside rq_queue_freeze: asleep, not returned */
	assert_true(fx_wait_blocked(&f.tid, &f.returned, 10000));

	mock_complete_one(f.m, 0, RQ_STS_OK);
	/* one still in flight: asleep again after that wake-up, not returned */
	assert_true(fx_wait_blocked(&f.tid, &f.returned, 10000));
	mock_complete_all(f.m, RQ_STS_OK);

	assert_true(FX_WAIT_FOR(__atomic_load_n(&f.returned, __ATOMIC_ACQUIRE) == 1, 10000));
	pthread_join(th, NULL);
	assert_int_equal(io_finish(&a), RQ_STS_OK);
	assert_int_equal(io_finish(&b), RQ_STS_OK);
	rq_queue_unfreeze(f.m->q);

	/* the queue works again */
	rq_submit_bio(f.m->q, mock_bio(&a, RQ_OP_READ, 8, zero_buf, 4096));
	assert_true(mock_wait_held(f.m, 1, 10000));
	mock_complete_all(f.m, RQ_STS_OK);
	assert_int_equal(io_finish(&a), RQ_STS_OK);
	mock_destroy(f.m);
}

struct submitter {
	struct mock_dev *m;
	struct mock_io io;
	struct rq_bio *bio;  /* built by the main thread before the submitter starts */
	int returned;        /* atomic: rq_submit_bio returned */
	pid_t tid;           /* atomic: the submitting thread (fx_wait_blocked) */
};

static void *submit_thread(void *arg)
{
	struct submitter *s = arg;

	__atomic_store_n(&s->tid, fx_gettid(), __ATOMIC_RELEASE);
	rq_submit_bio(s->m->q, s->bio);
	__atomic_store_n(&s->returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A bio submitted (from another thread) while the queue is frozen does not
 * reach the driver, nor end, until rq_queue_unfreeze; then it is issued
 * and ends once with OK.
 */
static void test_submit_while_frozen_waits(void **state)
{
	struct submitter s = { .m = dev(MOCK_COMPLETE_INLINE, NULL) };
	pthread_t th;

	s.bio = mock_bio(&s.io, RQ_OP_WRITE, 64, zero_buf, 4096);
	rq_queue_freeze(s.m->q); /* idle queue: returns at once */
	assert_int_equal(pthread_create(&th, NULL, submit_thread, &s), 0);
	/* it blocks inside rq_submit_bio: asleep there, not returned */
	assert_true(fx_wait_blocked(&s.tid, &s.returned, 10000));
	assert_int_equal(mock_count(s.m, MOCK_QUEUE_RQ), 0);
	assert_int_equal(io_done(&s.io), 0);

	rq_queue_unfreeze(s.m->q);
	assert_true(FX_WAIT_FOR(__atomic_load_n(&s.returned, __ATOMIC_ACQUIRE) == 1, 10000));
	pthread_join(th, NULL);
	assert_int_equal(io_finish(&s.io), RQ_STS_OK);
	assert_int_equal(mock_count(s.m, MOCK_QUEUE_RQ), 1);
	mock_destroy(s.m);
}

/* A NOWAIT bio on a frozen queue ends with RQ_STS_AGAIN, without the driver. */
static void test_nowait_while_frozen(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);
	struct mock_io io;
	struct rq_bio *bio;

	rq_queue_freeze(m->q);
	bio = mock_bio(&io, RQ_OP_WRITE, 0, zero_buf, 4096);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(m->q, bio);
	assert_int_equal(io_finish(&io), RQ_STS_AGAIN);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_queue_unfreeze(m->q);

	/* unfrozen: the same NOWAIT bio goes through */
	bio = mock_bio(&io, RQ_OP_WRITE, 0, zero_buf, 4096);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(m->q, bio);
	assert_int_equal(io_finish(&io), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	mock_destroy(m);
}

/* Freeze is counted: two freezes need two unfreezes before bios flow again. */
static void test_nested_freeze(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);
	struct mock_io io;
	struct rq_bio *bio;

	assert_false(rq_queue_frozen(m->q));
	rq_queue_freeze(m->q);
	assert_true(rq_queue_frozen(m->q));
	rq_queue_freeze(m->q);
	rq_queue_unfreeze(m->q);
	assert_true(rq_queue_frozen(m->q)); /* still frozen once */

	bio = mock_bio(&io, RQ_OP_WRITE, 0, zero_buf, 4096);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(m->q, bio);
	assert_int_equal(io_finish(&io), RQ_STS_AGAIN); /* still frozen once */
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);

	rq_queue_unfreeze(m->q);
	assert_false(rq_queue_frozen(m->q));
	bio = mock_bio(&io, RQ_OP_WRITE, 0, zero_buf, 4096);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(m->q, bio);
	assert_int_equal(io_finish(&io), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	mock_destroy(m);
}

/* -------------------------------------------------------------- quiesce */

#define NQ 8

/*
 * Quiesced (no scheduler, then test-fifo): submissions return but no
 * queue_rq happens (dispatch would have been synchronous); unquiesce
 * dispatches every one of them and each ends once with OK.
 */
static void test_quiesce_queues_up(void **state)
{
	static const char *scheds[] = { "none", FIXTURE_FIFO_NAME };

	assert_int_equal(fixture_register_fifo(), 0);
	for (unsigned s = 0; s < 2; s++) {
		struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, scheds[s]);
		struct mock_io io[NQ];

		rq_queue_quiesce(m->q);
		for (unsigned i = 0; i < NQ; i++)
			rq_submit_bio(m->q, mock_bio(&io[i], RQ_OP_WRITE, i * 1000, zero_buf, 4096));
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
		for (unsigned i = 0; i < NQ; i++)
			assert_int_equal(io_done(&io[i]), 0);

		rq_queue_unquiesce(m->q);
		for (unsigned i = 0; i < NQ; i++)
			assert_int_equal(io_finish(&io[i]), RQ_STS_OK);
		/* non-contiguous sectors: one request each */
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), NQ);
		mock_destroy(m);
	}
}

/*
 * Quiesce with a DEFER driver: requests the driver already holds stay its
 * own and can be completed while quiesced; new ones wait for unquiesce.
 */
static void test_quiesce_with_held(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER, NULL);
	struct mock_io a, b;

	rq_submit_bio(m->q, mock_bio(&a, RQ_OP_WRITE, 0, zero_buf, 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	rq_queue_quiesce(m->q);
	rq_submit_bio(m->q, mock_bio(&b, RQ_OP_WRITE, 4096, zero_buf, 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);

	mock_complete_all(m, RQ_STS_OK); /* a completion must not dispatch b */
	assert_int_equal(io_finish(&a), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	assert_int_equal(io_done(&b), 0);

	rq_queue_unquiesce(m->q);
	assert_true(mock_wait_held(m, 1, 10000));
	mock_complete_all(m, RQ_STS_OK);
	assert_int_equal(io_finish(&b), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	mock_destroy(m);
}

/* A thread submitting asynchronously while the main thread quiesces. */
#define STREAM_BIOS 400

struct stream {
	struct mock_dev *m;
	atomic_uint ends[STREAM_BIOS];
	atomic_uint bad;
	atomic_uint finished;
	atomic_uint submitted;
	atomic_bool quiesced;   /* the test quiesced the queue: the second half may go */
};

static struct stream *stream_state;

static void stream_end_io(struct rq_bio *bio)
{
	struct stream *s = stream_state;

	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&s->bad, 1);
	atomic_fetch_add(&s->ends[(uintptr_t)bio->private_data], 1);
	atomic_fetch_add(&s->finished, 1);
	rq_bio_put(bio);
}

static void *stream_thread(void *arg)
{
	struct stream *s = arg;

	for (unsigned i = 0; i < STREAM_BIOS; i++) {
		struct rq_bio *bio = rq_bio_alloc(1);

		if (!bio)
			break;
		rq_bio_add_vec(bio, zero_buf, 4096);
		bio->op = RQ_OP_WRITE;
		bio->iter.sector = (uint64_t)i * 64;
		bio->iter.size = 4096;
		bio->end_io = stream_end_io;
		bio->private_data = (void *)(uintptr_t)i;
		/* half way, wait for the quiesce, so bios arrive while it is on */
		if (i == STREAM_BIOS / 2)
			while (!atomic_load(&s->quiesced))
				fx_poll_pause();
		rq_submit_bio(s->m->q, bio);
		atomic_fetch_add(&s->submitted, 1);
		if (i % 16 == 0)
			fx_poll_pause(); /* let others run: pacing, not ordering */
	}
	return NULL;
}

/*
 * Once rq_queue_quiesce returns no queue_rq call starts, even with another
 * thread submitting (and completions arriving on the mock's thread), until
 * unquiesce; then everything is dispatched and ends exactly once with OK.
 */
static void test_quiesce_under_load(void **state)
{
	struct stream *s = calloc(1, sizeof(*s));
	struct mock_config cfg;
	unsigned c1, sub1;
	pthread_t th;

	assert_non_null(s);
	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = MOCK_COMPLETE_THREAD;
	/* a tag for every bio: while quiesced the submitter must never wait for one */
	cfg.queue_depth = STREAM_BIOS;
	s->m = mock_create(&cfg, NULL);
	stream_state = s;

	assert_int_equal(pthread_create(&th, NULL, stream_thread, s), 0);
	assert_true(mock_wait_count(s->m, MOCK_QUEUE_RQ, 10, 10000));
	rq_queue_quiesce(s->m->q);
	c1 = mock_count(s->m, MOCK_QUEUE_RQ);
	sub1 = atomic_load(&s->submitted);
	atomic_store(&s->quiesced, true);
	/* the submitter keeps going: 8 more bios, and none is dispatched */
	assert_true(FX_WAIT_FOR(atomic_load(&s->submitted) >= sub1 + 8, 10000));
	assert_int_equal(mock_count(s->m, MOCK_QUEUE_RQ), c1);
	rq_queue_unquiesce(s->m->q);

	pthread_join(th, NULL);
	assert_true(FX_WAIT_FOR(atomic_load(&s->finished) >= STREAM_BIOS, 10000));
	/* after destroy no end_io can come: a second one would show here */
	mock_destroy(s->m);
	for (unsigned i = 0; i < STREAM_BIOS; i++)
		assert_int_equal(atomic_load(&s->ends[i]), 1);
	assert_int_equal(atomic_load(&s->bad), 0);
	stream_state = NULL;
	free(s);
}

/* ------------------------------------------- usage taken ahead by a plug */

/*
 * A plugged thread takes its bios' usage references in batches (lib/plug.c,
 * plug_queue_enter()), and a bio merged away gives its reference back to
 * the batch.  What must hold: every reference goes back (once the plug is
 * finished and the requests have ended, a freeze returns: it would wait
 * for ever on one left behind, split pieces included); a freeze waits
 * while another thread's plug holds a stock; and no bio takes a reference
 * from a stock once a freeze has begun.
 */

static char plug_buf[64 * 1024];

/* Freeze in a second thread; true if it returned within 10 s. */
static bool freeze_returns(struct mock_dev *m)
{
	struct freezer f = { .m = m };
	pthread_t th;
	bool ok;

	assert_int_equal(pthread_create(&th, NULL, freeze_thread, &f), 0);
	ok = FX_WAIT_FOR(__atomic_load_n(&f.returned, __ATOMIC_ACQUIRE) == 1, 10000);
	if (ok)
		pthread_join(th, NULL);
	else
		pthread_detach(th);
	return ok;
}

/*
 * Bios under one plug, three of them merged away into the first (their
 * references go back to the stock), then more than a stock's worth:
 * after the plug and the driver are done, a freeze returns.
 */
static void test_stock_goes_back(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER, NULL);
	struct mock_io io[20];
	struct rq_plug plug;
	unsigned i;

	rq_start_plug(&plug);
	for (i = 0; i < 4; i++) /* one request: 3 back merges on the plug */
		rq_submit_bio(m->q, mock_bio(&io[i], RQ_OP_WRITE, i * 8, plug_buf, 4096));
	for (i = 4; i < 20; i++) /* apart: a request each */
		rq_submit_bio(m->q, mock_bio(&io[i], RQ_OP_READ, 1000 + i * 64, plug_buf, 4096));
	rq_finish_plug(&plug);
	assert_true(mock_wait_held(m, 17, 10000));
	mock_complete_all(m, RQ_STS_OK);
	for (i = 0; i < 20; i++) {
		mock_wait(&io[i]);
		assert_int_equal(io[i].status, RQ_STS_OK);
	}
	assert_true(freeze_returns(m));
	rq_queue_unfreeze(m->q);
	mock_destroy(m);
}

struct holder {
	struct mock_dev *m;
	struct mock_io first, late;
	int stage;           /* atomic: 1 plug holds a stock, 2 go on, 3 done */
};

/* Hold a plug with a stock until told, then submit a NOWAIT bio and finish. */
static void *holder_thread(void *arg)
{
	struct holder *h = arg;
	struct rq_plug plug;
	struct rq_bio *bio;

	rq_start_plug(&plug);
	rq_submit_bio(h->m->q, mock_bio(&h->first, RQ_OP_WRITE, 0, plug_buf, 4096));
	__atomic_store_n(&h->stage, 1, __ATOMIC_RELEASE);
	FX_WAIT_FOR(__atomic_load_n(&h->stage, __ATOMIC_ACQUIRE) == 2, 10000);
	bio = mock_bio(&h->late, RQ_OP_READ, 4096, plug_buf, 4096);
	bio->opf |= RQ_BIO_NOWAIT;
	rq_submit_bio(h->m->q, bio);
	rq_finish_plug(&plug);
	__atomic_store_n(&h->stage, 3, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A freeze begins while another thread's plug holds a stock: the freeze
 * waits for that plug; the NOWAIT bio the thread submits meanwhile ends
 * with AGAIN without reaching the driver (it may not use the stock); the
 * plugged request goes through and the freeze returns after it.
 */
static void test_no_stock_once_freezing(void **state)
{
	struct holder h = { .m = dev(MOCK_COMPLETE_INLINE, NULL) };
	struct freezer f = { .m = h.m };
	pthread_t th, fz;

	assert_int_equal(pthread_create(&th, NULL, holder_thread, &h), 0);
	assert_true(FX_WAIT_FOR(__atomic_load_n(&h.stage, __ATOMIC_ACQUIRE) == 1, 10000));

	assert_int_equal(pthread_create(&fz, NULL, freeze_thread, &f), 0);
	/* the plugged request and the stock hold the queue: the freezer sleeps */
	assert_true(fx_wait_blocked(&f.tid, &f.returned, 10000));

	__atomic_store_n(&h.stage, 2, __ATOMIC_RELEASE);
	assert_true(FX_WAIT_FOR(__atomic_load_n(&h.stage, __ATOMIC_ACQUIRE) == 3, 10000));
	pthread_join(th, NULL);
	mock_wait(&h.late);
	assert_int_equal(h.late.status, RQ_STS_AGAIN);
	mock_wait(&h.first);
	assert_int_equal(h.first.status, RQ_STS_OK);
	assert_int_equal(mock_count(h.m, MOCK_QUEUE_RQ), 1);

	assert_true(FX_WAIT_FOR(__atomic_load_n(&f.returned, __ATOMIC_ACQUIRE) == 1, 10000));
	pthread_join(fz, NULL);
	rq_queue_unfreeze(h.m->q);
	mock_destroy(h.m);
}

/*
 * A bio split under a plug: each piece holds a reference of its own and
 * every one goes back; the freeze afterwards returns.
 */
static void test_split_pieces_under_plug(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE, NULL);
	struct mock_io io;
	struct rq_plug plug;

	/* 64 KiB in one vector, requests of at most 16 KiB: four pieces */
	assert_int_equal(rq_queue_attr_set(m->q, "max_sectors_kb", "16"), 0);
	rq_start_plug(&plug);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 0, plug_buf, 64 * 1024));
	rq_finish_plug(&plug);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	assert_true(freeze_returns(m));
	rq_queue_unfreeze(m->q);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_freeze_waits_for_in_flight),
		cmocka_unit_test(test_submit_while_frozen_waits),
		cmocka_unit_test(test_nowait_while_frozen),
		cmocka_unit_test(test_nested_freeze),
		cmocka_unit_test(test_quiesce_queues_up),
		cmocka_unit_test(test_quiesce_with_held),
		cmocka_unit_test(test_quiesce_under_load),
		cmocka_unit_test(test_stock_goes_back),
		cmocka_unit_test(test_no_stock_once_freezing),
		cmocka_unit_test(test_split_pieces_under_plug),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
