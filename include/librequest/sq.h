/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the single-queue front end (the request_fn request layer of
 * Linux 4.x).
 *
 * One queue, one lock.  Bios are split, merged and plugged as on the
 * multi-queue front end; requests come from a pool bounded by nr_requests
 * and go through a single-queue scheduler (noop, deadline, cfq) onto the
 * dispatch queue.  Whenever there is new work the library calls the
 * driver's request_fn with the queue lock held; the driver takes requests
 * with rq_sq_peek_request() / rq_sq_start_request() (or both at once,
 * rq_sq_fetch_request()), may drop and retake the lock, and ends them by
 * bytes.  The point of having this front end is the contrast with the
 * multi-queue one: every submitter and completer meets on the queue lock.
 *
 * What may run at the same time:
 *
 *   operation                            lock
 *   request_fn                           called with the queue lock held
 *   rq_sq_peek/start/fetch_request       queue lock held (inside request_fn,
 *                                        or after rq_sq_lock())
 *   rq_sq_*_locked, stop/start, tags     queue lock held
 *   rq_sq_end_request, rq_sq_run_queue   not held (they take it)
 *   rq_submit_bio and the rest of queue.h as for any queue
 */
#ifndef LIBREQUEST_SQ_H
#define LIBREQUEST_SQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librequest/bio.h>
#include <librequest/queue.h>
#include <librequest/request.h>
#include <librequest/mq.h>
#include <librequest/elevator.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ABI version of struct rq_sq_ops. */
#define RQ_SQ_OPS_ABI 1

/**
 * struct rq_sq_ops - a single-queue driver.  Begin with RQ_SQ_OPS_INIT;
 * only request_fn is required.
 */
struct rq_sq_ops {
	uint32_t size;
	uint32_t abi_version;
	/**
	 * @request_fn: there is work: take requests with rq_sq_fetch_request()
	 * (or peek + start) until it returns NULL or the device is full.
	 * Context: queue lock held; may drop and retake it.
	 */
	void (*request_fn)(struct rq_queue *q);
	/**
	 * @timeout: a started request passed its deadline.  RQ_EH_DONE: the
	 * driver ends it (now or later); RQ_EH_RESET_TIMER: another period.
	 * Context: the service thread, queue lock held.
	 */
	enum rq_timeout_ret (*timeout)(struct rq_request *rq);
	/** @init_request / @exit_request: set up / tear down a pool request's payload. */
	int (*init_request)(struct rq_queue *q, struct rq_request *rq);
	void (*exit_request)(struct rq_queue *q, struct rq_request *rq);
};

#define RQ_SQ_OPS_INIT .size = sizeof(struct rq_sq_ops), .abi_version = RQ_SQ_OPS_ABI

/**
 * struct rq_sq_config - how to make a single-queue queue.  Begin an
 * initialiser with RQ_SQ_CONFIG_INIT (or set size to its sizeof).
 */
struct rq_sq_config {
	uint32_t size;                  /* sizeof(struct rq_sq_config) as the caller knew it */
	const struct rq_sq_ops *ops;
	const struct rq_queue_limits *limits; /* NULL: defaults */
	uint64_t capacity;              /* sectors; 0: unbounded */
	const char *scheduler;          /* NULL: "cfq" when registered, else "noop" */
	unsigned nr_requests;           /* request pool; 0: 128 (BLKDEV_MAX_RQ) */
	unsigned cmd_size;              /* driver payload bytes per request */
	pthread_mutex_t *queue_lock;    /* the driver's lock, or NULL: the library's */
	unsigned timeout_ms;            /* request timeout; 0: 30000 */
	void *queuedata;                /* rq_queue_driver_data() */
};

/** Start a struct rq_sq_config initialiser with this. */
#define RQ_SQ_CONFIG_INIT .size = sizeof(struct rq_sq_config)

/**
 * rq_sq_alloc_queue() - make a single-queue queue.
 * @cfg: ops (begun with RQ_SQ_OPS_INIT), limits, scheduler, pool size,
 *	lock and queuedata.
 * @out: receives the queue.
 *
 * The request pool is allocated (ops->init_request runs for each request)
 * and the scheduler attached on the calling thread; the first queue of the
 * process starts the service thread (unless rq_service_manual() was
 * called).
 *
 * Context: any thread, not from a driver or scheduler hook; allocates; may
 * sleep.
 * Return: 0 and *@out; -EINVAL (bad config or limits, nr_requests outside
 * 4..65536, cmd_size above 1 MiB, unknown scheduler, ops without
 * request_fn, unknown ABI), -ENOMEM, or the error the scheduler's
 * init_queue returned.
 */
int rq_sq_alloc_queue(const struct rq_sq_config *cfg, struct rq_queue **out);

/**
 * rq_queue_is_sq() - whether @q belongs to the single-queue front end.
 * @q: the queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: true for a queue made by rq_sq_alloc_queue().
 */
bool rq_queue_is_sq(const struct rq_queue *q);

/**
 * rq_sq_lock() / rq_sq_unlock() - take / drop the queue lock.
 * @q: a single-queue queue.
 *
 * rq_sq_unlock() also ends the bios of requests ended under the lock: their
 * end_io run on the calling thread after the lock is dropped.
 *
 * Context: any thread not holding the lock (rq_sq_lock(); it is not
 * recursive) / holding it (rq_sq_unlock()); rq_sq_lock() blocks while
 * another thread holds it.  Not inside request_fn, which runs with it held.
 */
void rq_sq_lock(struct rq_queue *q);
void rq_sq_unlock(struct rq_queue *q);

/**
 * rq_sq_peek_request() - the next request for the driver, left on the
 * dispatch queue (the scheduler is asked to move more there when it is
 * empty).  Context: queue lock held.  Return: the request or NULL.
 */
struct rq_request *rq_sq_peek_request(struct rq_queue *q);

/**
 * rq_sq_start_request() - take a peeked request off the dispatch queue:
 * it is the driver's now and its timeout runs.  Context: queue lock held.
 */
void rq_sq_start_request(struct rq_request *rq);

/**
 * rq_sq_fetch_request() - peek and start: the next request, now the
 * driver's.
 * @q: the queue.
 *
 * Context: queue lock held (request_fn, or after rq_sq_lock()).
 * Return: the request or NULL when nothing is ready.
 */
struct rq_request *rq_sq_fetch_request(struct rq_queue *q);

/**
 * rq_sq_end_request() / rq_sq_end_request_locked() - complete @bytes of a
 * started request with @status.
 * @rq: a started request.
 * @status: status for those bytes.
 * @bytes: bytes completed from the start of what remains.
 *
 * Ending a request that is not started does nothing.  The _locked variant
 * defers the bios' end_io until the lock is dropped (by the library, or
 * the service thread within a millisecond when the driver holds it).
 *
 * Context: rq_sq_end_request(): any thread, queue lock NOT held (it takes
 * it; end_io run on the calling thread after the unlock).
 * rq_sq_end_request_locked(): queue lock held.
 * Return: true if bytes remain (the request is still the driver's), false
 * when it has ended and been freed, or was not started.
 */
bool rq_sq_end_request(struct rq_request *rq, rq_status_t status, unsigned bytes);
bool rq_sq_end_request_locked(struct rq_request *rq, rq_status_t status, unsigned bytes);

/**
 * rq_sq_end_request_all() / rq_sq_end_request_all_locked() - end all
 * remaining bytes, and so the request.
 * @rq: a started request.
 * @status: its status.
 *
 * Context: as rq_sq_end_request() / rq_sq_end_request_locked(): queue lock
 * not held / held.
 */
void rq_sq_end_request_all(struct rq_request *rq, rq_status_t status);
void rq_sq_end_request_all_locked(struct rq_request *rq, rq_status_t status);

/**
 * rq_sq_requeue_request() - give a started request back; it goes to the
 * front of the dispatch queue.  Context: queue lock held.
 */
void rq_sq_requeue_request(struct rq_request *rq);

/**
 * rq_sq_stop_queue() / rq_sq_start_queue() - no request_fn calls while
 * stopped; start runs the queue.  Context: queue lock held.
 */
void rq_sq_stop_queue(struct rq_queue *q);
void rq_sq_start_queue(struct rq_queue *q);
/**
 * rq_sq_queue_stopped() - whether the queue is stopped.
 * @q: the queue.
 *
 * Context: queue lock held for a stable answer; never blocks.
 * Return: true while stopped (rq_sq_stop_queue()).
 */
bool rq_sq_queue_stopped(struct rq_queue *q);

/**
 * rq_sq_run_queue() - call request_fn if there is work.
 * @q: the queue.
 *
 * Nothing is called while the queue is stopped or quiesced.
 *
 * Context: any thread, queue lock NOT held: it takes it, runs request_fn on
 * the calling thread and ends the finished bios after the unlock.
 */
void rq_sq_run_queue(struct rq_queue *q);
/**
 * rq_sq_run_queue_locked() - the same with the queue lock held (the
 * kernel's __blk_run_queue): for a completion path that ends requests
 * under the lock and refills the device before dropping it, so nothing
 * touches the queue after the unlock (a queue being destroyed may go once
 * its last request has ended).  From inside request_fn it only asks for
 * one more round.
 * @q: the queue.
 *
 * Context: queue lock held; request_fn runs on the calling thread.
 */
void rq_sq_run_queue_locked(struct rq_queue *q);

/**
 * rq_sq_delay_queue() - run the queue after @msecs, from the service thread
 * (or rq_service_run()).
 * @q: the queue.
 * @msecs: delay; an earlier pending run wins.
 *
 * Context: any thread, lock held or not, any hook; lock-free, never blocks.
 */
void rq_sq_delay_queue(struct rq_queue *q, unsigned msecs);

/* ------------------------------------------------- tagged command queueing */

/**
 * rq_sq_init_tags() - give the queue a tag map of @depth (1..4096) for
 * drivers that keep several requests in flight and name them by tag.
 * @q: the queue.
 * @depth: tags, 1..4096; with a map already there, it is resized.
 *
 * Context: queue lock held; allocates.
 * Return: 0; -EINVAL for a depth outside 1..4096; -ENOMEM; as
 * rq_sq_resize_tags() when the queue already has tags.
 */
int rq_sq_init_tags(struct rq_queue *q, unsigned depth);

/**
 * rq_sq_start_tag() - start a peeked request and give it a free tag
 * (rq->tag).  Return: 0, or 1 (and nothing changes) when every tag is busy.
 * Context: queue lock held.
 */
int rq_sq_start_tag(struct rq_queue *q, struct rq_request *rq);

/**
 * rq_sq_end_tag() - free a request's tag.  Ending a request frees its tag
 * by itself; this is for drivers that release it early.
 * @q: the queue.
 * @rq: the request; one without a tag is ignored.
 *
 * Context: queue lock held; never blocks.
 */
void rq_sq_end_tag(struct rq_queue *q, struct rq_request *rq);

/**
 * rq_sq_find_tag() - the request holding @tag.
 * @q: the queue.
 * @tag: a tag.
 *
 * Context: queue lock held; never blocks.
 * Return: the request, or NULL when @tag is free, out of range, or the
 * queue has no tags.
 */
struct rq_request *rq_sq_find_tag(struct rq_queue *q, unsigned tag);

/**
 * rq_sq_resize_tags() - change the tag depth of a queue with tags.
 * @q: the queue.
 * @depth: the new depth, 1..4096.
 *
 * Context: queue lock held; may allocate.
 * Return: 0; -EBUSY when a tag at or above @depth is in use; -EINVAL for a
 * depth outside 1..4096 or a queue without tags (rq_sq_init_tags());
 * -ENOMEM.
 */
int rq_sq_resize_tags(struct rq_queue *q, unsigned depth);

/* ------------------------------------------------------- scheduler hooks */

/** ABI version of struct rq_elevator_sq_ops. */
#define RQ_ELV_SQ_ABI 1

/**
 * struct rq_elevator_sq_ops - hooks of a single-queue scheduler (the
 * kernel's elevator_ops), all called with the queue lock held.  Required:
 * add_request and dispatch.
 */
struct rq_elevator_sq_ops {
	uint32_t size;          /* sizeof(struct rq_elevator_sq_ops) */
	uint32_t abi_version;   /* RQ_ELV_SQ_ABI */
	/** @init_queue / @exit_queue: per-queue data. */
	int (*init_queue)(struct rq_queue *q, void **data);
	void (*exit_queue)(struct rq_queue *q, void *data);
	/** @merge: find a request @bio could front-merge into (*@rq). */
	int (*merge)(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio);
	/** @merged: @rq grew by a merge of @type. */
	void (*merged)(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type);
	/** @merge_req: @next was merged into @rq and leaves the scheduler. */
	void (*merge_req)(struct rq_queue *q, struct rq_request *rq, struct rq_request *next);
	/** @allow_merge: veto a bio merge. */
	bool (*allow_merge)(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio);
	/** @allow_rq_merge: veto a request-request merge. */
	bool (*allow_rq_merge)(struct rq_queue *q, struct rq_request *rq, struct rq_request *next);
	/** @add_request: take a new request. */
	void (*add_request)(struct rq_queue *q, struct rq_request *rq);
	/**
	 * @dispatch: move requests to the dispatch queue with
	 * rq_sq_dispatch_add_tail() / rq_sq_dispatch_sort(); with @force move
	 * everything.  Return: how many were moved.
	 */
	int (*dispatch)(struct rq_queue *q, bool force);
	/** @activate / @deactivate: the driver started / requeued @rq. */
	void (*activate)(struct rq_queue *q, struct rq_request *rq);
	void (*deactivate)(struct rq_queue *q, struct rq_request *rq);
	/** @completed: @rq ended. */
	void (*completed)(struct rq_queue *q, struct rq_request *rq);
	/** @former / @latter: neighbours in sector order. */
	struct rq_request *(*former)(struct rq_queue *q, struct rq_request *rq);
	struct rq_request *(*latter)(struct rq_queue *q, struct rq_request *rq);
	/** @set_request / @put_request: per-request scheduler data (elv_priv). */
	int (*set_request)(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio);
	void (*put_request)(struct rq_request *rq);
	/** @may_queue: RQ_ELV_MQUEUE_MUST lets a request be allocated past the limit. */
	int (*may_queue)(struct rq_queue *q, unsigned op, unsigned opf);
	/** @queue_empty: nothing queued in the scheduler (optional). */
	bool (*queue_empty)(struct rq_queue *q);
	/**
	 * @dispatch_one: optional (a trailing member: a scheduler built
	 * without it still registers, see @size).  Take out of the scheduler
	 * the request dispatch(@q, false) would move to the head of an empty
	 * dispatch queue, with its list node unlinked and initialised, and
	 * return it; NULL when dispatch(@q, false) would move none.  The core
	 * calls it instead of dispatch only where it would take that request
	 * straight off the empty dispatch queue to start it (a fetch), and
	 * does for it what rq_sq_dispatch_add_tail() does; everywhere else
	 * (a peek, a forced drain) it calls dispatch.  Set it only when
	 * dispatch(@q, false) moves one request: the result is then the same
	 * as dispatch's, one call and one list move less.
	 */
	struct rq_request *(*dispatch_one)(struct rq_queue *q);
};

#define RQ_ELV_SQ_OPS_INIT .size = sizeof(struct rq_elevator_sq_ops), .abi_version = RQ_ELV_SQ_ABI

#define RQ_ELV_MQUEUE_MAY 0
#define RQ_ELV_MQUEUE_NO 1
#define RQ_ELV_MQUEUE_MUST 2

/**
 * rq_sq_dispatch_add_tail() / rq_sq_dispatch_sort() - move a request from
 * the scheduler to the dispatch queue.
 * @q: the queue.
 * @rq: a request the scheduler holds.
 *
 * rq_sq_dispatch_add_tail() puts @rq at the end of the dispatch queue;
 * rq_sq_dispatch_sort() inserts it in sector order after the last request
 * already started or of another operation (elv_dispatch_sort), in one
 * elevator sweep.
 *
 * Context: the scheduler's dispatch hook, queue lock held; never blocks.
 */
void rq_sq_dispatch_add_tail(struct rq_queue *q, struct rq_request *rq);
void rq_sq_dispatch_sort(struct rq_queue *q, struct rq_request *rq);

/**
 * rq_sq_nr_sorted() / rq_sq_in_flight() - requests in the scheduler / with
 * the driver.
 * @q: the queue.
 * @sync: count the synchronous (reads, sync writes) or the other requests.
 *
 * Context: queue lock held for a stable answer (schedulers' hooks, the
 * driver's request_fn); never blocks.
 * Return: the number of requests.
 */
unsigned rq_sq_nr_sorted(const struct rq_queue *q);
unsigned rq_sq_in_flight(const struct rq_queue *q, bool sync);

/** rq_request_is_sync() - reads and sync writes: the kernel's rq_is_sync(). */
static inline bool rq_request_is_sync(const struct rq_request *rq)
{
	return rq->op == RQ_OP_READ || (rq->opf & RQ_BIO_SYNC);
}

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_SQ_H */
