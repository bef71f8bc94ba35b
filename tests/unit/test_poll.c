/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Poll queues: bios flagged RQ_BIO_POLLED go to the tag set's poll hw
 * queues, whose driver completes nothing by itself; rq_mq_poll() reaps them
 * through ops->poll.
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

#define NR_HW 2
#define MAX_HELD 64

struct poll_drv {
	pthread_mutex_t lock;
	struct rq_request *held[NR_HW][MAX_HELD];
	unsigned nr_held[NR_HW];
	unsigned queued[NR_HW];
	unsigned polls;
};

static struct poll_drv drv;
static char buf[4096];
static _Atomic int ended;

/* Interrupt-driven queue: end at once.  Poll queue: keep until polled. */
static rq_status_t poll_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	unsigned i = rq_hctx_index(hctx);

	pthread_mutex_lock(&drv.lock);
	drv.queued[i]++;
	if (rq_hctx_is_poll(hctx)) {
		assert_true(drv.nr_held[i] < MAX_HELD);
		drv.held[i][drv.nr_held[i]++] = rq;
		pthread_mutex_unlock(&drv.lock);
		return RQ_STS_OK;
	}
	pthread_mutex_unlock(&drv.lock);
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

static int poll_poll(struct rq_hw_ctx *hctx, unsigned max)
{
	unsigned i = rq_hctx_index(hctx);
	struct rq_request *batch[MAX_HELD];
	unsigned n;

	pthread_mutex_lock(&drv.lock);
	drv.polls++;
	n = drv.nr_held[i] < max ? drv.nr_held[i] : max;
	memcpy(batch, drv.held[i], n * sizeof(batch[0]));
	memmove(drv.held[i], drv.held[i] + n, (drv.nr_held[i] - n) * sizeof(batch[0]));
	drv.nr_held[i] -= n;
	pthread_mutex_unlock(&drv.lock);
	for (unsigned k = 0; k < n; k++)
		rq_mq_end_request(batch[k], RQ_STS_OK);
	return (int)n;
}

static const struct rq_mq_ops poll_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = poll_queue_rq,
	.poll = poll_poll,
};

static void count_end_io(struct rq_bio *bio)
{
	atomic_fetch_add(&ended, 1);
}

static struct rq_bio *read_bio(unsigned opf)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	assert_non_null(bio);
	assert_int_equal(rq_bio_add_vec(bio, buf, sizeof(buf)), 0);
	bio->op = RQ_OP_READ;
	bio->opf = opf;
	bio->iter.sector = 64;
	bio->end_io = count_end_io;
	return bio;
}

static void make_queue(struct rq_tag_set **set, struct rq_queue **q)
{
	struct rq_tag_set_config cfg = {
		RQ_TAG_SET_CONFIG_INIT,
		.ops = &poll_ops,
		.nr_hw_queues = NR_HW,
		.nr_poll_queues = 1,
		.queue_depth = 32,
		.numa_node = -1,
	};

	memset(&drv, 0, sizeof(drv));
	pthread_mutex_init(&drv.lock, NULL);
	atomic_store(&ended, 0);
	assert_int_equal(rq_tag_set_alloc(&cfg, set), 0);
	assert_int_equal(rq_mq_alloc_queue(*set, NULL, q), 0);
}

/*
 * A polled bio lands on the poll hw queue (the last one), stays there until
 * rq_mq_poll() runs ops->poll, and then ends exactly once; a plain bio goes
 * to the interrupt-driven queue and never needs polling.
 */
static void test_polled_bio_reaped_by_poll(void **state)
{
	struct rq_tag_set *set;
	struct rq_queue *q;
	struct rq_bio *plain, *polled;

	make_queue(&set, &q);
	assert_false(rq_hctx_is_poll(rq_queue_hctx(q, 0)));
	assert_true(rq_hctx_is_poll(rq_queue_hctx(q, 1)));

	plain = read_bio(0);
	rq_submit_bio(q, plain);
	assert_int_equal(atomic_load(&ended), 1);
	assert_int_equal(drv.queued[0], 1);

	polled = read_bio(RQ_BIO_POLLED);
	rq_submit_bio(q, polled);
	assert_int_equal(drv.queued[1], 1);
	assert_int_equal(atomic_load(&ended), 1); /* waits for a poll */

	assert_int_equal(rq_mq_poll(q, false), 1);
	assert_int_equal(atomic_load(&ended), 2);
	assert_int_equal(rq_mq_poll(q, true), 0);
	assert_int_equal(atomic_load(&ended), 2);

	rq_bio_put(plain);
	rq_bio_put(polled);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
}

/* A tag set must keep at least one interrupt-driven queue. */
static void test_poll_queue_config_checked(void **state)
{
	struct rq_tag_set_config cfg = {
		RQ_TAG_SET_CONFIG_INIT,
		.ops = &poll_ops,
		.nr_hw_queues = 2,
		.nr_poll_queues = 2,
		.queue_depth = 32,
		.numa_node = -1,
	};
	struct rq_tag_set *set = NULL;

	assert_int_equal(rq_tag_set_alloc(&cfg, &set), -EINVAL);
	assert_null(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_polled_bio_reaped_by_poll),
		cmocka_unit_test(test_poll_queue_config_checked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
