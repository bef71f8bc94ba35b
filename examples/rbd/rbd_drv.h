/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rbd_drv: a queue in front of a Ceph RBD image, through librbd's
 * asynchronous API.
 *
 * One rados connection per process and cluster (per ceph.conf and client
 * id, shared and reference-counted by every device that uses it), one image
 * handle per hardware queue.  Requests become rbd_aio_readv / writev /
 * discard / write_zeroes / flush; librbd ends them on its own callback
 * threads, which hand them to rq_mq_complete_request().
 *
 * Object boundaries: librbd stores an image as objects of a fixed size
 * (order 22: 4 MiB; with fancy striping, stripe units of them).  The queue's
 * largest request is one stripe unit, and a request that still crosses a
 * boundary (the library merges without knowing where objects end) is issued
 * as one librbd call per object piece, so that no call spans two RADOS
 * objects.  rqrbd_config.span_objects lifts both: larger requests, one call
 * each, librbd splits them itself.
 *
 * librbd's own cache (rbd_cache) is turned off unless asked for: every
 * image handle would cache on its own, and handles of one image do not see
 * each other's cached writes; the request layer in front already merges.
 * A write has then reached the OSDs when it completes; flushes are still
 * passed on (RQ_FEAT_WRITE_CACHE), as they cost a call and no RADOS op.
 *
 * Failures: rados_osd_op_timeout and rados_mon_op_timeout are set to
 * op_timeout_s (30 s by default) unless ceph.conf or CEPH_ARGS set them, so a cluster that does not answer makes librbd fail the call
 * with ETIMEDOUT instead of waiting for ever; the request then ends with
 * RQ_STS_TIMEOUT.  The library's request timeout (the op timeout plus a
 * margin) only counts: librbd owns the request's buffers until it calls
 * back, so the driver never ends a request librbd still holds.  A client
 * the cluster blocklisted (ESHUTDOWN) ends its requests with RQ_STS_OFFLINE
 * and is reopened on the next request (a new connection and handle); see
 * rqrbd_status() in rbd_drv.c for the whole mapping.
 *
 * What may run at the same time:
 *
 *   operation                          concurrent with
 *   rqrbd_create                         anything (the connection table has a lock)
 *   rqrbd_queue, rqrbd_get_stats,
 *   rqrbd_object_size, rqrbd_size          everything
 *   rqrbd_destroy                        nothing on that device: stop submitting first
 */
#ifndef RBD_DRV_H
#define RBD_DRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <librequest/mq.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct rqrbd_config - which image, and how to make its queue.  Zero fields
 * take the defaults in brackets; rqrbd_config_default() fills them.
 */
struct rqrbd_config {
	const char *pool;           /* pool name; required */
	const char *image;          /* image name; required */
	const char *snap;           /* [NULL] a snapshot (then read-only) */
	const char *ceph_conf;      /* [NULL] ceph.conf; NULL: librados' search
				       ($CEPH_CONF, /etc/ceph/ceph.conf, ...) */
	const char *client_id;      /* [NULL] the cephx id without "client.";
				       NULL: "admin" */
	bool read_only;             /* open read-only (writes: RQ_STS_TARGET) */
	bool span_objects;          /* requests may span objects (one call each) */
	bool rbd_cache;             /* keep librbd's cache as ceph.conf says
				       (then one handle for all hw queues);
				       default: rbd_cache = false, the queue
				       in front is the only cache */
	unsigned nr_hw_queues;      /* [1] one image handle per queue */
	unsigned hw_queue_depth;    /* [64] tags per hw queue */
	unsigned op_timeout_s;      /* [30] rados osd/mon op timeout, seconds */
	struct rq_queue_limits limits; /* zero fields: the driver's choice */
	const char *sched;          /* NULL: the library's choice */
	unsigned flags;             /* extra RQ_TAG_SET_* flags */
	bool quiet;                 /* say nothing on stderr at creation */
};

/** struct rqrbd_stats - what the driver did, summed over hw queues. */
struct rqrbd_stats {
	uint64_t reads;          /* requests */
	uint64_t writes;
	uint64_t flushes;
	uint64_t discards;
	uint64_t write_zeroes;
	uint64_t read_calls;     /* librbd calls: one per object piece */
	uint64_t write_calls;
	uint64_t discard_calls;
	uint64_t zero_calls;
	uint64_t split;          /* requests that crossed an object boundary
				    and went out as several calls */
	uint64_t bytes;          /* data bytes of completed reads and writes */
	uint64_t errors;         /* requests ended with an error status */
	uint64_t timeouts;       /* request timeouts seen (the call went on) */
	uint64_t reopens;        /* handles reopened after a blocklisting */
	uint64_t last_errno;     /* positive errno of the latest failed call */
};

struct rqrbd_dev;

/**
 * rqrbd_config_default() - fill @cfg with the defaults (pool and image NULL).
 * @cfg: configuration to overwrite.
 */
void rqrbd_config_default(struct rqrbd_config *cfg);

/**
 * rqrbd_create() - connect (or share the process's connection), open the
 * image once per hardware queue and make a queue over it.
 * @cfg: configuration; copied (the strings too).
 * @out: receives the device.
 *
 * Unless @cfg->quiet, prints one line on stderr: the image, its size and
 * object size, the handles.  An image with the exclusive-lock feature is
 * opened once and shared by the hardware queues (several handles of one
 * process would pass the lock back and forth on every write).
 *
 * Context: may sleep (connects to the cluster: up to op_timeout_s).
 * Return: 0; -EINVAL for a bad configuration; the negative errno of
 * librados or librbd (-ENOENT: no such pool or image, -ETIMEDOUT: no
 * cluster answered, -EACCES / -EPERM: refused); -ENOMEM.
 */
int rqrbd_create(const struct rqrbd_config *cfg, struct rqrbd_dev **out);

/** rqrbd_queue() - the queue to submit bios to. */
struct rq_queue *rqrbd_queue(struct rqrbd_dev *dev);

/** rqrbd_size() - the image's size in bytes (a multiple of 512). */
uint64_t rqrbd_size(struct rqrbd_dev *dev);

/**
 * rqrbd_object_size() - bytes of one object piece: the stripe unit (the
 * object size without fancy striping); no request call crosses a multiple
 * of it unless span_objects was set.
 */
uint64_t rqrbd_object_size(struct rqrbd_dev *dev);

/** rqrbd_nr_handles() - image handles open (1, or one per hw queue). */
unsigned rqrbd_nr_handles(struct rqrbd_dev *dev);

/** rqrbd_get_stats() - read the counters (exact once the device is idle). */
void rqrbd_get_stats(struct rqrbd_dev *dev, struct rqrbd_stats *st);

/**
 * rqrbd_stats_format() - @st as one line of text ("requests: 3 reads, ...;
 * librbd calls: ...; 2 split at object boundaries; 0 errors (last errno 0),
 * 0 timeouts, 0 reopens"), for logs.
 * @st: the counters.
 * @buf: receives the line, NUL-terminated (cut if @len is short).
 * @len: bytes of @buf.
 */
void rqrbd_stats_format(const struct rqrbd_stats *st, char *buf, size_t len);

/**
 * rqrbd_stats_json() - @st as JSON members ("reads": 3, "writes": 4, ...,
 * named as the fields), without braces, for a program's JSON object.
 * @st: the counters.
 * @f: where to print.
 */
void rqrbd_stats_json(const struct rqrbd_stats *st, FILE *f);

/**
 * rqrbd_destroy() - tear the queue down (waiting for every request), close
 * the handles, drop the connection (shut down with its last user).
 * @dev: the device; NULL is allowed.
 * Context: may sleep; the caller has stopped submitting.
 */
void rqrbd_destroy(struct rqrbd_dev *dev);

#ifdef __cplusplus
}
#endif

#endif /* RBD_DRV_H */
