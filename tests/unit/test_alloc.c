/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * No heap allocation per I/O: after a warm-up, submitting 100k and 200k bios
 * (null driver, inline completion, plugs of 32) must cost the same number of
 * jemalloc allocations; so must 20k and 40k bios ended by the null driver's
 * completion thread in completion batches, with rq_affinity 1 and 2.  Counted with mallctl over all arenas; jemalloc's
 * per-thread cache is turned off for this program (malloc_conf below) so
 * that every allocation reaches the arena counters.  Skips when jemalloc's
 * statistics are not available.
 */
#include <stdarg.h>
#include <stdatomic.h>
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

#include <librequest/librequest.h>

#include "fixtures.h"

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

struct nslot {
	struct rq_bio bio;
	struct nslot *next;
};

static struct nslot nslots[DEPTH];
static _Atomic(struct nslot *) ndone;
static uint64_t nrng = 0x9e3779b97f4a7c15ull;

static void nslot_end_io(struct rq_bio *bio)
{
	struct nslot *s = bio->private_data;

	s->next = atomic_load_explicit(&ndone, memory_order_relaxed);
	while (!atomic_compare_exchange_weak(&ndone, &s->next, s))
		;
}

/*
 * Keep DEPTH bios in flight on the null driver until @nr have ended; with
 * @affinity2 the bios end here, in rq_process_completions().
 */
static void run_null(struct rq_queue *q, unsigned long nr, bool affinity2)
{
	struct nslot *free = NULL;
	unsigned long done = 0, issued = 0;
	struct rq_plug plug;

	for (unsigned i = 0; i < DEPTH; i++) {
		nslots[i].next = free;
		free = &nslots[i];
	}
	while (done < nr) {
		struct nslot *s;

		rq_start_plug(&plug);
		while (free && issued < nr) {
			s = free;
			free = s->next;
			rq_bio_init(&s->bio, NULL, 1);
			nrng ^= nrng << 13;
			nrng ^= nrng >> 7;
			nrng ^= nrng << 17;
			s->bio.op = RQ_OP_READ;
			s->bio.iter.sector = (nrng % 100000) * 8;
			rq_bio_add_vec(&s->bio, buf, 4096);
			s->bio.end_io = nslot_end_io;
			s->bio.private_data = s;
			rq_submit_bio(q, &s->bio);
			issued++;
		}
		rq_finish_plug(&plug);
		if (affinity2)
			rq_process_completions();
		s = atomic_exchange(&ndone, NULL);
		while (s) {
			struct nslot *next = s->next;

			s->next = free;
			free = s;
			s = next;
			done++;
		}
		if (!free)
			fx_poll_pause();
	}
}


/*
 * The null driver's completion thread ends requests with the batch API:
 * all of them end, the counters agree, and after a warm-up 20k and 40k
 * bios cost the same number of allocations (none per I/O), with rq_affinity
 * 1 and 2.
 */
static void test_null_thread_batches(void **state)
{
	static const char *const aff[] = { "1", "2" };

	(void)state;
	for (unsigned k = 0; k < 2; k++) {
		struct null_config cfg;
		struct null_stats ns;
		struct null_dev *dev;
		struct rq_queue *q;
		int64_t a0, a1, a2;

		null_config_default(&cfg);
		cfg.completion = NULL_COMPLETE_THREAD;
		cfg.sched = "none";
		assert_int_equal(null_create(&cfg, &dev), 0);
		q = null_queue(dev);
		assert_int_equal(rq_queue_attr_set(q, "rq_affinity", aff[k]), 0);
		assert_int_equal(rq_queue_attr_set(q, "nomerges", "2"), 0);
		run_null(q, 5000, k == 1);
		a0 = alloc_count();
		run_null(q, 20000, k == 1);
		a1 = alloc_count();
		run_null(q, 40000, k == 1);
		a2 = alloc_count();
		null_get_stats(dev, &ns);
		assert_int_equal(ns.completed, 65000);
		assert_int_equal(ns.requests, 65000);
		if (a0 >= 0) {
			print_message("rq_affinity %s: allocations %lld over 20k, %lld over 40k bios\n",
				      aff[k], (long long)(a1 - a0), (long long)(a2 - a1));
			assert_int_equal(a1 - a0, a2 - a1);
		}
		null_destroy(dev);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_alloc_per_io),
		cmocka_unit_test(test_null_thread_batches),
	};

	/*
	 * No service thread: its rq_affinity 2 fallback would end bios on a
	 * thread that counts (and so allocates its statistics block) for the
	 * first time inside a measured window, once, depending on timing.
	 */
	assert_int_equal(rq_service_manual(), 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
