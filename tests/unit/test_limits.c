/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue limits: defaults, validation, per-op caps and bio_check().
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "internal/bio.h"

#define FAKE(addr) ((void *)(uintptr_t)(addr))

/* The defaults are the kernel's. */
static void test_defaults(void **state)
{
	struct rq_queue_limits lim;

	(void)state;
	memset(&lim, 0xff, sizeof(lim));
	rq_queue_limits_default(&lim);
	assert_int_equal(lim.logical_block_size, 512);
	assert_int_equal(lim.physical_block_size, 512);
	assert_int_equal(lim.max_hw_sectors, 255);
	assert_int_equal(lim.max_sectors, 255);
	assert_int_equal(lim.max_segments, 128);
	assert_int_equal(lim.max_segment_size, 65536);
	assert_int_equal(lim.seg_boundary_mask, 0xffffffffull);
	assert_int_equal(lim.max_discard_sectors, 0);
	assert_int_equal(lim.discard_granularity, 512);
	assert_int_equal(lim.max_write_zeroes_sectors, 0);
	assert_int_equal(lim.features, 0);
}

/* All-zero limits validate to the defaults. */
static void test_validate_zero_is_default(void **state)
{
	struct rq_queue_limits lim, def;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	rq_queue_limits_default(&def);
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	assert_memory_equal(&lim, &def, sizeof(lim));
	assert_int_equal(rq_queue_limits_validate(&lim), 0); /* idempotent */
	assert_memory_equal(&lim, &def, sizeof(lim));
}

/* Zero fields derive from the given ones: max_sectors, pbs, granularity. */
static void test_validate_derived(void **state)
{
	struct rq_queue_limits lim;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.max_hw_sectors = 1024;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	assert_int_equal(lim.max_sectors, 1024);

	memset(&lim, 0, sizeof(lim));

	lim.size = sizeof(lim);
	lim.max_hw_sectors = 8192;
	lim.logical_block_size = 4096;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	assert_int_equal(lim.max_sectors, 2560);
	assert_int_equal(lim.physical_block_size, 4096);
	assert_int_equal(lim.discard_granularity, 4096);
	assert_int_equal(lim.max_segments, 128);

	memset(&lim, 0, sizeof(lim));

	lim.size = sizeof(lim);
	lim.logical_block_size = 512;
	lim.physical_block_size = 4096;
	lim.max_discard_sectors = 2048;
	lim.discard_granularity = 65536;
	lim.features = RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	assert_int_equal(lim.physical_block_size, 4096);
	assert_int_equal(lim.discard_granularity, 65536);
}

/* Apply @mutate to zeroed limits; validation must fail and leave them as they were. */
static void expect_invalid(void (*mutate)(struct rq_queue_limits *))
{
	struct rq_queue_limits lim, copy;

	memset(&lim, 0, sizeof(lim));

	lim.size = sizeof(lim);
	mutate(&lim);
	copy = lim;
	assert_int_equal(rq_queue_limits_validate(&lim), -EINVAL);
	assert_memory_equal(&lim, &copy, sizeof(lim));
}

static void lbs_not_pow2(struct rq_queue_limits *l) { l->logical_block_size = 1000; }
static void lbs_small(struct rq_queue_limits *l) { l->logical_block_size = 256; }
static void lbs_big(struct rq_queue_limits *l) { l->logical_block_size = 131072; }
static void pbs_below_lbs(struct rq_queue_limits *l)
{
	l->logical_block_size = 4096;
	l->physical_block_size = 512;
}
static void pbs_not_pow2(struct rq_queue_limits *l) { l->physical_block_size = 3072; }
static void max_sectors_above_hw(struct rq_queue_limits *l)
{
	l->max_hw_sectors = 256;
	l->max_sectors = 512;
}
static void hw_below_block(struct rq_queue_limits *l)
{
	l->logical_block_size = 4096;
	l->max_hw_sectors = 4;
}
static void segments_many(struct rq_queue_limits *l) { l->max_segments = 65536; }
static void seg_size_small(struct rq_queue_limits *l) { l->max_segment_size = 2048; }
static void boundary_small(struct rq_queue_limits *l) { l->seg_boundary_mask = 0x7ff; }
static void boundary_not_mask(struct rq_queue_limits *l) { l->seg_boundary_mask = 0x1f0ff; }
static void granularity_odd(struct rq_queue_limits *l)
{
	l->logical_block_size = 4096;
	l->discard_granularity = 6144;
}
static void discard_below_block(struct rq_queue_limits *l)
{
	l->logical_block_size = 4096;
	l->max_discard_sectors = 4;
}
static void unknown_feature(struct rq_queue_limits *l) { l->features = 1u << 30; }

/* Each documented rejection returns -EINVAL and changes nothing. */
static void test_validate_rejects(void **state)
{
	(void)state;
	expect_invalid(lbs_not_pow2);
	expect_invalid(lbs_small);
	expect_invalid(lbs_big);
	expect_invalid(pbs_below_lbs);
	expect_invalid(pbs_not_pow2);
	expect_invalid(max_sectors_above_hw);
	expect_invalid(hw_below_block);
	expect_invalid(segments_many);
	expect_invalid(seg_size_small);
	expect_invalid(boundary_small);
	expect_invalid(boundary_not_mask);
	expect_invalid(granularity_odd);
	expect_invalid(discard_below_block);
	expect_invalid(unknown_feature);
}

/* Per-op caps: the right field, rounded down to the logical block size. */
static void test_max_sectors_for_op(void **state)
{
	struct rq_queue_limits lim;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.logical_block_size = 4096;
	lim.max_hw_sectors = 2000;
	lim.max_sectors = 1001;
	lim.max_discard_sectors = 77;
	lim.max_write_zeroes_sectors = 4100;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	assert_int_equal(limits_max_sectors_for_op(&lim, RQ_OP_READ), 1000);
	assert_int_equal(limits_max_sectors_for_op(&lim, RQ_OP_WRITE), 1000);
	assert_int_equal(limits_max_sectors_for_op(&lim, RQ_OP_DISCARD), 72);
	assert_int_equal(limits_max_sectors_for_op(&lim, RQ_OP_WRITE_ZEROES), 4096);
	assert_int_equal(limits_max_sectors_for_op(&lim, RQ_OP_FLUSH), 0);
}

/* ---------------------------------------------------------------- bio_check */

struct check_fixture {
	struct rq_queue_limits lim;
	struct rq_bvec vecs[4];
	struct rq_bio bio;
};

static struct check_fixture fx;

/* A valid 8 KiB write at sector 16 on a 4096-byte-block device with discard. */
static int setup_check(void **state)
{
	(void)state;
	memset(&fx.lim, 0, sizeof(fx.lim));
	fx.lim.size = sizeof(fx.lim);
	fx.lim.logical_block_size = 4096;
	fx.lim.max_discard_sectors = 1024;
	assert_int_equal(rq_queue_limits_validate(&fx.lim), 0);
	rq_bio_init(&fx.bio, fx.vecs, 4);
	fx.bio.op = RQ_OP_WRITE;
	fx.bio.iter.sector = 16;
	assert_int_equal(rq_bio_add_vec(&fx.bio, FAKE(0x10000), 4096), 0);
	assert_int_equal(rq_bio_add_vec(&fx.bio, FAKE(0x30000), 4096), 0);
	return 0;
}

/* Well-formed bios pass: read/write, flush (even with a capacity), discard. */
static void test_check_accepts(void **state)
{
	struct rq_bio flush, discard;

	(void)state;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_OK);
	assert_int_equal(bio_check(&fx.lim, 32, &fx.bio), RQ_STS_OK); /* ends exactly at the end */
	fx.bio.op = RQ_OP_READ;
	fx.bio.opf = RQ_BIO_FLAGS_ALL;
	assert_int_equal(bio_check(&fx.lim, 32, &fx.bio), RQ_STS_OK);

	rq_bio_init(&flush, NULL, 0);
	flush.op = RQ_OP_FLUSH;
	flush.opf = RQ_BIO_PREFLUSH;
	flush.iter.sector = 1u << 30;
	assert_int_equal(bio_check(&fx.lim, 64, &flush), RQ_STS_OK);

	rq_bio_init(&discard, NULL, 0);
	discard.op = RQ_OP_DISCARD;
	discard.iter.sector = 8;
	discard.iter.size = 1 << 20;
	assert_int_equal(bio_check(&fx.lim, 0, &discard), RQ_STS_OK);
}

/* A partly consumed vector still covers the size it must (iter.done counts). */
static void test_check_vector_cover(void **state)
{
	(void)state;
	bio_advance(&fx.bio, 4096); /* now: vec 1, 4 KiB left */
	fx.bio.iter.sector = 16;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_OK);
	fx.bio.iter.size += 4096; /* claims more than the vectors hold */
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL);
}

/* Unknown op or flag bits are INVAL. */
static void test_check_unknown_op_flags(void **state)
{
	(void)state;
	fx.bio.op = RQ_OP_LAST;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL);
	fx.bio.op = RQ_OP_WRITE;
	fx.bio.opf = RQ_BIO_FLAGS_ALL + 1;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL);
}

/* Data ops need a size and vectors; data-less ops must carry none. */
static void test_check_data_presence(void **state)
{
	struct rq_bio b;

	(void)state;
	rq_bio_init(&b, NULL, 0);
	b.op = RQ_OP_READ;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_INVAL); /* size 0 */
	b.iter.size = 4096;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_INVAL); /* no vectors */

	fx.bio.op = RQ_OP_FLUSH;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL); /* data on a flush */
	fx.bio.op = RQ_OP_DISCARD;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL); /* vectors on a discard */

	rq_bio_init(&b, NULL, 0);
	b.op = RQ_OP_FLUSH;
	b.iter.size = 4096;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_INVAL); /* flush with a size */
	b.op = RQ_OP_WRITE_ZEROES;
	b.iter.size = 0;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_INVAL); /* no size */
}

/* Discard / write zeroes on a queue with a zero cap are NOTSUPP. */
static void test_check_notsupp(void **state)
{
	struct rq_bio b;

	(void)state;
	rq_bio_init(&b, NULL, 0);
	b.op = RQ_OP_WRITE_ZEROES;
	b.iter.size = 8192;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_NOTSUPP);
	fx.lim.max_discard_sectors = 0;
	b.op = RQ_OP_DISCARD;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_NOTSUPP);
}

/* Sector and size must be multiples of the logical block size. */
static void test_check_alignment(void **state)
{
	struct rq_bio b;

	(void)state;
	fx.bio.iter.sector = 17;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL);
	fx.bio.iter.sector = 16;
	fx.bio.iter.size = 4096 + 512;
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL);
	fx.bio.iter.size = 4096 + 100; /* not even a sector */
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_INVAL);

	rq_bio_init(&b, NULL, 0);
	b.op = RQ_OP_DISCARD;
	b.iter.sector = 4;
	b.iter.size = 4096;
	assert_int_equal(bio_check(&fx.lim, 0, &b), RQ_STS_INVAL);
}

/* Past the capacity, or a sector that wraps, is IOERR. */
static void test_check_capacity(void **state)
{
	(void)state;
	assert_int_equal(bio_check(&fx.lim, 31, &fx.bio), RQ_STS_IOERR); /* ends at 32 */
	assert_int_equal(bio_check(&fx.lim, 24, &fx.bio), RQ_STS_IOERR);
	fx.bio.iter.sector = UINT64_MAX - 7; /* aligned, but + 16 wraps */
	assert_int_equal(bio_check(&fx.lim, 0, &fx.bio), RQ_STS_IOERR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_validate_zero_is_default),
		cmocka_unit_test(test_validate_derived),
		cmocka_unit_test(test_validate_rejects),
		cmocka_unit_test(test_max_sectors_for_op),
		cmocka_unit_test_setup(test_check_accepts, setup_check),
		cmocka_unit_test_setup(test_check_vector_cover, setup_check),
		cmocka_unit_test_setup(test_check_unknown_op_flags, setup_check),
		cmocka_unit_test_setup(test_check_data_presence, setup_check),
		cmocka_unit_test_setup(test_check_notsupp, setup_check),
		cmocka_unit_test_setup(test_check_alignment, setup_check),
		cmocka_unit_test_setup(test_check_capacity, setup_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
