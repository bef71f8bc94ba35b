/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Stress: 3 threads write and read back their own regions of a memory-backed
 * device (completion on the driver's thread, 5% random RESOURCE answers) --
 * the mock driver, or with argument "null" the example null driver --
 * with random plug sizes and random multi-vector bios of 4 KiB..256 KiB,
 * while the main thread switches the scheduler round every multi-queue
 * scheduler (test-fifo, none, mq-deadline, kyber, bfq) every ~2 ms.  Every bio must end exactly once with OK and every byte read
 * must be the last generation written (the scenario and its checks:
 * tests/common/stress.h, shared with the single-queue stress).  With the
 * null driver, its RESOURCE answers are the queue's.  RQ_STRESS_SEED and
 * RQ_STRESS_SECONDS replay or lengthen it (tests/common/stress.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"
#include "null_blk.h"
#include "stress.h"

static const struct stress_config stress_cfg = {
	.label = "stress",          /* "(mock)" or "(null)" added by main() */
	.threads = 3,
	.bios_per_thread = 3000,      /* writes + reads, per thread */
	.region_bytes = 4u << 20,
	.max_bio = 256u << 10,
	.max_batch = 40,
	.seed = 0x1234567u,
	.wait_ms = 20000,
	.scheds = { FIXTURE_FIFO_NAME, "none", "mq-deadline", "kyber", "bfq" },
};
#define MEM_BYTES ((uint64_t)stress_cfg.threads * stress_cfg.region_bytes)

static bool use_null;              /* argv[1] == "null" */

/* The whole scenario over the mock driver. */
static void test_stress_mock(void)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_THREAD, .mem_bytes = MEM_BYTES,
				   .resource_permille = 50 };
	struct mock_dev *m = mock_create(&cfg, NULL);
	struct stress_result res;

	stress_soak(m->q, &stress_cfg, &res);
	mock_destroy(m);
}

/* The whole scenario over the null driver; its busy answers are counted. */
static void test_stress_null(void)
{
	struct null_config nc;
	struct null_dev *nd;
	struct null_stats ns;
	struct stress_result res;

	null_config_default(&nc);
	nc.completion = NULL_COMPLETE_THREAD;
	nc.memory_backed = true;
	nc.size_bytes = MEM_BYTES;
	nc.resource_permille = 50;
	nc.nr_hw_queues = 2;
	assert_int_equal(null_create(&nc, &nd), 0);
	stress_soak(null_queue(nd), &stress_cfg, &res);
	null_get_stats(nd, &ns);
	assert_true(ns.busy > 0);
	assert_int_equal(ns.busy, res.st.resource);
	null_destroy(nd);
}

static void test_stress(void **state)
{
	assert_int_equal(fixture_register_fifo(), 0);
	if (use_null)
		test_stress_null();
	else
		test_stress_mock();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stress),
	};

	use_null = argc > 1 && !strcmp(argv[1], "null");

	return cmocka_run_group_tests(tests, NULL, NULL);
}
