/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Two queues over one tag set: with RQ_TAG_SET_SHARED the busy queues split
 * the driver tags fairly (the kernel's hctx_may_queue rule); without it the
 * first comer may take them all.  The idle check runs with the timeout
 * scan, here in application-driven service on a virtual clock.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <librequest/librequest.h>

#include "fixtures.h"

#define DEPTH 16
#define MAX_HELD 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rq_request *held[MAX_HELD];
static unsigned nr_held;
static char buf[4096];
static _Atomic int ended, again;

/* Keep every request until the test ends it. */
static rq_status_t hold_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	pthread_mutex_lock(&lock);
	assert_true(nr_held < MAX_HELD);
	held[nr_held++] = rq;
	pthread_mutex_unlock(&lock);
	return RQ_STS_OK;
}

static const struct rq_mq_ops hold_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = hold_queue_rq,
};

static void count_end_io(struct rq_bio *bio)
{
	if (bio->status == RQ_STS_AGAIN)
		atomic_fetch_add(&again, 1);
	else
		atomic_fetch_add(&ended, 1);
	rq_bio_put(bio);
}

/* Submit one NOWAIT 4 KiB read to @q; it is held, or ends with AGAIN. */
static void submit_nowait(struct rq_queue *q, uint64_t sector)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	assert_non_null(bio);
	assert_int_equal(rq_bio_add_vec(bio, buf, sizeof(buf)), 0);
	bio->op = RQ_OP_READ;
	bio->opf = RQ_BIO_NOWAIT;
	bio->iter.sector = sector;
	bio->end_io = count_end_io;
	rq_submit_bio(q, bio);
}

/* End the held requests of queue @q (all if NULL); return how many. */
static unsigned end_held(struct rq_queue *q)
{
	struct rq_request *mine[MAX_HELD];
	unsigned n = 0, keep = 0;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nr_held; i++) {
		if (!q || held[i]->q == q)
			mine[n++] = held[i];
		else
			held[keep++] = held[i];
	}
	nr_held = keep;
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < n; i++)
		rq_mq_end_request(mine[i], RQ_STS_OK);
	return n;
}

static unsigned held_by(struct rq_queue *q)
{
	unsigned n = 0;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nr_held; i++)
		n += held[i]->q == q;
	pthread_mutex_unlock(&lock);
	return n;
}

static void make(unsigned flags, struct rq_tag_set **set, struct rq_queue **a, struct rq_queue **b)
{
	struct rq_tag_set_config cfg = {
		RQ_TAG_SET_CONFIG_INIT,
		.ops = &hold_ops,
		.nr_hw_queues = 1,
		.queue_depth = DEPTH,
		.numa_node = -1,
		.flags = flags,
		.timeout_ms = 20, /* the idle check runs with the timeout scan */
	};

	nr_held = 0;
	atomic_store(&ended, 0);
	atomic_store(&again, 0);
	assert_int_equal(rq_tag_set_alloc(&cfg, set), 0);
	assert_int_equal(rq_mq_alloc_queue(*set, NULL, a), 0);
	assert_int_equal(rq_mq_alloc_queue(*set, NULL, b), 0);
}

/*
 * Shared: a lone busy queue may use every tag; once a second queue is busy
 * each gets at most half; when the second goes idle (no tag held for a
 * scan), the first may use them all again.
 */
static void test_fair_share(void **state)
{
	struct rq_tag_set *set;
	struct rq_queue *a, *b;
	unsigned i;

	make(RQ_TAG_SET_SHARED, &set, &a, &b);

	for (i = 0; i < DEPTH; i++)
		submit_nowait(a, i * 8);
	assert_int_equal(held_by(a), DEPTH);          /* alone: all of them */

	/* b arrives: nothing free, and a now over its share */
	submit_nowait(b, 0);
	assert_int_equal(atomic_load(&again), 1);
	assert_int_equal(end_held(a), DEPTH);
	for (i = 0; i < DEPTH; i++)
		submit_nowait(b, i * 8);
	assert_int_equal(held_by(b), DEPTH / 2);      /* its half */
	for (i = 0; i < DEPTH; i++)
		submit_nowait(a, 1000 + i * 8);
	assert_int_equal(held_by(a), DEPTH / 2);      /* and a's half */
	assert_int_equal(atomic_load(&again), 1 + DEPTH / 2 + DEPTH / 2);

	/* b finishes: until its next scan it still counts as busy */
	end_held(b);
	submit_nowait(a, 5000);
	assert_int_equal(held_by(a), DEPTH / 2);
	/* one scan interval (io_timeout 20 ms / 2) of virtual time, every
	 * service run the library asks for done: b's scan finds it idle, and
	 * a may grow to the whole depth again */
	fx_serve_until(fx_vclock_now() + 10 * 1000000ull);
	for (i = 0; i < DEPTH; i++)
		submit_nowait(a, 6000 + i * 8);
	assert_int_equal(held_by(a), DEPTH);

	end_held(NULL);
	rq_queue_destroy(a);
	rq_queue_destroy(b);
	rq_tag_set_free(set);
}

/* Not shared: the first busy queue may take every tag whatever the other does. */
static void test_unshared_first_come(void **state)
{
	struct rq_tag_set *set;
	struct rq_queue *a, *b;

	make(0, &set, &a, &b);
	submit_nowait(b, 0);
	for (unsigned i = 0; i < DEPTH; i++)
		submit_nowait(a, i * 8);
	assert_int_equal(held_by(b), 1);
	assert_int_equal(held_by(a), DEPTH - 1);
	end_held(NULL);
	rq_queue_destroy(a);
	rq_queue_destroy(b);
	rq_tag_set_free(set);
}

/*
 * Statistics of a NOWAIT bio that gets no request: it counts as a bio and
 * not as a request (mq counts a bio and its request in one and takes the
 * request back when none is made), and nothing else moves.
 */
static void test_nowait_again_stats(void **state)
{
	struct rq_queue_stats st = { 0 };
	struct rq_tag_set *set;
	struct rq_queue *a, *b;

	make(0, &set, &a, &b);
	for (unsigned i = 0; i < DEPTH; i++)
		submit_nowait(a, i * 8);
	submit_nowait(a, DEPTH * 8); /* no tag left */
	assert_int_equal(atomic_load(&again), 1);
	assert_int_equal(rq_queue_get_stats(a, &st, sizeof(st)), 0);
	assert_int_equal(st.bios, DEPTH + 1);
	assert_int_equal(st.requests, DEPTH);
	assert_int_equal(st.dispatched, DEPTH);
	assert_int_equal(st.completed, 0);
	assert_int_equal(st.errors, 0);
	assert_int_equal(end_held(a), DEPTH);
	assert_int_equal(rq_queue_get_stats(a, &st, sizeof(st)), 0);
	assert_int_equal(st.bios, DEPTH + 1);
	assert_int_equal(st.requests, DEPTH);
	assert_int_equal(st.completed, DEPTH);
	rq_queue_destroy(a);
	rq_queue_destroy(b);
	rq_tag_set_free(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fair_share),
		cmocka_unit_test(test_unshared_first_come),
		cmocka_unit_test(test_nowait_again_stats),
	};

	/* before the first queue: the idle check runs only in fx_serve_until(),
	 * on a virtual clock only the test moves */
	if (rq_service_manual())
		return 1;
	fx_vclock_install(1000000000ull);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
