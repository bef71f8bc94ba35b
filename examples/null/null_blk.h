/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * null_blk: a device that does nothing, quickly.
 *
 * The example multi-queue driver of librequest, meant to be copied from.  It
 * completes every request either inside queue_rq (inline), from one
 * completion thread per hardware queue (thread), or from that thread after a
 * fixed delay (timer).  The completion threads end what they finished in
 * completion batches (rq_mq_add_to_batch(), rq_mq_end_request_batch()).  Optionally it keeps the data in memory, allocated one
 * 4 KiB page at a time on first write, so a large device costs only what is
 * written to it.
 *
 * What may run at the same time:
 *
 *   operation                 concurrent with
 *   null_create               anything (each device is independent)
 *   null_queue, null_get_stats everything
 *   null_destroy              nothing on that device: stop submitting first
 */
#ifndef NULL_BLK_H
#define NULL_BLK_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/mq.h>
#include <librequest/sq.h>

#ifdef __cplusplus
extern "C" {
#endif

/** enum null_completion - where requests end. */
enum null_completion {
	NULL_COMPLETE_INLINE = 0, /* inside queue_rq */
	NULL_COMPLETE_THREAD = 1, /* on the hw queue's completion thread */
	NULL_COMPLETE_TIMER = 2,  /* there, completion_nsec after queue_rq */
};

/**
 * enum null_ct_placement - where a completion thread runs.
 *
 * A completion thread that shares a CPU with its submitter costs two
 * context switches and a futex wake-up per batch (about a third of the
 * throughput of one on another CPU), and the scheduler keeps such a pair
 * together once a wake-up has put them there (the waker's CPU is chosen
 * whenever the other CPU is not idle at that moment).
 */
enum null_ct_placement {
	NULL_CT_STEER = 0, /* leave the submitter's CPU: when a batch comes from
			      the CPU the thread runs on and a CPU is free (the
			      machine's runnable threads are at most the CPUs
			      the thread may use), it moves itself off that CPU
			      (allowed CPUs minus that one, then its mask back,
			      so it is never pinned), trying once per 16 to
			      16384 batches taken there (about 100 us to
			      100 ms), the gap doubling per move, or after 64
			      when no CPU was free; multi-queue only */
	NULL_CT_FREE = 1,  /* leave placement to the scheduler */
};

/** enum null_queue_mode - which front end the device's queue uses. */
enum null_queue_mode {
	NULL_Q_MQ = 0, /* multi-queue: queue_rq per hw queue */
	NULL_Q_RQ = 1, /* single-queue: one request_fn under the queue lock
			  (null_blk's queue_mode=1) */
};

/**
 * struct null_config - how to make a null device.  Zero fields take the
 * defaults given in brackets; null_config_default() fills them explicitly.
 */
struct null_config {
	unsigned nr_hw_queues;          /* [1] */
	unsigned hw_queue_depth;        /* [64] tags per hw queue */
	enum null_completion completion; /* [NULL_COMPLETE_INLINE] */
	uint64_t completion_nsec;       /* [10000] timer mode delay */
	bool memory_backed;             /* keep written data (lazy 4 KiB pages) */
	uint64_t size_bytes;            /* [1 GiB] device size */
	bool blocking;                  /* RQ_TAG_SET_BLOCKING: queue_rq may sleep */
	uint64_t blocking_nsec;         /* blocking mode: queue_rq sleeps this long */
	unsigned blocksize;             /* [512] logical block size */
	struct rq_queue_limits limits;  /* zero fields: library defaults;
					   discard and write-zeroes are enabled
					   when their limits are left 0 */
	const char *sched;              /* NULL: the library's choice */
	unsigned flags;                 /* extra RQ_TAG_SET_* flags */
	void (*thread_init)(void);      /* NULL, or run first on every
					   completion thread (e.g. to set up
					   allocator or tracing state) */
	enum null_queue_mode queue_mode; /* [NULL_Q_MQ]; NULL_Q_RQ uses one hw
					   queue's worth of state, hw_queue_depth
					   bounds requests in flight and sched
					   names a single-queue scheduler */
	unsigned resource_permille;     /* [0] fault injection: this share
					   (per mille) of queue_rq calls
					   answers RQ_STS_RESOURCE, as
					   null_blk's requeue injection */
	void (*batch_done)(void);       /* NULL, or run on a completion thread
					   after each batch it ended (e.g. to
					   hand what the bios' end_io gathered
					   to the submitters at once) */
	enum null_ct_placement ct_placement; /* [NULL_CT_STEER] */
};

/** struct null_stats - what the device saw, summed over hw queues. */
struct null_stats {
	uint64_t requests;      /* queue_rq calls */
	uint64_t completed;     /* requests ended by the driver */
	uint64_t bytes;         /* data bytes of read and write requests */
	uint64_t reads;
	uint64_t writes;
	uint64_t flushes;
	uint64_t discards;
	uint64_t write_zeroes;
	uint64_t segments;      /* data segments walked (memory-backed only) */
	uint64_t busy;          /* RQ_STS_RESOURCE answers (fault injection) */
	uint64_t pages;         /* memory-backed pages currently allocated */
	/* completion threads (thread and timer modes) */
	uint64_t batches;       /* non-empty takes of pushed requests: the
				   mean batch is completed / batches */
	uint64_t sleeps;        /* futex sleeps waiting for pushes */
	uint64_t colocated;     /* batches taken on the CPU of the last push */
	uint64_t moves;         /* NULL_CT_STEER: moves off that CPU */
};

struct null_dev;

/**
 * null_config_default() - fill @cfg with the defaults.
 * @cfg: configuration to overwrite.
 */
void null_config_default(struct null_config *cfg);

/**
 * null_create() - make a null device and its queue.
 * @cfg: configuration; copied, need not outlive the call.
 * @out: receives the device.
 *
 * Context: may sleep; starts one thread per hw queue in thread/timer mode.
 * Return: 0, -EINVAL for a bad configuration (including an unknown
 * scheduler), -ENOMEM, or another negative errno from the library.
 */
int null_create(const struct null_config *cfg, struct null_dev **out);

/**
 * null_queue() - the queue to submit bios to.
 * @dev: the device.
 */
struct rq_queue *null_queue(struct null_dev *dev);

/**
 * null_get_stats() - read the counters (exact once the device is idle).
 * @dev: the device.
 * @st: receives the sums.
 */
void null_get_stats(struct null_dev *dev, struct null_stats *st);

/**
 * null_map() - the allocation state at byte @pos of a memory-backed
 * device: whether its 4 KiB page holds written data (1) or was never
 * written or was freed by a discard or write-zeroes (0: reads as zeros).
 * @dev: the device.
 * @pos: byte offset, below the device size.
 * @len: bytes to look at from @pos (> 0).
 * @run: receives how many bytes from @pos, at most @len, are in that state.
 *
 * Context: any thread; takes the store's lock shared (in step with
 * discards).
 * Return: 1, 0, or -EINVAL (not memory-backed, @pos out of range).
 */
int null_map(struct null_dev *dev, uint64_t pos, uint64_t len, uint64_t *run);

/**
 * null_destroy() - tear down the queue, wait for every request, stop the
 * completion threads and free the memory.
 * @dev: the device; NULL is allowed.
 *
 * Context: may sleep; the caller has stopped submitting.
 */
void null_destroy(struct null_dev *dev);

#ifdef __cplusplus
}
#endif

#endif /* NULL_BLK_H */
