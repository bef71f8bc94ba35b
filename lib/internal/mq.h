/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The multi-queue front end's private header: tag sets, hw queue states,
 * and what lib/mq.c and lib/mq-sched.c offer each other.  Only those two
 * files (and the built-in schedulers that read the tag set) include it;
 * the layers below reach the front end through q->fe alone.  lib/core.c
 * includes it for the scheduler switch's pending view only (struct
 * sched_view): it defines the view's two variables, since its getters
 * rq_sched_data() and rq_queue_nr_requests() read them.
 */
#ifndef RQ_INTERNAL_MQ_H
#define RQ_INTERNAL_MQ_H

#include "queue.h"

/* hctx->state bits */
#define HCTX_STOPPED (1u << 0)
#define HCTX_RESTART (1u << 1)      /* re-run when a request completes */
#define HCTX_ASYNC_RUN (1u << 2)    /* the service thread should run it */

/* run_state values: dispatch ownership of one hctx */
#define RUN_IDLE 0
#define RUN_BUSY 1
#define RUN_AGAIN 2

struct rq_tag_set {
	struct rq_mq_ops ops;          /* copy, zero-filled past the driver's size */
	unsigned nr_hw_queues;
	unsigned nr_poll_queues;
	unsigned queue_depth;
	unsigned reserved_tags;
	unsigned cmd_size;
	int numa_node;
	unsigned timeout_ms;
	unsigned flags;
	void *driver_data;
	unsigned nr_cpus;
	unsigned *map;                 /* cpu -> hw queue */
	int *hctx_node;                /* hw queue -> NUMA node of its memory */
	struct rq_tags **tags;         /* per hw queue (or one shared) */
	size_t rq_size;
	pthread_mutex_t lock;          /* queue list */
	unsigned nr_queues;
	struct rq_queue *queues[64];
};

/* The sizes of the configuration structs in 0.1: the smallest a caller may pass. */
#define RQ_TAG_SET_CONFIG_SIZE_0_1 \
	(offsetof(struct rq_tag_set_config, driver_data) + sizeof(void *))
#define RQ_QUEUE_CONFIG_SIZE_0_1 (offsetof(struct rq_queue_config, queuedata) + sizeof(void *))

/* ---- the pending view of a scheduler switch (lib/mq-sched.c) ---- */

/**
 * struct sched_view - the scheduler that the accessors show one thread
 * while it switches @q: the new one while it is set up before the freeze,
 * the old one while it is retired after.
 * @q: the queue being switched.
 * @data: what rq_sched_data(@q) returns (NULL until init_sched returns).
 * @hctx_data: per hw queue (by queue_num): what rq_sched_hctx_data()
 *	returns and where rq_sched_set_hctx_data() writes.
 * @tags: per hw queue scheduler tags of that scheduler (NULL for none).
 * @nr_requests: what rq_queue_nr_requests(@q) and rq_sched_shallow_depth()
 *	count with.
 *
 * Set with sched_view_begin() and cleared with sched_view_end(), both on
 * the switching thread, around scheduler hooks only (never around a
 * freeze, which may run the installed scheduler on this thread).  Any
 * other thread, and this one outside those brackets, sees the installed
 * scheduler.
 */
struct sched_view {
	const struct rq_queue *q;
	void *data;
	void **hctx_data;
	struct rq_tags **tags;
	unsigned nr_requests;
};

/*
 * Threads with a view set, process-wide; and this thread's view (lib/core.c).
 * The count only lets every other thread skip the TLS access: a thread
 * reads its own count increment in program order, so a relaxed load is
 * enough, and a stale non-zero count elsewhere costs only the TLS check.
 */
extern _Atomic unsigned sched_views_active;
extern __thread const struct sched_view *sched_view_tls
	__attribute__((tls_model("initial-exec")));

/**
 * sched_view_of() - the pending view this thread has of @q, if any.
 * @q: the queue a scheduler accessor was asked about.
 *
 * The common case (no switch anywhere in the process) is one relaxed load
 * of a global and a branch not taken; the TLS lookup behind it makes no
 * call, so an accessor inlined into a scheduler (LTO) needs no extra
 * registers saved.  Context: any thread; lock-free.
 * Return: the view, or NULL (then the installed scheduler answers).
 */
static inline const struct sched_view *sched_view_of(const struct rq_queue *q)
{
	if (unlikely(atomic_load_explicit(&sched_views_active, memory_order_relaxed))) {
		const struct sched_view *v = sched_view_tls;

		if (v && v->q == q)
			return v;
	}
	return NULL;
}

/* ---- lib/mq-sched.c (context: q->sysfs_lock held) ---- */
int mq_elevator_switch(struct rq_queue *q, const char *name);
void mq_elevator_detach(struct rq_queue *q);
int mq_set_nr_requests(struct rq_queue *q, const char *val);

#endif /* RQ_INTERNAL_MQ_H */
