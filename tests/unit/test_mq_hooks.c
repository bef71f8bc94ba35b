/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The multi-queue core calls the per-request hooks of the scheduler that
 * is attached now (bio_merge, limit_depth, prepare_request,
 * completed_request, finish_request), through the copy the queue keeps of
 * them (q->elv, made by the switch's install, cleared by the detach): after
 * a switch to another scheduler only the new one's are called, after a
 * switch to none nobody's, and after a switch back the first one's again.
 * Both submission paths are used: a bio without a plug (mq_submit_slow)
 * and a plug of bios (the inline mq_submit_plugged_sched()).  The test
 * fails if the copy is not made, or not made anew, at a switch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

enum { H_MERGE, H_LIMIT, H_PREPARE, H_COMPLETED, H_FINISH, H_NR };
enum { S_A, S_B, S_NR };

static const char *const hook_names[S_NR] = { "mqhooks-a", "mqhooks-b" };
static atomic_uint calls[S_NR][H_NR];

struct fifo {
	pthread_mutex_t lock;
	struct rq_list_node list;
};

static int fifo_init(struct rq_queue *q, void **data)
{
	struct fifo *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	rq_list_init(&f->list);
	*data = f;
	return 0;
}

static void fifo_exit(struct rq_queue *q, void *data)
{
	struct fifo *f = data;

	pthread_mutex_destroy(&f->lock);
	free(f);
}

static void fifo_insert(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct fifo *f = rq_sched_data(rq_hctx_queue(hctx));

	pthread_mutex_lock(&f->lock);
	if (flags & RQ_INSERT_AT_HEAD)
		rq_list_splice_init(list, &f->list);
	else
		rq_list_splice_tail_init(list, &f->list);
	pthread_mutex_unlock(&f->lock);
}

static struct rq_request *fifo_dispatch(struct rq_hw_ctx *hctx)
{
	struct fifo *f = rq_sched_data(rq_hctx_queue(hctx));
	struct rq_request *rq;

	pthread_mutex_lock(&f->lock);
	rq = rq_list_first_rq(&f->list);
	if (rq)
		rq_list_del_init(&rq->queuelist);
	pthread_mutex_unlock(&f->lock);
	return rq;
}

static bool fifo_has_work(struct rq_hw_ctx *hctx)
{
	struct fifo *f = rq_sched_data(rq_hctx_queue(hctx));
	bool work;

	pthread_mutex_lock(&f->lock);
	work = !rq_list_empty(&f->list);
	pthread_mutex_unlock(&f->lock);
	return work;
}

/* The counting hooks of scheduler S (they merge nothing and limit nothing). */
#define COUNTING_HOOKS(S)                                                             \
	static bool merge_##S(struct rq_queue *q, struct rq_bio *bio, unsigned n)     \
	{                                                                             \
		atomic_fetch_add(&calls[S][H_MERGE], 1);                              \
		return false;                                                         \
	}                                                                             \
	static void limit_##S(struct rq_alloc_data *data)                             \
	{                                                                             \
		atomic_fetch_add(&calls[S][H_LIMIT], 1);                              \
	}                                                                             \
	static void prepare_##S(struct rq_request *rq)                                \
	{                                                                             \
		atomic_fetch_add(&calls[S][H_PREPARE], 1);                            \
	}                                                                             \
	static void completed_##S(struct rq_request *rq, uint64_t now)                \
	{                                                                             \
		atomic_fetch_add(&calls[S][H_COMPLETED], 1);                          \
	}                                                                             \
	static void finish_##S(struct rq_request *rq)                                 \
	{                                                                             \
		atomic_fetch_add(&calls[S][H_FINISH], 1);                             \
	}

COUNTING_HOOKS(S_A)
COUNTING_HOOKS(S_B)

#define COUNTING_TYPE(S)                                                              \
	{                                                                             \
		RQ_ELV_TYPE_INIT, .name = hook_names[S], .features = RQ_ELV_F_MQ,     \
		.ops = { .init_sched = fifo_init, .exit_sched = fifo_exit,            \
			 .bio_merge = merge_##S, .limit_depth = limit_##S,            \
			 .prepare_request = prepare_##S,                              \
			 .completed_request = completed_##S,                          \
			 .finish_request = finish_##S, .insert_requests = fifo_insert, \
			 .dispatch_request = fifo_dispatch,                           \
			 .has_work = fifo_has_work },                                 \
	}

static int setup(void **state)
{
	static const struct rq_elevator_type types[S_NR] = { COUNTING_TYPE(S_A),
							     COUNTING_TYPE(S_B) };

	for (unsigned s = 0; s < S_NR; s++) {
		int ret = rq_sched_register(&types[s]);

		assert_true(ret == 0 || ret == -EEXIST);
	}
	return 0;
}

static char buf[8 * 4096];

/*
 * @n bios of 4 KiB, far apart (nothing merges), at @sector: one at a time
 * without a plug, then @n more in one plug.
 */
static void submit_both_ways(struct mock_dev *m, uint64_t sector, unsigned n)
{
	struct mock_io io[8];
	struct rq_plug plug;

	assert_true(n <= 8);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(mock_rw(m, i % 2 ? RQ_OP_WRITE : RQ_OP_READ,
					 sector + i * 1024, buf + i * 4096, 4096), RQ_STS_OK);
	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(m->q, mock_bio(&io[i], i % 2 ? RQ_OP_WRITE : RQ_OP_READ,
					     sector + (n + i) * 1024, buf + i * 4096, 4096));
	rq_finish_plug(&plug);
	for (unsigned i = 0; i < n; i++) {
		mock_wait(&io[i]);
		assert_int_equal(io[i].status, RQ_STS_OK);
	}
}

/* Every hook of @s was called @want times since @base. */
static void expect_calls(unsigned s, const unsigned base[H_NR], unsigned want)
{
	for (unsigned h = 0; h < H_NR; h++) {
		unsigned got = atomic_load(&calls[s][h]) - base[h];

		if (got != want)
			fail_msg("%s: hook %u called %u times, expected %u", hook_names[s], h,
				 got, want);
	}
}

static void snapshot(unsigned base[S_NR][H_NR])
{
	for (unsigned s = 0; s < S_NR; s++)
		for (unsigned h = 0; h < H_NR; h++)
			base[s][h] = atomic_load(&calls[s][h]);
}

/*
 * none -> a -> b -> none -> a: each stage's I/O calls each per-request
 * hook once per request of the scheduler attached, and no other's.
 */
static void test_hooks_follow_switch(void **state)
{
	static const int order[] = { S_A, S_B, -1, S_A };
	struct mock_config cfg;
	struct mock_dev *m;
	unsigned base[S_NR][H_NR];
	uint64_t sector = 0;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = MOCK_COMPLETE_INLINE;
	m = mock_create(&cfg, NULL);
	for (unsigned i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		int cur = order[i];

		assert_int_equal(rq_queue_attr_set(m->q, "scheduler",
						   cur < 0 ? "none" : hook_names[cur]), 0);
		snapshot(base);
		submit_both_ways(m, sector, 4);
		sector += 1u << 16;
		for (unsigned s = 0; s < S_NR; s++)
			expect_calls(s, base[s], (int)s == cur ? 8 : 0);
	}
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hooks_follow_switch),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
