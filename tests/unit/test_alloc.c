/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * No heap allocation per I/O: after a warm-up, submitting 100k and 200k bios
 * (null driver, inline completion, plugs of 32) must cost the same number of
 * jemalloc allocations.  Counted with mallctl over all arenas; jemalloc's
 * per-thread cache is turned off for this program (malloc_conf below) so
 * that every allocation reaches the arena counters.  Skips when jemalloc's
 * statistics are not available.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#if HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
/* read by jemalloc at start-up: every allocation counts in the arenas */
const char *malloc_conf = "tcache:false";
#endif

#include <librequest/mq.h>

#include "null_blk.h"

#define DEPTH 32
#define BATCH 32
#define BS 4096

struct slot {
	struct rq_bio bio;
	int ended;
};

static struct slot slots[DEPTH];
static char buf[BS];
static uint64_t rng = 0x243f6a8885a308d3ull;
static unsigned long ended;

static void slot_end_io(struct rq_bio *bio)
{
	struct slot *s = bio->private_data;

	s->ended++;
	ended++;
}

/* Submit @nr random 4 KiB reads, 32 per plug; inline completion ends them. */
static void run_bios(struct rq_queue *q, unsigned long nr, uint64_t nr_blocks)
{
	unsigned long done = 0;
	struct rq_plug plug;
	unsigned i;

	while (done < nr) {
		unsigned n = nr - done < BATCH ? (unsigned)(nr - done) : BATCH;
		unsigned long before = ended;

		rq_start_plug(&plug);
		for (i = 0; i < n; i++) {
			struct rq_bio *bio = &slots[i].bio;

			rq_bio_init(bio, NULL, 1);
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			bio->op = RQ_OP_READ;
			bio->iter.sector = (rng % nr_blocks) * (BS >> RQ_SECTOR_SHIFT);
			rq_bio_add_vec(bio, buf, BS);
			bio->end_io = slot_end_io;
			bio->private_data = &slots[i];
			rq_submit_bio(q, bio);
		}
		rq_finish_plug(&plug);
		/* inline completion: all of them ended by now */
		assert_int_equal(ended - before, n);
		done += n;
	}
}

#if HAVE_JEMALLOC
/* Allocations so far, or -1 if jemalloc's statistics are unavailable. */
static int64_t alloc_count(void)
{
	uint64_t epoch = 1, v, sum = 0;
	size_t sz = sizeof(epoch);
	const char *kind[] = { "small", "large" };
	char name[96];
	unsigned i;

	if (mallctl("epoch", &epoch, &sz, &epoch, sz))
		return -1;
	for (i = 0; i < 2; i++) {
		snprintf(name, sizeof(name), "stats.arenas.%u.%s.nmalloc",
			 (unsigned)MALLCTL_ARENAS_ALL, kind[i]);
		sz = sizeof(v);
		if (mallctl(name, &v, &sz, NULL, 0))
			return -1;
		sum += v;
	}
	return (int64_t)sum;
}
#else
static int64_t alloc_count(void)
{
	return -1;
}
#endif

static void test_no_alloc_per_io(void **state)
{
	struct null_config cfg;
	struct null_dev *dev;
	struct rq_queue *q;
	uint64_t nr_blocks;
	int64_t a0, a1, a2;

	if (alloc_count() < 0)
		skip();

	null_config_default(&cfg);
	cfg.completion = NULL_COMPLETE_INLINE;
	cfg.sched = "none";
	assert_int_equal(null_create(&cfg, &dev), 0);
	q = null_queue(dev);
	nr_blocks = cfg.size_bytes / BS;

	run_bios(q, 20000, nr_blocks); /* warm-up: per-thread caches filled */

	a0 = alloc_count();
	run_bios(q, 100000, nr_blocks);
	a1 = alloc_count();
	run_bios(q, 200000, nr_blocks);
	a2 = alloc_count();

	print_message("allocations: %lld over 100k bios, %lld over 200k bios\n",
		      (long long)(a1 - a0), (long long)(a2 - a1));
	assert_int_equal(a1 - a0, a2 - a1);
	null_destroy(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_alloc_per_io),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
