/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue limits: defaults, validation, per-op sector caps and the checks a
 * bio must pass before it may become a request.
 */
#include <errno.h>
#include <string.h>

#include "internal/bio.h"

/* The kernel's defaults (BLK_SAFE_MAX_SECTORS, BLK_DEF_MAX_SECTORS_CAP ...). */
#define DEF_LOGICAL_BLOCK_SIZE 512u
#define DEF_MAX_HW_SECTORS 255u
#define DEF_MAX_SECTORS_CAP 2560u
#define DEF_MAX_SEGMENTS 128u
#define DEF_MAX_SEGMENT_SIZE 65536u
#define DEF_SEG_BOUNDARY_MASK 0xffffffffull

/* Bounds the validation enforces. */
#define MAX_BLOCK_SIZE 65536u
#define MAX_SEGMENTS 65535u           /* rq_request.nr_segments is 16 bits */
#define MIN_SEGMENT_SIZE 4096u        /* a page */
#define MIN_SEG_BOUNDARY_MASK 4095ull /* a segment may span at least a page */

#define RQ_FEAT_ALL (RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA | RQ_FEAT_ROTATIONAL | RQ_FEAT_NOMERGE)

static inline bool is_power_of_2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/**
 * rq_queue_limits_default() - fill limits with the kernel's defaults.
 * @lim: the limits to fill.
 *
 * 512-byte blocks, 255 sectors per request, 128 segments of up to 64 KiB
 * that never cross a 4 GiB boundary, no discard, no write zeroes.
 *
 * Context: any.
 */
RQ_EXPORT void rq_queue_limits_default(struct rq_queue_limits *lim)
{
	*lim = (struct rq_queue_limits){
		.size = sizeof(*lim),
		.logical_block_size = DEF_LOGICAL_BLOCK_SIZE,
		.physical_block_size = DEF_LOGICAL_BLOCK_SIZE,
		.max_hw_sectors = DEF_MAX_HW_SECTORS,
		.max_sectors = min_t(uint32_t, DEF_MAX_HW_SECTORS, DEF_MAX_SECTORS_CAP),
		.max_segments = DEF_MAX_SEGMENTS,
		.max_segment_size = DEF_MAX_SEGMENT_SIZE,
		.seg_boundary_mask = DEF_SEG_BOUNDARY_MASK,
		.max_discard_sectors = 0,
		.discard_granularity = DEF_LOGICAL_BLOCK_SIZE,
		.max_write_zeroes_sectors = 0,
		.features = 0,
	};
}

static bool block_size_ok(uint32_t bs)
{
	return is_power_of_2(bs) && bs >= RQ_SECTOR_SIZE && bs <= MAX_BLOCK_SIZE;
}

/*
 * Copy a caller's limits into @dst, the library's own size: the fields its
 * size covers, zero (the default) for the rest.  Return: 0, or -EINVAL for
 * a size that is not at least this release's first layout.
 */
int limits_copy_in(struct rq_queue_limits *dst, const struct rq_queue_limits *src)
{
	size_t n = src->size < sizeof(*dst) ? src->size : sizeof(*dst);

	if (src->size < RQ_LIMITS_SIZE_0_1)
		return -EINVAL;
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, src, n);
	dst->size = sizeof(*dst);
	return 0;
}

/**
 * rq_queue_limits_validate() - complete zero fields with defaults and check
 * the rest.
 * @lim: the limits, as a driver filled them.
 *
 * Zero fields take the defaults; max_sectors 0 becomes
 * min(max_hw_sectors, 2560) and discard_granularity 0 (or anything below
 * it) the logical block size.  Rejected: block sizes that are not powers of
 * two in 512..65536, a physical block smaller than the logical one,
 * max_hw_sectors smaller than one logical block, max_sectors above
 * max_hw_sectors or below one logical block, max_segments above 65535 (a
 * request counts its segments in 16 bits), max_segment_size below 4096,
 * a seg_boundary_mask below 4095 or not of the form 2^n - 1, a discard
 * granularity that is not a multiple of the logical block size, a non-zero
 * discard or write-zeroes cap below one logical block, unknown features.
 *
 * Context: any.
 * Return: 0, or -EINVAL with @lim unchanged.
 */
RQ_EXPORT int rq_queue_limits_validate(struct rq_queue_limits *lim)
{
	struct rq_queue_limits l;
	uint32_t lbs_sectors;

	if (!lim || limits_copy_in(&l, lim))
		return -EINVAL;
	if (!l.logical_block_size)
		l.logical_block_size = DEF_LOGICAL_BLOCK_SIZE;
	if (!block_size_ok(l.logical_block_size))
		return -EINVAL;
	lbs_sectors = l.logical_block_size >> RQ_SECTOR_SHIFT;

	if (!l.physical_block_size)
		l.physical_block_size = l.logical_block_size;
	if (!block_size_ok(l.physical_block_size) ||
	    l.physical_block_size < l.logical_block_size)
		return -EINVAL;

	if (!l.max_hw_sectors)
		l.max_hw_sectors = DEF_MAX_HW_SECTORS;
	if (l.max_hw_sectors < lbs_sectors)
		return -EINVAL;
	if (!l.max_sectors)
		l.max_sectors = min_t(uint32_t, l.max_hw_sectors, DEF_MAX_SECTORS_CAP);
	if (l.max_sectors > l.max_hw_sectors || l.max_sectors < lbs_sectors)
		return -EINVAL;

	if (!l.max_segments)
		l.max_segments = DEF_MAX_SEGMENTS;
	if (l.max_segments > MAX_SEGMENTS)
		return -EINVAL;
	if (!l.max_segment_size)
		l.max_segment_size = DEF_MAX_SEGMENT_SIZE;
	if (l.max_segment_size < MIN_SEGMENT_SIZE)
		return -EINVAL;
	if (!l.seg_boundary_mask)
		l.seg_boundary_mask = DEF_SEG_BOUNDARY_MASK;
	if (l.seg_boundary_mask < MIN_SEG_BOUNDARY_MASK ||
	    (l.seg_boundary_mask & (l.seg_boundary_mask + 1)))
		return -EINVAL;

	if (l.discard_granularity < l.logical_block_size)
		l.discard_granularity = l.logical_block_size;
	if (l.discard_granularity % l.logical_block_size)
		return -EINVAL;
	if (l.max_discard_sectors && l.max_discard_sectors < lbs_sectors)
		return -EINVAL;
	if (l.max_write_zeroes_sectors && l.max_write_zeroes_sectors < lbs_sectors)
		return -EINVAL;

	if (l.chunk_sectors % lbs_sectors)
		return -EINVAL;
	if (l.features & ~RQ_FEAT_ALL)
		return -EINVAL;

	/* back into the caller's struct, as far as its size goes */
	l.size = lim->size < sizeof(l) ? lim->size : (uint32_t)sizeof(l);
	memcpy(lim, &l, l.size);
	return 0;
}

/* Logical block size in sectors; limits not yet validated count as 512. */
static inline uint32_t lbs_sectors_of(const struct rq_queue_limits *lim)
{
	uint32_t lbs = lim->logical_block_size >> RQ_SECTOR_SHIFT;

	return lbs ? lbs : 1;
}

/**
 * limits_max_sectors_for_op() - the per-request sector cap for an op.
 * @lim: validated limits.
 * @op: enum rq_op.
 *
 * READ and WRITE: max_sectors; DISCARD: max_discard_sectors; WRITE_ZEROES:
 * max_write_zeroes_sectors; FLUSH (and unknown ops): 0.  Caps are rounded
 * down to the logical block size.
 *
 * Context: any.
 * Return: the cap in sectors; 0 means no data may be carried (or the op is
 * unsupported).
 */
unsigned limits_max_sectors_for_op(const struct rq_queue_limits *lim, unsigned op)
{
	uint32_t cap;

	switch (op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		cap = lim->max_sectors;
		break;
	case RQ_OP_DISCARD:
		cap = lim->max_discard_sectors;
		break;
	case RQ_OP_WRITE_ZEROES:
		cap = lim->max_write_zeroes_sectors;
		break;
	default:
		return 0;
	}
	return cap - cap % lbs_sectors_of(lim);
}

/**
 * limits_fast_lim() - what bio_fast_ok() compares with, for validated limits.
 * @lim: the queue's limits.
 * @fl: filled in.
 *
 * max_bytes is the sector cap rw_max_sectors() (split.c) gives a read or
 * write wherever it starts: max_sectors rounded down to the logical block,
 * less what ending on a physical block boundary may take off (at most one
 * physical block minus one logical block).  Chunked queues (chunk_sectors)
 * are never fast: every bio there is measured against its chunk.
 * Context: whoever changes @lim, with the queue frozen or not yet in use.
 */
void limits_fast_lim(const struct rq_queue_limits *lim, struct bio_fast_lim *fl)
{
	uint32_t lbs = lbs_sectors_of(lim);
	uint32_t pbs = lim->physical_block_size >> RQ_SECTOR_SHIFT;
	uint64_t max = limits_max_sectors_for_op(lim, RQ_OP_READ);

	if (!max)
		max = UINT32_MAX; /* no cap */
	else if (pbs > lbs)
		max = max > pbs - lbs ? max - (pbs - lbs) : 0;
	fl->seg_mask = lim->seg_boundary_mask ? lim->seg_boundary_mask : UINT64_MAX;
	fl->seg_bytes = lim->chunk_sectors ? 0 :
			lim->max_segment_size ? lim->max_segment_size : UINT32_MAX;
	fl->lbs_mask = (lbs << RQ_SECTOR_SHIFT) - 1;
	fl->max_bytes = (uint32_t)min_t(uint64_t, max << RQ_SECTOR_SHIFT, UINT32_MAX);
}

/* Do the vectors from the bio's position hold at least its size? */
static bool bio_vectors_cover(const struct rq_bio *bio)
{
	uint64_t have = 0;
	uint32_t i = bio->iter.idx;

	if (!bio->vecs || bio->vcnt > bio->max_vecs || i >= bio->vcnt)
		return false;
	if (bio->iter.done > bio->vecs[i].len)
		return false;
	have = bio->vecs[i].len - bio->iter.done;
	for (i++; have < bio->iter.size && i < bio->vcnt; i++)
		have += bio->vecs[i].len;
	return have >= bio->iter.size;
}

/**
 * bio_check() - is a bio acceptable for a queue?
 * @lim: the queue's validated limits.
 * @capacity: device size in sectors, 0 for unbounded.
 * @bio: the bio as submitted.
 *
 * In order: the op and flags are known (else INVAL); the data matches the op
 * (READ / WRITE: a non-zero size and vectors covering it; FLUSH: no size,
 * no vectors; DISCARD / WRITE_ZEROES: a non-zero size, no vectors) (else
 * INVAL); DISCARD / WRITE_ZEROES are supported (else NOTSUPP); sector and
 * size are multiples of the logical block size (else INVAL); the bio ends
 * within the capacity and the sector does not wrap (else IOERR).  A flush
 * has no position, so no capacity check.
 *
 * Context: any; reads the bio only.
 * Return: RQ_STS_OK or the status to end the bio with.
 */
rq_status_t bio_check(const struct rq_queue_limits *lim, uint64_t capacity,
		      const struct rq_bio *bio)
{
	uint32_t lbs_mask = lbs_sectors_of(lim) - 1;
	uint64_t sectors, end;

	if (unlikely(bio->op >= RQ_OP_LAST || (bio->opf & ~RQ_BIO_FLAGS_ALL)))
		return RQ_STS_INVAL;

	switch (bio->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		if (unlikely(!bio->iter.size || !bio_vectors_cover(bio)))
			return RQ_STS_INVAL;
		break;
	case RQ_OP_FLUSH:
		if (unlikely(bio->iter.size || bio->vcnt))
			return RQ_STS_INVAL;
		return RQ_STS_OK;
	case RQ_OP_DISCARD:
	case RQ_OP_WRITE_ZEROES:
		if (unlikely(!bio->iter.size || bio->vcnt))
			return RQ_STS_INVAL;
		if (unlikely(!limits_max_sectors_for_op(lim, bio->op)))
			return RQ_STS_NOTSUPP;
		break;
	}

	if (unlikely((bio->iter.size & (RQ_SECTOR_SIZE - 1)) ||
		     (bio->iter.sector & lbs_mask) ||
		     (rq_bio_sectors(bio) & lbs_mask)))
		return RQ_STS_INVAL;

	sectors = rq_bio_sectors(bio);
	end = bio->iter.sector + sectors;
	if (unlikely(end < bio->iter.sector || (capacity && end > capacity)))
		return RQ_STS_IOERR;
	return RQ_STS_OK;
}
