/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The log both test drivers keep of what they were asked to do, in one
 * form: the multi-queue mock (mock_driver.h) logs every call, the
 * single-queue device (sq_driver.h) every request its request_fn takes,
 * as MOCK_QUEUE_RQ events.  So a check written against a recorder (the
 * shared workloads of workload.h) holds for either front end.
 *
 * The recorder also walks data requests as a driver would (rq_req_iter)
 * and keeps the most pieces seen in one request and how many requests'
 * pieces did not add up to rq->bytes.
 *
 * Locking: a recorder is guarded by its driver's lock, given to
 * recorder_init().  Functions ending in _locked are called with it held;
 * the others take it, so call them without it.
 */
#ifndef RQ_TEST_RECORDER_H
#define RQ_TEST_RECORDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <librequest/librequest.h>

enum mock_call {
	MOCK_QUEUE_RQ,         /* queue_rq (mq); request_fn took a request (sq) */
	MOCK_COMMIT_RQS,
	MOCK_QUEUE_RQS,
	MOCK_COMPLETE,
	MOCK_TIMEOUT,
	MOCK_GET_BUDGET,
	MOCK_PUT_BUDGET,
	MOCK_INIT_HCTX,
	MOCK_EXIT_HCTX,
	MOCK_INIT_REQUEST,
	MOCK_EXIT_REQUEST,
	MOCK_POLL,
};

/* For the @call of the functions below: events of every kind. */
#define RECORDER_ALL (-1)

/* One recorded call. */
struct mock_event {
	enum mock_call call;
	unsigned hctx;        /* hw queue index (mq, where it applies; sq: 0) */
	int op;               /* request fields at the time of the call */
	uint32_t opf;
	uint64_t sector;
	uint32_t bytes;
	uint16_t nr_segments;
	bool last;            /* queue_rq's last */
	rq_status_t ret;      /* what queue_rq returned (sq: always RQ_STS_OK) */
	int tag;              /* rq->tag (-1 untagged, or no request) */
	uint64_t when_ns;     /* the library's clock (rq_clock_ns) at the call */
};

/** struct recorder - a driver's log; its fields are read through the functions below. */
struct recorder {
	pthread_mutex_t *lock;        /* the driver's lock: guards all below */
	struct mock_event *events;
	unsigned nr_events, max_events;
	unsigned max_pieces;          /* most data pieces walked in one request */
	unsigned long bad_requests;   /* requests whose walk did not add up */
};

/** recorder_init() - an empty log guarded by @lock (the driver's). */
void recorder_init(struct recorder *r, pthread_mutex_t *lock);
/** recorder_free() - free the log (nothing may record any more). */
void recorder_free(struct recorder *r);

/**
 * recorder_add_locked() - log a @call about @rq (NULL: none), with the
 * request's fields, tag and the clock; the caller fills in the rest.
 * Context: the driver's lock held.
 * Return: the new event, valid until the lock is dropped.
 */
struct mock_event *recorder_add_locked(struct recorder *r, enum mock_call call,
				       struct rq_request *rq);
/**
 * recorder_walk_locked() - walk a data request's pieces as a driver would,
 * for recorder_walk_stats().  Context: the driver's lock held.
 */
void recorder_walk_locked(struct recorder *r, struct rq_request *rq);

/** recorder_count() - events of kind @call (RECORDER_ALL: all) since the last reset. */
unsigned recorder_count(struct recorder *r, int call);
/** recorder_find() - the @i-th (0-based) event of kind @call (or any); false if none. */
bool recorder_find(struct recorder *r, int call, unsigned i, struct mock_event *out);
/** recorder_copy() - malloc'ed copy of the events of kind @call (free it); returns the count. */
unsigned recorder_copy(struct recorder *r, int call, struct mock_event **out);
/** recorder_reset() - forget the events (not the walk statistics). */
void recorder_reset(struct recorder *r);
/** recorder_walk_stats() - most pieces in one walked request, and walks that did not add up. */
void recorder_walk_stats(struct recorder *r, unsigned *max_pieces, unsigned long *bad_requests);

#endif /* RQ_TEST_RECORDER_H */
