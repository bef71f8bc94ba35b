/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: bios, the unit of I/O an application submits.
 *
 * A bio names an operation, a start sector (always 512-byte units, whatever the
 * logical block size) and a vector of caller buffers.  The library may split it
 * to the queue's limits; the caller's end_io runs exactly once, after every
 * piece has ended, with the first error any piece saw.
 */
#ifndef LIBREQUEST_BIO_H
#define LIBREQUEST_BIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Sector shift: sectors are always 512 bytes. */
#define RQ_SECTOR_SHIFT 9
#define RQ_SECTOR_SIZE (1u << RQ_SECTOR_SHIFT)

/* ---------------------------------------------------------------- status */

/**
 * typedef rq_status_t - completion status of a bio or request, as blk_status_t.
 */
typedef uint8_t rq_status_t;

#define RQ_STS_OK 0
#define RQ_STS_NOTSUPP 1
#define RQ_STS_TIMEOUT 2
#define RQ_STS_NOSPC 3
#define RQ_STS_TRANSPORT 4
#define RQ_STS_TARGET 5
#define RQ_STS_MEDIUM 7
#define RQ_STS_PROTECTION 8
#define RQ_STS_RESOURCE 9
#define RQ_STS_IOERR 10
#define RQ_STS_DEV_RESOURCE 13
#define RQ_STS_AGAIN 12
#define RQ_STS_OFFLINE 16
#define RQ_STS_INVAL 19

/**
 * rq_status_to_errno() - the negative errno a status stands for.
 * @status: an RQ_STS_* value.
 *
 * Context: any thread, any hook; a pure function, never blocks.
 * Return: 0 for RQ_STS_OK, else a negative errno (-EIO for unknown values).
 */
int rq_status_to_errno(rq_status_t status);

/**
 * rq_errno_to_status() - the status that best stands for an errno.
 * @err: an errno, positive or negative; 0 means success.
 *
 * Context: any thread, any hook; a pure function, never blocks.
 * Return: the matching RQ_STS_* value (RQ_STS_OK for 0), RQ_STS_IOERR for
 * unknown errnos.
 */
rq_status_t rq_errno_to_status(int err);

/**
 * rq_status_name() - a short constant name for a status, for messages.
 * @status: an RQ_STS_* value.
 *
 * Context: any thread, any hook; a pure function, never blocks.
 * Return: a static string: "OK", "IOERR", ...; "UNKNOWN" for values with no
 * name.  Never NULL.
 */
const char *rq_status_name(rq_status_t status);

/* ------------------------------------------------------------ operations */

/** enum rq_op - what a bio (and the request built from it) does. */
enum rq_op {
	RQ_OP_READ = 0,
	RQ_OP_WRITE = 1,
	RQ_OP_FLUSH = 2,        /* empty cache flush; no data */
	RQ_OP_DISCARD = 3,      /* no data; size says how much */
	RQ_OP_WRITE_ZEROES = 4, /* no data; size says how much */
	RQ_OP_LAST
};

/** rq_op_is_write() - true for ops that change the medium. */
static inline bool rq_op_is_write(unsigned op)
{
	return op & 1u || op == RQ_OP_DISCARD || op == RQ_OP_WRITE_ZEROES ||
	       op == RQ_OP_FLUSH;
}

/** rq_op_has_data() - true for ops that carry data buffers. */
static inline bool rq_op_has_data(unsigned op)
{
	return op == RQ_OP_READ || op == RQ_OP_WRITE;
}

/* Bio flags (bi_opf modifiers), also carried by requests. */
#define RQ_BIO_SYNC (1u << 0)     /* someone waits for this */
#define RQ_BIO_META (1u << 1)     /* filesystem metadata */
#define RQ_BIO_PRIO (1u << 2)     /* boost priority */
#define RQ_BIO_FUA (1u << 3)      /* forced unit access: on media at completion */
#define RQ_BIO_PREFLUSH (1u << 4) /* flush the write cache before the data */
#define RQ_BIO_NOMERGE (1u << 5)  /* never merge with another */
#define RQ_BIO_RAHEAD (1u << 6)   /* read-ahead: may fail early */
#define RQ_BIO_IDLE (1u << 7)     /* anticipate more I/O: an idle hint */
#define RQ_BIO_NOWAIT (1u << 8)   /* fail with RQ_STS_AGAIN instead of sleeping */
#define RQ_BIO_POLLED (1u << 9)   /* go to a poll queue; reap with rq_mq_poll() */
#define RQ_BIO_FLAGS_ALL 0x3ffu

/* I/O priorities, as ioprio_set(2): class in the top 3 bits, level below. */
#define RQ_IOPRIO_CLASS_NONE 0
#define RQ_IOPRIO_CLASS_RT 1
#define RQ_IOPRIO_CLASS_BE 2
#define RQ_IOPRIO_CLASS_IDLE 3
#define RQ_IOPRIO_CLASS_SHIFT 13
#define RQ_IOPRIO_VALUE(cls, lvl) ((uint16_t)(((cls) << RQ_IOPRIO_CLASS_SHIFT) | (lvl)))
#define RQ_IOPRIO_CLASS(p) ((unsigned)(p) >> RQ_IOPRIO_CLASS_SHIFT)
#define RQ_IOPRIO_LEVEL(p) ((unsigned)(p) & 0x7u)

/* ---------------------------------------------------------------- vectors */

/** struct rq_bvec - one caller buffer. */
struct rq_bvec {
	void *base;   /* start of the buffer */
	uint32_t len; /* bytes */
};

/**
 * struct rq_bvec_iter - position inside a bio's vector.
 * @sector: device sector the position stands for.
 * @size: bytes left from here.
 * @idx: current vector index.
 * @done: bytes already consumed from vecs[idx].
 */
struct rq_bvec_iter {
	uint64_t sector;
	uint32_t size;
	uint32_t idx;
	uint32_t done;
};

struct rq_bio;
struct rq_io_context;

/**
 * typedef rq_bio_end_io_t - completion callback; runs once per bio.
 *
 * When it runs, bio->status holds the result, and op, ioprio, ioc, vecs,
 * vcnt, max_vecs, private_data and end_io are as the submitter left them;
 * so is opf, except that RQ_BIO_PREFLUSH and RQ_BIO_FUA may be cleared (a
 * queue without a write cache drops both; after a split only the front
 * piece keeps PREFLUSH).  bio->iter is not kept: the library advances it as
 * the bio is split and completed, so it no longer describes the I/O that
 * was asked for:
 *
 *   - a bio split to the queue's limits holds the position of its last
 *     piece: iter.sector advanced past the front pieces, iter.size the
 *     last piece's bytes (then as below for that piece);
 *   - a bio completed by bytes is advanced to its end: iter.size 0,
 *     iter.sector just past its last sector.  That is every bio
 *     rq_mq_update_request() ends, and every bio a single-queue driver
 *     ends (rq_sq_end_request*() always count bytes);
 *   - otherwise (multi-queue rq_mq_end_request() on a whole request, a bio
 *     rejected at submission, a request the library fails) the bio keeps
 *     the iter it was submitted with.
 *
 * A caller that needs the start sector or the length in end_io saves them
 * before rq_submit_bio() (in its own structure reached through
 * private_data, for instance).  Walking the data again from vecs[0] works:
 * the vectors are unchanged.
 */
typedef void (*rq_bio_end_io_t)(struct rq_bio *bio);

/**
 * struct rq_bio - one I/O.
 *
 * Fill @op, @opf, @iter.sector, the vector (rq_bio_add_vec) and @end_io, then
 * call rq_submit_bio().  Fields under "core" belong to the library while the
 * bio is submitted.  A bio may live in caller memory (rq_bio_init) or come
 * from the per-thread cache (rq_bio_alloc / rq_bio_put).
 *
 * What each op needs (sectors are 512 bytes; sector and size must be
 * multiples of the logical block size):
 *
 *   RQ_OP_READ, RQ_OP_WRITE    vectors added with rq_bio_add_vec(), which
 *                              sets iter.size to their sum; iter.sector
 *   RQ_OP_DISCARD,             no vectors (vcnt 0); iter.sector the first
 *   RQ_OP_WRITE_ZEROES         sector, iter.size the length in bytes, set
 *                              by hand (non-zero; the queue's
 *                              max_discard_sectors / max_write_zeroes_sectors
 *                              must be non-zero, else RQ_STS_NOTSUPP; a
 *                              larger one is split to them)
 *   RQ_OP_FLUSH                no vectors, iter.size 0; iter.sector is
 *                              ignored
 *
 * The driver sees a request with that op, rq->sector at iter.sector and
 * rq->bytes equal to iter.size (0 for a flush), unless the bio was split to
 * the limits or merged with another.  A READ or WRITE without
 * vectors (iter.size 0, or a size set by hand with no vectors to cover it),
 * and a data-less op with vectors or with the wrong size, end at submission
 * with RQ_STS_INVAL; the driver never sees them.
 */
struct rq_bio {
	/* filled by the submitter */
	struct rq_bvec_iter iter; /* sector, size in bytes, position */
	uint8_t op;               /* enum rq_op */
	uint8_t vcnt;             /* vectors in use */
	uint8_t max_vecs;         /* capacity of @vecs */
	volatile uint8_t status;  /* RQ_STS_*; set before end_io runs */
	uint16_t ioprio;          /* RQ_IOPRIO_VALUE(), 0: inherit the context's */
	uint16_t core_flags;      /* core: RQ_BIOF_* */
	uint32_t opf;             /* RQ_BIO_* flags */
	struct rq_bvec *vecs;     /* caller buffers */
	rq_bio_end_io_t end_io;   /* called once when the bio has ended */
	void *private_data;       /* for the submitter */
	struct rq_io_context *ioc; /* NULL: the submitting thread's context */

	/* core */
	struct rq_bio *next;      /* next bio of the same request */
	struct rq_bio *parent;    /* chained parent (split) */
	int remaining;            /* chained pieces still in flight */
	void *cache;              /* owning bio cache, NULL for caller memory */
	struct rq_bvec inline_vecs[1];
};

/** Inline vectors of a bio returned by rq_bio_alloc(). */
#define RQ_BIO_INLINE_VECS 4

/**
 * rq_bio_init() - make caller memory a bio with room for @max_vecs vectors.
 * @bio: memory to initialise.
 * @vecs: vector storage, or NULL to use the single inline vector (max 1).
 * @max_vecs: entries of @vecs.
 *
 * Every field is reset (op RQ_OP_READ, size 0, no end_io).  Such a bio is
 * the caller's: rq_bio_put() ignores it, and it must outlive its end_io.
 *
 * Context: any thread; takes no lock, never allocates, never blocks.
 */
void rq_bio_init(struct rq_bio *bio, struct rq_bvec *vecs, unsigned max_vecs);

/**
 * rq_bio_alloc() - take a bio from the calling thread's cache.
 * @nr_vecs: vectors needed, 0..255; up to RQ_BIO_INLINE_VECS come without an
 *	extra allocation.
 *
 * Context: any thread; no heap allocation once the cache is warm.
 * Return: an initialised bio, NULL if memory is exhausted or @nr_vecs > 255.
 */
struct rq_bio *rq_bio_alloc(unsigned nr_vecs);

/**
 * rq_bio_put() - give a bio from rq_bio_alloc() back.
 * @bio: the bio, after its end_io ran (possibly from inside end_io); NULL
 *	and bios in caller memory (rq_bio_init()) are ignored.
 *
 * Context: any thread; never blocks.  On the allocating thread it goes back
 * to that thread's cache; from another thread it is pushed lock-free to the
 * allocator's return stack, or freed once the allocating thread has exited.
 */
void rq_bio_put(struct rq_bio *bio);

/**
 * rq_bio_add_vec() - append a buffer to a bio and grow its size.
 * @bio: the bio, not yet submitted.
 * @base: start of the buffer.
 * @len: bytes; a non-zero multiple of 512 (RQ_SECTOR_SIZE).
 *
 * The checks, in this order; on any error the bio is unchanged:
 *
 *   1. -EINVAL if @len is 0, if @len is not a multiple of 512 (1..511,
 *      513, 4095, ...), or if @bio is a piece made by rq_bio_split()
 *      (it shares another bio's vectors);
 *   2. -ENOSPC if the bio already holds max_vecs vectors;
 *   3. -EINVAL if iter.size + @len would exceed UINT32_MAX (a bio carries
 *      less than 4 GiB).
 *
 * Nothing else is checked here: @base is not looked at, the op is not (a
 * data-less op with vectors ends with RQ_STS_INVAL at submission), nor is
 * alignment to a logical block larger than 512 bytes (also checked at
 * submission).
 *
 * Context: the bio's owner, before submission; takes no lock, never blocks.
 * Return: 0; -EINVAL or -ENOSPC as above.
 */
int rq_bio_add_vec(struct rq_bio *bio, void *base, uint32_t len);

/**
 * rq_bio_endio() - end a bio with its current status.
 * @bio: the bio; bio->status set first.
 *
 * Runs end_io, or for a piece of a split counts down its parent: the last
 * piece to end passes the first error up and ends the parent.  Drivers
 * normally end requests, not bios; this is for code that handles bios
 * itself.
 *
 * Context: any thread; takes no lock of the library; end_io runs on the
 * calling thread, so the caller must allow whatever end_io does.
 */
void rq_bio_endio(struct rq_bio *bio);

/**
 * rq_bio_split() - split off the first @sectors of @bio.
 * @bio: the bio to split; afterwards it covers the rest.
 * @sectors: sectors of the front piece, > 0 and < bio size.
 *
 * The front piece shares @bio's vectors and is chained to it: @bio's end_io
 * runs once, after both pieces ended, with the first error.
 *
 * Context: the bio's owner, before submission; may allocate (the calling
 * thread's bio cache), never blocks otherwise.
 * Return: the front piece (from the calling thread's cache), or NULL with
 * nothing changed if @sectors is out of range or memory is exhausted.
 */
struct rq_bio *rq_bio_split(struct rq_bio *bio, unsigned sectors);

/** rq_bio_sectors() - bytes remaining in @bio, in sectors. */
static inline uint32_t rq_bio_sectors(const struct rq_bio *bio)
{
	return bio->iter.size >> RQ_SECTOR_SHIFT;
}

/** rq_bio_end_sector() - the sector just past @bio. */
static inline uint64_t rq_bio_end_sector(const struct rq_bio *bio)
{
	return bio->iter.sector + rq_bio_sectors(bio);
}

/**
 * struct rq_segment - one contiguous piece of data, as produced by
 * rq_bio_next_segment().
 */
struct rq_segment {
	void *base;
	uint32_t len;
};

/**
 * rq_bio_next_segment() - walk the data of a bio from @it.
 * @bio: the bio (for its vectors).
 * @it: position; start from a copy of bio->iter.
 * @seg: filled with the next piece.
 *
 * Return: false once @it->size is 0.
 */
static inline bool rq_bio_next_segment(const struct rq_bio *bio,
				       struct rq_bvec_iter *it,
				       struct rq_segment *seg)
{
	const struct rq_bvec *v;
	uint32_t len;

	if (!it->size)
		return false;
	v = &bio->vecs[it->idx];
	len = v->len - it->done;
	if (len > it->size)
		len = it->size;
	seg->base = (char *)v->base + it->done;
	seg->len = len;
	it->size -= len;
	it->sector += len >> RQ_SECTOR_SHIFT;
	it->done += len;
	if (it->done == v->len) {
		it->idx++;
		it->done = 0;
	}
	return true;
}

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_BIO_H */
