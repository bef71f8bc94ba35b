/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the counters every queue keeps.
 */
#ifndef LIBREQUEST_STATS_H
#define LIBREQUEST_STATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/** struct rq_queue_stats - counters kept by every queue. */
struct rq_queue_stats {
	uint32_t size;           /* bytes rq_queue_get_stats() filled */
	uint64_t bios;           /* bios submitted (after splits: pieces) */
	uint64_t splits;         /* bios split */
	uint64_t requests;       /* requests allocated */
	uint64_t dispatched;     /* queue_rq calls that returned OK */
	uint64_t completed;      /* requests ended */
	uint64_t merges_back;    /* bios merged at a request's end */
	uint64_t merges_front;   /* bios merged at a request's start */
	uint64_t merges_rq;      /* requests merged with requests */
	uint64_t plug_merges;    /* bios merged on a plug */
	uint64_t resource;       /* RESOURCE/DEV_RESOURCE returns */
	uint64_t requeues;       /* requests requeued */
	uint64_t timeouts;       /* timeout handler calls */
	uint64_t flushes;        /* flush requests issued */
	uint64_t errors;         /* requests ended with a status */
	uint64_t invalid;        /* bios rejected before a request */
};

/**
 * rq_queue_get_stats() - sum the queue's counters.
 * @q: the queue.
 * @st: receives the sums: the first @size bytes, size set to what was filled.
 * @size: sizeof(*@st) as the caller knows it.
 *
 * The counters are summed one by one while I/O goes on: the sums are not
 * one instant's.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's statistics mutex briefly.
 * Return: 0, or -EINVAL when @size cannot hold the size field.
 */
int rq_queue_get_stats(struct rq_queue *q, struct rq_queue_stats *st, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_STATS_H */
