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
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "internal/queue.h"

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
