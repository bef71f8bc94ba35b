/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Sized structs (doc/architecture.md, "A public ABI"): every configuration
 * struct and the limits begin with their size, the stats and limits getters
 * take the caller's size.  A caller built against an older (shorter) layout
 * is read only as far as its size goes, a newer (longer) one is accepted
 * with the extra bytes ignored, and a size below this release's first
 * layout is refused with -EINVAL, changing nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <librequest/librequest.h>

static rq_status_t end_now(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	(void)hctx;
	(void)last;
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

static const struct rq_mq_ops ops = { RQ_MQ_OPS_INIT, .queue_rq = end_now };

/* A tag set config: size 0 and a cut size are refused; a longer one is read as far as ours. */
static void test_tag_set_config_size(void **state)
{
	struct {
		struct rq_tag_set_config cfg;
		unsigned char newer[64]; /* fields of a later release, zero */
	} big;
	struct rq_tag_set_config cfg = { RQ_TAG_SET_CONFIG_INIT, .ops = &ops, .nr_hw_queues = 1,
					 .queue_depth = 8, .numa_node = -1 };
	struct rq_tag_set *set = NULL;

	(void)state;
	cfg.size = 0;
	assert_int_equal(rq_tag_set_alloc(&cfg, &set), -EINVAL);
	cfg.size = offsetof(struct rq_tag_set_config, driver_data);
	assert_int_equal(rq_tag_set_alloc(&cfg, &set), -EINVAL);
	assert_null(set);
	cfg.size = sizeof(cfg);
	assert_int_equal(rq_tag_set_alloc(&cfg, &set), 0);
	rq_tag_set_free(set);

	memset(&big, 0, sizeof(big));
	big.cfg = cfg;
	big.cfg.size = sizeof(big);
	set = NULL;
	assert_int_equal(rq_tag_set_alloc(&big.cfg, &set), 0);
	rq_tag_set_free(set);
}

/* Queue configs and limits: size checked; the stats getter fills what the caller's size covers. */
static void test_queue_config_and_getters(void **state)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT, .ops = &ops, .nr_hw_queues = 1,
					.queue_depth = 8, .numa_node = -1 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = "none" };
	struct rq_queue_stats st;
	struct rq_tag_set *set;
	struct rq_queue *q = NULL;
	size_t cut = offsetof(struct rq_queue_stats, splits);

	(void)state;
	assert_int_equal(rq_tag_set_alloc(&sc, &set), 0);
	rq_queue_limits_default(&lim);
	assert_int_equal(lim.size, sizeof(lim));
	lim.size = 0;
	assert_int_equal(rq_queue_limits_validate(&lim), -EINVAL);
	assert_int_equal(rq_mq_alloc_queue(set, &qc, &q), -EINVAL);
	assert_null(q);
	lim.size = sizeof(lim);
	qc.size = 0;
	assert_int_equal(rq_mq_alloc_queue(set, &qc, &q), -EINVAL);
	qc.size = sizeof(qc);
	assert_int_equal(rq_mq_alloc_queue(set, &qc, &q), 0);

	/* an older caller's shorter stats: size and bios only, nothing past them */
	memset(&st, 0xa5, sizeof(st));
	assert_int_equal(rq_queue_get_stats(q, &st, cut), 0);
	assert_int_equal(st.size, cut);
	assert_int_equal(st.bios, 0);
	assert_int_equal(st.splits, 0xa5a5a5a5a5a5a5a5ull);
	assert_int_equal(rq_queue_get_stats(q, &st, 2), -EINVAL);
	assert_int_equal(rq_queue_get_stats(q, &st, sizeof(st)), 0);
	assert_int_equal(st.size, sizeof(st));
	assert_int_equal(st.splits, 0);

	memset(&lim, 0, sizeof(lim));
	assert_int_equal(rq_queue_get_limits(q, &lim, sizeof(lim)), 0);
	assert_int_equal(lim.size, sizeof(lim));
	assert_int_equal(lim.logical_block_size, 512);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tag_set_config_size),
		cmocka_unit_test(test_queue_config_and_getters),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
