/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the counters every queue keeps.
 */
#ifndef LIBREQUEST_STATS_H
#define LIBREQUEST_STATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/**
 * struct rq_queue_stats - counters kept by every queue.
 *
 * Every counter only grows.  What each counts, and how they relate:
 *
 *   invalid     bios ended by the submission checks (bad op or flags,
 *               misaligned, wrong size for the op, past capacity, an
 *               unsupported discard / write-zeroes, no piece fits the
 *               limits): they reach no other counter.
 *   splits      front pieces cut off a bio to fit the limits: a bio cut
 *               into n pieces adds n - 1.
 *   bios        pieces that reached the front end after the checks and
 *               splits: every bio that passed adds 1 + its splits.  Not
 *               counted: invalid bios, bios that failed to enter the queue
 *               (RQ_BIO_NOWAIT on a frozen queue, a dying queue) and empty
 *               flushes ended at once on a queue without a write cache.
 *   merges_back, merges_front
 *               pieces (bios, not requests) that joined an existing
 *               request at its end / start, on a plug, a software queue or
 *               in the scheduler.
 *   plug_merges the part of merges_back + merges_front made on a plug.
 *   requests    requests allocated for pieces that did not merge.
 *   merges_rq   requests merged into another request and freed (they
 *               are never completed).
 *   completed   requests ended, by the driver or by the library (an error
 *               answer from queue_rq, a failed flush sequence, teardown).
 *   errors      the completed requests that ended with a status other than
 *               RQ_STS_OK: a subset of completed.
 *   dispatched  requests the driver accepted: queue_rq (or a queue_rqs
 *               batch, or the single-queue rq_sq_start_request()) taking a
 *               request with RQ_STS_OK, the library's flush requests
 *               included.  A requeued request counts again when it is
 *               dispatched again; a request answered with an error status
 *               is completed but not dispatched.
 *   resource    queue_rq answers RQ_STS_RESOURCE / RQ_STS_DEV_RESOURCE (the
 *               request is retried later, not counted in dispatched then).
 *   requeues    requests a driver gave back (rq_mq_requeue_request(),
 *               rq_sq_requeue_request()).
 *   timeouts    calls of the driver's timeout hook.
 *   flushes     FLUSH requests the flush machinery issued (only on a queue
 *               whose write cache is on).  These are the library's own:
 *               counted in dispatched when the driver takes them, never in
 *               requests, completed or errors.  A bio with RQ_OP_FLUSH or
 *               RQ_BIO_PREFLUSH / RQ_BIO_FUA is one request (in requests
 *               and completed) whatever flushes it needs; an RQ_OP_FLUSH
 *               bio's request reaches the driver only as a flush request.
 *
 * So, once every bio submitted has ended (nothing in flight):
 *
 *   bios       = requests + merges_back + merges_front
 *   requests   = completed + merges_rq
 *   plug_merges <= merges_back + merges_front
 *   errors     <= completed
 *   dispatched = completed - (requests completed without the driver
 *                accepting them) + requeues      (no write cache on)
 *
 * The first holds except for pieces that found no request on a dying
 * queue.  In the last, "requests completed without the driver" are those
 * ended by an error answer of queue_rq, a failed flush sequence or
 * teardown; with the write cache on, dispatched also has the flush
 * requests, and an RQ_OP_FLUSH bio's request is dispatched only as one.
 * While I/O is in flight, requests - completed - merges_rq requests are
 * allocated and not yet ended.
 */
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
 * struct rq_diskstats - one queue's line of /proc/diskstats.
 *
 * The 17 fields of the kernel's /proc/diskstats line (and of
 * /sys/block/X/stat), with the kernel's definitions
 * (Documentation/admin-guide/iostats.rst), counted while the queue
 * attribute "iostats" is 1 (it is 0 when a queue is made: the clock reads
 * it needs cost more than the rest of a request's accounting).  Times are
 * the library's clock (rq_clock_ns()), in milliseconds.
 *
 *   *_ios        requests completed (reads, writes, discards; a write
 *                zeroes counts as a write).  flush_ios: the flush
 *                requests the flush machinery completed.
 *   *_merges     pieces merged into a request (bio merges) and requests
 *                merged into another request: so, once idle, ios + merges
 *                = the pieces (bios after splits) of that kind.
 *   *_sectors    512-byte sectors completed.
 *   *_ticks_ms   the sum over completed requests of the time from
 *                allocation (blktrace's G) to completion.
 *   in_flight    requests with the driver (issued, not completed).
 *   io_ticks_ms  time with requests in flight, in whole milliseconds, as
 *                the kernel counts it (at each request start and end).
 *   time_in_queue_ms  the sum of the four *_ticks_ms.
 *   in_flight_read, in_flight_write   in_flight split as the "inflight"
 *                attribute shows it (discards and flushes count as writes).
 */
struct rq_diskstats {
	uint32_t size;           /* bytes rq_queue_get_diskstats() filled */
	uint32_t reserved;
	uint64_t read_ios, read_merges, read_sectors, read_ticks_ms;
	uint64_t write_ios, write_merges, write_sectors, write_ticks_ms;
	uint64_t in_flight, io_ticks_ms, time_in_queue_ms;
	uint64_t discard_ios, discard_merges, discard_sectors, discard_ticks_ms;
	uint64_t flush_ios, flush_ticks_ms;
	uint64_t in_flight_read, in_flight_write;
};

/**
 * rq_queue_get_diskstats() - the queue's diskstats fields.
 * @q: the queue.
 * @ds: receives the fields: the first @size bytes, size set to what was
 *	filled.
 * @size: sizeof(*@ds) as the caller knows it.
 *
 * Summed one counter at a time while I/O goes on, as rq_queue_get_stats().
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's statistics mutex briefly.
 * Return: 0, or -EINVAL when @size cannot hold the size field.
 */
int rq_queue_get_diskstats(struct rq_queue *q, struct rq_diskstats *ds, size_t size);

/** Buckets of a latency histogram: bucket 0 holds 0 ns, bucket b [2^(b-1), 2^b) ns. */
#define RQ_LAT_BUCKETS 40

/** Operations a latency histogram tells apart (op groups, as diskstats). */
enum rq_lat_op {
	RQ_LAT_READ = 0,
	RQ_LAT_WRITE = 1,      /* writes and write zeroes */
	RQ_LAT_DISCARD = 2,
	RQ_LAT_FLUSH = 3,      /* the flush machinery's flush requests */
	RQ_LAT_NR_OPS = 4
};

/**
 * struct rq_latency_hist - log2 latency histograms of completed requests.
 *
 * Counted while "iostats" is 1, per op: q2c, the time from allocation
 * (blktrace's G) to completion, for every completed request; d2c, the time
 * from the last issue to the driver (D) to completion, for the requests
 * the driver had.  Bucket b counts latencies in [2^(b-1), 2^b) ns (bucket
 * 0: 0 ns); the last bucket also holds everything longer.  Counts start
 * at the last reset (rq_queue_reset_latency_hist()).
 */
struct rq_latency_hist {
	uint32_t size;           /* bytes rq_queue_get_latency_hist() filled */
	uint32_t nr_buckets;     /* RQ_LAT_BUCKETS */
	uint64_t q2c[RQ_LAT_NR_OPS][RQ_LAT_BUCKETS];
	uint64_t d2c[RQ_LAT_NR_OPS][RQ_LAT_BUCKETS];
};

/**
 * rq_queue_get_latency_hist() - the queue's latency histograms.
 * @q: the queue.
 * @h: receives the histograms: the first @size bytes, size set to what
 *	was filled.
 * @size: sizeof(*@h) as the caller knows it.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's statistics mutex briefly.
 * Return: 0, or -EINVAL when @size cannot hold the size field.
 */
int rq_queue_get_latency_hist(struct rq_queue *q, struct rq_latency_hist *h, size_t size);

/**
 * rq_queue_reset_latency_hist() - start the latency histograms again at 0.
 * @q: the queue.
 *
 * What is counted from here on shows; the per-thread counters themselves
 * are not written (the reset remembers the sums it saw).
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's statistics mutex briefly.
 * Return: 0, or -ENOMEM if the queue has no room for the base.
 */
int rq_queue_reset_latency_hist(struct rq_queue *q);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_STATS_H */
