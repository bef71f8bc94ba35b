/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Splitting bios to the queue's limits, and counting their segments.
 *
 * A segment is one contiguous piece of memory as a driver's DMA list would
 * hold it.  Walking a bio's vectors from its position:
 *
 *  - a vector that starts where the current segment ends joins it while the
 *    segment stays within max_segment_size and does not cross the segment
 *    boundary (an address multiple of seg_boundary_mask + 1);
 *  - otherwise it starts a new segment, and a vector longer than what one
 *    segment may hold takes several.
 *
 * A read or write is cut before max_segments would be exceeded or its bytes
 * pass the op's sector cap (ending on a physical block boundary where the
 * cap allows); the cut is aligned down to the logical block size.  Discard
 * and write zeroes are cut by their own caps (discard also on its
 * granularity where possible).  A flush never splits.
 *
 * The front piece is a clone chained to the bio, which keeps the rest: the
 * caller processes the piece and calls again with the bio.  As the kernel
 * does, a front piece is marked RQ_BIO_NOMERGE: it was cut at a limit, so
 * nothing can grow it.
 */
#include <errno.h>

#include "internal/bio.h"

/* Bytes a segment starting at @addr may hold: size cap and boundary. */
static inline uint32_t seg_room_at(const struct rq_queue_limits *lim, uintptr_t addr)
{
	uint64_t mask = lim->seg_boundary_mask;
	uint32_t room = lim->max_segment_size ? lim->max_segment_size : UINT32_MAX;
	uint64_t left;

	if (!mask)
		return room;
	left = mask - ((uint64_t)addr & mask); /* bytes to the boundary, minus one */
	if (left < room)
		room = (uint32_t)left + 1;
	return room;
}

/*
 * Walk @bio's data from its position, cutting it into segments, until
 * @max_bytes are covered or one more segment would pass @max_segs.
 * Return: the bytes covered; *@nsegs_out receives their segment count.
 */
static uint64_t seg_walk(const struct rq_queue_limits *lim, const struct rq_bio *bio,
			 uint32_t max_segs, uint64_t max_bytes, unsigned *nsegs_out)
{
	uint64_t left = min_t(uint64_t, bio->iter.size, max_bytes);
	uint32_t idx = bio->iter.idx, done = bio->iter.done;
	uint64_t bytes = 0;
	uintptr_t end = 0;  /* address just past the open segment */
	uint32_t room = 0;  /* bytes the open segment may still take; 0: closed */
	unsigned nsegs = 0;

	for (; left && idx < bio->vcnt; idx++, done = 0) {
		const struct rq_bvec *v = &bio->vecs[idx];
		uintptr_t addr = (uintptr_t)v->base + done;
		uint64_t len = v->len - done;

		if (len > left)
			len = left;
		while (len) {
			uint64_t take;

			if (!room || addr != end) {
				if (nsegs == max_segs)
					goto out;
				nsegs++;
				room = seg_room_at(lim, addr);
			}
			take = min_t(uint64_t, len, room);
			room -= (uint32_t)take;
			addr += take;
			end = addr;
			len -= take;
			left -= take;
			bytes += take;
		}
	}
out:
	*nsegs_out = nsegs;
	return bytes;
}

/**
 * bio_count_segments() - count a bio's data segments as the driver sees
 * them: memory-contiguous vectors coalesce within max_segment_size and the
 * segment boundary; a long vector may take several.
 * @lim: the queue's limits.
 * @bio: the bio, from its current position.
 *
 * Context: any; reads the bio only.
 * Return: the number of segments, 0 for ops without data.
 */
unsigned bio_count_segments(const struct rq_queue_limits *lim, const struct rq_bio *bio)
{
	unsigned nsegs;

	if (!rq_op_has_data(bio->op) || !bio->vcnt)
		return 0;
	seg_walk(lim, bio, UINT32_MAX, UINT64_MAX, &nsegs);
	return nsegs;
}

/* Cut @bytes off the front of @bio as a chained clone; NULL on exhaustion. */
static struct rq_bio *bio_split_front(struct rq_bio *bio, uint32_t bytes)
{
	struct rq_bio *split = bio_alloc_clone(bio);

	if (!split)
		return NULL;
	split->iter.size = bytes;
	split->opf |= RQ_BIO_NOMERGE;
	bio_chain(split, bio);
	bio_advance(bio, bytes);
	return split;
}

static inline uint32_t lbs_sectors(const struct rq_queue_limits *lim)
{
	uint32_t s = lim->logical_block_size >> RQ_SECTOR_SHIFT;

	return s ? s : 1;
}

/*
 * Sector cap of a read or write starting at @sector: the op's cap, not past
 * the next chunk boundary (6.x get_max_io_size()), ended on a physical
 * block boundary when that leaves something.  0 means no cap
 * (limits that were never validated).
 */
static uint64_t rw_max_sectors(const struct rq_queue_limits *lim, uint64_t sector)
{
	uint32_t max = limits_max_sectors_for_op(lim, RQ_OP_WRITE);
	uint32_t pbs = lim->physical_block_size >> RQ_SECTOR_SHIFT;
	uint64_t start, end;

	if (!max)
		return UINT64_MAX >> RQ_SECTOR_SHIFT;
	if (lim->chunk_sectors && max > limits_chunk_left(lim, sector))
		max = (uint32_t)limits_chunk_left(lim, sector);
	if (pbs > lbs_sectors(lim)) {
		start = sector & (pbs - 1);
		end = (start + max) & ~(uint64_t)(pbs - 1);
		if (end > start)
			return end - start;
	}
	return max;
}

/*
 * The common read or write, which needs no split, found with a few
 * compares and no division: its data sits in one vector from its position,
 * inside one segment (max_segment_size, segment boundary), and it is no
 * longer than max_sectors (rounded down to the logical block, a power of
 * two), with no chunk boundary and no physical block rounding to consider.
 * False sends it to the full computation, which gives the same answer for
 * every bio this accepts.
 */
static inline bool rw_fits_one_segment(const struct rq_queue_limits *lim,
				       const struct rq_bio *bio)
{
	uint64_t size = bio->iter.size, mask = lim->seg_boundary_mask;
	uint64_t cap = lim->max_sectors & ~(uint64_t)(lbs_sectors(lim) - 1);
	const struct rq_bvec *v;
	uint64_t off;

	if (bio->iter.idx >= bio->vcnt || lim->chunk_sectors ||
	    lim->physical_block_size > lim->logical_block_size)
		return false;
	if ((cap && size > cap << RQ_SECTOR_SHIFT) ||
	    (lim->max_segment_size && size > lim->max_segment_size))
		return false;
	v = &bio->vecs[bio->iter.idx];
	if (v->len - bio->iter.done < size)
		return false;
	off = ((uintptr_t)v->base + bio->iter.done) & mask;
	return !mask || off + size - 1 <= mask;
}

/* Where to cut a read or write; 0 if it fits, UINT64_MAX if no cut fits. */
static uint64_t rw_split_bytes(const struct rq_queue_limits *lim, const struct rq_bio *bio,
			       unsigned *nr_segs)
{
	uint64_t max_bytes = rw_max_sectors(lim, bio->iter.sector) << RQ_SECTOR_SHIFT;
	uint32_t max_segs = lim->max_segments ? lim->max_segments : UINT32_MAX;
	uint64_t lbs_bytes = (uint64_t)lbs_sectors(lim) << RQ_SECTOR_SHIFT;
	uint64_t bytes;

	/* The common case: the data sits in one vector and fits one segment. */
	if (bio->iter.idx < bio->vcnt && bio->iter.size <= max_bytes) {
		const struct rq_bvec *v = &bio->vecs[bio->iter.idx];

		if (v->len - bio->iter.done >= bio->iter.size &&
		    seg_room_at(lim, (uintptr_t)v->base + bio->iter.done) >= bio->iter.size) {
			*nr_segs = 1;
			return 0;
		}
	}

	bytes = seg_walk(lim, bio, max_segs, max_bytes, nr_segs);
	if (bytes >= bio->iter.size)
		return 0;
	bytes -= bytes % lbs_bytes;
	return bytes ? bytes : UINT64_MAX;
}

/* Where to cut a discard, in sectors; 0 if it fits. */
static uint64_t discard_split_sectors(const struct rq_queue_limits *lim,
				      const struct rq_bio *bio)
{
	uint32_t gran = lim->discard_granularity >> RQ_SECTOR_SHIFT;
	uint32_t lbs = lbs_sectors(lim);
	uint64_t max = limits_max_sectors_for_op(lim, RQ_OP_DISCARD);
	uint64_t split, misalign;

	if (gran < lbs)
		gran = lbs;
	if (max >= gran)
		max -= max % gran;
	if (!max || rq_bio_sectors(bio) <= max)
		return 0;
	/* End the piece on a granularity boundary so the rest starts on one. */
	split = max;
	misalign = (bio->iter.sector + split) % gran;
	if (split > misalign)
		split -= misalign;
	split -= split % lbs;
	return split ? split : max;
}

/**
 * bio_split_to_limits_status() - bio_split_to_limits(), telling why it
 * returned NULL.
 * @lim: the queue's validated limits.
 * @bio: the bio, checked with bio_check(); if it does not fit, afterwards it
 *	covers only the rest.
 * @nr_segs: receives the number of data segments of the returned piece
 *	(1 for a discard, 0 for write zeroes and flush).
 * @status: on NULL, receives RQ_STS_RESOURCE (memory exhausted),
 *	RQ_STS_INVAL (no front piece of at least one logical block fits
 *	max_segments: the vectors are too fragmented for the block size) or
 *	RQ_STS_AGAIN (a RQ_BIO_NOWAIT read or write that would need a split).
 *
 * Context: the submitter, before the bio or its pieces are queued.
 * Return: @bio when it fits whole, else a new chained front piece, or NULL
 * with nothing changed.
 */
struct rq_bio *bio_split_to_limits_status(const struct rq_queue_limits *lim,
					  struct rq_bio *bio, unsigned *nr_segs,
					  rq_status_t *status)
{
	struct rq_bio *split;
	uint64_t bytes;
	unsigned segs = 0;

	if (likely(rq_op_has_data(bio->op) && rw_fits_one_segment(lim, bio))) {
		*nr_segs = 1;
		return bio;
	}
	switch (bio->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		bytes = rw_split_bytes(lim, bio, &segs);
		if (unlikely(bytes == UINT64_MAX)) {
			*status = RQ_STS_INVAL;
			return NULL;
		}
		break;
	case RQ_OP_DISCARD:
		bytes = discard_split_sectors(lim, bio) << RQ_SECTOR_SHIFT;
		segs = 1;
		break;
	case RQ_OP_WRITE_ZEROES:
		bytes = limits_max_sectors_for_op(lim, bio->op);
		if (rq_bio_sectors(bio) <= bytes)
			bytes = 0;
		bytes <<= RQ_SECTOR_SHIFT;
		break;
	default: /* flush: never split */
		bytes = 0;
		break;
	}

	if (likely(!bytes)) {
		*nr_segs = segs;
		return bio;
	}
	/*
	 * As 6.x bio_split_rw_at(): a NOWAIT read or write is not split (a
	 * piece could be issued and the rest refused, and whoever retries the
	 * bio would issue that piece twice): it ends with AGAIN, nothing sent.
	 */
	if (unlikely((bio->opf & RQ_BIO_NOWAIT) &&
		     (bio->op == RQ_OP_READ || bio->op == RQ_OP_WRITE))) {
		*status = RQ_STS_AGAIN;
		return NULL;
	}
	split = bio_split_front(bio, (uint32_t)bytes);
	if (unlikely(!split)) {
		*status = RQ_STS_RESOURCE;
		return NULL;
	}
	if (rq_op_has_data(split->op))
		segs = bio_count_segments(lim, split);
	*nr_segs = segs;
	return split;
}

/**
 * bio_split_to_limits() - the front of a bio that fits the queue's limits.
 * @lim: the queue's validated limits.
 * @bio: the bio; if it does not fit, afterwards it covers only the rest.
 * @nr_segs: receives the number of segments of the returned piece.
 *
 * Context: the submitter.
 * Return: @bio itself when it fits whole; else a new chained front piece
 * (process it, then call again with @bio); NULL with nothing changed when
 * memory is exhausted or no piece fits (see bio_split_to_limits_status()).
 */
struct rq_bio *bio_split_to_limits(const struct rq_queue_limits *lim, struct rq_bio *bio,
				   unsigned *nr_segs)
{
	rq_status_t status;

	return bio_split_to_limits_status(lim, bio, nr_segs, &status);
}
