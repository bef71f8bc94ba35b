/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Re-entrancy of the driver hooks that run on the service thread (issue 17,
 * item 1): a multi-queue driver may end, complete or requeue a request from
 * inside its own ops->timeout hook, the usual kernel driver pattern.  Each
 * case checks that the service pass returns (no spin on the request the
 * scan itself holds), that the bio ends exactly once with the driver's
 * status, that the request's tag is free again (a second bio is issued and
 * ends), and that rq_queue_destroy() returns.
 *
 * The process runs in application-driven service on a virtual clock, so
 * the timeout scan runs only inside this thread's rq_service_run() calls,
 * exactly when the virtual clock says; an alarm turns a hang into a failure
 * with a message instead of a suite timeout.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixtures.h"

enum hook_action {
	HOOK_END,         /* rq_mq_end_request(rq, RQ_STS_TIMEOUT), DONE */
	HOOK_COMPLETE,    /* rq_mq_complete_request(rq, RQ_STS_TIMEOUT) -> ops->complete, DONE */
	HOOK_REQUEUE,     /* rq_mq_requeue_request(rq, true), DONE: issued again */
	HOOK_END_SQ,      /* single-queue (lock held): rq_sq_end_request_all_locked(rq, RQ_STS_TIMEOUT), DONE */
};

struct drv {
	enum hook_action action;
	struct rq_request *held[8]; /* requests queue_rq kept (first issue only) */
	unsigned nr_held;
	unsigned issued;            /* queue_rq / request_fn starts */
	unsigned hook_calls;
	unsigned complete_calls;
	bool end_reissued;          /* a request issued again ends at once, OK */
};

static struct drv drv;
static uint8_t buf[4096];

static void on_alarm(int sig)
{
	static const char msg[] = "test_timeout_reentry: hung (a hook re-entered the core)\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(3);
}

static rq_status_t hold_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	(void)hctx;
	(void)last;
	drv.issued++;
	if (drv.end_reissued) {
		rq_mq_end_request(rq, RQ_STS_OK);
		return RQ_STS_OK;
	}
	assert_true(drv.nr_held < 8);
	drv.held[drv.nr_held++] = rq;
	return RQ_STS_OK;
}

static void drv_complete(struct rq_request *rq)
{
	drv.complete_calls++;
	rq_mq_end_request(rq, rq_mq_complete_status(rq));
}

static enum rq_timeout_ret drv_timeout(struct rq_request *rq)
{
	drv.hook_calls++;
	switch (drv.action) {
	case HOOK_END:
		rq_mq_end_request(rq, RQ_STS_TIMEOUT);
		break;
	case HOOK_COMPLETE:
		assert_true(rq_mq_complete_request(rq, RQ_STS_TIMEOUT));
		break;
	case HOOK_REQUEUE:
		drv.nr_held = 0;
		drv.end_reissued = true;
		rq_mq_requeue_request(rq, true);
		break;
	case HOOK_END_SQ:
		rq_sq_end_request_all_locked(rq, RQ_STS_TIMEOUT);
		break;
	}
	return RQ_EH_DONE;
}

static const struct rq_mq_ops mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = hold_queue_rq,
	.timeout = drv_timeout,
	.complete = drv_complete,
};

struct mq_dev {
	struct rq_tag_set *set;
	struct rq_queue *q;
};

static struct mq_dev mq_make(enum hook_action action)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT, .ops = &mq_ops, .nr_hw_queues = 1, .queue_depth = 1,
					.numa_node = -1 };
	struct rq_queue_config qc;
	struct mq_dev d;

	memset(&drv, 0, sizeof(drv));
	drv.action = action;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.capacity = 1 << 20;
	qc.scheduler = "none";
	assert_int_equal(rq_tag_set_alloc(&sc, &d.set), 0);
	assert_int_equal(rq_mq_alloc_queue(d.set, &qc, &d.q), 0);
	assert_int_equal(rq_queue_attr_set(d.q, "io_timeout", "100"), 0);
	return d;
}

/* Step the virtual clock 10 ms at a time, serving, until the hook ran (at most 2 s). */
static void serve_until_hook(void)
{
	for (unsigned i = 0; i < 200 && !drv.hook_calls; i++) {
		fx_vclock_set(fx_vclock_now() + 10 * 1000000ull);
		fx_service_due();
	}
	assert_int_equal(drv.hook_calls, 1);
}

/*
 * One held write times out; the hook does @action; the write must end once
 * with @want; then, the queue depth being 1, a second write can only be
 * issued if the first one's tag came back.
 */
static void mq_case(enum hook_action action, rq_status_t want, unsigned want_issued)
{
	struct mq_dev d = mq_make(action);
	struct fx_rec a = { 0 }, b = { 0 };

	rq_submit_bio(d.q, fx_bio(&a, RQ_OP_WRITE, 64, buf, sizeof(buf)));
	assert_int_equal(drv.issued, 1);
	assert_int_equal(fx_done(&a), 0);
	serve_until_hook();
	fx_service_due(); /* a requeue kick, if any */
	assert_int_equal(fx_done(&a), 1);
	assert_int_equal(a.status, want);
	assert_int_equal(drv.issued, want_issued);

	drv.end_reissued = true;
	rq_submit_bio(d.q, fx_bio(&b, RQ_OP_WRITE, 128, buf, sizeof(buf)));
	fx_service_due();
	assert_int_equal(fx_done(&b), 1);
	assert_int_equal(b.status, RQ_STS_OK);
	assert_int_equal(fx_done(&a), 1); /* never twice */

	rq_queue_destroy(d.q);
	rq_tag_set_free(d.set);
	fx_put(&a, 1);
	fx_put(&b, 1);
}

/* rq_mq_end_request() inside ops->timeout. */
static void test_mq_end_in_timeout(void **state)
{
	(void)state;
	mq_case(HOOK_END, RQ_STS_TIMEOUT, 1);
}

/* rq_mq_complete_request() inside ops->timeout: ops->complete runs and ends it. */
static void test_mq_complete_in_timeout(void **state)
{
	(void)state;
	mq_case(HOOK_COMPLETE, RQ_STS_TIMEOUT, 1);
	assert_int_equal(drv.complete_calls, 1);
}

/* rq_mq_requeue_request() inside ops->timeout: issued again, then ends OK. */
static void test_mq_requeue_in_timeout(void **state)
{
	(void)state;
	mq_case(HOOK_REQUEUE, RQ_STS_OK, 2);
}

/* The single-queue front end, same pattern: request_fn starts and holds. */
static void sq_request_fn(struct rq_queue *q)
{
	struct rq_request *rq;

	while ((rq = rq_sq_fetch_request(q))) {
		drv.issued++;
		if (drv.end_reissued) {
			rq_sq_end_request_all_locked(rq, RQ_STS_OK);
			continue;
		}
		drv.held[drv.nr_held++] = rq;
	}
}

static const struct rq_sq_ops sq_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = sq_request_fn,
	.timeout = drv_timeout,
};

/* rq_sq_end_request_all() inside the single-queue timeout hook. */
static void test_sq_end_in_timeout(void **state)
{
	struct rq_sq_config cfg;
	struct rq_queue *q;
	struct fx_rec a = { 0 }, b = { 0 };

	(void)state;
	memset(&drv, 0, sizeof(drv));
	drv.action = HOOK_END_SQ;
	memset(&cfg, 0, sizeof(cfg));
	cfg.size = sizeof(cfg);
	cfg.ops = &sq_ops;
	cfg.capacity = 1 << 20;
	cfg.scheduler = "noop";
	assert_int_equal(rq_sq_alloc_queue(&cfg, &q), 0);
	assert_int_equal(rq_queue_attr_set(q, "io_timeout", "100"), 0);
	rq_submit_bio(q, fx_bio(&a, RQ_OP_WRITE, 64, buf, sizeof(buf)));
	fx_service_due();
	assert_int_equal(drv.issued, 1);
	serve_until_hook();
	assert_int_equal(fx_done(&a), 1);
	assert_int_equal(a.status, RQ_STS_TIMEOUT);
	drv.end_reissued = true;
	rq_submit_bio(q, fx_bio(&b, RQ_OP_WRITE, 128, buf, sizeof(buf)));
	fx_service_due();
	assert_int_equal(fx_done(&b), 1);
	rq_queue_destroy(q);
	fx_put(&a, 1);
	fx_put(&b, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mq_end_in_timeout),
		cmocka_unit_test(test_mq_complete_in_timeout),
		cmocka_unit_test(test_mq_requeue_in_timeout),
		cmocka_unit_test(test_sq_end_in_timeout),
	};

	signal(SIGALRM, on_alarm);
	alarm(20);
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	fx_vclock_install(1000000000ull);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
