/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Stress over the single-queue front end: 4 threads write and read back
 * their own regions of a memory-backed simulated device (tests/common/
 * sq_driver.h) with random plugs (or none), random multi-vector bios of
 * 4 KiB..128 KiB and a small request pool (16), while the main thread
 * switches the scheduler between noop and deadline every ~2 ms, changes
 * deadline's fifo_batch and moves the virtual clock on (so deadline's FIFO
 * expiries fire too).
 *
 * Two devices, by argument:
 *   thread  (default) a device thread ends requests, depth 4, library lock;
 *   inline  request_fn ends them, dropping the driver's own queue lock
 *           around the data copy, so submitters, the switcher and
 *           request_fn all meet on that lock.
 *
 * Every bio must end exactly once with OK and every byte read back must be
 * the last generation written.  Bounded by bio counts, not time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "sq_driver.h"

#define THREADS 4
#define BIOS_PER_THREAD 2000                 /* writes + reads, per thread */
#define REGION_BYTES (2u << 20)              /* each thread's own sectors */
#define MEM_BYTES ((uint64_t)THREADS * REGION_BYTES)
#define MIN_BIO (4u << 10)
#define MAX_BIO (128u << 10)
#define MAX_VECS 6
#define MAX_PLUG 24
#define MAX_SERIALS (BIOS_PER_THREAD + 2 * (REGION_BYTES / MIN_BIO))
#define WAIT_MS 30000

struct worker {
	unsigned idx;
	uint64_t base;                 /* byte offset of the region */
	uint32_t *wbuf, *rbuf;         /* REGION_BYTES each */
	unsigned rng;
	unsigned serial;               /* bios submitted (this thread only) */
	unsigned gen;                  /* last generation fully written */
	unsigned mismatches;
	unsigned alloc_fail;
	bool wait_timeout;
	atomic_uint outstanding;
	atomic_uint bad_status;
	atomic_uchar ends[MAX_SERIALS];
};

#define WATCHDOG_S 120           /* only a hung library takes this long */

static bool inline_mode;
static struct sq_dev *dev;
static struct worker *workers;
static atomic_uint workers_done;

static unsigned rnd(struct worker *w)
{
	unsigned x = w->rng;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	w->rng = x;
	return x;
}

/* The 32-bit word at absolute byte offset @off for generation @gen. */
static uint32_t pattern(uint64_t off, unsigned gen)
{
	uint32_t x = (uint32_t)(off >> 2) * 2654435761u ^ (gen * 0x9e3779b9u) ^ 0x5bd1e995u;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return x;
}

static void fill_region(uint32_t *buf, uint64_t base, unsigned gen)
{
	for (uint64_t i = 0; i < REGION_BYTES / 4; i++)
		buf[i] = pattern(base + i * 4, gen);
}

static void stress_end_io(struct rq_bio *bio)
{
	uintptr_t v = (uintptr_t)bio->private_data;
	struct worker *w = &workers[v >> 24];

	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&w->bad_status, 1);
	atomic_fetch_add(&w->ends[v & 0xffffff], 1);
	rq_bio_put(bio);
	atomic_fetch_sub(&w->outstanding, 1);
}

/* One bio of @op over [@off, @off + @size) of the region, in 1..MAX_VECS vectors. */
static bool submit_one(struct worker *w, unsigned op, uint8_t *buf, uint32_t off, uint32_t size)
{
	unsigned k = 1 + rnd(w) % MAX_VECS;
	uint32_t left = size;
	uint8_t *p = buf + off;
	struct rq_bio *bio;

	if (k > size / 512)
		k = size / 512;
	bio = rq_bio_alloc(k);
	if (!bio) {
		w->alloc_fail++;
		return false;
	}
	for (unsigned v = 0; v < k; v++) {
		uint32_t len = left;

		if (v < k - 1)
			len = 512 * (1 + rnd(w) % (left / 512 - (k - 1 - v)));
		if (rq_bio_add_vec(bio, p, len)) {
			w->alloc_fail++;
			rq_bio_put(bio);
			return false;
		}
		p += len;
		left -= len;
	}
	bio->op = op;
	bio->iter.sector = (w->base + off) >> RQ_SECTOR_SHIFT;
	bio->iter.size = size;
	bio->end_io = stress_end_io;
	bio->private_data = (void *)(((uintptr_t)w->idx << 24) | w->serial);
	w->serial++;
	atomic_fetch_add(&w->outstanding, 1);
	rq_submit_bio(dev->q, bio);
	return true;
}

/*
 * Cover the whole region with bios of @op: in plugs of random sizes, or
 * (one batch in three) without a plug, so bios meet queued requests and
 * merge through the scheduler.  Within a batch, bios go in ascending or
 * (sometimes) descending order, for back and front merges.
 */
static bool cover_region(struct worker *w, unsigned op, void *buf)
{
	uint32_t off = 0;

	while (off < REGION_BYTES) {
		unsigned n = 1 + rnd(w) % MAX_PLUG;
		bool plugged = rnd(w) % 3 != 0, reverse = rnd(w) % 4 == 0;
		uint32_t offs[MAX_PLUG], sizes[MAX_PLUG];
		struct rq_plug plug;
		unsigned k;

		for (k = 0; k < n && off < REGION_BYTES; k++) {
			uint32_t size = MIN_BIO * (1 + rnd(w) % (MAX_BIO / MIN_BIO));

			if (size > REGION_BYTES - off)
				size = REGION_BYTES - off;
			offs[k] = off;
			sizes[k] = size;
			off += size;
		}
		if (plugged)
			rq_start_plug(&plug);
		for (unsigned i = 0; i < k; i++) {
			unsigned j = reverse ? k - 1 - i : i;

			if (!submit_one(w, op, buf, offs[j], sizes[j])) {
				if (plugged)
					rq_finish_plug(&plug);
				return false;
			}
		}
		if (plugged)
			rq_finish_plug(&plug);
	}
	return true;
}

static bool wait_idle(struct worker *w)
{
	uint64_t end = fixture_now_ms() + WAIT_MS;

	while (atomic_load(&w->outstanding)) {
		if (fixture_now_ms() > end) {
			w->wait_timeout = true;
			return false;
		}
		fixture_sleep_us(100);
	}
	return true;
}

static void *worker_thread(void *arg)
{
	struct worker *w = arg;

	while (w->serial + 2 * (REGION_BYTES / MIN_BIO) <= MAX_SERIALS &&
	       w->serial < BIOS_PER_THREAD) {
		unsigned gen = w->gen + 1;

		fill_region(w->wbuf, w->base, gen);
		if (!cover_region(w, RQ_OP_WRITE, w->wbuf) || !wait_idle(w))
			break;
		w->gen = gen;
		memset(w->rbuf, 0xee, REGION_BYTES);
		if (!cover_region(w, RQ_OP_READ, w->rbuf) || !wait_idle(w))
			break;
		if (memcmp(w->rbuf, w->wbuf, REGION_BYTES))
			w->mismatches++;
	}
	atomic_fetch_add(&workers_done, 1);
	return NULL;
}

/*
 * A hang (a lost wakeup, a switch that never drains) would otherwise sit
 * until meson's timeout: say what is stuck and abort instead.
 */
static void *watchdog_main(void *arg)
{
	uint64_t end = fixture_now_ms() + WATCHDOG_S * 1000ull;

	while (!atomic_load((atomic_bool *)arg)) {
		if (fixture_now_ms() > end) {
			fprintf(stderr, "sq stress: no progress after %u s; %u of %u workers done, "
				"outstanding:", WATCHDOG_S, atomic_load(&workers_done), THREADS);
			for (unsigned t = 0; t < THREADS; t++)
				fprintf(stderr, " %u", atomic_load(&workers[t].outstanding));
			fprintf(stderr, "\n");
			abort();
		}
		fixture_sleep_us(100000);
	}
	return NULL;
}

static void test_sq_stress(void **state)
{
	atomic_bool finished = false;
	pthread_t watchdog;
	struct rq_queue_limits lim;
	struct sq_config c = { .mem_bytes = MEM_BYTES, .scheduler = "deadline",
			       .nr_requests = 16, .limits = &lim };
	static const char *const batches[] = { "1", "4", "16", "64" };
	unsigned switches = 0, switch_fail = 0;
	pthread_t th[THREADS];
	struct rq_queue_stats st;
	uint64_t total_bios = 0;
	uint8_t *all;

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
	dev = sq_create(&c);
	workers = calloc(THREADS, sizeof(*workers));
	assert_non_null(workers);
	for (unsigned t = 0; t < THREADS; t++) {
		struct worker *w = &workers[t];

		w->idx = t;
		w->base = (uint64_t)t * REGION_BYTES;
		w->rng = 0x2545f491u * (t + 1);
		w->wbuf = malloc(REGION_BYTES);
		w->rbuf = malloc(REGION_BYTES);
		assert_non_null(w->wbuf);
		assert_non_null(w->rbuf);
	}
	for (unsigned t = 0; t < THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, worker_thread, &workers[t]), 0);
	assert_int_equal(pthread_create(&watchdog, NULL, watchdog_main, &finished), 0);

	while (atomic_load(&workers_done) < THREADS && switches < 100000) {
		const char *name = switches % 2 ? "noop" : "deadline";

		if (rq_queue_attr_set(dev->q, "scheduler", name))
			switch_fail++;
		/* a tunable of deadline; refused (-EINVAL) while noop runs */
		(void)rq_queue_attr_set(dev->q, "iosched/fifo_batch", batches[switches % 4]);
		sq_clock_advance(300 * 1000000ull);
		switches++;
		fixture_sleep_us(2000);
	}
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	atomic_store(&finished, true);
	pthread_join(watchdog, NULL);
	assert_int_equal(switch_fail, 0);

	for (unsigned t = 0; t < THREADS; t++) {
		struct worker *w = &workers[t];

		assert_false(w->wait_timeout);
		assert_int_equal(w->alloc_fail, 0);
		assert_int_equal(atomic_load(&w->bad_status), 0);
		assert_int_equal(w->mismatches, 0);
		assert_true(w->serial >= BIOS_PER_THREAD);
		for (unsigned i = 0; i < w->serial; i++)
			if (atomic_load(&w->ends[i]) != 1)
				fail_msg("thread %u bio %u ended %u times", t, i,
					 (unsigned)atomic_load(&w->ends[i]));
		for (unsigned i = w->serial; i < MAX_SERIALS; i++)
			assert_int_equal(atomic_load(&w->ends[i]), 0);
		total_bios += w->serial;
	}

	/* the device holds each region's last generation */
	all = malloc(MEM_BYTES);
	assert_non_null(all);
	memset(all, 0xee, MEM_BYTES);
	for (uint64_t off = 0; off < MEM_BYTES; off += MAX_BIO)
		assert_int_equal(sq_rw(dev, RQ_OP_READ, off >> RQ_SECTOR_SHIFT, all + off, MAX_BIO),
				 RQ_STS_OK);
	for (unsigned t = 0; t < THREADS; t++) {
		const uint32_t *r = (const uint32_t *)(all + (uint64_t)t * REGION_BYTES);

		for (uint64_t i = 0; i < REGION_BYTES / 4; i++)
			if (r[i] != pattern(workers[t].base + i * 4, workers[t].gen))
				fail_msg("region %u word %llu: %08x, want %08x (gen %u)", t,
					 (unsigned long long)i, r[i],
					 pattern(workers[t].base + i * 4, workers[t].gen),
					 workers[t].gen);
	}
	free(all);

	rq_queue_get_stats(dev->q, &st);
	assert_int_equal(st.errors, 0);
	assert_int_equal(st.invalid, 0);
	assert_true(st.bios >= total_bios);
	assert_int_equal(st.completed, st.requests - st.merges_rq);
	print_message("sq stress (%s): %llu bios, %u switches, %llu requests, merges back %llu "
		      "front %llu rq %llu plug %llu\n", inline_mode ? "inline" : "thread",
		      (unsigned long long)total_bios, switches, (unsigned long long)st.requests,
		      (unsigned long long)st.merges_back, (unsigned long long)st.merges_front,
		      (unsigned long long)st.merges_rq, (unsigned long long)st.plug_merges);

	sq_destroy(dev);
	dev = NULL;
	for (unsigned t = 0; t < THREADS; t++) {
		free(workers[t].wbuf);
		free(workers[t].rbuf);
	}
	free(workers);
	workers = NULL;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sq_stress),
	};

	inline_mode = argc > 1 && !strcmp(argv[1], "inline");
	if (!rq_elevator_exists("noop") || !rq_elevator_exists("deadline")) {
		fprintf(stderr, "noop or deadline not registered: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
