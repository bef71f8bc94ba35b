/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the queue itself: capacity, submission, freeze, quiesce,
 * destroy.
 *
 * A queue is made by a front end (mq.h for multi-queue; sq.h for the
 * single-queue one) and is then used the same way: submit bios, plug,
 * read and write attributes, freeze, quiesce, destroy.  The topics around
 * it have headers of their own, all included here: limits.h (queue
 * limits), plug.h (per-thread batches), iocontext.h (io contexts and groups),
 * attr.h (attributes by name), stats.h (counters) and service.h (the
 * library's background work).
 *
 * What may run at the same time:
 *
 *   operation                         concurrent with
 *   rq_submit_bio, plugs              everything, from any number of threads
 *   rq_queue_attr_get/set             everything (a scheduler switch freezes)
 *   rq_queue_freeze/unfreeze          everything; nests (counted)
 *   rq_queue_quiesce/unquiesce        everything but itself from a driver callback
 *   rq_queue_destroy                  nothing: the caller stops submitting first
 */
#ifndef LIBREQUEST_QUEUE_H
#define LIBREQUEST_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librequest/bio.h>
#include <librequest/request.h>
#include <librequest/limits.h>
#include <librequest/plug.h>
#include <librequest/iocontext.h>
#include <librequest/attr.h>
#include <librequest/stats.h>
#include <librequest/service.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/**
 * rq_queue_set_capacity() - set the device size.
 * @q: the queue.
 * @sectors: size in 512-byte sectors; bios past it fail with RQ_STS_IOERR.
 *	0 means unknown: no bound is checked.
 *
 * Context: any thread; an atomic store, never blocks.  Bios already checked
 * against the old size go on.
 */
void rq_queue_set_capacity(struct rq_queue *q, uint64_t sectors);

/**
 * rq_queue_capacity() - device size in sectors.
 * @q: the queue.
 *
 * Context: any thread, any hook; an atomic load, never blocks.
 * Return: the size set at creation or by rq_queue_set_capacity(); 0 when
 * unknown.
 */
uint64_t rq_queue_capacity(struct rq_queue *q);

/**
 * rq_queue_driver_data() - the queuedata given at creation.
 * @q: the queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the config's queuedata (NULL if none was given).
 */
void *rq_queue_driver_data(struct rq_queue *q);

/* -------------------------------------------------------------- submission */

/**
 * rq_submit_bio() - submit a bio to a queue.
 * @q: the queue.
 * @bio: a bio with op, sector, size/vectors and end_io set.
 *
 * The bio is checked against the queue's limits and capacity, split if it
 * is larger than they allow, merged with queued work where possible, and
 * dispatched.  Invalid bios (misaligned, past capacity, unknown op, data on a
 * data-less op) end at once with RQ_STS_INVAL or RQ_STS_IOERR, before any
 * driver sees them.  Either way bio->end_io runs exactly once, possibly
 * before this returns.
 *
 * Context: any thread.  May sleep waiting for a free request unless the bio
 * has RQ_BIO_NOWAIT, in which case it ends with RQ_STS_AGAIN instead.
 */
void rq_submit_bio(struct rq_queue *q, struct rq_bio *bio);

/* ------------------------------------------------------ freeze, quiesce */

/**
 * rq_queue_freeze() - stop new requests and wait until none is in flight.
 * @q: the queue.
 *
 * Counted: every freeze needs an unfreeze.  Submitters block (or, with
 * RQ_BIO_NOWAIT, fail with RQ_STS_AGAIN) until the last unfreeze.
 *
 * Context: any thread; may sleep; not from a driver or scheduler hook.  It
 * flushes the calling thread's plug first (what a plug holds keeps the
 * queue busy) and runs the hardware queues while it waits, so the driver's
 * queue_rq may be called from here.
 */
void rq_queue_freeze(struct rq_queue *q);

/**
 * rq_queue_unfreeze() - undo one rq_queue_freeze().
 * @q: the queue.
 *
 * The last one lets waiting submitters go on; one without a freeze does
 * nothing.
 *
 * Context: any thread; takes the queue's freeze mutex briefly, never waits
 * for I/O.
 */
void rq_queue_unfreeze(struct rq_queue *q);

/**
 * rq_queue_quiesce() - stop dispatching to the driver; on return no
 * queue_rq call is running.  Submission goes on; requests wait.
 * @q: the queue.
 *
 * Counted, as freezes are.
 *
 * Context: any thread; may sleep; not from a driver callback.
 */
void rq_queue_quiesce(struct rq_queue *q);

/**
 * rq_queue_unquiesce() - undo one rq_queue_quiesce(); the last one runs
 * every hardware queue.
 * @q: the queue.
 *
 * One without a quiesce does nothing.
 *
 * Context: any thread, not from a driver callback and not holding a
 * single-queue queue's lock: the queue runs on the calling thread, so the
 * driver's queue_rq (request_fn) may be called from here.
 */
void rq_queue_unquiesce(struct rq_queue *q);

/**
 * rq_queue_frozen() - whether a freeze of @q is on or being waited for.
 * @q: the queue.
 *
 * A hint for schedulers deciding whether to wait for more I/O: while it is
 * true (and while the queue is torn down) no new request can arrive.
 *
 * Context: any thread, any hook; an atomic load, never blocks.
 * Return: true while frozen, being frozen or destroyed.
 */
bool rq_queue_frozen(const struct rq_queue *q);

/**
 * rq_queue_destroy() - tear a queue down.
 * @q: the queue (NULL is ignored).
 *
 * Requests not yet with the driver end with RQ_STS_IOERR; requests with
 * the driver are waited for (the timeout handler still runs).  Every bio
 * ends exactly once.  The scheduler is detached and @q freed; its tag set
 * stays the driver's.
 *
 * The recommended shutdown, which fails nothing:
 *
 *   1. stop submitting to @q (every thread; finish open plugs);
 *   2. rq_queue_freeze(@q): returns once every request has ended, so every
 *      bio submitted has ended, with the status the driver gave it;
 *   3. rq_queue_destroy(@q), without unfreezing: nothing is queued, so
 *      nothing is failed and no end_io runs here.
 *
 * Destroying without the freeze is also safe, but fails with RQ_STS_IOERR
 * whatever is still queued in the library (in the scheduler, on dispatch
 * and requeue lists, on the calling thread's plug) instead of sending it to
 * the driver: use it to abandon queued I/O, for instance when the device is
 * gone.  A bio submitted during or after destroy is a caller bug.
 *
 * Context: the queue's owner, once no thread submits to @q any more; may
 * sleep; not from a driver or scheduler hook.
 */
void rq_queue_destroy(struct rq_queue *q);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_QUEUE_H */
