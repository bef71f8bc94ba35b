/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A request as the library lays it out: the public part drivers and
 * schedulers see (struct rq_request, include/librequest/request.h), the
 * library's own fields behind it, then the driver's payload.
 *
 *   | struct rq_request | library fields | owner | driver payload (cmd_size) |
 *   ^ rq                                          ^ rq->pdu
 *
 * Drivers find the payload through rq->pdu and the request through the
 * word just before the payload (rq_request_from_pdu()), so neither the
 * public part nor the library's part is baked into a driver: both may grow
 * in a later release.  Never installed.
 */
#ifndef RQ_INTERNAL_REQUEST_H
#define RQ_INTERNAL_REQUEST_H

#include <stddef.h>

#include <librequest/elevator.h>
#include <librequest/request.h>

#include "compiler.h"

struct rq_sw_ctx;

/* The library's part of a request (rq_priv()). */
struct rq_request_priv {
	struct rq_request rq;     /* the public part, first */
	struct rq_sw_ctx *ctx;    /* software queue it was made on */
	uint32_t gen;             /* bumped at every issue (timeout scan) */
	uint8_t core_busy;        /* the timeout scan holds it (2: release handed over) */
	uint8_t complete_status;  /* status given to rq_mq_complete_request() */
	uint8_t obs_started;      /* iostats counted its issue (lib/trace.c) */
	struct rq_hlist_node hash; /* back-merge hash */
	void (*end_io)(struct rq_request *rq, rq_status_t status); /* flush sequencing */
	void *end_io_data;        /* the submitter's completion mailbox */
	struct {
		uint32_t seq;          /* flush steps done */
		struct rq_list_node list;
	} flush;                   /* flush sequencing */
	struct rq_request *owner;  /* last: the word before the payload */
};

_Static_assert(offsetof(struct rq_request_priv, owner) + sizeof(void *) ==
		       sizeof(struct rq_request_priv),
	       "the payload must follow the owner word");

static inline struct rq_request_priv *rq_priv(const struct rq_request *rq)
{
	return RQ_CONTAINER_OF(rq, struct rq_request_priv, rq);
}

/* Bytes one request takes with @cmd_size bytes of driver payload, 64-aligned. */
static inline size_t request_size(unsigned cmd_size)
{
	return (sizeof(struct rq_request_priv) + cmd_size + 63) & ~(size_t)63;
}

/* Point a new (zeroed) request at its payload and the payload back at it. */
static inline void request_layout_init(struct rq_request *rq)
{
	struct rq_request_priv *p = rq_priv(rq);

	p->owner = rq;
	rq->pdu = p + 1;
}

#endif /* RQ_INTERNAL_REQUEST_H */
