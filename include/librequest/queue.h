/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: queues, limits, submission, plugging and attributes.
 *
 * A queue is made by a front end (mq.h for multi-queue; sq.h for the
 * single-queue one) and is then used the same way: submit bios, plug,
 * read and write attributes, freeze, quiesce, destroy.
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

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/* Queue limit features (rq_queue_limits.features). */
#define RQ_FEAT_WRITE_CACHE (1u << 0) /* volatile write cache: flushes matter */
#define RQ_FEAT_FUA (1u << 1)         /* the device honours FUA itself */
#define RQ_FEAT_ROTATIONAL (1u << 2)  /* seeks cost: a disk */
#define RQ_FEAT_NOMERGE (1u << 3)     /* never merge (nomerges 2) */

/**
 * struct rq_queue_limits - what the device accepts, as queue_limits.
 *
 * Zero fields take the kernel's defaults (rq_queue_limits_default()).
 * Sector counts are in 512-byte sectors.
 */
struct rq_queue_limits {
	uint32_t size;                /* sizeof(struct rq_queue_limits) as the caller knew
					 it; rq_queue_limits_default() sets it */
	uint32_t logical_block_size;  /* bytes; 512 */
	uint32_t physical_block_size; /* bytes; logical_block_size */
	uint32_t max_hw_sectors;      /* hard cap per request; 255 */
	uint32_t max_sectors;         /* soft cap; min(max_hw_sectors, 2560) */
	uint32_t max_segments;        /* data segments per request; 128 */
	uint32_t max_segment_size;    /* bytes per segment; 65536 */
	uint32_t reserved;            /* zero */
	uint64_t seg_boundary_mask;   /* a segment never crosses it; 0xffffffff */
	uint32_t max_discard_sectors; /* 0: discard unsupported */
	uint32_t discard_granularity; /* bytes; logical_block_size */
	uint32_t max_write_zeroes_sectors; /* 0: write-zeroes unsupported */
	uint32_t features;            /* RQ_FEAT_* */
};

/**
 * rq_queue_limits_default() - fill @lim with the kernel's defaults.
 * @lim: the limits to fill.
 *
 * 512-byte blocks, 255 sectors per request, 128 segments of up to 64 KiB
 * that never cross a 4 GiB boundary, no discard, no write zeroes.
 *
 * Context: any thread; a pure function, never blocks.
 */
void rq_queue_limits_default(struct rq_queue_limits *lim);

/**
 * rq_queue_limits_validate() - complete zero fields with defaults and check
 * the rest.
 * @lim: the limits, as a driver filled them.
 *
 * Checked: block sizes are powers of two in 512..65536, the physical block
 * is not smaller than the logical one, max_sectors <= max_hw_sectors, both
 * at least one logical block, max_segments <= 65535, max_segment_size >=
 * 4096, seg_boundary_mask of the form 2^n - 1 and >= 4095, discard
 * granularity a multiple of the logical block, no unknown features.  The
 * queue constructors call it; a driver may call it first to see what a
 * queue would get.
 *
 * Context: any thread; a pure function, never blocks.
 * Return: 0, or -EINVAL with @lim unchanged.
 */
int rq_queue_limits_validate(struct rq_queue_limits *lim);

/**
 * rq_queue_get_limits() - copy of the queue's current limits.
 * @q: the queue.
 * @lim: receives the limits: the first @size bytes, size set to what was
 *	filled (a later release's longer struct is cut to the caller's).
 * @size: sizeof(*@lim) as the caller knows it.
 *
 * Context: any thread; takes no lock, never blocks.  A concurrent write of
 * the max_sectors_kb attribute may or may not be seen.
 * Return: 0, or -EINVAL when @size cannot hold the size field.
 */
int rq_queue_get_limits(struct rq_queue *q, struct rq_queue_limits *lim, size_t size);

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
 * requests, tags taken ahead, which hold the queue's usage) is given back
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
 * The outermost plug dispatches what it holds, gives back the tags it took
 * ahead and runs the completions other threads handed to this one
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

/* --------------------------------------------------------------- io context */

/**
 * struct rq_io_context - who a bio is submitted for: the unit schedulers
 * are fair between (cfq, bfq).  Opaque.
 */
struct rq_io_context;

/**
 * rq_ioc_create() - a new io context (for example one per client connection).
 * @ioprio: default priority of its bios (RQ_IOPRIO_VALUE), 0 for BE/4.
 *
 * Context: any thread; allocates, takes no lock.
 * Return: the context with one reference; NULL with errno ENOMEM, or EINVAL
 * for a malformed @ioprio.
 */
struct rq_io_context *rq_ioc_create(uint16_t ioprio);

/**
 * rq_ioc_get() / rq_ioc_put() - take / drop a reference to an io context.
 * @ioc: the context (NULL is ignored).
 *
 * The last put frees the context; schedulers hold their own references
 * while they use it.
 *
 * Context: any thread; atomic, never blocks.  rq_ioc_get() needs a
 * reference the caller already holds.
 */
void rq_ioc_get(struct rq_io_context *ioc);
void rq_ioc_put(struct rq_io_context *ioc);

/**
 * rq_ioc_set_prio() - change a context's default priority.
 * @ioc: the context.
 * @ioprio: RQ_IOPRIO_VALUE(class 0..3, level 0..7); 0 means BE/4.
 *
 * Context: any thread; never blocks.  Bios already queued keep the priority
 * they had.
 * Return: 0, or -EINVAL for a malformed value.
 */
int rq_ioc_set_prio(struct rq_io_context *ioc, uint16_t ioprio);

/**
 * rq_ioc_prio() - a context's default priority.
 * @ioc: the context.
 *
 * Context: any thread, any hook; never blocks.
 * Return: an RQ_IOPRIO_VALUE(), never 0.
 */
uint16_t rq_ioc_prio(const struct rq_io_context *ioc);

/**
 * rq_ioc_id() - a number unique to the context, for tracing.
 * @ioc: the context.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the id: ids start at 1 and are never reused in a process.
 */
uint64_t rq_ioc_id(const struct rq_io_context *ioc);

/**
 * rq_ioc_current() - the calling thread's io context.
 *
 * The one set with rq_ioc_set_current(), else a context of the thread's
 * own (BE/4) made on first use and dropped when the thread exits.  No
 * reference is taken for the caller: take one to keep it past the thread or
 * past the next rq_ioc_set_current().
 *
 * Context: any thread; allocates on first use, never blocks.
 * Return: the context; NULL only on memory exhaustion.
 */
struct rq_io_context *rq_ioc_current(void);

/**
 * rq_ioc_set_current() - make @ioc the context of the calling thread's bios
 * that do not name one.
 * @ioc: the context (a reference is taken), or NULL for the thread's own.
 *
 * Context: any thread; affects only the calling thread; never blocks.  The
 * reference to the previously set context is dropped.
 */
void rq_ioc_set_current(struct rq_io_context *ioc);

/**
 * rq_ioc_set_weight() - a context's weight inside its io group, for the
 * proportional schedulers (bfq).
 * @ioc: the context.
 * @weight: 1..1000, or 0 to derive it from the priority again ((8 - level)
 *	* 10, as the kernel's bfq: BE/0 -> 80, BE/4 -> 40, BE/7 -> 10).
 *
 * Context: any thread; never blocks.  Schedulers apply it the next time
 * the context becomes busy.
 * Return: 0, or -EINVAL for a NULL context or a weight above 1000.
 */
int rq_ioc_set_weight(struct rq_io_context *ioc, unsigned weight);

/**
 * rq_ioc_weight() - the weight set with rq_ioc_set_weight().
 * @ioc: the context.
 *
 * Context: any thread, any hook; never blocks.
 * Return: 1..1000, or 0 when it is derived from the priority.
 */
unsigned rq_ioc_weight(const struct rq_io_context *ioc);

/**
 * struct rq_io_group - a set of io contexts sharing one weight, standing in
 * for a cgroup with io.weight: bfq divides the device between groups by
 * their weights, then inside each group between its contexts.  Opaque.
 */
struct rq_io_group;

/**
 * rq_iog_create() - a new io group.
 * @weight: 1..1000; 0 means 100.
 *
 * Context: any thread; allocates, takes no lock.
 * Return: the group with one reference; NULL with errno EINVAL (weight above
 * 1000) or ENOMEM.
 */
struct rq_io_group *rq_iog_create(unsigned weight);

/**
 * rq_iog_get() / rq_iog_put() - take / drop a reference to an io group.
 * @iog: the group (NULL is ignored).
 *
 * The last put frees the group.  Contexts and schedulers using it hold
 * their own references, so the application may drop its one at any time.
 *
 * Context: any thread; atomic, never blocks.  rq_iog_get() needs a
 * reference the caller already holds.
 */
void rq_iog_get(struct rq_io_group *iog);
void rq_iog_put(struct rq_io_group *iog);

/**
 * rq_iog_set_weight() - change a group's weight.
 * @iog: the group.
 * @weight: 1..1000.
 *
 * Context: any thread; never blocks.  Schedulers apply it the next time
 * the group is scheduled anew.
 * Return: 0, or -EINVAL for a NULL group or a weight outside 1..1000.
 */
int rq_iog_set_weight(struct rq_io_group *iog, unsigned weight);

/**
 * rq_iog_weight() - a group's weight.
 * @iog: the group, or NULL for the root group.
 *
 * Context: any thread, any hook; never blocks.
 * Return: 1..1000 (the root group weighs 100).
 */
unsigned rq_iog_weight(const struct rq_io_group *iog);

/**
 * rq_ioc_set_group() - move a context into an io group.
 * @ioc: the context.
 * @iog: the group (a reference is taken), or NULL for the root group.
 *
 * Queued requests keep their group; schedulers move the context's queues
 * once those are idle.
 *
 * Context: any thread; never blocks.
 * Return: 0, or -EINVAL for a NULL context.
 */
int rq_ioc_set_group(struct rq_io_context *ioc, struct rq_io_group *iog);

/* --------------------------------------------------------------- attributes */

/**
 * rq_queue_attr_get() - read an attribute, as /sys/block/X/queue/<name>.
 * @q: queue.
 * @name: "scheduler", "nr_requests", ..., or "iosched/<tunable>".
 * @buf: receives the value as text, newline-terminated as sysfs prints it.
 * @len: size of @buf.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex, so it waits while a write (a scheduler switch)
 * is in progress.
 * Return: bytes written (without the NUL), -EINVAL for an unknown name or
 * a NULL argument, -ENOSPC if @buf is too small.
 */
int rq_queue_attr_get(struct rq_queue *q, const char *name, char *buf, size_t len);

/**
 * rq_queue_attr_set() - write an attribute.
 * @q: queue.
 * @name: as for rq_queue_attr_get().
 * @value: the text, as written to sysfs (one trailing newline allowed).
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex and may sleep (a scheduler switch or an
 * nr_requests change freezes the queue, as rq_queue_freeze() does).
 * Return: 0, or -EINVAL for an unknown name, a bad value or a read-only
 * attribute; on error nothing changes.
 */
int rq_queue_attr_set(struct rq_queue *q, const char *name, const char *value);

/**
 * rq_queue_attr_list() - names of all attributes, one per line, in @buf.
 * @q: queue.
 * @buf: receives the names, the current scheduler's tunables as
 *	"iosched/<name>".
 * @len: size of @buf.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex.
 * Return: bytes written (without the NUL), -ENOSPC if @buf is too small,
 * -EINVAL for a NULL argument.
 */
int rq_queue_attr_list(struct rq_queue *q, char *buf, size_t len);

/* ---------------------------------------------------- freeze, quiesce, stats */

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

/* ------------------------------------------------------------- service
 *
 * The library's background work — hardware queue runs asked for
 * asynchronously or after a delay (RQ_STS_RESOURCE's 3 ms safety net, a
 * scheduler idling), requeue kicks, the timeout scan, completion mailboxes
 * (rq_affinity 2), the single-queue front end's deferred work — is done by
 * one service thread the library starts with the first queue.  A
 * run-to-completion application can own it instead: no thread is started,
 * and its event loop calls rq_service_run() when the returned time has
 * passed or rq_service_fd() polls readable.
 *
 * Clocks.  The service thread measures its deadlines on CLOCK_MONOTONIC and
 * sleeps on real time.  In application-driven mode every deadline (a delayed
 * run's, a requeue kick's, the timeout scan's, the 1 ms fallbacks for
 * completion mailboxes and the single-queue deferred work) is measured on
 * the library clock, rq_clock_ns(): CLOCK_MONOTONIC by default, or the
 * source rq_clock_set_source() installed.  A simulation on a virtual clock
 * thus gets from rq_service_run() exactly the work due at the virtual time
 * it has reached, however much real time has passed, and the wait it
 * returns is in that clock's nanoseconds (with a virtual clock: advance it
 * by that much, then call again).  rq_service_clock_ns() reads the clock in
 * use.
 */

/**
 * rq_service_manual() - switch the library to application-driven service.
 * Call before creating the first queue.
 * Context: any thread; once per process (again: 0, nothing changes).
 * Return: 0; -EBUSY if a queue exists or the service thread already runs;
 * -errno if the eventfd could not be made.
 */
int rq_service_manual(void);

/**
 * rq_service_run() - do the service work that is due now, by the library
 * clock (rq_clock_ns()).
 * Context: any thread, not from a driver or scheduler hook; concurrent
 * calls serialize.  Drivers' timeout hooks and queue runs happen here.
 * Return: library-clock nanoseconds until the next work falls due (0: call
 * again now; INT64_MAX: nothing is scheduled and no queue exists), or
 * -EINVAL when not in application-driven mode.
 */
int64_t rq_service_run(void);

/**
 * rq_service_fd() - an eventfd that becomes readable when work is asked
 * for sooner than rq_service_run() said (an async run, a new delay);
 * rq_service_run() clears it.
 *
 * Context: any thread; never blocks.
 * Return: the descriptor (the library's: do not close it), or -EINVAL when
 * not in application-driven mode.
 */
int rq_service_fd(void);

/**
 * rq_service_clock_ns() - the clock service deadlines are measured on:
 * rq_clock_ns() in application-driven mode, else CLOCK_MONOTONIC (the
 * service thread's).  For a scheduler that asks for a delayed run and needs
 * to know when it will come (both clocks are the same one unless a source
 * is installed).
 * Context: any thread, any hook; never blocks.
 * Return: nanoseconds.
 */
uint64_t rq_service_clock_ns(void);

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

/**
 * rq_queue_destroy() - tear a queue down.
 * @q: the queue (NULL is ignored).
 *
 * Requests not yet with the driver end with RQ_STS_IOERR; requests with
 * the driver are waited for (the timeout handler still runs).  Every bio
 * ends exactly once.  The scheduler is detached and @q freed; its tag set
 * stays the driver's.
 *
 * Context: the queue's owner, once no thread submits to @q any more; may
 * sleep; not from a driver or scheduler hook.
 */
void rq_queue_destroy(struct rq_queue *q);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_QUEUE_H */
