/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: queue limits, what a device accepts (as the kernel's
 * queue_limits): defaults, validation, and a queue's current limits.
 */
#ifndef LIBREQUEST_LIMITS_H
#define LIBREQUEST_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/* Queue limit features (rq_queue_limits.features). */
#define RQ_FEAT_WRITE_CACHE (1u << 0) /* volatile write cache: flushes matter */
#define RQ_FEAT_FUA (1u << 1)         /* the device honours FUA itself */
#define RQ_FEAT_ROTATIONAL (1u << 2)  /* seeks cost: a disk */
#define RQ_FEAT_NOMERGE (1u << 3)     /* never merge (nomerges 2) */

/**
 * struct rq_queue_limits - what the device accepts, as queue_limits.
 *
 * Zero fields take the kernel's defaults (rq_queue_limits_default()).
 * Sector counts are in 512-byte sectors.
 */
struct rq_queue_limits {
	uint32_t size;                /* sizeof(struct rq_queue_limits) as the caller knew
					 it; rq_queue_limits_default() sets it */
	uint32_t logical_block_size;  /* bytes; 512 */
	uint32_t physical_block_size; /* bytes; logical_block_size */
	uint32_t max_hw_sectors;      /* hard cap per request; 255 */
	uint32_t max_sectors;         /* soft cap; min(max_hw_sectors, 2560) */
	uint32_t max_segments;        /* data segments per request; 128 */
	uint32_t max_segment_size;    /* bytes per segment; 65536 */
	uint32_t chunk_sectors;       /* no read/write request crosses a multiple of
					 it (a RAID chunk, an RBD object); a multiple
					 of the logical block; 0: none */
	uint64_t seg_boundary_mask;   /* a segment never crosses it; 0xffffffff */
	uint32_t max_discard_sectors; /* 0: discard unsupported */
	uint32_t discard_granularity; /* bytes; logical_block_size */
	uint32_t max_write_zeroes_sectors; /* 0: write-zeroes unsupported */
	uint32_t features;            /* RQ_FEAT_* */
};

/**
 * rq_queue_limits_default() - fill @lim with the kernel's defaults.
 * @lim: the limits to fill.
 *
 * 512-byte blocks, 255 sectors per request, 128 segments of up to 64 KiB
 * that never cross a 4 GiB boundary, no discard, no write zeroes.
 *
 * Context: any thread; a pure function, never blocks.
 */
void rq_queue_limits_default(struct rq_queue_limits *lim);

/**
 * rq_queue_limits_validate() - complete zero fields with defaults and check
 * the rest.
 * @lim: the limits, as a driver filled them.
 *
 * Checked: block sizes are powers of two in 512..65536, the physical block
 * is not smaller than the logical one, max_sectors <= max_hw_sectors, both
 * at least one logical block, max_segments <= 65535, max_segment_size >=
 * 4096, seg_boundary_mask of the form 2^n - 1 and >= 4095, discard
 * granularity a multiple of the logical block, chunk_sectors 0 or a multiple
 * of the logical block, no unknown features.  The
 * queue constructors call it; a driver may call it first to see what a
 * queue would get.
 *
 * Context: any thread; a pure function, never blocks.
 * Return: 0, or -EINVAL with @lim unchanged.
 */
int rq_queue_limits_validate(struct rq_queue_limits *lim);

/**
 * rq_queue_get_limits() - copy of the queue's current limits.
 * @q: the queue.
 * @lim: receives the limits: the first @size bytes, size set to what was
 *	filled (a later release's longer struct is cut to the caller's).
 * @size: sizeof(*@lim) as the caller knows it.
 *
 * Context: any thread; takes no lock, never blocks.  A concurrent write of
 * the max_sectors_kb attribute may or may not be seen.
 * Return: 0, or -EINVAL when @size cannot hold the size field.
 */
int rq_queue_get_limits(struct rq_queue *q, struct rq_queue_limits *lim, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_LIMITS_H */
