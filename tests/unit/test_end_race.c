/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A driver's completion racing the timeout scan (issue 16, "completion
 * without a per-request atomic").  The common end takes a request out of
 * flight with no atomic (a restartable sequence, lib/mq.c); the scan's hold
 * and ends made during it keep the compare-and-swap.  Each iteration holds
 * one write in the driver, lets it time out on the virtual clock, and has
 * a completer thread end it at the very moment the scan looks at it (or the
 * hook runs, the hook ending it too; or as the end of a request the hook
 * completed comes after the hold): the bio must end exactly once, with
 * the status of the one end that won, and its tag must come back (the queue
 * has one).  A completer that did not see the scan's hold, or a scan that
 * did not wait for sequences in progress, lets both ends through: the bio
 * ends twice.  Registered twice: as the process chooses (rseq where the
 * kernel has it) and with RQ_END_ATOMIC=1 (compare-and-swap everywhere).
 *
 * Application-driven service on a virtual clock: the scan runs only inside
 * this thread's rq_service_run() calls.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixtures.h"

#define ITERATIONS 8000
#define JITTER 128 /* spin steps either side waits before its end, at most */

enum race_mode {
	RACE_HOOK_END,   /* the completer goes when the hook runs; the hook ends it too */
	RACE_HOOK_WAIT,  /* the completer goes when the hook runs; the hook only returns */
	RACE_SCAN,       /* the completer goes as the scan pass starts */
	RACE_COMPLETING, /* the hook completes it (COMPLETING), ops->complete defers the
			    end past the hold, and the completer ends it meanwhile */
	RACE_MODES
};

static struct {
	struct rq_request *_Atomic held;  /* the request queue_rq kept */
	struct rq_request *deferred;      /* ops->complete left it to the test thread */
	atomic_int go;                    /* 1: completer, end it now */
	atomic_int ended;                 /* the completer's end returned */
	atomic_bool stop;
	atomic_uint hook_calls;
	atomic_uint completer_spin;       /* steps the completer waits after go */
	unsigned hook_spin;               /* steps the hook waits after go */
	enum race_mode mode;
	unsigned issued;
} drv;

/* Wait @n steps: a spread of moments for the two ends to meet. */
static void spin(unsigned n)
{
	for (volatile unsigned i = 0; i < n; i++)
		;
}

static uint8_t buf[4096];

static rq_status_t hold_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	(void)hctx;
	(void)last;
	drv.issued++;
	atomic_store(&drv.held, rq);
	return RQ_STS_OK;
}

/* Start the completer and, for the race to be close, do not wait for it. */
static void release_completer(void)
{
	atomic_store_explicit(&drv.go, 1, memory_order_release);
}

static enum rq_timeout_ret race_timeout(struct rq_request *rq)
{
	atomic_fetch_add(&drv.hook_calls, 1);
	if (drv.mode == RACE_HOOK_END || drv.mode == RACE_HOOK_WAIT)
		release_completer();
	if (drv.mode == RACE_HOOK_END || drv.mode == RACE_SCAN) {
		spin(drv.hook_spin);
		rq_mq_end_request(rq, RQ_STS_TIMEOUT);
	}
	if (drv.mode == RACE_COMPLETING)
		assert_true(rq_mq_complete_request(rq, RQ_STS_TIMEOUT));
	return RQ_EH_DONE;
}

/* A driver whose ops->complete ends the request later, on its own thread. */
static void defer_complete(struct rq_request *rq)
{
	drv.deferred = rq;
}

/* The deferred end, after the hold, racing the completer. */
static void end_deferred(void)
{
	struct rq_request *rq = drv.deferred;

	if (!rq)
		return;
	drv.deferred = NULL;
	release_completer();
	spin(drv.hook_spin);
	rq_mq_end_request(rq, rq_mq_complete_status(rq));
}

static const struct rq_mq_ops mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = hold_queue_rq,
	.timeout = race_timeout,
	.complete = defer_complete,
};

/* The driver's completion thread: spins so that it runs at once. */
static void *completer(void *arg)
{
	(void)arg;
	while (!atomic_load(&drv.stop)) {
		struct rq_request *rq;

		if (!atomic_load_explicit(&drv.go, memory_order_acquire)) {
#if defined(__x86_64__)
			__builtin_ia32_pause();
#endif
			continue;
		}
		rq = atomic_load(&drv.held);
		atomic_store(&drv.go, 0);
		spin(atomic_load(&drv.completer_spin));
		rq_mq_end_request(rq, RQ_STS_OK);
		atomic_store_explicit(&drv.ended, 1, memory_order_release);
	}
	return NULL;
}

/* One write, held, timed out while the completer ends it; checked. */
static void race_once(struct rq_queue *q, enum race_mode mode, unsigned *won)
{
	struct fx_rec a = { 0 };
	unsigned release_at = 2 + (unsigned)rand() % 3;

	drv.mode = mode;
	drv.hook_spin = (unsigned)rand() % JITTER;
	atomic_store(&drv.completer_spin, (unsigned)rand() % JITTER);
	atomic_store(&drv.hook_calls, 0);
	atomic_store(&drv.ended, 0);
	rq_submit_bio(q, fx_bio(&a, RQ_OP_WRITE, 64, buf, sizeof(buf)));
	assert_non_null(atomic_load(&drv.held));
	for (unsigned i = 0; i < 50 && !atomic_load(&drv.ended); i++) {
		fx_vclock_set(fx_vclock_now() + 1000000ull);
		if (mode == RACE_SCAN && i == release_at)
			release_completer(); /* about when the scan fires: either may win */
		fx_service_due();
		end_deferred();
	}
	assert_true(FX_WAIT_FOR(atomic_load(&drv.ended), 10000));
	fx_service_due();
	assert_int_equal(fx_done(&a), 1);
	assert_true(a.status == RQ_STS_OK || a.status == RQ_STS_TIMEOUT);
	won[a.status == RQ_STS_OK]++;
	atomic_store(&drv.held, NULL);
	fx_put(&a, 1);
}

static void test_end_races_timeout(void **state)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT, .ops = &mq_ops, .nr_hw_queues = 1,
					.queue_depth = 1, .numa_node = -1 };
	struct rq_queue_config qc;
	struct rq_tag_set *set;
	struct rq_queue *q;
	unsigned won[RACE_MODES][2] = { { 0 } };
	pthread_t th;

	(void)state;
	srand(16);
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.capacity = 1 << 20;
	qc.scheduler = "none";
	assert_int_equal(rq_tag_set_alloc(&sc, &set), 0);
	assert_int_equal(rq_mq_alloc_queue(set, &qc, &q), 0);
	assert_int_equal(rq_queue_attr_set(q, "io_timeout", "2"), 0);
	assert_int_equal(pthread_create(&th, NULL, completer, NULL), 0);
	for (unsigned i = 0; i < ITERATIONS; i++) {
		enum race_mode mode = (enum race_mode)(i % RACE_MODES);

		race_once(q, mode, won[mode]);
		/* depth 1: every write was issued, so every tag came back */
		assert_int_equal(drv.issued, i + 1);
	}
	atomic_store(&drv.stop, true);
	pthread_join(th, NULL);
	/* the hook that only returns never ends it: the completer always wins */
	assert_int_equal(won[RACE_HOOK_WAIT][0], 0);
	printf("# completer / hook won: hook ends too %u / %u; scan %u / %u; completing %u / %u\n",
	       won[RACE_HOOK_END][1], won[RACE_HOOK_END][0], won[RACE_SCAN][1],
	       won[RACE_SCAN][0], won[RACE_COMPLETING][1], won[RACE_COMPLETING][0]);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_end_races_timeout),
	};

	alarm(100); /* a hang (a tag given back twice or lost) fails by SIGALRM */
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	fx_vclock_install(1000000000ull);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
