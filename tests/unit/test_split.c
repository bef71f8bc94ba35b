/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Splitting bios to queue limits and counting their segments.
 *
 * Vector addresses are never dereferenced by the split code, so the tests
 * use made-up addresses to control contiguity and boundaries exactly.
 *
 * A bio holds at most 255 vectors (vcnt is 8 bits), so "1 MiB of 4 KiB
 * vectors" is tested as 1 MiB of 8 KiB vectors cut into 4 KiB segments and
 * as 255 vectors of 4 KiB (1020 KiB).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal/bio.h"
#include "fixtures.h"
#include "mock_driver.h"

#define FAKE(addr) ((void *)(uintptr_t)(addr))
#define KiB 1024u

struct end_record {
	int calls;
	rq_status_t status;
};

static void record_end_io(struct rq_bio *bio)
{
	struct end_record *r = bio->private_data;

	r->calls++;
	r->status = bio->status;
}

static void limits(struct rq_queue_limits *lim, uint32_t max_sectors, uint32_t max_segments,
		   uint32_t max_segment_size)
{
	memset(lim, 0, sizeof(*lim));
	lim->size = sizeof(*lim);
	lim->max_hw_sectors = max_sectors;
	lim->max_sectors = max_sectors;
	lim->max_segments = max_segments;
	lim->max_segment_size = max_segment_size;
	assert_int_equal(rq_queue_limits_validate(lim), 0);
}

/* A write bio of @n vectors of @len bytes, vector i at @base + i * @stride. */
static struct rq_bio *make_bio(unsigned n, uint32_t len, uintptr_t base, uintptr_t stride,
			       struct end_record *rec)
{
	struct rq_bio *bio = rq_bio_alloc(n);

	assert_non_null(bio);
	bio->op = RQ_OP_WRITE;
	bio->end_io = record_end_io;
	bio->private_data = rec;
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(rq_bio_add_vec(bio, FAKE(base + i * stride), len), 0);
	return bio;
}

/* Split @bio until it fits, recording each piece's bytes and segments; ends pieces. */
static unsigned split_all(const struct rq_queue_limits *lim, struct rq_bio *bio,
			  uint32_t *bytes, unsigned *segs, unsigned max_pieces)
{
	unsigned n = 0;

	for (;;) {
		struct rq_bio *piece;
		unsigned nsegs = 0;

		piece = bio_split_to_limits(lim, bio, &nsegs);
		assert_non_null(piece);
		assert_true(n < max_pieces);
		bytes[n] = piece->iter.size;
		segs[n] = nsegs;
		n++;
		rq_bio_endio(piece);
		if (piece == bio)
			return n;
	}
}

static int teardown_cache(void **state)
{
	(void)state;
	bio_cache_drain();
	return 0;
}

/* A 4 KiB single-vector bio fits whole, as one segment. */
static void test_fits_whole(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	struct rq_bio *bio;
	unsigned nsegs = 0;

	(void)state;
	limits(&lim, 0, 0, 0);
	bio = make_bio(1, 4096, 0x100000, 0, &rec);
	assert_ptr_equal(bio_split_to_limits(&lim, bio, &nsegs), bio);
	assert_int_equal(nsegs, 1);
	assert_false(bio->core_flags & RQ_BIOF_CHAIN);
	rq_bio_put(bio);
}

/* 1 MiB in 128 separate 8 KiB vectors, 4 KiB segments, 128 max: 512 KiB + 512 KiB. */
static void test_noncontig_1m_by_segments(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	uint32_t bytes[4];
	unsigned segs[4], n;
	struct rq_bio *bio;

	(void)state;
	limits(&lim, 2048, 128, 4096);
	bio = make_bio(128, 8 * KiB, 0x10000000, 16 * KiB, &rec);
	assert_int_equal(bio->iter.size, 1024 * KiB);
	assert_int_equal(bio_count_segments(&lim, bio), 256);
	n = split_all(&lim, bio, bytes, segs, 4);
	assert_int_equal(n, 2);
	assert_int_equal(bytes[0], 512 * KiB);
	assert_int_equal(bytes[1], 512 * KiB);
	assert_int_equal(segs[0], 128);
	assert_int_equal(segs[1], 128);
	assert_int_equal(rec.calls, 1);
	rq_bio_put(bio);
}

/* 255 separate 4 KiB vectors, 128 max segments: 512 KiB + 508 KiB. */
static void test_noncontig_4k_vectors(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	uint32_t bytes[4];
	unsigned segs[4], n;
	struct rq_bio *bio;

	(void)state;
	limits(&lim, 2560, 128, 65536);
	bio = make_bio(255, 4 * KiB, 0x10000000, 8 * KiB, &rec);
	n = split_all(&lim, bio, bytes, segs, 4);
	assert_int_equal(n, 2);
	assert_int_equal(bytes[0], 512 * KiB);
	assert_int_equal(segs[0], 128);
	assert_int_equal(bytes[1], 508 * KiB);
	assert_int_equal(segs[1], 127);
	assert_int_equal(rec.calls, 1);
	rq_bio_put(bio);
}

/* Contiguous 4 KiB vectors coalesce into 64 KiB segments; max_sectors caps the piece. */
static void test_contig_coalesce(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	uint32_t bytes[4];
	unsigned segs[4], n;
	struct rq_bio *bio;

	(void)state;
	limits(&lim, 1024, 128, 65536);
	bio = make_bio(255, 4 * KiB, 0x10000000, 4 * KiB, &rec);
	assert_int_equal(bio_count_segments(&lim, bio), 16); /* 15 x 64 KiB + 60 KiB */
	n = split_all(&lim, bio, bytes, segs, 4);
	assert_int_equal(n, 2);
	assert_int_equal(bytes[0], 512 * KiB);
	assert_int_equal(segs[0], 8);
	assert_int_equal(bytes[1], 508 * KiB);
	assert_int_equal(segs[1], 8);
	rq_bio_put(bio);
}

/* A segment never crosses the boundary mask, even inside one vector. */
static void test_seg_boundary(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	struct rq_bio *bio, *piece;
	unsigned nsegs;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.seg_boundary_mask = 0xffff;
	lim.max_hw_sectors = 2048;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);

	/* 64 KiB starting 32 KiB before a 64 KiB boundary: two segments. */
	bio = make_bio(1, 64 * KiB, 0x10008000, 0, &rec);
	assert_int_equal(bio_count_segments(&lim, bio), 2);
	rq_bio_put(bio);

	/* Two contiguous vectors meeting exactly at the boundary do not merge. */
	bio = make_bio(2, 8 * KiB, 0x1000e000, 8 * KiB, &rec);
	assert_int_equal(bio_count_segments(&lim, bio), 2);
	rq_bio_put(bio);

	/* ... while the same vectors inside one window do. */
	bio = make_bio(2, 8 * KiB, 0x10004000, 8 * KiB, &rec);
	assert_int_equal(bio_count_segments(&lim, bio), 1);
	rq_bio_put(bio);

	/* One segment allowed: the split falls on the boundary. */
	lim.max_segments = 1;
	bio = make_bio(1, 64 * KiB, 0x10008000, 0, &rec);
	bio->iter.sector = 1000;
	piece = bio_split_to_limits(&lim, bio, &nsegs);
	assert_non_null(piece);
	assert_ptr_not_equal(piece, bio);
	assert_int_equal(piece->iter.size, 32 * KiB);
	assert_int_equal(nsegs, 1);
	assert_true(piece->opf & RQ_BIO_NOMERGE);
	assert_int_equal(bio->iter.sector, 1064);
	assert_int_equal(bio->iter.done, 32 * KiB);
	rq_bio_endio(piece);
	assert_ptr_equal(bio_split_to_limits(&lim, bio, &nsegs), bio);
	assert_int_equal(nsegs, 1);
	rq_bio_endio(bio);
	assert_int_equal(rec.calls, 1);
	rq_bio_put(bio);
}

/* With 4 KiB logical blocks the split point is aligned down to 4 KiB. */
static void test_lbs_alignment(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	uint32_t bytes[16];
	unsigned segs[16], n;
	struct rq_bio *bio;
	rq_status_t st = RQ_STS_OK;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.logical_block_size = 4096;
	lim.max_segments = 3;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);

	/* 8 separate 2 KiB vectors: 3 segments hold 6 KiB, cut at 4 KiB. */
	bio = make_bio(8, 2 * KiB, 0x10000000, 64 * KiB, &rec);
	n = split_all(&lim, bio, bytes, segs, 16);
	assert_int_equal(n, 4);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(bytes[i], 4 * KiB);
		assert_int_equal(segs[i], 2);
	}
	rq_bio_put(bio);

	/* One segment of 2 KiB cannot hold a 4 KiB block: INVAL, nothing changed. */
	lim.max_segments = 1;
	bio = make_bio(4, 2 * KiB, 0x10000000, 64 * KiB, &rec);
	{
		struct rq_bio before = *bio;
		unsigned nsegs;

		assert_null(bio_split_to_limits_status(&lim, bio, &nsegs, &st));
		assert_int_equal(st, RQ_STS_INVAL);
		assert_memory_equal(bio, &before, sizeof(before));
	}
	rq_bio_put(bio);
}

/* A physical block larger than the logical one: the piece ends on a pbs boundary. */
static void test_pbs_end_alignment(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	struct rq_bio *bio, *piece;
	unsigned nsegs;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.physical_block_size = 4096;
	lim.max_hw_sectors = 20;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	bio = make_bio(1, 64 * KiB, 0x10000000, 0, &rec);
	bio->iter.sector = 3;
	piece = bio_split_to_limits(&lim, bio, &nsegs);
	assert_int_equal(rq_bio_sectors(piece), 13); /* 3 + 13 = 16 */
	assert_int_equal(bio->iter.sector, 16);
	rq_bio_endio(piece);
	piece = bio_split_to_limits(&lim, bio, &nsegs);
	assert_int_equal(rq_bio_sectors(piece), 16); /* 20 would end mid-block */
	rq_bio_endio(piece);
	rq_bio_endio(bio); /* the rest, unsplit: its end_io waits for nothing now */
	rq_bio_put(bio);
}

/* Discards split by their cap, later pieces start on the granularity. */
static void test_discard_split(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	struct rq_bio bio, *piece;
	uint64_t expect = 100;
	unsigned nsegs, pieces = 0;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.max_discard_sectors = 1000;
	lim.discard_granularity = 64 * KiB; /* 128 sectors */
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	rq_bio_init(&bio, NULL, 0);
	bio.op = RQ_OP_DISCARD;
	bio.iter.sector = 100;
	bio.iter.size = 5000 * 512;
	bio.end_io = record_end_io;
	bio.private_data = &rec;
	assert_int_equal(bio_check(&lim, 0, &bio), RQ_STS_OK);
	do {
		piece = bio_split_to_limits(&lim, &bio, &nsegs);
		assert_non_null(piece);
		assert_int_equal(piece->iter.sector, expect);
		assert_true(rq_bio_sectors(piece) <= 1000);
		assert_int_equal(nsegs, 1);
		if (pieces == 0)
			assert_int_equal(rq_bio_sectors(piece), 796); /* ends at 896 = 7 * 128 */
		if (piece != &bio)
			assert_int_equal(rq_bio_end_sector(piece) % 128, 0);
		expect += rq_bio_sectors(piece);
		pieces++;
		rq_bio_endio(piece);
	} while (piece != &bio);
	assert_int_equal(expect, 5100);
	assert_int_equal(pieces, 6); /* 796 + 4 x 896 + 620 */
	assert_int_equal(rec.calls, 1);
}

/* Write zeroes split by their cap; flushes never split. */
static void test_write_zeroes_and_flush(void **state)
{
	struct end_record rec = { 0 };
	struct rq_queue_limits lim;
	struct rq_bio bio, *piece;
	unsigned nsegs = 99, pieces = 0;

	(void)state;
	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.max_write_zeroes_sectors = 100;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	rq_bio_init(&bio, NULL, 0);
	bio.op = RQ_OP_WRITE_ZEROES;
	bio.iter.size = 250 * 512;
	bio.end_io = record_end_io;
	bio.private_data = &rec;
	do {
		piece = bio_split_to_limits(&lim, &bio, &nsegs);
		assert_int_equal(rq_bio_sectors(piece), pieces < 2 ? 100 : 50);
		assert_int_equal(nsegs, 0);
		pieces++;
		rq_bio_endio(piece);
	} while (piece != &bio);
	assert_int_equal(pieces, 3);
	assert_int_equal(rec.calls, 1);

	rq_bio_init(&bio, NULL, 0);
	bio.op = RQ_OP_FLUSH;
	nsegs = 99;
	assert_ptr_equal(bio_split_to_limits(&lim, &bio, &nsegs), &bio);
	assert_int_equal(nsegs, 0);
}

/* Tiny deterministic generator: the property test must not depend on libc's rand. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

/*
 * Property: over random vector layouts and limits (fixed seed), every piece
 * has at most max_segments segments (as counted independently) and at most
 * max_sectors sectors, is aligned to the logical block size, and the pieces
 * cover the original data in order, exactly once.
 */
static void test_property_random_layouts(void **state)
{
	static const uint32_t seg_sizes[] = { 4096, 8192, 12288, 65536 };
	static const uint64_t masks[] = { 0xfff, 0x1fff, 0xffff, 0xffffffff };
	struct rq_bvec orig[64];
	unsigned multi = 0, refused = 0;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		struct end_record rec = { 0 };
		struct rq_queue_limits lim;
		uint32_t lbs = rng(3) ? 512 : 4096;
		unsigned nvec = 1 + rng(64), oi = 0, pieces = 0;
		uint32_t ooff = 0, total = 0, max_sectors;
		uintptr_t addr = 0x10000000 + (uintptr_t)rng(1 << 16) * 512;
		uint64_t sector, start;
		struct rq_bio *bio;
		rq_status_t st;

		memset(&lim, 0, sizeof(lim));

		lim.size = sizeof(lim);
		lim.logical_block_size = lbs;
		lim.max_segments = 1 + rng(16);
		lim.max_segment_size = seg_sizes[rng(4)];
		lim.seg_boundary_mask = masks[rng(4)];
		max_sectors = (lbs / 512) * (1 + rng(64));
		lim.max_hw_sectors = max_sectors;
		assert_int_equal(rq_queue_limits_validate(&lim), 0);

		bio = rq_bio_alloc(nvec);
		bio->op = rng(2) ? RQ_OP_READ : RQ_OP_WRITE;
		bio->end_io = record_end_io;
		bio->private_data = &rec;
		bio->iter.sector = sector = start = (uint64_t)rng(1 << 20) * (lbs / 512);
		for (unsigned i = 0; i < nvec; i++) {
			uint32_t len = 512 * (1 + rng(32));

			if (i == nvec - 1 && (total + len) % lbs)
				len += lbs - (total + len) % lbs;
			if (rng(2))
				addr += 512 * (1 + rng(64)); /* a gap: not contiguous */
			orig[i].base = FAKE(addr);
			orig[i].len = len;
			assert_int_equal(rq_bio_add_vec(bio, FAKE(addr), len), 0);
			addr += len;
			total += len;
		}

		for (;;) {
			struct rq_bvec_iter it;
			struct rq_segment seg;
			struct rq_bio *piece;
			unsigned nsegs = 0;

			piece = bio_split_to_limits_status(&lim, bio, &nsegs, &st);
			if (!piece) {
				/* Only too-fragmented data for a 4 KiB block may refuse. */
				assert_int_equal(st, RQ_STS_INVAL);
				assert_int_equal(lbs, 4096);
				bio_end_with(bio, st);
				refused++;
				break;
			}
			assert_true(nsegs <= lim.max_segments);
			assert_int_equal(nsegs, bio_count_segments(&lim, piece));
			assert_true(rq_bio_sectors(piece) <= max_sectors);
			assert_true(piece->iter.size > 0);
			assert_int_equal(piece->iter.size % lbs, 0);
			assert_int_equal(piece->iter.sector, sector);
			sector += rq_bio_sectors(piece);

			/* The piece's data continues the original stream. */
			it = piece->iter;
			while (rq_bio_next_segment(piece, &it, &seg)) {
				assert_true(oi < nvec);
				assert_ptr_equal(seg.base, (char *)orig[oi].base + ooff);
				assert_true(seg.len <= orig[oi].len - ooff);
				ooff += seg.len;
				if (ooff == orig[oi].len) {
					oi++;
					ooff = 0;
				}
			}
			pieces++;
			rq_bio_endio(piece);
			if (piece == bio) {
				assert_int_equal(oi, nvec);
				assert_int_equal(sector - start, total / 512);
				break;
			}
		}
		multi += pieces > 1;
		assert_int_equal(rec.calls, 1);
		rq_bio_put(bio);
	}
	/* The layouts must exercise splitting, and refusals stay the exception. */
	assert_true(multi > 1000);
	assert_true(refused < 200);
}

/*
 * chunk_sectors: a read or write is cut at each chunk boundary (6.x
 * get_max_io_size()), 32 KiB chunks, a 96 KiB bio at sector 40 (20 KiB in):
 * 12 KiB, 32, 32, 20; a chunk that is not a power of two (24 sectors)
 * works too; validation refuses a chunk that is not a whole logical block.
 */
static void test_chunk_boundary(void **state)
{
	struct rq_queue_limits lim;
	struct end_record rec = { 0 };
	struct rq_bio *bio;
	uint32_t bytes[8];
	unsigned segs[8], n;

	(void)state;
	limits(&lim, 2560, 128, 64 * KiB);
	lim.chunk_sectors = 64;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	bio = make_bio(24, 4 * KiB, 0x100000, 4 * KiB, &rec);
	bio->iter.sector = 40;
	n = split_all(&lim, bio, bytes, segs, 8);
	assert_int_equal(n, 4);
	assert_int_equal(bytes[0], 12 * KiB);
	assert_int_equal(bytes[1], 32 * KiB);
	assert_int_equal(bytes[2], 32 * KiB);
	assert_int_equal(bytes[3], 20 * KiB);
	rq_bio_put(bio);

	lim.chunk_sectors = 24; /* 12 KiB */
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	bio = make_bio(6, 4 * KiB, 0x100000, 4 * KiB, &rec);
	bio->iter.sector = 8;
	n = split_all(&lim, bio, bytes, segs, 8);
	assert_int_equal(n, 3);
	assert_int_equal(bytes[0], 8 * KiB);
	assert_int_equal(bytes[1], 12 * KiB);
	assert_int_equal(bytes[2], 4 * KiB);
	rq_bio_put(bio);

	limits(&lim, 2560, 128, 64 * KiB);
	lim.logical_block_size = 4096;
	lim.chunk_sectors = 12; /* 6 KiB: not whole 4 KiB blocks */
	assert_int_equal(rq_queue_limits_validate(&lim), -EINVAL);
}

/*
 * A NOWAIT read or write that does not fit is not split (6.x
 * bio_split_rw_at()): NULL with RQ_STS_AGAIN and the bio untouched, so
 * nothing of it is issued and a retry sends it whole; one that fits is
 * returned whole; a NOWAIT discard still splits.
 */
static void test_nowait_not_split(void **state)
{
	struct rq_queue_limits lim;
	struct end_record rec = { 0 };
	struct rq_bio *bio, *piece, disc;
	rq_status_t status = RQ_STS_OK;
	unsigned nsegs = 0;

	(void)state;
	limits(&lim, 512, 128, 64 * KiB); /* 256 KiB requests */
	bio = make_bio(16, 64 * KiB, 0x100000, 64 * KiB, &rec); /* 1 MiB, contiguous */
	bio->opf |= RQ_BIO_NOWAIT;
	piece = bio_split_to_limits_status(&lim, bio, &nsegs, &status);
	assert_null(piece);
	assert_int_equal(status, RQ_STS_AGAIN);
	assert_int_equal(bio->iter.size, 1024 * KiB);
	assert_int_equal(bio->iter.sector, 0);
	assert_int_equal(rec.calls, 0);
	rq_bio_put(bio);

	bio = make_bio(4, 64 * KiB, 0x100000, 64 * KiB, &rec); /* 256 KiB: fits */
	bio->opf |= RQ_BIO_NOWAIT;
	assert_ptr_equal(bio_split_to_limits_status(&lim, bio, &nsegs, &status), bio);
	rq_bio_put(bio);

	memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.max_discard_sectors = 8;
	assert_int_equal(rq_queue_limits_validate(&lim), 0);
	rq_bio_init(&disc, NULL, 0);
	disc.op = RQ_OP_DISCARD;
	disc.opf |= RQ_BIO_NOWAIT;
	disc.iter.size = 16 * 512;
	piece = bio_split_to_limits_status(&lim, &disc, &nsegs, &status);
	assert_non_null(piece);
	assert_ptr_not_equal(piece, &disc);
	assert_int_equal(piece->iter.size, 8 * 512);
	assert_int_equal(disc.iter.size, 8 * 512);
	rq_bio_endio(piece);
}

/* A random choice of @n values. */
#define PICK(arr) ((arr)[rng(sizeof(arr) / sizeof((arr)[0]))])

/* Random validated limits, sometimes with physical blocks, chunks, caps. */
static void random_limits(struct rq_queue_limits *lim)
{
	static const uint32_t lbss[] = { 512, 512, 4096 };
	static const uint32_t seg_sizes[] = { 0, 4096, 8192, 65536, 1u << 20 };
	static const uint64_t masks[] = { 0, 0xfff, 0x1fff, 0xffff, 0xffffffff };
	uint32_t lbs = PICK(lbss), lbs_s = lbs / 512;

	memset(lim, 0, sizeof(*lim));
	lim->size = sizeof(*lim);
	lim->logical_block_size = lbs;
	lim->physical_block_size = rng(2) ? lbs : lbs << rng(4);
	lim->max_hw_sectors = lbs_s * (1 + rng(512));
	lim->max_sectors = rng(3) ? lbs_s * (1 + rng(lim->max_hw_sectors / lbs_s)) : 0;
	lim->max_segments = rng(4) ? 1 + rng(128) : 0;
	lim->max_segment_size = PICK(seg_sizes);
	lim->seg_boundary_mask = PICK(masks);
	lim->chunk_sectors = rng(8) ? 0 : lbs_s * (1 + rng(64));
	assert_int_equal(rq_queue_limits_validate(lim), 0);
}

/* A random bio for @lim, near the fast path's edges; vectors in @v[4]. */
static void random_bio(struct rq_bio *bio, struct rq_bvec *v, const struct rq_queue_limits *lim,
		       uint64_t capacity)
{
	uint32_t lbs = lim->logical_block_size, unit = rng(8) ? lbs : 512;
	uint64_t mask = lim->seg_boundary_mask;
	uintptr_t addr = 0x10000000 + (uintptr_t)rng(1u << 20) * 512;
	uint32_t size;

	rq_bio_init(bio, v, 4);
	bio->op = rng(6) ? rng(2) : rng(RQ_OP_LAST + 1);
	bio->opf = rng(3) ? 0 : 1u << rng(12);
	/* sizes around max_sectors and max_segment_size, or small */
	switch (rng(3)) {
	case 0:
		size = unit * (1 + rng(16));
		break;
	case 1:
		size = lim->max_sectors * 512 + (int32_t)(unit * (rng(9) - 4));
		break;
	default:
		size = lim->max_segment_size + (int32_t)(unit * (rng(9) - 4));
		break;
	}
	if (!rng(50))
		size = rng(2) ? 0 : size + 1;
	/* a start just before a segment boundary now and then */
	if (!rng(4))
		addr = ((addr | (uintptr_t)(mask & 0xfffff)) + 1) - unit * (1 + rng(8));
	bio->vcnt = (uint8_t)(rng(5) ? 1 : 1 + rng(4));
	for (unsigned i = 0; i < bio->vcnt; i++) {
		v[i].base = FAKE(addr);
		v[i].len = i + 1 < bio->vcnt ? unit * (1 + rng(4)) : size;
		addr += v[i].len + (rng(2) ? 0 : 4096);
	}
	if (!rng(40))
		v[0].len -= unit;
	bio->iter.size = size;
	if (!rng(20)) {
		bio->iter.done = unit;
		v[0].len += unit;
	}
	if (!rng(40) && bio->vcnt > 1)
		bio->iter.idx = 1;
	if (!rng(60))
		bio->vcnt = 5; /* more than max_vecs */
	if (!rng(60))
		bio->vecs = NULL;
	bio->iter.sector = (uint64_t)rng(1u << 20) * (unit / 512) + (rng(20) ? 0 : 1);
	if (capacity && !rng(4))
		bio->iter.sector = capacity - rng(64) * (unit / 512);
	if (!rng(40))
		bio->iter.sector = UINT64_MAX - rng(64) * (unit / 512);
}

/*
 * The submission fast check (bio_fast_ok() with the queue's fast limits,
 * then size <= max_bytes) against the full path, on random limits and bios
 * at its edges (sizes about max_sectors and max_segment_size, starts near
 * segment boundaries and the capacity, physical blocks larger than logical
 * ones, chunks, odd flags, ops and vector layouts): whatever it takes,
 * bio_check() accepts and bio_split_to_limits() returns whole, as one
 * segment.  It must also take most of the bios it could, so that the
 * common case is really fast.
 */
static void test_fast_path_agrees(void **state)
{
	unsigned fast = 0, could = 0, taken_of_could = 0;

	(void)state;
	for (int round = 0; round < 200000; round++) {
		struct rq_queue_limits lim;
		struct bio_fast_lim fl;
		struct rq_bvec v[5];
		struct rq_bio bio, *piece = NULL;
		uint64_t capacity = rng(3) ? 0 : 1 + rng(1u << 21);
		rq_status_t st = RQ_STS_OK;
		unsigned nsegs = 0;
		bool ok, whole;

		random_limits(&lim);
		limits_fast_lim(&lim, &fl);
		random_bio(&bio, v, &lim, capacity);
		ok = bio_fast_ok(&fl, capacity, &bio) && bio.iter.size <= fl.max_bytes;
		/* the full path: a valid plain read or write, returned whole as one segment */
		if (bio.op <= RQ_OP_WRITE && !(bio.opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA)) &&
		    bio_check(&lim, capacity, &bio) == RQ_STS_OK)
			piece = bio_split_to_limits_status(&lim, &bio, &nsegs, &st);
		whole = piece == &bio && nsegs == 1;
		if (piece && piece != &bio)
			rq_bio_endio(piece); /* a split happened: the front piece goes back */
		if (ok) {
			fast++;
			assert_true(whole);
			assert_int_equal(bio_count_segments(&lim, &bio), 1);
		}
		/* what the fast check is meant to take: one vector from the start, no chunk or pbs rounding */
		if (whole && !bio.iter.idx && !bio.iter.done && bio.vecs[0].len >= bio.iter.size &&
		    !lim.chunk_sectors && lim.physical_block_size == lim.logical_block_size) {
			could++;
			taken_of_could += ok;
		}
	}
	/* the property holds on many fast bios, and the fast check misses none it could take */
	assert_true(fast > 15000 && could > 10000);
	assert_int_equal(taken_of_could, could);
}

/*
 * The fast check follows max_sectors_kb: a single-vector 64 KiB write goes
 * whole under the default limits, is cut into 16 KiB requests once the
 * attribute says 16, and goes whole again at 64 (the store recomputes the
 * queue's fast limits; a stale copy would let it through whole).
 */
static void test_fast_path_follows_max_sectors_kb(void **state)
{
	static const unsigned kbs[] = { 0, 16, 64 };
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE };
	struct mock_dev *m = mock_create(&cfg, NULL);
	void *buf = aligned_alloc(65536, 65536);

	(void)state;
	assert_non_null(m);
	assert_non_null(buf);
	for (unsigned k = 0; k < 3; k++) {
		unsigned expect = kbs[k] == 16 ? 4 : 1, nr;
		struct mock_event *ev;
		struct fx_rec rec;
		char val[16];

		if (kbs[k]) {
			snprintf(val, sizeof(val), "%u", kbs[k]);
			assert_int_equal(rq_queue_attr_set(m->q, "max_sectors_kb", val), 0);
		}
		mock_reset_events(m);
		rq_submit_bio(m->q, fx_bio(&rec, RQ_OP_WRITE, 256, buf, 65536));
		assert_true(fx_wait(&rec, 1, 10000));
		assert_int_equal(rec.status, RQ_STS_OK);
		nr = mock_copy_events(m, MOCK_QUEUE_RQ, &ev);
		assert_int_equal(nr, expect);
		for (unsigned i = 0; i < nr; i++)
			assert_int_equal(ev[i].bytes, 65536 / expect);
		free(ev);
		fx_put(&rec, 1);
	}
	mock_destroy(m);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_fits_whole, teardown_cache),
		cmocka_unit_test_teardown(test_noncontig_1m_by_segments, teardown_cache),
		cmocka_unit_test_teardown(test_noncontig_4k_vectors, teardown_cache),
		cmocka_unit_test_teardown(test_contig_coalesce, teardown_cache),
		cmocka_unit_test_teardown(test_seg_boundary, teardown_cache),
		cmocka_unit_test_teardown(test_lbs_alignment, teardown_cache),
		cmocka_unit_test_teardown(test_pbs_end_alignment, teardown_cache),
		cmocka_unit_test_teardown(test_discard_split, teardown_cache),
		cmocka_unit_test_teardown(test_write_zeroes_and_flush, teardown_cache),
		cmocka_unit_test_teardown(test_property_random_layouts, teardown_cache),
		cmocka_unit_test_teardown(test_nowait_not_split, teardown_cache),
		cmocka_unit_test_teardown(test_chunk_boundary, teardown_cache),
		cmocka_unit_test_teardown(test_fast_path_agrees, teardown_cache),
		cmocka_unit_test_teardown(test_fast_path_follows_max_sectors_kb, teardown_cache),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
