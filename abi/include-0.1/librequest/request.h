/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: requests, what a driver receives.
 *
 * A request is one or more contiguous bios of the same operation, built and
 * merged by the library within the queue's limits.  Its public part is laid
 * out here so drivers and schedulers read it without calls; fields marked
 * "core" are the library's and must not be written by drivers.  The
 * library's own fields and the driver's per-request payload (cmd_size bytes
 * of the tag set) are elsewhere: rq_request_pdu().
 */
#ifndef LIBREQUEST_REQUEST_H
#define LIBREQUEST_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librequest/bio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------- intrusive containers (public) */

/** struct rq_list_node - doubly linked circular list node / head. */
struct rq_list_node {
	struct rq_list_node *next, *prev;
};

/** struct rq_hlist_node - hash chain node. */
struct rq_hlist_node {
	struct rq_hlist_node *next, **pprev;
};

/** struct rq_rb_node - red-black tree node (parent pointer | colour bit). */
struct rq_rb_node {
	uintptr_t parent_color;
	struct rq_rb_node *left, *right;
};

/** struct rq_rb_root - red-black tree root. */
struct rq_rb_root {
	struct rq_rb_node *node;
};

struct rq_queue;
struct rq_hw_ctx;

/** enum rq_state - life of a request, changed atomically by the core. */
enum rq_state {
	RQ_STATE_IDLE = 0,     /* allocated or free, not with the driver */
	RQ_STATE_IN_FLIGHT = 1, /* handed to the driver */
	RQ_STATE_COMPLETE = 2, /* the driver has completed it */
	RQ_STATE_COMPLETING = 3, /* handed to rq_mq_complete_request, not ended yet */
};

/* Core request flags (rq->rq_flags); read-only for drivers. */
#define RQ_RQF_STARTED (1u << 0)      /* the driver has started it */
#define RQ_RQF_SORTED (1u << 1)       /* inserted into a scheduler */
#define RQ_RQF_FLUSH_SEQ (1u << 2)    /* owned by the flush state machine */
#define RQ_RQF_MIXED_MERGE (1u << 3)  /* bios with different flags */
#define RQ_RQF_DONTPREP (1u << 4)     /* driver prepared it already */
#define RQ_RQF_SCHED_TAGS (1u << 5)   /* holds a scheduler tag */
#define RQ_RQF_RESERVED (1u << 6)     /* holds a reserved tag */
#define RQ_RQF_TIMED_OUT (1u << 7)    /* the timeout handler has seen it */
#define RQ_RQF_ELVPRIV (1u << 8)      /* scheduler prepare_request ran */
#define RQ_RQF_HASHED (1u << 9)       /* on the back-merge hash */
#define RQ_RQF_STATS (1u << 10)       /* count in the queue's statistics */
#define RQ_RQF_IO_STAT (1u << 11)
#define RQ_RQF_FLUSH_INTERNAL (1u << 12) /* the flush machinery's own request */

/**
 * struct rq_request - a request as drivers and schedulers see it.
 *
 * The library keeps its own fields behind this part and the driver's
 * payload behind those: never allocate, copy or embed a struct rq_request,
 * and never compute the payload's place from sizeof(struct rq_request);
 * use rq_request_pdu() and rq_request_from_pdu().  Later releases only add
 * fields at the end.  Fields marked "core" are the library's to write.
 */
struct rq_request {
	struct rq_queue *q;       /* owning queue */
	struct rq_hw_ctx *hctx;   /* hardware queue it is dispatched on (mq) */
	uint64_t sector;          /* first sector (512 B units) */
	uint32_t bytes;           /* data bytes not yet completed */
	uint32_t opf;             /* RQ_BIO_* flags */
	uint8_t op;               /* enum rq_op */
	uint8_t state;            /* enum rq_state; core, atomic */
	uint16_t ioprio;          /* RQ_IOPRIO_VALUE() */
	uint16_t nr_segments;     /* data segments the driver will see */
	uint16_t reserved16;      /* core */
	int32_t tag;              /* driver tag, -1 until dispatch */
	int32_t internal_tag;     /* scheduler tag, -1 without a scheduler */
	uint32_t rq_flags;        /* RQ_RQF_*; core */
	int32_t cpu;              /* CPU of the submitter */
	uint64_t start_time_ns;   /* allocated */
	uint64_t io_start_time_ns; /* handed to the driver */
	uint64_t fifo_time;       /* for schedulers: FIFO expiry */
	struct rq_bio *bio;       /* first bio */
	struct rq_bio *biotail;   /* last bio */
	struct rq_request *rq_next; /* batch lists (plug, queue_rqs) */
	struct rq_list_node queuelist; /* owned by whoever queues it */
	struct rq_rb_node rb_node;     /* schedulers: sort tree */
	void *elv_priv[2];             /* schedulers: private */
	struct rq_io_context *ioc;     /* io context of the first bio */
	void *pdu;                     /* core: the driver payload (rq_request_pdu()) */
};

/**
 * rq_request_pdu() - the driver's cmd_size bytes of a request (8-aligned).
 * Context: any.
 * Return: the payload; stable for the request's life.
 */
static inline void *rq_request_pdu(struct rq_request *rq)
{
	return rq->pdu;
}

/**
 * rq_request_from_pdu() - the request a driver payload belongs to (the
 * word just before the payload names it).
 * Context: any.
 * Return: the request.
 */
static inline struct rq_request *rq_request_from_pdu(void *pdu)
{
	return ((struct rq_request **)pdu)[-1];
}

/** rq_request_sectors() - sectors not yet completed. */
static inline uint32_t rq_request_sectors(const struct rq_request *rq)
{
	return rq->bytes >> RQ_SECTOR_SHIFT;
}

/** rq_request_end_sector() - the sector just past the request. */
static inline uint64_t rq_request_end_sector(const struct rq_request *rq)
{
	return rq->sector + rq_request_sectors(rq);
}

/**
 * struct rq_req_iter - walks every data segment of a request, bio by bio.
 */
struct rq_req_iter {
	struct rq_bio *bio;
	struct rq_bvec_iter it;
};

/** rq_req_iter_init() - start a walk at the first uncompleted byte. */
static inline void rq_req_iter_init(struct rq_req_iter *ri, struct rq_request *rq)
{
	struct rq_bvec_iter none = { 0, 0, 0, 0 };

	ri->bio = rq->bio;
	ri->it = ri->bio ? ri->bio->iter : none;
}

/**
 * rq_req_iter_next() - the next piece of data (never longer than a vector).
 * Return: false when the walk is over.
 */
static inline bool rq_req_iter_next(struct rq_req_iter *ri, struct rq_segment *seg)
{
	while (ri->bio) {
		if (rq_bio_next_segment(ri->bio, &ri->it, seg))
			return true;
		ri->bio = ri->bio->next;
		if (ri->bio)
			ri->it = ri->bio->iter;
	}
	return false;
}

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_REQUEST_H */
