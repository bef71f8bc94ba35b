/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scalable bitmap tags (sbitmap / sbitmap_queue) and per-hctx tag maps.
 *
 * The bitmap's words each sit on their own cache line; every CPU keeps a
 * start hint so CPUs allocate from different words.  Allocation never blocks;
 * sbq_wait_get() blocks until a bit frees.  Freed bits wake sleepers in
 * batches of wake_batch.
 *
 * What may run at the same time:
 *
 *   operation                       concurrent with
 *   sbq_get*, sbq_put*, wait        each other, from any thread
 *   sbq_resize                      get/put (bits above the depth drain out)
 *   sbq_init / sbq_destroy          nothing
 */
#ifndef RQ_INTERNAL_TAGS_H
#define RQ_INTERNAL_TAGS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "compiler.h"

struct rq_request;

/* One word of bits, alone on its cache line. */
struct sbitmap_word {
	_Atomic unsigned long word;    /* set bits are allocated */
	_Atomic unsigned long cleared; /* freed bits not yet folded into word (batched put) */
} rq_cacheline_aligned;

struct sbitmap {
	unsigned depth;          /* usable bits */
	unsigned shift;          /* log2 bits used per word */
	unsigned map_nr;         /* words */
	bool round_robin;        /* strict order of allocation */
	struct sbitmap_word *map;
	unsigned *alloc_hint;    /* per CPU start hint (nr_cpus entries, 16 apart) */
	unsigned nr_cpus;
	unsigned max_depth;      /* depth at init: the most sbq_resize grows to */
};

/* Sleepers of one wait state. */
struct sbq_wait_state {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	_Atomic int wait_cnt;    /* frees left before a wake-up */
	unsigned waiters;        /* under lock */
	uint64_t wake_seq;       /* under lock: bumped per wake-up */
} rq_cacheline_aligned;

#define SBQ_WAIT_QUEUES 8

struct sbitmap_queue {
	struct sbitmap sb;
	unsigned wake_batch;
	_Atomic unsigned wake_index;
	_Atomic int ws_active;   /* sleepers across all wait states */
	unsigned min_shallow_depth;
	struct sbq_wait_state ws[SBQ_WAIT_QUEUES];
};

/**
 * sbq_init() - a bitmap of @depth bits (0 < depth <= 65536) for @nr_cpus
 * CPUs, memory on NUMA @node (-1: any).  Return 0 or -ENOMEM / -EINVAL.
 */
int sbq_init(struct sbitmap_queue *sbq, unsigned depth, bool round_robin, int node);
void sbq_destroy(struct sbitmap_queue *sbq);

/** sbq_resize() - change the usable depth (<= the depth at init). */
void sbq_resize(struct sbitmap_queue *sbq, unsigned depth);

/** sbq_get() - allocate one bit, hinted by @cpu; -1 when none is free. */
int sbq_get(struct sbitmap_queue *sbq, unsigned cpu);

/** sbq_get_shallow() - the same, using at most @shallow_depth bits per word. */
int sbq_get_shallow(struct sbitmap_queue *sbq, unsigned cpu, unsigned shallow_depth);

/**
 * sbq_get_batch() - allocate up to @nr (<= bits per word) bits from one word.
 * Return: the mask of bits taken (bit i means tag *@offset + i), 0 if none.
 */
unsigned long sbq_get_batch(struct sbitmap_queue *sbq, unsigned cpu, unsigned nr,
			    unsigned *offset);
/** sbq_get_batch_shallow() - the same, using at most @shallow_depth bits per word. */
unsigned long sbq_get_batch_shallow(struct sbitmap_queue *sbq, unsigned cpu, unsigned nr,
				    unsigned shallow_depth, unsigned *offset);

/** sbq_put() - free @bit; remembers it as @cpu's hint; wakes sleepers. */
void sbq_put(struct sbitmap_queue *sbq, unsigned bit, unsigned cpu);

/** sbq_put_mask() - free a mask of one word, as sbq_get_batch() gave it. */
void sbq_put_mask(struct sbitmap_queue *sbq, unsigned long mask, unsigned offset, unsigned cpu);

/**
 * sbq_wait_get() - allocate a bit, sleeping until one frees.  @shallow_depth
 * 0 means the full word.  @before_sleep (may be NULL) runs once before the
 * first sleep (e.g. flush the caller's plug so its own requests free tags).
 * Return: the bit, or -1 if @should_abort(@arg) turned true while waiting.
 */
int sbq_wait_get(struct sbitmap_queue *sbq, unsigned cpu, unsigned shallow_depth,
		 void (*before_sleep)(void *arg), bool (*should_abort)(void *arg), void *arg);

/** sbq_wake_all() - wake every sleeper (queue dying, depth grew). */
void sbq_wake_all(struct sbitmap_queue *sbq);

/** sbq_weight() - bits set now (approximate under concurrency). */
unsigned sbq_weight(const struct sbitmap_queue *sbq);

/** sbq_for_each_set() - call @fn(@bit, @arg) for each set bit; stop when it returns false. */
void sbq_for_each_set(const struct sbitmap_queue *sbq, bool (*fn)(unsigned bit, void *arg),
		      void *arg);

/*
 * Per hardware queue tags: a bitmap for normal and one for reserved tags,
 * the preallocated requests, and the tag -> in-flight request map.
 * Tag numbers: reserved tags are 0..nr_reserved-1, normal ones follow.
 */
struct rq_tags {
	unsigned nr_tags;        /* total including reserved */
	unsigned nr_reserved;
	int node;
	struct sbitmap_queue bitmap;   /* normal tags, bit i = tag nr_reserved + i */
	struct sbitmap_queue breserved; /* reserved tags */
	struct rq_request **rqs;       /* tag -> request holding it (driver tags) */
	struct rq_request **static_rqs; /* tag -> preallocated request */
	void *rq_mem;                  /* backing memory of static_rqs */
	size_t rq_mem_size;
	size_t rq_size;                /* sizeof(struct rq_request) + cmd_size, 64-aligned */
	_Atomic int active_queues;     /* queues sharing these tags that are busy */
};

/**
 * rq_tags_alloc() - tags and, when @rq_size is not 0, @nr_tags preallocated
 * zeroed requests of @rq_size bytes each on NUMA @node.
 * Return: the tags or NULL.
 */
struct rq_tags *rq_tags_alloc(unsigned nr_tags, unsigned nr_reserved, size_t rq_size,
			      bool round_robin, int node);
void rq_tags_free(struct rq_tags *tags);

/** rq_tags_get() - a normal tag number or -1; rq_tags_get_reserved() likewise. */
int rq_tags_get(struct rq_tags *tags, unsigned cpu, unsigned shallow_depth);
int rq_tags_get_reserved(struct rq_tags *tags, unsigned cpu);
/** rq_tags_put() - free tag number @tag (reserved or normal). */
void rq_tags_put(struct rq_tags *tags, unsigned tag, unsigned cpu);

/* Zeroed, 64-byte aligned memory on a NUMA node: lib/alloc.c mem_alloc_node(). */
void *rq_alloc_node(size_t size, int node);
void rq_free_node(void *p, size_t size);

#endif /* RQ_INTERNAL_TAGS_H */
