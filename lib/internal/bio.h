/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Bios inside the library: per-thread caches, chaining, checks and splits.
 */
#ifndef RQ_INTERNAL_BIO_H
#define RQ_INTERNAL_BIO_H

#include <librequest/bio.h>
#include <librequest/queue.h>

#include "compiler.h"

/* rq_bio.core_flags */
#define RQ_BIOF_CHAIN (1u << 0)     /* remaining counts pieces: end_io waits */
#define RQ_BIOF_CLONED (1u << 1)    /* shares another bio's vectors */
#define RQ_BIOF_ALLOCATED (1u << 3) /* from a cache: rq_bio_put frees it */
#define RQ_BIOF_EXT_VECS (1u << 4)  /* vecs were allocated separately */

/**
 * bio_alloc_clone() - a bio from the calling thread's cache sharing @src's
 * vectors, op, flags, ioprio, ioc and position.  NULL on memory exhaustion.
 */
struct rq_bio *bio_alloc_clone(const struct rq_bio *src);

/**
 * bio_chain() - make @child a piece of @parent: @parent's end_io waits for
 * @child's end, and takes its error if it is the first.
 */
void bio_chain(struct rq_bio *child, struct rq_bio *parent);

/** bio_advance() - drop @bytes from the front of @bio (sector moves too). */
void bio_advance(struct rq_bio *bio, unsigned bytes);

/* end_io of a chained piece (lib/bio.c): pass the status on, end the parent. */
void bio_chain_endio(struct rq_bio *bio);

/* Set @status on @bio unless it already carries an error: first error wins. */
static inline void bio_set_status_once(struct rq_bio *bio, rq_status_t status)
{
	uint8_t expected = RQ_STS_OK;

	if (status != RQ_STS_OK)
		__atomic_compare_exchange_n((uint8_t *)&bio->status, &expected, status, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/**
 * bio_end_with() - set @status (first error wins) and end @bio.  A bio
 * that is neither waiting for pieces nor a piece itself (every request's
 * common case) runs its end_io here; the rest go through rq_bio_endio().
 */
static inline void bio_end_with(struct rq_bio *bio, rq_status_t status)
{
	bio_set_status_once(bio, status);
	if (likely(!(__atomic_load_n(&bio->core_flags, __ATOMIC_ACQUIRE) & RQ_BIOF_CHAIN) &&
		   bio->end_io != bio_chain_endio)) {
		if (bio->end_io)
			bio->end_io(bio);
		return;
	}
	rq_bio_endio(bio);
}

/**
 * bio_check() - is @bio acceptable for a queue with @lim and @capacity
 * sectors (0: unbounded)?  Checks the op, data presence, alignment to the
 * logical block size, vector sanity, capacity, discard / write-zeroes support.
 * Return: RQ_STS_OK, or the status to end it with (RQ_STS_INVAL for a bad
 * bio, RQ_STS_IOERR past capacity, RQ_STS_NOTSUPP for unsupported ops).
 */
rq_status_t bio_check(const struct rq_queue_limits *lim, uint64_t capacity,
		      const struct rq_bio *bio);

/**
 * bio_split_to_limits() - the front of @bio that fits the limits.
 * @lim: the queue's limits.
 * @bio: the bio; if it does not fit, afterwards it covers only the rest.
 * @nr_segs: receives the number of segments of the returned piece.
 *
 * Return: @bio itself when it fits whole; else a new chained front piece
 * (process it, then call again with @bio); NULL when memory is exhausted
 * (nothing changed).
 */
struct rq_bio *bio_split_to_limits(const struct rq_queue_limits *lim, struct rq_bio *bio,
				   unsigned *nr_segs);

/**
 * bio_segments_fit() - count @bio's segments as the driver would see them,
 * i.e. coalescing memory-contiguous vectors within max_segment_size and the
 * segment boundary.  Used by tests and the merge code.
 */
unsigned bio_count_segments(const struct rq_queue_limits *lim, const struct rq_bio *bio);

/* The size of struct rq_queue_limits in 0.1, the smallest a caller may pass. */
#define RQ_LIMITS_SIZE_0_1 (offsetof(struct rq_queue_limits, features) + sizeof(uint32_t))

int limits_copy_in(struct rq_queue_limits *dst, const struct rq_queue_limits *src);

/** limits_chunk_left() - sectors from @sector to the next chunk boundary (chunk_sectors != 0). */
static inline uint64_t limits_chunk_left(const struct rq_queue_limits *lim, uint64_t sector)
{
	uint32_t chunk = lim->chunk_sectors;

	if (!(chunk & (chunk - 1)))
		return chunk - (sector & (chunk - 1));
	return chunk - sector % chunk;
}

/** limits_max_sectors_for_op() - the per-request sector cap for @op. */
unsigned limits_max_sectors_for_op(const struct rq_queue_limits *lim, unsigned op);

/*
 * struct bio_fast_lim - what bio_fast_ok() compares with, derived from a
 * queue's limits by limits_fast_lim() whenever they change.
 * @seg_mask: seg_boundary_mask.
 * @seg_bytes: max_segment_size; 0 turns the fast check off (chunk_sectors).
 * @lbs_mask: logical block size - 1, in bytes.
 * @max_bytes: the largest read or write max_sectors never splits, wherever
 *	it starts (physical block rounding included); 0: none.  The only part
 *	an attribute (max_sectors_kb) changes: read it inside the queue.
 */
struct bio_fast_lim {
	uint64_t seg_mask;
	uint32_t seg_bytes;
	uint32_t lbs_mask;
	uint32_t max_bytes;
};

/** limits_fast_lim() - fill @fl from validated limits @lim. */
void limits_fast_lim(const struct rq_queue_limits *lim, struct bio_fast_lim *fl);

/**
 * bio_fast_ok() - the common read or write, valid and in one segment.
 * @fl: the queue's fast limits.
 * @capacity: the device size in sectors (0: unbounded).
 * @bio: the bio as submitted.
 *
 * True for a READ or WRITE with no flush, FUA or unknown flag, whose data
 * sits in one vector from its position and within one segment (segment
 * size and boundary), aligned to the logical block and inside the capacity:
 * bio_check() passes it, and once its size is at most @fl->max_bytes it
 * needs no split and is one segment.  False says nothing: the full checks
 * decide.  A handful of compares and no division or call.
 */
static inline bool bio_fast_ok(const struct bio_fast_lim *fl, uint64_t capacity,
			       const struct rq_bio *bio)
{
	const struct rq_bvec *v = bio->vecs;
	uint64_t sector = bio->iter.sector;
	uint64_t last = capacity ? capacity - 1 : UINT64_MAX - 1; /* last sector it may touch */
	uint32_t size = bio->iter.size;
	uintptr_t addr;

	if (bio->op > RQ_OP_WRITE ||
	    (bio->opf & (~RQ_BIO_FLAGS_ALL | RQ_BIO_PREFLUSH | RQ_BIO_FUA)) ||
	    (bio->iter.idx | bio->iter.done) || !bio->vcnt || bio->vcnt > bio->max_vecs ||
	    !v || v->len < size || size - 1 >= fl->seg_bytes ||
	    (((uint32_t)sector << RQ_SECTOR_SHIFT | size) & fl->lbs_mask))
		return false;
	/* ends within the capacity, and its end sector does not wrap */
	if (sector > last || (size >> RQ_SECTOR_SHIFT) - 1 > last - sector)
		return false;
	addr = (uintptr_t)v->base;
	return size - 1 <= fl->seg_mask - (addr & fl->seg_mask);
}

/** Per-thread cache: drop everything cached by the calling thread. */
void bio_cache_drain(void);

/**
 * bio_split_to_limits_status() - bio_split_to_limits(), and on NULL tells
 * why in *@status: RQ_STS_RESOURCE (memory exhausted) or RQ_STS_INVAL (no
 * piece of at least one logical block fits max_segments).  End the bio with it.
 */
struct rq_bio *bio_split_to_limits_status(const struct rq_queue_limits *lim,
					  struct rq_bio *bio, unsigned *nr_segs,
					  rq_status_t *status);

#endif /* RQ_INTERNAL_BIO_H */
