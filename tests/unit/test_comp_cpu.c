/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A completion batch ended on another CPU than its requests' submitter
 * leaves the submitter's per-CPU lines alone (lib/mq.c, mq_end_list()):
 *
 * - the batch's usage references are dropped on the completing CPU's slot
 *   (the freezer sums the slots), not on the submitter's, whose software
 *   context line every submission reads;
 * - every bio still ends exactly once, and the queue is whole afterwards
 *   (a freeze finds no usage left, every tag can be taken again).
 *
 * Submitter and completer are pinned to two different CPUs; with fewer
 * than two CPUs allowed the test is skipped.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "internal/queue.h"
#include "mock_driver.h"

#define NR 24
#define DEPTH 32

static char buf[4096];
static struct rq_bio bios[NR];
static struct rq_bvec vecs[NR];
static _Atomic int ended[NR];

static void end_io(struct rq_bio *bio)
{
	atomic_fetch_add(&ended[bio - bios], 1);
}

static void pin(unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
	assert_int_equal(sched_getcpu(), (int)cpu);
}

/* The first two CPUs the process may use; false if there are fewer. */
static bool two_cpus(unsigned *a, unsigned *b)
{
	cpu_set_t set;
	unsigned n = 0;

	if (sched_getaffinity(0, sizeof(set), &set))
		return false;
	for (unsigned c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &set))
			*(n++ ? b : a) = c;
	return n == 2;
}

struct completer {
	struct mock_dev *m;
	unsigned cpu;
};

/* On @arg's CPU: end every held request in one completion batch. */
static void *complete_fn(void *arg)
{
	struct completer *c = arg;
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	struct rq_request *rq;

	pin(c->cpu);
	while ((rq = mock_take_held(c->m, 0)))
		assert_true(rq_mq_add_to_batch(&cb, rq, RQ_STS_OK));
	rq_mq_end_request_batch(&cb);
	return NULL;
}

static void test_batch_on_another_cpu(void **state)
{
	struct completer c;
	struct rq_sw_ctx *ctx_a, *ctx_b;
	unsigned a, b;
	long usage_a, usage_b;
	struct rq_plug plug;
	pthread_t thread;
	struct mock_dev *m;
	cpu_set_t saved;

	(void)state;
	if (!two_cpus(&a, &b))
		skip();
	assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
	pin(a);
	m = mock_create_unmerged(MOCK_COMPLETE_DEFER, 1, DEPTH, "none");
	assert_true(a < m->q->nr_cpus && b < m->q->nr_cpus);
	ctx_a = &m->q->ctxs[a];
	ctx_b = &m->q->ctxs[b];

	rq_start_plug(&plug);
	for (unsigned i = 0; i < NR; i++) {
		rq_bio_init(&bios[i], &vecs[i], 1);
		assert_int_equal(rq_bio_add_vec(&bios[i], buf, sizeof(buf)), 0);
		bios[i].op = RQ_OP_READ;
		bios[i].iter.sector = 8 * (2 * i + 1);
		bios[i].end_io = end_io;
		rq_submit_bio(m->q, &bios[i]);
	}
	rq_finish_plug(&plug);
	assert_true(mock_wait_held(m, NR, 10000));

	/* what the end may not touch, and what it must */
	usage_a = atomic_load(&ctx_a->usage);
	usage_b = atomic_load(&ctx_b->usage);
	c = (struct completer){ .m = m, .cpu = b };
	assert_int_equal(pthread_create(&thread, NULL, complete_fn, &c), 0);
	assert_int_equal(pthread_join(thread, NULL), 0);

	for (unsigned i = 0; i < NR; i++)
		assert_int_equal(atomic_load(&ended[i]), 1);
	assert_int_equal(atomic_load(&ctx_a->usage), usage_a);
	assert_int_equal(atomic_load(&ctx_b->usage), usage_b - NR);

	/* whole again: as many requests again, then a freeze that does not wait */
	rq_start_plug(&plug);
	for (unsigned i = 0; i < NR; i++) {
		atomic_store(&ended[i], 0);
		rq_bio_init(&bios[i], &vecs[i], 1);
		assert_int_equal(rq_bio_add_vec(&bios[i], buf, sizeof(buf)), 0);
		bios[i].op = RQ_OP_READ;
		bios[i].iter.sector = 8 * (2 * i + 1000);
		bios[i].end_io = end_io;
		rq_submit_bio(m->q, &bios[i]);
	}
	rq_finish_plug(&plug);
	assert_true(mock_wait_held(m, NR, 10000));
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), NR);
	rq_queue_freeze(m->q);
	rq_queue_unfreeze(m->q);
	for (unsigned i = 0; i < NR; i++)
		assert_int_equal(atomic_load(&ended[i]), 1);
	mock_destroy(m);
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_on_another_cpu),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
