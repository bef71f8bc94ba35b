/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: traces in blktrace's binary format.
 *
 * A queue writes, while a trace runs, the events the kernel's blktrace
 * records at the same points of the request layer (queued, split, merged,
 * request allocated, sleep, plug, unplug, inserted, issued, completed,
 * requeued), as version 7 struct blk_io_trace records, into per-CPU files
 * DIR/NAME.blktrace.CPU: `blkparse -i NAME` (in DIR) prints them and btt
 * reads blkparse's dump of them.  doc/observability.md tells which library
 * point emits which action.
 */
#ifndef LIBREQUEST_TRACE_H
#define LIBREQUEST_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/*
 * The device number a queue's records carry: major RQ_TRACE_DEV_MAJOR
 * (240, the first of the majors Linux keeps for local and experimental
 * use, devices.txt: no real device has it), minor the queue's number
 * (rq_queue_trace_dev()).  As the kernel encodes dev_t in blktrace
 * records: major << 20 | minor.
 */
#define RQ_TRACE_DEV_MAJOR 240u
#define RQ_TRACE_MINOR_BITS 20

/**
 * struct rq_trace_info - how a trace went.
 *
 * events counts the records written to the files (the process-name notes
 * included); dropped the events lost because a thread's buffer was full
 * when it had one more (the writer did not keep up), or because a thread
 * got no buffer (no memory).  A thread's events that are written are in
 * the order the thread made them; a drop is never silent: it is counted
 * here and, at the end of a trace that had any, noted in the trace itself
 * (a blkparse message record, "m N librequest: N events dropped").
 */
struct rq_trace_info {
	uint32_t size;           /* bytes filled */
	uint32_t dev;            /* the records' device: major << 20 | minor */
	uint64_t events;         /* records written so far */
	uint64_t dropped;        /* events lost (buffer full, no memory) */
	uint32_t nr_cpus;        /* files NAME.blktrace.0 .. nr_cpus - 1 */
	uint32_t nr_threads;     /* threads that had a buffer */
};

/**
 * rq_queue_trace_start() - start writing a blktrace trace of @q.
 * @q: the queue.
 * @dir: an existing directory for the files.
 * @name: the trace's name: files @dir/@name.blktrace.CPU, one per
 *	configured CPU (empty ones included, as blktrace leaves them), made
 *	anew; no '/' in it.
 *
 * Starts a writer thread that drains the per-thread buffers into the
 * files.  Timestamps are the library's clock in nanoseconds from this
 * call.  Tracing costs nothing but one predictable branch per event point
 * while no trace runs.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex.
 * Return: 0; -EBUSY if a trace of @q runs; -EINVAL for a bad @name or a
 * NULL argument; -errno of a file that could not be made; -ENOMEM.
 */
int rq_queue_trace_start(struct rq_queue *q, const char *dir, const char *name);

/**
 * rq_queue_trace_stop() - stop @q's trace: every event made before is
 * written, the files are closed.
 * @q: the queue.
 * @info: receives the trace's totals (first @size bytes), or NULL.
 * @size: sizeof(*@info) as the caller knows it.
 *
 * Context: any thread, not from a driver or scheduler hook, never inside
 * a submission (it waits for every thread still writing an event); takes
 * the queue's attribute mutex.
 * Return: 0; -ENOENT if no trace runs; -EIO if a file could not be
 * written to the end (the trace is stopped anyway).
 */
int rq_queue_trace_stop(struct rq_queue *q, struct rq_trace_info *info, size_t size);

/**
 * rq_queue_trace_get_info() - the running trace's totals so far.
 * @q: the queue.
 * @info: receives them (first @size bytes).
 * @size: sizeof(*@info) as the caller knows it.
 *
 * Context: any thread, not from a driver or scheduler hook.
 * Return: 0; -ENOENT if no trace runs; -EINVAL for a NULL @info or a
 * @size that cannot hold the size field.
 */
int rq_queue_trace_get_info(struct rq_queue *q, struct rq_trace_info *info, size_t size);

/**
 * rq_queue_trace_dev() - the device number @q's trace records carry.
 * @q: the queue.
 *
 * Context: any thread.
 * Return: RQ_TRACE_DEV_MAJOR << 20 | the queue's number (its 20 low bits).
 */
uint32_t rq_queue_trace_dev(const struct rq_queue *q);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_TRACE_H */
