/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The io context of a request made for a multi-queue scheduler: a bio
 * with no priority of its own takes its context's (the bio's, else the
 * submitting thread's), as the kernel gives a bio the task's priority at
 * submission, whatever the scheduler.  mq-deadline serves RT before BE, so
 * the dispatch order shows which priority each request got.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <librequest/iocontext.h>

#include "fixtures.h"
#include "mock_driver.h"

#define NR_RECS 4

static uint8_t data_buf[4096];

struct ioc_dev {
	struct mock_dev *m;
	struct fx_rec recs[NR_RECS];
	unsigned nr;
};

static void dev_init(struct ioc_dev *d, const char *sched)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE, .queue_depth = 64 };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = sched };

	d->nr = 0;
	d->m = mock_create(&cfg, &qc);
	assert_non_null(d->m);
	rq_queue_quiesce(d->m->q);
}

/* A 4 KiB read at @sector for context @ioc (NULL: the thread's), no priority. */
static void submit_read(struct ioc_dev *d, uint64_t sector, struct rq_io_context *ioc)
{
	struct rq_bio *bio;

	assert_true(d->nr < NR_RECS);
	bio = fx_bio(&d->recs[d->nr++], RQ_OP_READ, sector, data_buf, sizeof(data_buf));
	bio->ioc = ioc;
	rq_submit_bio(d->m->q, bio);
}

/* Let the queue run, check the @n dispatches came in @want's sector order. */
static void run_and_expect(struct ioc_dev *d, const uint64_t *want, unsigned n)
{
	rq_queue_unquiesce(d->m->q);
	rq_mq_run_hw_queues(d->m->q, false);
	assert_true(mock_wait_count(d->m, MOCK_QUEUE_RQ, n, 10000));
	for (unsigned i = 0; i < n; i++) {
		struct mock_event ev;

		assert_true(mock_find(d->m, MOCK_QUEUE_RQ, i, &ev));
		assert_int_equal(ev.sector, want[i]);
	}
	assert_true(fx_wait(d->recs, d->nr, 10000));
	for (unsigned i = 0; i < d->nr; i++)
		assert_int_equal(fx_done(&d->recs[i]), 1);
	mock_destroy(d->m);
	fx_put(d->recs, d->nr);
}

/* The thread's set context (RT) gives its bios RT: they go first. */
static void test_thread_context_prio(void **state)
{
	static const uint64_t want[] = { 800, 100 };
	struct rq_io_context *rt = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0));
	struct ioc_dev d;

	(void)state;
	assert_non_null(rt);
	dev_init(&d, "mq-deadline");
	submit_read(&d, 100, NULL);         /* the thread's own context: BE/4 */
	rq_ioc_set_current(rt);
	submit_read(&d, 800, NULL);         /* RT, from the thread's set context */
	rq_ioc_set_current(NULL);
	run_and_expect(&d, want, 2);
	rq_ioc_put(rt);
}

/* A bio's own context overrides the thread's, both ways. */
static void test_bio_context_prio(void **state)
{
	static const uint64_t want[] = { 400, 700, 100 };
	struct rq_io_context *rt = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0));
	struct rq_io_context *idle = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0));
	struct ioc_dev d;

	(void)state;
	assert_non_null(rt);
	assert_non_null(idle);
	dev_init(&d, "mq-deadline");
	rq_ioc_set_current(rt);
	submit_read(&d, 100, idle);         /* IDLE: its bio's context, not the thread's RT */
	submit_read(&d, 700, NULL);         /* RT: the thread's */
	rq_ioc_set_current(NULL);
	submit_read(&d, 400, rt);           /* RT: its bio's context, not the thread's BE */
	run_and_expect(&d, want, 3);
	rq_ioc_put(rt);
	rq_ioc_put(idle);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_thread_context_prio),
		cmocka_unit_test(test_bio_context_prio),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
