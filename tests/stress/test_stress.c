/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Stress: 3 threads write and read back their own regions of a memory-backed
 * device (completion on the driver's thread, 5% random RESOURCE answers) --
 * the mock driver, or with argument "null" the example null driver --
 * with random plug sizes and random multi-vector bios of 4 KiB..256 KiB,
 * while the main thread switches the scheduler between none and test-fifo
 * every ~2 ms.  Every bio must end exactly once with OK and every byte read
 * must be the last generation written.  Bounded by bio counts, not time;
 * meant to pass under ThreadSanitizer too (all shared counters are atomics).
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

#include "mock_driver.h"
#include "fixtures.h"
#include "null_blk.h"

#define THREADS 3
#define BIOS_PER_THREAD 3000                 /* writes + reads, per thread */
#define REGION_BYTES (4u << 20)              /* each thread's own sectors */
#define MEM_BYTES ((uint64_t)THREADS * REGION_BYTES)
#define MIN_BIO (4u << 10)
#define MAX_BIO (256u << 10)
#define MAX_VECS 6
#define MAX_PLUG 40
#define MAX_SERIALS (BIOS_PER_THREAD + 2 * (REGION_BYTES / MIN_BIO))
#define WAIT_MS 20000

struct worker {
	unsigned idx;
	uint64_t base;                 /* byte offset of the region */
	uint32_t *wbuf, *rbuf;         /* REGION_BYTES each */
	unsigned rng;
	unsigned serial;               /* bios submitted (this thread only) */
	unsigned gen;                  /* last generation fully written */
	unsigned mismatches;           /* read-back errors (this thread only) */
	unsigned alloc_fail;
	bool wait_timeout;
	atomic_uint outstanding;
	atomic_uint bad_status;
	atomic_uchar ends[MAX_SERIALS];
};

static bool use_null;              /* argv[1] == "null" */
static struct mock_dev *dev;       /* the mock, or */
static struct null_dev *ndev;      /* the null driver */
static struct rq_queue *queue;     /* the queue of either */

/* Memory-backed device with thread completion and 5% RESOURCE answers. */
static void device_create(void)
{
	if (use_null) {
		struct null_config nc;

		null_config_default(&nc);
		nc.completion = NULL_COMPLETE_THREAD;
		nc.memory_backed = true;
		nc.size_bytes = MEM_BYTES;
		nc.resource_permille = 50;
		nc.nr_hw_queues = 2;
		assert_int_equal(null_create(&nc, &ndev), 0);
		queue = null_queue(ndev);
	} else {
		struct mock_config cfg;

		memset(&cfg, 0, sizeof(cfg));
		cfg.completion = MOCK_COMPLETE_THREAD;
		cfg.mem_bytes = MEM_BYTES;
		cfg.resource_permille = 50;
		dev = mock_create(&cfg, NULL);
		queue = dev->q;
	}
}

static void device_destroy(void)
{
	if (use_null)
		null_destroy(ndev);
	else
		mock_destroy(dev);
	ndev = NULL;
	dev = NULL;
	queue = NULL;
}

/* One synchronous bio on the device. */
static rq_status_t sync_rw(unsigned op, uint64_t sector, void *buf, uint32_t len)
{
	struct mock_io io;

	rq_submit_bio(queue, mock_bio(&io, op, sector, buf, len));
	mock_wait(&io);	/* also gives the bio back */
	return io.status;
}
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
	uint64_t sector = off >> RQ_SECTOR_SHIFT;
	uint32_t x = (uint32_t)(sector * 2654435761u) ^ (gen * 0x9e3779b9u) ^
		     (uint32_t)((off & (RQ_SECTOR_SIZE - 1)) << 20) ^ (uint32_t)(off >> 2);

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
	struct rq_bio *bio;
	uint32_t left = size;
	uint8_t *p = buf + off;

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
	rq_submit_bio(queue, bio);
	return true;
}

/* Cover the whole region with bios of @op, in plugs of random sizes. */
static bool cover_region(struct worker *w, unsigned op, void *buf)
{
	uint32_t off = 0;

	while (off < REGION_BYTES) {
		unsigned in_plug = 1 + rnd(w) % MAX_PLUG;
		struct rq_plug plug;

		rq_start_plug(&plug);
		for (unsigned i = 0; i < in_plug && off < REGION_BYTES; i++) {
			uint32_t size = MIN_BIO * (1 + rnd(w) % (MAX_BIO / MIN_BIO));

			if (size > REGION_BYTES - off)
				size = REGION_BYTES - off;
			if (!submit_one(w, op, buf, off, size)) {
				rq_finish_plug(&plug);
				return false;
			}
			off += size;
		}
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
 * The whole scenario: 3 writers/readers, scheduler switches every ~2 ms,
 * then a final read of the whole device from the main thread.
 */
static void test_stress(void **state)
{
	pthread_t th[THREADS];
	unsigned switches = 0, switch_fail = 0;
	struct rq_queue_stats st;
	uint32_t *all;
	uint64_t total_bios = 0;

	assert_int_equal(fixture_register_fifo(), 0);
	device_create();
	workers = calloc(THREADS, sizeof(*workers));
	assert_non_null(workers);
	for (unsigned t = 0; t < THREADS; t++) {
		struct worker *w = &workers[t];

		w->idx = t;
		w->base = (uint64_t)t * REGION_BYTES;
		w->rng = 0x1234567u * (t + 1);
		w->wbuf = malloc(REGION_BYTES);
		w->rbuf = malloc(REGION_BYTES);
		assert_non_null(w->wbuf);
		assert_non_null(w->rbuf);
	}
	for (unsigned t = 0; t < THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, worker_thread, &workers[t]), 0);

	while (atomic_load(&workers_done) < THREADS && switches < 100000) {
		const char *name = switches % 2 ? "none" : FIXTURE_FIFO_NAME;

		if (rq_queue_attr_set(queue, "scheduler", name))
			switch_fail++;
		switches++;
		fixture_sleep_us(2000);
	}
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(switch_fail, 0);

	for (unsigned t = 0; t < THREADS; t++) {
		struct worker *w = &workers[t];

		assert_false(w->wait_timeout);
		assert_int_equal(w->alloc_fail, 0);
		assert_int_equal(atomic_load(&w->bad_status), 0);
		assert_int_equal(w->mismatches, 0);
		assert_true(w->serial >= BIOS_PER_THREAD);
		assert_true(w->gen >= 1);
		for (unsigned i = 0; i < w->serial; i++)
			if (atomic_load(&w->ends[i]) != 1)
				fail_msg("thread %u bio %u ended %u times", t, i,
					 (unsigned)atomic_load(&w->ends[i]));
		for (unsigned i = w->serial; i < MAX_SERIALS; i++)
			assert_int_equal(atomic_load(&w->ends[i]), 0);
		total_bios += w->serial;
	}

	/* final read of the whole device, 256 KiB at a time, against each region's last generation */
	all = malloc(MEM_BYTES);
	assert_non_null(all);
	memset(all, 0xee, MEM_BYTES);
	for (uint64_t off = 0; off < MEM_BYTES; off += MAX_BIO)
		assert_int_equal(sync_rw(RQ_OP_READ, off >> RQ_SECTOR_SHIFT,
					 (uint8_t *)all + off, MAX_BIO), RQ_STS_OK);
	for (unsigned t = 0; t < THREADS; t++) {
		const uint32_t *r = all + (uint64_t)t * REGION_BYTES / 4;

		for (uint64_t i = 0; i < REGION_BYTES / 4; i++)
			if (r[i] != pattern(workers[t].base + i * 4, workers[t].gen))
				fail_msg("region %u word %llu: %08x, want %08x (gen %u)", t,
					 (unsigned long long)i, r[i],
					 pattern(workers[t].base + i * 4, workers[t].gen),
					 workers[t].gen);
	}
	free(all);

	rq_queue_get_stats(queue, &st);
	assert_int_equal(st.errors, 0);
	assert_int_equal(st.invalid, 0);
	assert_true(st.bios >= total_bios);
	print_message("stress: %llu bios, %u switches, %llu requests, %llu resource, "
		      "%llu merges\n", (unsigned long long)total_bios, switches,
		      (unsigned long long)st.requests, (unsigned long long)st.resource,
		      (unsigned long long)(st.merges_back + st.merges_front));

	if (use_null) {
		struct null_stats ns;

		null_get_stats(ndev, &ns);
		assert_true(ns.busy > 0);
		assert_int_equal(ns.busy, st.resource);
	}
	device_destroy();
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
		cmocka_unit_test(test_stress),
	};

	use_null = argc > 1 && !strcmp(argv[1], "null");

	return cmocka_run_group_tests(tests, NULL, NULL);
}
