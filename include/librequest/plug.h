/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: plugging, a per-thread batch of submissions (as blk_plug).
 */
#ifndef LIBREQUEST_PLUG_H
#define LIBREQUEST_PLUG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;
struct rq_request;

/**
 * struct rq_plug - a per-thread batch, as blk_plug.  Lives on the caller's
 * stack between rq_start_plug() and rq_finish_plug(); fields are the core's.
 */
struct rq_plug {
	struct rq_request *head;   /* core: requests waiting, newest first */
	struct rq_request *tail;
	unsigned count;            /* core: requests on the list */
	unsigned multiple_queues;  /* core */
	struct rq_queue *q;        /* core: the last queue seen */
	struct rq_plug *prev;      /* core: outer plug of the thread */
	void *tag_cache;           /* core: tags the cached bits come from */
	unsigned long cached_tags; /* core: tags taken ahead in one batch */
	unsigned cached_off;       /* core: bitmap bit of cached bit 0 */
	struct rq_queue *cache_q;  /* core: queue whose usage cached scheduler tags hold */
	void *reserved[4];         /* core: room for a later release, zero */
};

/** Requests a plug holds before it flushes by itself (BLK_MAX_REQUEST_COUNT). */
#define RQ_PLUG_MAX_REQUESTS 32

/**
 * rq_start_plug() - start batching the calling thread's submissions.
 * @plug: the caller's plug, on its stack, until rq_finish_plug().
 *
 * Nested plugs join the outermost one.  Keep a plug short, around one
 * batch of submissions, as the kernel's are: what it holds (plugged
 * requests, tags and queue usage references taken ahead) is given back
 * only when it is flushed or finished, and a freeze of the queue (a
 * scheduler switch, an nr_requests change, destroying it) waits until then.
 *
 * Context: any thread, not inside a driver or scheduler hook; per-thread
 * state only: takes no lock, never blocks.  Pairs with rq_finish_plug() on
 * the same thread.
 */
void rq_start_plug(struct rq_plug *plug);

/**
 * rq_finish_plug() - flush and end a plug started on this thread.
 * @plug: the plug given to rq_start_plug(); a nested one only ends.
 *
 * The outermost plug dispatches what it holds, gives back the tags and
 * queue usage references it took ahead and runs the completions other threads handed to this one
 * (rq_affinity 2).
 *
 * Context: the thread that started @plug, not inside a driver or scheduler
 * hook.  The driver's queue_rq and ops->complete may run on this thread;
 * may sleep only as dispatch may (a RQ_TAG_SET_BLOCKING driver, the
 * single-queue front end's queue lock).
 */
void rq_finish_plug(struct rq_plug *plug);

/**
 * rq_flush_plug() - flush the calling thread's plug (if any) without ending
 * it, and give back tags it took ahead.
 *
 * The library calls it before a thread sleeps in the library; call it
 * before sleeping elsewhere with a plug open.
 *
 * Context: any thread, not inside a driver or scheduler hook; does nothing
 * without a plug.  Dispatches as rq_finish_plug() does.
 */
void rq_flush_plug(void);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_PLUG_H */
