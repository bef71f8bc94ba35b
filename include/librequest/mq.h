/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the multi-queue front end (blk-mq).
 *
 * A driver describes itself with a tag set (hardware queues, depth, payload
 * size, ops), makes one or more queues over it, and receives requests in
 * queue_rq().  It ends them with rq_mq_end_request(), many at once with a
 * completion batch (rq_mq_add_to_batch(), rq_mq_end_request_batch()), or
 * hands them to rq_mq_complete_request(), which runs ops->complete where
 * rq_affinity says.
 *
 * What may run at the same time:
 *
 *   operation                        concurrent with
 *   queue_rq on hctx N               queue_rq on other hctxs; never itself on N
 *   rq_mq_end_request/complete       everything (any thread, inside queue_rq too)
 *   rq_mq_add_to_batch, end_batch    everything; one struct rq_comp_batch is
 *                                    used by one thread at a time
 *   rq_mq_run/stop/start_hw_queue(s) everything
 *   rq_mq_requeue_request            everything
 *   rq_tag_set_free                  nothing: free its queues first
 */
#ifndef LIBREQUEST_MQ_H
#define LIBREQUEST_MQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librequest/bio.h>
#include <librequest/queue.h>
#include <librequest/request.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_tag_set;
struct rq_hw_ctx;

/** enum rq_timeout_ret - what the driver's timeout hook decided. */
enum rq_timeout_ret {
	RQ_EH_DONE = 0,        /* the driver completed it, or will */
	RQ_EH_RESET_TIMER = 1, /* give it another timeout period */
};

/** ABI version of struct rq_mq_ops. */
#define RQ_MQ_OPS_ABI 1

/**
 * struct rq_mq_ops - a multi-queue driver.  Begin with RQ_MQ_OPS_INIT; the
 * core copies min(size, its size) and zero-fills the rest, so older drivers
 * keep working.  Only queue_rq is required.
 */
struct rq_mq_ops {
	uint32_t size;        /* sizeof(struct rq_mq_ops) as the driver knew it */
	uint32_t abi_version; /* RQ_MQ_OPS_ABI */

	/**
	 * @queue_rq: issue one request.  @last is false when more follow at
	 * once (then commit_rqs is called if the batch ends early).  Return
	 * RQ_STS_OK when accepted, RQ_STS_RESOURCE / RQ_STS_DEV_RESOURCE when
	 * busy (the core parks it and re-runs the queue after a completion or
	 * a delay), any other status to end it with that status.
	 * Context: dispatch, never concurrently on one hctx; may call
	 * rq_mq_end_request() on @rq before returning OK.  Blocking only with
	 * RQ_TAG_SET_BLOCKING.
	 */
	rq_status_t (*queue_rq)(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last);

	/** @commit_rqs: kick the hardware after a batch ended without last. */
	void (*commit_rqs)(struct rq_hw_ctx *hctx);

	/**
	 * @queue_rqs: optional batch issue.  Takes a list linked by rq_next, all
	 * for @hctx; leaves in *@list those it did not accept (they are then
	 * issued one by one through queue_rq).
	 */
	void (*queue_rqs)(struct rq_hw_ctx *hctx, struct rq_request **list);

	/** @get_budget: reserve device-wide depth; false when none is left. */
	bool (*get_budget)(struct rq_queue *q);
	/** @put_budget: give back what get_budget reserved. */
	void (*put_budget)(struct rq_queue *q);

	/**
	 * @timeout: a request passed its deadline.  Context: the service
	 * thread (or rq_service_run()); the request is still in flight unless
	 * the driver completes it.  The hook may end it here
	 * (rq_mq_end_request(), rq_mq_complete_request()) or requeue it
	 * (rq_mq_requeue_request()), and another thread may end it while the
	 * hook runs: the request is not reused until the hook returns.
	 * Return: RQ_EH_DONE (the driver ended it or will), RQ_EH_RESET_TIMER
	 * (another io_timeout period).
	 */
	enum rq_timeout_ret (*timeout)(struct rq_request *rq);

	/**
	 * @poll: reap completions of a poll queue; return how many ended.
	 * Context: rq_mq_poll() callers.
	 */
	int (*poll)(struct rq_hw_ctx *hctx, unsigned max);

	/**
	 * @complete: finish a request handed to rq_mq_complete_request();
	 * normally calls rq_mq_end_request().  Required if the driver uses
	 * rq_mq_complete_request().
	 */
	void (*complete)(struct rq_request *rq);

	/** @init_hctx: set up a hardware queue (hctx driver data). */
	int (*init_hctx)(struct rq_hw_ctx *hctx, void *set_data, unsigned idx);
	/** @exit_hctx: undo init_hctx. */
	void (*exit_hctx)(struct rq_hw_ctx *hctx, unsigned idx);

	/** @init_request: set up a preallocated request's payload. */
	int (*init_request)(struct rq_tag_set *set, struct rq_request *rq,
			    unsigned hctx_idx, int numa_node);
	/** @exit_request: undo init_request. */
	void (*exit_request)(struct rq_tag_set *set, struct rq_request *rq,
			     unsigned hctx_idx);

	/**
	 * @map_queues: fill @map[cpu] with a hardware queue index for every
	 * CPU 0..@nr_cpus-1.  Default: CPUs spread evenly, node by node.
	 */
	void (*map_queues)(struct rq_tag_set *set, unsigned *map, unsigned nr_cpus);
};

/** Start a struct rq_mq_ops initialiser with this. */
#define RQ_MQ_OPS_INIT .size = sizeof(struct rq_mq_ops), .abi_version = RQ_MQ_OPS_ABI

/* Tag set flags. */
#define RQ_TAG_SET_BLOCKING (1u << 0)     /* queue_rq may sleep */
#define RQ_TAG_SET_SHARED (1u << 1)       /* queues share tags fairly */
#define RQ_TAG_SET_NO_SCHED (1u << 2)     /* never attach a scheduler */
#define RQ_TAG_SET_SHARED_TAGS (1u << 3)  /* one tag space for all hw queues */

/**
 * struct rq_tag_set_config - what a driver fills to make a tag set.  Begin
 * an initialiser with RQ_TAG_SET_CONFIG_INIT (or set size to its sizeof):
 * a later release reads only the fields a caller's size covers and takes
 * the rest as zero, so programs built against these headers keep working.
 */
struct rq_tag_set_config {
	uint32_t size;           /* sizeof(struct rq_tag_set_config) as the caller knew it */
	const struct rq_mq_ops *ops;
	unsigned nr_hw_queues;   /* >= 1; more than CPUs is allowed */
	unsigned nr_poll_queues; /* of those, how many are polled (the last ones) */
	unsigned queue_depth;    /* tags per hw queue, 1..65536 */
	unsigned reserved_tags;  /* of those, kept for reserved allocations */
	unsigned cmd_size;       /* driver payload bytes per request */
	int numa_node;           /* -1: none preferred */
	unsigned timeout_ms;     /* request timeout; 0: 30000 */
	unsigned flags;          /* RQ_TAG_SET_* */
	void *driver_data;       /* passed to init_hctx */
};

/** Start a struct rq_tag_set_config initialiser with this. */
#define RQ_TAG_SET_CONFIG_INIT .size = sizeof(struct rq_tag_set_config)

/**
 * rq_tag_set_alloc() - make a tag set: tags and preallocated requests for
 * every hardware queue, on the queue's NUMA node.
 * @cfg: what the driver fills; ops begin with RQ_MQ_OPS_INIT.  Copied.
 * @out: receives the tag set.
 *
 * ops->init_request runs for every preallocated request, on the calling
 * thread, before this returns.
 *
 * Context: any thread, not from a driver or scheduler hook; allocates.
 * Return: 0 and *@out, or -EINVAL (bad config: no hardware queue or more
 * than 1024, a depth outside 1..65536, reserved tags or poll queues not
 * fewer than the total, cmd_size above 1 MiB; ops without queue_rq or of
 * an unknown ABI), or -ENOMEM (also when init_request fails).
 */
int rq_tag_set_alloc(const struct rq_tag_set_config *cfg, struct rq_tag_set **out);

/**
 * rq_tag_set_free() - free a tag set that no queue uses any more.
 * @set: the tag set (NULL is ignored).
 *
 * ops->exit_request runs for every preallocated request.
 *
 * Context: the driver, after rq_queue_destroy() of every queue over @set;
 * nothing else may use @set meanwhile.
 */
void rq_tag_set_free(struct rq_tag_set *set);

/**
 * rq_tag_set_driver_data() - the config's driver_data.
 * @set: the tag set.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the driver_data given to rq_tag_set_alloc().
 */
void *rq_tag_set_driver_data(struct rq_tag_set *set);

/**
 * struct rq_queue_config - how to make a queue over a tag set.  Begin an
 * initialiser with RQ_QUEUE_CONFIG_INIT (or set size to its sizeof).
 */
struct rq_queue_config {
	uint32_t size;           /* sizeof(struct rq_queue_config) as the caller knew it */
	const struct rq_queue_limits *limits; /* NULL: defaults */
	uint64_t capacity;       /* sectors; 0: unbounded */
	const char *scheduler;   /* NULL: "mq-deadline" for one hw queue on a
				    rotational device, else "none" */
	void *queuedata;         /* rq_queue_driver_data() */
};

/** Start a struct rq_queue_config initialiser with this. */
#define RQ_QUEUE_CONFIG_INIT .size = sizeof(struct rq_queue_config)

/**
 * rq_mq_alloc_queue() - make a queue over @set.
 * @set: the tag set.
 * @cfg: limits, capacity, scheduler and queuedata; NULL for all defaults.
 * @out: receives the queue.
 *
 * ops->init_hctx runs for every hardware queue and the scheduler's
 * init_sched on the calling thread; the first queue of the process starts
 * the service thread (unless rq_service_manual() was called).
 *
 * Context: any thread, not from a driver or scheduler hook; allocates; may
 * sleep.
 * Return: 0 and *@out; -EINVAL (NULL @set, bad limits, unknown scheduler, a
 * scheduler with RQ_TAG_SET_NO_SCHED), -ENOSPC when @set already has the
 * most queues it can share (64), -ENOMEM, -EIO when init_hctx fails, or the
 * error init_sched returned.
 */
int rq_mq_alloc_queue(struct rq_tag_set *set, const struct rq_queue_config *cfg,
		      struct rq_queue **out);

/* ------------------------------------------------------------- completion */

/**
 * rq_mq_end_request() - end a request: every bio ends with @status, the tag
 * is freed, waiters and the scheduler are told.  Ending a request that is not
 * in flight does nothing (no request is completed twice).
 * Context: any thread, including inside queue_rq.
 */
void rq_mq_end_request(struct rq_request *rq, rq_status_t status);

/**
 * rq_mq_update_request() - complete @bytes of a request from its start with
 * @status (partial completion); ends the bios that are wholly done.
 * @rq: a request the driver holds (in flight or being completed).
 * @status: status for the bytes completed.
 * @bytes: bytes completed from the start of what remains.
 *
 * Context: the driver, any thread; takes no queue lock; the ended bios'
 * end_io run on the calling thread.
 * Return: true if bytes remain (the request is still the driver's), false if
 * it is all done or was not the driver's (call rq_mq_end_request() to
 * finish it).
 */
bool rq_mq_update_request(struct rq_request *rq, rq_status_t status, unsigned bytes);

/**
 * rq_mq_complete_request() - hand a finished request to ops->complete.
 * @rq: a request in flight.
 * @status: its status, for rq_mq_complete_status().
 *
 * With rq_affinity 0 or 1 ops->complete runs right here; with 2 it runs on
 * the thread that submitted the request (see rq_process_completions()),
 * unless that is the calling thread.
 *
 * Context: any thread, including inside queue_rq; lock-free, never blocks
 * (but ops->complete may run on the calling thread).
 * Return: true if the request was handed on; false if it was not in flight
 * (already completed: nothing happens).
 */
bool rq_mq_complete_request(struct rq_request *rq, rq_status_t status);

/**
 * struct rq_comp_batch - requests a driver has finished, ended together
 * (the kernel's io_comp_batch).  Start it empty with RQ_COMP_BATCH_INIT or
 * rq_comp_batch_init(), fill it with rq_mq_add_to_batch(), end it with
 * rq_mq_end_request_batch().  It lives where the driver likes (usually on
 * the completing thread's stack) and is used by one thread at a time.
 *
 * Ending a batch costs less per request than ending each alone: the tags
 * go back one bitmap word at a time, the queue usage drops once per
 * hardware queue run, statistics are counted once, and under rq_affinity 2
 * the requests go to each submitter's mailbox with one atomic and at most
 * one wake-up per batch.  The fields are the library's: read @nr if you
 * like, write none of them.
 */
struct rq_comp_batch {
	struct rq_request *head; /* first request added (linked by rq_next) */
	struct rq_request *tail; /* last request added */
	unsigned nr;             /* requests in the batch */
	unsigned flags;          /* reserved: 0 */
};

/** An empty struct rq_comp_batch, for an initialiser. */
#define RQ_COMP_BATCH_INIT { NULL, NULL, 0, 0 }

/**
 * rq_comp_batch_init() - make @cb an empty batch.
 * @cb: the batch.
 *
 * Context: any thread; never blocks.
 */
static inline void rq_comp_batch_init(struct rq_comp_batch *cb)
{
	cb->head = cb->tail = NULL;
	cb->nr = 0;
	cb->flags = 0;
}

/**
 * rq_mq_add_to_batch() - a request the driver finished with @status joins
 * @cb; it ends (bios, tag, scheduler, usage) in rq_mq_end_request_batch().
 * @cb: the batch.
 * @rq: a request in flight (or handed to rq_mq_complete_request() and not
 *      ended yet).
 * @status: the status its bios end with.
 *
 * From this call on the request is no longer in flight: a second end, a
 * timeout or rq_mq_update_request() leave it alone.  The library links it
 * through rq->rq_next until the batch ends.  ops->complete is not called
 * for it.
 *
 * Context: any thread, including inside queue_rq; lock-free, never blocks.
 * Return: true if @rq joined; false if it was not in flight (already
 * ended) or is a single-queue request: nothing happens.
 */
bool rq_mq_add_to_batch(struct rq_comp_batch *cb, struct rq_request *rq, rq_status_t status);

/**
 * rq_mq_end_request_batch() - end every request of @cb, each with the
 * status it joined with, as rq_mq_end_request() would, and leave @cb empty.
 * @cb: the batch (may be empty; requests of any hardware queues and queues).
 *
 * Requests of one hardware queue that come one after another give their
 * tags and usage back together.  With rq_affinity 2, a request whose
 * submitter is another live thread is not ended here: it goes to that
 * thread's mailbox (one push and at most one wake-up per submitter per
 * batch) and ends there, bios included, at the thread's next entry into
 * the library (rq_process_completions()), or from the service thread
 * within a millisecond.
 *
 * Context: any thread, including inside queue_rq; the bios' end_io run on
 * the calling thread (or the submitter's, above); never blocks unless a
 * driver or scheduler hook it calls does.
 */
void rq_mq_end_request_batch(struct rq_comp_batch *cb);

/**
 * rq_mq_end_requests() - end @nr requests at once with one status, through
 * a completion batch (rq_mq_add_to_batch() for each, then
 * rq_mq_end_request_batch()).
 * @rqs: the requests; entries not in flight (already ended) are skipped.
 * @nr: how many.
 * @status: the status every bio ends with.
 *
 * Context: as rq_mq_end_request_batch().
 * Return: how many requests it ended (or handed to their submitters).
 */
unsigned rq_mq_end_requests(struct rq_request *const *rqs, unsigned nr, rq_status_t status);

/**
 * rq_process_completions() - run the completions other threads handed to
 * the calling thread (rq_affinity 2).  The library also does this whenever
 * the thread submits or finishes a plug, and the service thread does it for
 * a submitter that has not come back within a millisecond.
 *
 * Context: any thread, not inside a driver or scheduler hook; ops->complete
 * and the bios' end_io run on it.
 * Return: how many requests were completed (0 for a thread that never
 * submitted).
 */
int rq_process_completions(void);

/**
 * rq_wait_completions() - wait until other threads hand the calling thread
 * completions (rq_affinity 2), then run them, as rq_process_completions().
 * @timeout_ns: the longest wait in nanoseconds; 0 does not wait,
 *              UINT64_MAX waits with no limit.
 *
 * The thread sleeps on its completion mailbox: the first push of a
 * completion batch (or of a single request) to it wakes it, one wake-up
 * per push however many requests it carries, and only while it sleeps.  A
 * thread that waits here wakes also when the service thread ran its
 * completions for it (after a millisecond): it then returns 0, and the
 * bios' end_io have run on the service thread.
 *
 * Context: any thread, not inside a driver or scheduler hook; may sleep;
 * ops->complete and the bios' end_io run on it.
 * Return: how many requests were completed (0 on timeout or wake-up with
 * nothing left), -ENOMEM if the thread's mailbox could not be made.
 */
int rq_wait_completions(uint64_t timeout_ns);

/**
 * rq_mq_complete_status() - the status given to rq_mq_complete_request(),
 * for ops->complete.
 * @rq: the request being completed.
 *
 * Context: ops->complete (any thread); never blocks.
 * Return: the RQ_STS_* value passed to rq_mq_complete_request().
 */
rq_status_t rq_mq_complete_status(const struct rq_request *rq);

/**
 * rq_mq_start_request() - mark a request started (RQ_RQF_STARTED).  The
 * core does it before queue_rq; drivers need not call it.
 * @rq: a request the driver received.
 *
 * Context: the driver, inside queue_rq or while it holds @rq; never blocks.
 */
void rq_mq_start_request(struct rq_request *rq);

/**
 * rq_mq_requeue_request() - give an in-flight request back to be issued
 * again; with @kick, re-run the queue now, else wait for
 * rq_mq_kick_requeue_list().
 * @rq: a request in flight (anything else is ignored).
 * @kick: run the requeue list now.
 *
 * Context: any thread, including inside queue_rq; takes the queue's requeue
 * spinlock and calls the scheduler's requeue_request hook; with @kick the
 * hardware queues run on the calling thread.  Never sleeps unless the
 * driver's queue_rq does.
 */
void rq_mq_requeue_request(struct rq_request *rq, bool kick);

/**
 * rq_mq_kick_requeue_list() - re-insert requeued requests and run.
 * @q: the queue.
 *
 * Context: any thread, including inside queue_rq; takes the requeue
 * spinlock; the hardware queues run on the calling thread.
 */
void rq_mq_kick_requeue_list(struct rq_queue *q);

/**
 * rq_mq_delay_kick_requeue_list() - rq_mq_kick_requeue_list() after @msecs,
 * from the service thread (or rq_service_run()).
 * @q: the queue.
 * @msecs: delay; an earlier pending kick wins.
 *
 * Context: any thread, any hook; lock-free, never blocks.
 */
void rq_mq_delay_kick_requeue_list(struct rq_queue *q, unsigned msecs);

/**
 * rq_mq_tag_to_rq() - the in-flight request holding driver tag @tag.
 * @hctx: the hardware queue the tag belongs to.
 * @tag: a driver tag (rq->tag).
 *
 * Context: any thread; lock-free, never blocks.  The answer is stable only
 * while the driver holds that request.
 * Return: the request last given @tag, NULL for a tag out of range.
 */
struct rq_request *rq_mq_tag_to_rq(struct rq_hw_ctx *hctx, unsigned tag);

/* ------------------------------------------------------------ hw queues */

/**
 * rq_mq_run_hw_queue() / rq_mq_run_hw_queues() - dispatch what is queued on
 * one hardware queue / on every hardware queue of @q.
 * @hctx: the hardware queue.
 * @q: the queue.
 * @async: leave the run to the service thread (or rq_service_run()).
 *
 * A synchronous run dispatches on the calling thread unless another thread
 * is dispatching that hardware queue, which then runs it once more.
 *
 * Context: any thread, including inside queue_rq (it only asks for one more
 * round); lock-free.  A synchronous run calls queue_rq on the calling
 * thread, so it sleeps only if the driver does (RQ_TAG_SET_BLOCKING); on a
 * single-queue queue rq_mq_run_hw_queues() takes the queue lock, which the
 * caller must not hold.
 */
void rq_mq_run_hw_queue(struct rq_hw_ctx *hctx, bool async);
void rq_mq_run_hw_queues(struct rq_queue *q, bool async);
/**
 * rq_mq_delay_run_hw_queue() - run after @msecs, from the service thread.
 * @hctx: the hardware queue.
 * @msecs: delay; an earlier pending run wins.
 *
 * Context: any thread, any hook; lock-free, never blocks.
 */
void rq_mq_delay_run_hw_queue(struct rq_hw_ctx *hctx, unsigned msecs);
/**
 * rq_mq_stop_hw_queue() - no dispatch until started (e.g. device full).
 * @hctx: the hardware queue.
 *
 * A queue_rq call already running finishes.
 *
 * Context: any thread, including inside queue_rq; an atomic flag, never
 * blocks.
 */
void rq_mq_stop_hw_queue(struct rq_hw_ctx *hctx);
/**
 * rq_mq_start_hw_queue() - undo stop and run the queue on the calling
 * thread.
 * @hctx: the hardware queue.
 *
 * Context: any thread, including inside queue_rq; runs as
 * rq_mq_run_hw_queue() does synchronously.
 */
void rq_mq_start_hw_queue(struct rq_hw_ctx *hctx);
/**
 * rq_mq_stop_hw_queues() / rq_mq_start_hw_queues() - rq_mq_stop_hw_queue()
 * / rq_mq_start_hw_queue() for every hardware queue of @q.
 * @q: the queue.
 *
 * Context: as rq_mq_stop_hw_queue() / rq_mq_start_hw_queue(): any thread,
 * including inside queue_rq; starting runs the queues on the calling
 * thread.
 */
void rq_mq_stop_hw_queues(struct rq_queue *q);
void rq_mq_start_hw_queues(struct rq_queue *q);
/**
 * rq_mq_start_stopped_hw_queues() - start only the stopped hardware queues
 * of @q, and run them.
 * @q: the queue.
 * @async: run them from the service thread.
 *
 * Context: any thread, including inside queue_rq; runs as
 * rq_mq_run_hw_queue() does.
 */
void rq_mq_start_stopped_hw_queues(struct rq_queue *q, bool async);
/**
 * rq_mq_hw_queue_stopped() - whether a hardware queue is stopped.
 * @hctx: the hardware queue.
 *
 * Context: any thread, any hook; an atomic load, never blocks.
 * Return: true if stopped.
 */
bool rq_mq_hw_queue_stopped(struct rq_hw_ctx *hctx);

/**
 * rq_mq_poll() - reap completions on the poll queue the calling CPU maps to
 * (or every poll queue with @all).
 * @q: the queue.
 * @all: poll every poll queue.
 *
 * Also runs the completions handed to the calling thread
 * (rq_process_completions()).
 *
 * Context: any thread, not inside a driver hook; calls ops->poll (up to 32
 * requests per poll queue) on the calling thread.
 * Return: requests completed (0 without poll queues or ops->poll).
 */
int rq_mq_poll(struct rq_queue *q, bool all);

/**
 * rq_hctx_index() - index of a hw queue.
 * @hctx: the hardware queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: 0..rq_queue_nr_hw_queues() - 1.
 */
unsigned rq_hctx_index(const struct rq_hw_ctx *hctx);
/**
 * rq_hctx_queue() - the queue a hw queue belongs to.
 * @hctx: the hardware queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the queue.
 */
struct rq_queue *rq_hctx_queue(const struct rq_hw_ctx *hctx);
/**
 * rq_hctx_driver_data() / rq_hctx_set_driver_data() - the driver's pointer
 * for a hw queue, typically set in init_hctx.
 * @hctx: the hardware queue.
 * @data: the pointer to keep.
 *
 * Context: any thread, any hook; a plain load / store, never blocks: set it
 * before the hardware queue sees requests (init_hctx).
 * Return: rq_hctx_driver_data(): what was stored, NULL before.
 */
void *rq_hctx_driver_data(const struct rq_hw_ctx *hctx);
void rq_hctx_set_driver_data(struct rq_hw_ctx *hctx, void *data);
/**
 * rq_hctx_numa_node() - the NUMA node of a hw queue.
 * @hctx: the hardware queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the node, -1 for none.
 */
int rq_hctx_numa_node(const struct rq_hw_ctx *hctx);
/**
 * rq_hctx_is_poll() - whether a hw queue is polled (one of the tag set's
 * nr_poll_queues, the last ones).
 * @hctx: the hardware queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: true for a polled hw queue.
 */
bool rq_hctx_is_poll(const struct rq_hw_ctx *hctx);

/**
 * rq_queue_nr_hw_queues() / rq_queue_hctx() - hw queues of a queue.
 * @q: the queue.
 * @idx: 0..rq_queue_nr_hw_queues() - 1.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the number of hardware queues; the hardware queue @idx, NULL out
 * of range.
 */
unsigned rq_queue_nr_hw_queues(const struct rq_queue *q);
struct rq_hw_ctx *rq_queue_hctx(struct rq_queue *q, unsigned idx);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_MQ_H */
