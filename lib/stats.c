/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue statistics, exact and without atomic read-modify-writes.
 *
 * Every thread that counts something for a queue gets its own block of
 * counters for that queue, which only it writes (relaxed stores); a reader
 * sums all blocks.  A thread finds its block through a small per-thread
 * cache keyed by the queue's id, which is never reused, so a cache entry of
 * a destroyed queue can never match again and is never followed.  Blocks
 * belong to the queue and are freed with it; a thread that exits leaves its
 * counts behind.  Per-CPU counters were cheaper to find but lost updates
 * when two threads shared a CPU; these never do.
 *
 * What may run at the same time:
 *   stat_add (fast path)        everything; touches only the caller's block
 *   stats_block_slow            stats_sum; q->stats_lock
 *   stats_sum                   everything (reads may lag by a few updates)
 *   stats_free                  nothing (queue teardown)
 *
 * The diskstats fields and the latency histograms are counted in the same
 * blocks, by the event points of lib/trace.c while "iostats" is on; the
 * readers below turn them into the kernel's fields.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal/queue.h"
#include "internal/trace.h"

__thread struct stats_cache_slot tls_stats_cache[STATS_CACHE_SLOTS]
	__attribute__((tls_model("initial-exec")));

static _Atomic uint64_t next_queue_id = 1;

static uint64_t stats_new_queue_id(void)
{
	return atomic_fetch_add(&next_queue_id, 1);
}

/* The calling thread's block for @q, made on first use; NULL without memory. */
struct rq_stats_block *stats_block_slow(struct rq_queue *q)
{
	pthread_t self = pthread_self();
	struct stats_cache_slot *slot = &tls_stats_cache[q->id % STATS_CACHE_SLOTS];
	struct rq_stats_block *b;

	pthread_mutex_lock(&q->stats_lock);
	for (b = q->stats_blocks; b; b = b->next)
		if (pthread_equal(b->owner, self))
			break;
	if (!b) {
		b = rq_alloc_node(sizeof(*b), -1);
		if (b) {
			b->owner = self;
			b->next = q->stats_blocks;
			q->stats_blocks = b;
		}
	}
	pthread_mutex_unlock(&q->stats_lock);
	if (b) {
		slot->qid = q->id;
		slot->block = b;
	}
	return b;
}

void stats_sum(struct rq_queue *q, uint64_t *sum)
{
	pthread_mutex_lock(&q->stats_lock);
	for (struct rq_stats_block *b = q->stats_blocks; b; b = b->next)
		for (unsigned i = 0; i < ST_NR; i++)
			sum[i] += __atomic_load_n(&b->v[i], __ATOMIC_RELAXED);
	pthread_mutex_unlock(&q->stats_lock);
}

void stats_init(struct rq_queue *q)
{
	q->id = stats_new_queue_id();
	pthread_mutex_init(&q->stats_lock, NULL);
	q->stats_blocks = NULL;
}

void stats_free(struct rq_queue *q)
{
	struct rq_stats_block *b = q->stats_blocks;

	while (b) {
		struct rq_stats_block *next = b->next;

		rq_free_node(b, sizeof(*b));
		b = next;
	}
	q->stats_blocks = NULL;
	pthread_mutex_destroy(&q->stats_lock);
}

/* ------------------------------------------------ diskstats, histograms */

static uint64_t ns_to_ms(uint64_t ns)
{
	return ns / 1000000u;
}

RQ_EXPORT int rq_queue_get_diskstats(struct rq_queue *q, struct rq_diskstats *out, size_t size)
{
	uint64_t sum[ST_NR] = { 0 };
	struct rq_diskstats ds = { .size = sizeof(ds) };
	uint64_t in_r, in_w;

	if (!q || !out || size < sizeof(uint32_t))
		return -EINVAL;
	stats_sum(q, sum);
	ds.read_ios = sum[ST_DS_IOS + RQ_LAT_READ];
	ds.read_merges = sum[ST_DS_MERGES + RQ_LAT_READ];
	ds.read_sectors = sum[ST_DS_SECTORS + RQ_LAT_READ];
	ds.read_ticks_ms = ns_to_ms(sum[ST_DS_NSECS + RQ_LAT_READ]);
	ds.write_ios = sum[ST_DS_IOS + RQ_LAT_WRITE];
	ds.write_merges = sum[ST_DS_MERGES + RQ_LAT_WRITE];
	ds.write_sectors = sum[ST_DS_SECTORS + RQ_LAT_WRITE];
	ds.write_ticks_ms = ns_to_ms(sum[ST_DS_NSECS + RQ_LAT_WRITE]);
	ds.discard_ios = sum[ST_DS_IOS + RQ_LAT_DISCARD];
	ds.discard_merges = sum[ST_DS_MERGES + RQ_LAT_DISCARD];
	ds.discard_sectors = sum[ST_DS_SECTORS + RQ_LAT_DISCARD];
	ds.discard_ticks_ms = ns_to_ms(sum[ST_DS_NSECS + RQ_LAT_DISCARD]);
	ds.flush_ios = sum[ST_DS_IOS + RQ_LAT_FLUSH];
	ds.flush_ticks_ms = ns_to_ms(sum[ST_DS_NSECS + RQ_LAT_FLUSH]);
	/* as the kernel: the sum of the four times, each in ms first */
	ds.time_in_queue_ms = ds.read_ticks_ms + ds.write_ticks_ms + ds.discard_ticks_ms +
			      ds.flush_ticks_ms;
	ds.io_ticks_ms = sum[ST_DS_IO_TICKS];
	/* the sums are not one instant's: never show a negative count */
	in_r = sum[ST_DS_STARTED] - sum[ST_DS_LEFT];
	in_w = sum[ST_DS_STARTED + 1] - sum[ST_DS_LEFT + 1];
	ds.in_flight_read = (int64_t)in_r < 0 ? 0 : in_r;
	ds.in_flight_write = (int64_t)in_w < 0 ? 0 : in_w;
	ds.in_flight = ds.in_flight_read + ds.in_flight_write;
	rq_copy_sized_out(out, size, &ds, sizeof(ds));
	return 0;
}

/* Sum every thread's histogram buckets into @h (zeroed by the caller). */
static void hist_sum_locked(struct rq_queue *q, uint64_t h[2][RQ_LAT_NR_OPS][RQ_LAT_BUCKETS])
{
	for (struct rq_stats_block *b = q->stats_blocks; b; b = b->next)
		for (unsigned k = 0; k < 2; k++)
			for (unsigned o = 0; o < RQ_LAT_NR_OPS; o++)
				for (unsigned i = 0; i < RQ_LAT_BUCKETS; i++)
					h[k][o][i] += __atomic_load_n(&b->hist[k][o][i],
								      __ATOMIC_RELAXED);
}

RQ_EXPORT int rq_queue_get_latency_hist(struct rq_queue *q, struct rq_latency_hist *out,
					size_t size)
{
	uint64_t h[2][RQ_LAT_NR_OPS][RQ_LAT_BUCKETS];
	struct rq_latency_hist own = { .size = sizeof(own), .nr_buckets = RQ_LAT_BUCKETS };

	if (!q || !out || size < sizeof(uint32_t))
		return -EINVAL;
	memset(h, 0, sizeof(h));
	pthread_mutex_lock(&q->stats_lock);
	hist_sum_locked(q, h);
	for (unsigned o = 0; o < RQ_LAT_NR_OPS; o++)
		for (unsigned i = 0; i < RQ_LAT_BUCKETS; i++) {
			own.q2c[o][i] = h[0][o][i] - (q->obs ? q->obs->hist_base[0][o][i] : 0);
			own.d2c[o][i] = h[1][o][i] - (q->obs ? q->obs->hist_base[1][o][i] : 0);
		}
	pthread_mutex_unlock(&q->stats_lock);
	rq_copy_sized_out(out, size, &own, sizeof(own));
	return 0;
}

RQ_EXPORT int rq_queue_reset_latency_hist(struct rq_queue *q)
{
	if (!q)
		return -EINVAL;
	if (!q->obs)
		return -ENOMEM;
	pthread_mutex_lock(&q->stats_lock);
	memset(q->obs->hist_base, 0, sizeof(q->obs->hist_base));
	hist_sum_locked(q, q->obs->hist_base);
	pthread_mutex_unlock(&q->stats_lock);
	return 0;
}
