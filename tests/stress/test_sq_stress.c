/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Stress over the single-queue front end: 4 threads write and read back
 * their own regions of a memory-backed simulated device (tests/common/
 * sq_driver.h) with random plugs (or none), random multi-vector bios of
 * 4 KiB..128 KiB and a small request pool (16), while the main thread
 * switches the scheduler round noop, deadline and cfq every ~2 ms, changes
 * deadline's fifo_batch and moves the virtual clock on (so deadline's FIFO
 * expiries fire too).  The scenario and its checks are the multi-queue
 * stress's (tests/common/stress.h).
 *
 * Two devices, by argument:
 *   thread  (default) a device thread ends requests, depth 4, library lock;
 *   inline  request_fn ends them, dropping the driver's own queue lock
 *           around the data copy, so submitters, the switcher and
 *           request_fn all meet on that lock.
 *
 * Every bio must end exactly once with OK, every byte read back must be
 * the last generation written, and every request counted must have ended
 * (or been merged into another).  RQ_STRESS_SEED and RQ_STRESS_SECONDS
 * replay or lengthen it (tests/common/stress.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "sq_driver.h"
#include "stress.h"

static bool inline_mode;

/* A tunable of deadline (refused, -EINVAL, while noop runs), and 300 ms on the clock. */
static void after_switch(struct rq_queue *q, unsigned n)
{
	static const char *const batches[] = { "1", "4", "16", "64" };

	(void)rq_queue_attr_set(q, "iosched/fifo_batch", batches[n % 4]);
	sq_clock_advance(300 * 1000000ull);
}

static void test_sq_stress(void **state)
{
	const struct stress_config sc = {
		.label = inline_mode ? "sq stress (inline)" : "sq stress (thread)",
		.threads = 4,
		.bios_per_thread = 2000,  /* writes + reads, per thread */
		.region_bytes = 2u << 20,
		.max_bio = 128u << 10,
		.max_batch = 24,
		.mixed_batches = true,
		.seed = 0x2545f491u,
		.wait_ms = 30000,
		.scheds = { "deadline", "noop", "cfq" },
		.after_switch = after_switch,
	};
	struct rq_queue_limits lim;
	struct sq_config c = { .mem_bytes = (uint64_t)sc.threads * sc.region_bytes,
			       .scheduler = "deadline", .nr_requests = 16, .limits = &lim };
	struct stress_result res;
	struct sq_dev *d;

	rq_queue_limits_default(&lim);
	lim.max_hw_sectors = 256;       /* 128 KiB requests at most */
	lim.max_sectors = 256;
	lim.max_segments = 16;
	if (inline_mode) {
		c.mode = SQ_MODE_INLINE;
		c.driver_lock = true;
		c.drop_lock = true;
	} else {
		c.mode = SQ_MODE_THREAD;
		c.depth = 4;
	}
	d = sq_create(&c);
	stress_soak(d->q, &sc, &res);
	assert_int_equal(res.st.completed, res.st.requests - res.st.merges_rq);
	sq_destroy(d);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sq_stress),
	};

	inline_mode = argc > 1 && !strcmp(argv[1], "inline");
	if (!rq_sched_exists("noop") || !rq_sched_exists("deadline") ||
	    !rq_sched_exists("cfq")) {
		fprintf(stderr, "noop, deadline or cfq not registered: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
