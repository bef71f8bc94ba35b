/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The multi-queue front end's private header: tag sets, hw queue states,
 * and what lib/mq.c and lib/mq-sched.c offer each other.  Only those two
 * files (and the built-in schedulers that read the tag set) include it;
 * the layers below reach the front end through q->fe alone.  (The
 * scheduler switch's pending view, struct sched_view, is in queue.h: the
 * core's getters read it.)
 */
#ifndef RQ_INTERNAL_MQ_H
#define RQ_INTERNAL_MQ_H

#include "queue.h"

/* hctx->state bits */
#define HCTX_STOPPED (1u << 0)
#define HCTX_RESTART (1u << 1)      /* re-run when a request completes */
#define HCTX_ASYNC_RUN (1u << 2)    /* the service thread should run it */

/* q->mq_flags: fixed with the tag set, one word for the per-request tests */
#define MQ_F_SHARED_TAGS (1u << 0)  /* RQ_TAG_SET_SHARED: fair sharing counts driver tags */
#define MQ_F_PUT_BUDGET (1u << 1)   /* ops.put_budget is set */

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

/* ---- lib/mq-sched.c (context: q->sysfs_lock held) ---- */
int mq_elevator_switch(struct rq_queue *q, const char *name);
void mq_elevator_detach(struct rq_queue *q);
int mq_set_nr_requests(struct rq_queue *q, const char *val);

#endif /* RQ_INTERNAL_MQ_H */
