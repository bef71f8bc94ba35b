/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rbd_drv: a queue in front of a Ceph RBD image through librbd's
 * asynchronous API.  See rbd_drv.h.
 *
 * Reading order: the process's connections (shared, counted), the
 * per-request command and its pieces, errno -> status, issuing a request
 * (queue_rq), librbd's callback, the rq_mq_ops, then opening the image,
 * creation and teardown.
 *
 * Concurrency.  queue_rq runs once at a time per hw queue (the core's
 * rule) and calls into librbd, whose calls are thread-safe; librbd's
 * callbacks run on its own threads, any number at once.  A command counts
 * its outstanding pieces plus one reference queue_rq holds while it issues
 * them: whoever drops the count to zero hands the request to
 * rq_mq_complete_request().  A blocklisted handle (ESHUTDOWN) is marked
 * stale by the callback and reopened by the next queue_rq of its hw queue
 * (RQ_TAG_SET_BLOCKING: that call may wait for the cluster), under the
 * device's reopen lock.  Counters are relaxed atomics.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "rbd_drv.h"

#define RQRBD_DEFAULT_DEPTH 64
#define RQRBD_DEFAULT_TIMEOUT_S 30
#define RQRBD_TIMEOUT_MARGIN_MS 5000   /* request timeout past the op timeout */
#define RQRBD_MAX_SEGMENTS 256         /* iovecs per request (max_segments) */
#define RQRBD_SPAN_OBJECTS 4           /* span_objects: largest request, in objects */
#define RQRBD_MAX_REQ_BYTES (32u << 20) /* and never more than this */

/* -------------------------------------------------- the process's connections */

/* One rados connection per (ceph.conf, client id) in the process. */
struct rqrbd_conn {
	struct rqrbd_conn *next;
	char *conf;          /* "" for librados' search */
	char *id;            /* "" for the default */
	unsigned timeout_s;
	bool cache;          /* leave librbd's cache as configured */
	unsigned refs;       /* devices (and reopened handles) using it */
	bool dead;           /* blocklisted: new users make a new one */
	rados_t cluster;
};

static pthread_mutex_t rqrbd_conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rqrbd_conn *rqrbd_conns;

/* Set @name to @value unless ceph.conf or CEPH_ARGS set it (not "0"). */
static int rqrbd_conf_default(rados_t cluster, const char *name, const char *value)
{
	char cur[32];

	if (rados_conf_get(cluster, name, cur, sizeof(cur)) == 0 && strcmp(cur, "0") &&
	    strcmp(cur, "0.000000"))
		return 0;
	return rados_conf_set(cluster, name, value);
}

static int rqrbd_conn_connect(struct rqrbd_conn *c)
{
	char t[16];
	int ret;

	ret = rados_create(&c->cluster, c->id[0] ? c->id : NULL);
	if (ret < 0)
		return ret;
	ret = rados_conf_read_file(c->cluster, c->conf[0] ? c->conf : NULL);
	if (ret < 0)
		goto fail;
	rados_conf_parse_env(c->cluster, NULL); /* CEPH_ARGS */
	/* the queue is the cache; librbd's would be one per handle, incoherent */
	if (!c->cache && (ret = rados_conf_set(c->cluster, "rbd_cache", "false")) < 0)
		goto fail;
	/* never wait for ever for a cluster that does not answer */
	snprintf(t, sizeof(t), "%u", c->timeout_s);
	if ((ret = rqrbd_conf_default(c->cluster, "rados_osd_op_timeout", t)) < 0 ||
	    (ret = rqrbd_conf_default(c->cluster, "rados_mon_op_timeout", t)) < 0 ||
	    (ret = rados_conf_set(c->cluster, "client_mount_timeout", t)) < 0)
		goto fail;
	ret = rados_connect(c->cluster);
	if (ret < 0)
		goto fail;
	return 0;
fail:
	rados_shutdown(c->cluster);
	return ret;
}

/* Take a reference on the live connection for @conf and @id (made if none). */
static int rqrbd_conn_get(const char *conf, const char *id, unsigned timeout_s,
			  bool cache, struct rqrbd_conn **out)
{
	struct rqrbd_conn *c;
	int ret;

	conf = conf ? conf : "";
	id = id ? id : "";
	pthread_mutex_lock(&rqrbd_conns_lock);
	for (c = rqrbd_conns; c; c = c->next) {
		if (!c->dead && c->cache == cache && !strcmp(c->conf, conf) &&
		    !strcmp(c->id, id)) {
			c->refs++;
			*out = c;
			pthread_mutex_unlock(&rqrbd_conns_lock);
			return 0;
		}
	}
	ret = -ENOMEM;
	c = calloc(1, sizeof(*c));
	if (!c || !(c->conf = strdup(conf)) || !(c->id = strdup(id)))
		goto fail;
	c->timeout_s = timeout_s;
	c->cache = cache;
	ret = rqrbd_conn_connect(c);
	if (ret < 0)
		goto fail;
	c->refs = 1;
	c->next = rqrbd_conns;
	rqrbd_conns = c;
	*out = c;
	pthread_mutex_unlock(&rqrbd_conns_lock);
	return 0;
fail:
	pthread_mutex_unlock(&rqrbd_conns_lock);
	if (c) {
		free(c->conf);
		free(c->id);
	}
	free(c);
	return ret;
}

/* Drop a reference; the last one shuts the connection down. */
static void rqrbd_conn_put(struct rqrbd_conn *c)
{
	struct rqrbd_conn **p;
	bool last;

	if (!c)
		return;
	pthread_mutex_lock(&rqrbd_conns_lock);
	last = --c->refs == 0;
	if (last) {
		for (p = &rqrbd_conns; *p; p = &(*p)->next) {
			if (*p == c) {
				*p = c->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&rqrbd_conns_lock);
	if (!last)
		return;
	rados_shutdown(c->cluster);
	free(c->conf);
	free(c->id);
	free(c);
}

/* A blocklisted connection is never handed out again. */
static void rqrbd_conn_mark_dead(struct rqrbd_conn *c)
{
	pthread_mutex_lock(&rqrbd_conns_lock);
	c->dead = true;
	pthread_mutex_unlock(&rqrbd_conns_lock);
}

/* ------------------------------------------------------ commands and handles */

/* An open image: a connection, an io context on the pool, the handle. */
struct rqrbd_handle {
	struct rqrbd_conn *conn;
	rados_ioctx_t io;
	rbd_image_t image;
	bool io_open, image_open;
};

/* One hardware queue: its handle (its own, or the device's shared one). */
struct rqrbd_hq {
	struct rqrbd_dev *dev;
	unsigned idx;
	struct rqrbd_handle *h;
	pthread_mutex_t lock; /* held while issuing on h; a reopen takes the
				 locks of every hw queue sharing h */
	atomic_bool stale;   /* a call came back blocklisted: reopen first */
};

/* The driver's payload of every request. */
struct rqrbd_cmd {
	struct rqrbd_hq *hq;
	atomic_int pending;  /* pieces out + 1 while queue_rq issues */
	atomic_int err;      /* positive errno of the first failed piece */
	uint16_t nr_iov;
	uint16_t piece_used; /* slots of piece[] handed to librbd so far */
	struct iovec iov[RQRBD_MAX_SEGMENTS];   /* the request's data */
	/*
	 * The pieces' windows of it, one after the other: librbd keeps a
	 * read's iovec array until it calls back.  A request spans at most
	 * two object pieces (its size is one at most), and the cut between
	 * them splits at most one iovec in two.
	 */
	struct iovec piece[RQRBD_MAX_SEGMENTS + 1];
};

/* Counters shared by every hw queue (relaxed atomics). */
struct rqrbd_counters {
	atomic_uint_fast64_t reads, writes, flushes, discards, write_zeroes,
		read_calls, write_calls, discard_calls, zero_calls, split, bytes,
		errors, timeouts, reopens, last_errno;
};

struct rqrbd_dev {
	struct rqrbd_config cfg;
	char *pool, *image, *snap, *conf, *id, *sched;  /* cfg's copies */
	uint64_t size;       /* bytes */
	uint64_t unit;       /* object piece: stripe unit */
	bool exclusive_lock; /* the image has the feature: one shared handle */
	unsigned nr_handles;
	struct rqrbd_handle *handles;  /* nr_handles */
	struct rqrbd_hq *hqs;          /* nr_hw_queues */
	pthread_mutex_t reopen_lock;
	struct rqrbd_counters c;
	struct rq_tag_set *set;
	struct rq_queue *q;
};

static inline void rqrbd_count(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t rqrbd_read_counter(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/**
 * rqrbd_config_default() - fill @cfg with the defaults.
 * @cfg: configuration to overwrite.
 */
void rqrbd_config_default(struct rqrbd_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->nr_hw_queues = 1;
	cfg->hw_queue_depth = RQRBD_DEFAULT_DEPTH;
	cfg->op_timeout_s = RQRBD_DEFAULT_TIMEOUT_S;
}

/* ----------------------------------------------------------- errno -> status */

/*
 * What a failed librbd call means for the request:
 *   ETIMEDOUT                       TIMEOUT (an op timeout expired)
 *   ESHUTDOWN (EBLOCKLISTED)        OFFLINE, and the handle is reopened
 *   ENOENT, ENODEV, ENXIO           OFFLINE (the image or pool went away)
 *   ENOTCONN, ECONNREFUSED, ...     TRANSPORT
 *   EROFS, EPERM, EACCES            TARGET (the cluster refused: read-only
 *                                   handle, snapshot, caps)
 *   ENOSPC, EDQUOT                  NOSPC (full pool or quota)
 *   EOPNOTSUPP, ENOSYS              NOTSUPP
 *   EINVAL                          INVAL
 *   ENOMEM                          RESOURCE
 *   EAGAIN, EBUSY                   AGAIN
 *   anything else                   IOERR
 */
static rq_status_t rqrbd_status(int err)
{
	switch (err) {
	case 0:
		return RQ_STS_OK;
	case ESHUTDOWN:
	case ENOENT:
	case ENODEV:
	case ENXIO:
		return RQ_STS_OFFLINE;
	case ENOTCONN:
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENOLINK:
		return RQ_STS_TRANSPORT;
	case EROFS:
	case EPERM:
	case EACCES:
		return RQ_STS_TARGET;
	case EDQUOT:
		return RQ_STS_NOSPC;
	case ENOSYS:
		return RQ_STS_NOTSUPP;
	case EBUSY:
		return RQ_STS_AGAIN;
	default:
		return rq_errno_to_status(err); /* TIMEOUT, NOSPC, INVAL, ... */
	}
}

/* ------------------------------------------------------------ completion */

/* Every piece is back: hand the request to ops->complete. */
static void rqrbd_finish(struct rqrbd_cmd *cmd)
{
	struct rq_request *rq = rq_request_from_pdu(cmd);
	struct rqrbd_dev *dev = cmd->hq->dev;
	int err = atomic_load_explicit(&cmd->err, memory_order_acquire);

	if (err) {
		rqrbd_count(&dev->c.errors, 1);
		atomic_store_explicit(&dev->c.last_errno, (uint64_t)err, memory_order_relaxed);
		if (err == ESHUTDOWN)
			atomic_store(&cmd->hq->stale, true);
	} else if (rq->op == RQ_OP_READ || rq->op == RQ_OP_WRITE) {
		rqrbd_count(&dev->c.bytes, rq->bytes);
	}
	rq_mq_complete_request(rq, rqrbd_status(err));
}

/* Drop one reference of @cmd, recording @err (positive) if it is the first. */
static void rqrbd_cmd_put(struct rqrbd_cmd *cmd, int err)
{
	if (err) {
		int none = 0;

		atomic_compare_exchange_strong_explicit(&cmd->err, &none, err,
							memory_order_release,
							memory_order_relaxed);
	}
	if (atomic_fetch_sub_explicit(&cmd->pending, 1, memory_order_acq_rel) == 1)
		rqrbd_finish(cmd);
}

/**
 * rqrbd_callback() - librbd ended one call of a command.
 * @c: the completion (released here).
 * @arg: the struct rqrbd_cmd.
 *
 * Context: a librbd callback thread (or the issuing thread, if librbd
 * completes at once); never blocks beyond what ops->complete does.
 */
static void rqrbd_callback(rbd_completion_t c, void *arg)
{
	ssize_t ret = rbd_aio_get_return_value(c);

	rbd_aio_release(c);
	rqrbd_cmd_put(arg, ret < 0 ? (int)-ret : 0);
}

/* --------------------------------------------------------------- issuing */

/*
 * Fill the next free slots of cmd->piece with the request's bytes [@off,
 * @off + @len) (offsets within the request); *@iov receives the first.
 * Return: the number of iovecs, or -EIO if the slots ran out (a request
 * larger than the limits allow).
 */
static int rqrbd_window(struct rqrbd_cmd *cmd, uint64_t off, uint64_t len,
			struct iovec **iov)
{
	struct iovec *w = cmd->piece + cmd->piece_used;
	unsigned room = RQRBD_MAX_SEGMENTS + 1 - cmd->piece_used;
	uint64_t pos = 0;
	int n = 0;

	*iov = w;

	for (unsigned i = 0; i < cmd->nr_iov && len; i++) {
		uint64_t l = cmd->iov[i].iov_len, skip, take;

		if (pos + l <= off) {
			pos += l;
			continue;
		}
		if ((unsigned)n == room)
			return -EIO;
		skip = off > pos ? off - pos : 0;
		take = l - skip < len ? l - skip : len;
		w[n].iov_base = (char *)cmd->iov[i].iov_base + skip;
		w[n].iov_len = take;
		n++;
		len -= take;
		off += take;
		pos += l;
	}
	cmd->piece_used += n;
	return n;
}

/* Issue one call for [@pos, @pos + @len) of the image; @off is in the request. */
static int rqrbd_issue(struct rqrbd_cmd *cmd, rbd_image_t image, unsigned op, uint64_t pos,
		     uint64_t off, uint64_t len)
{
	struct rqrbd_counters *ctr = &cmd->hq->dev->c;
	struct iovec *iov = NULL;
	rbd_completion_t c;
	int ret, n = 0;

	if (op == RQ_OP_READ || op == RQ_OP_WRITE) {
		n = rqrbd_window(cmd, off, len, &iov);
		if (n < 0)
			return n;
	}
	ret = rbd_aio_create_completion(cmd, rqrbd_callback, &c);
	if (ret < 0)
		return ret;
	atomic_fetch_add_explicit(&cmd->pending, 1, memory_order_relaxed);
	switch (op) {
	case RQ_OP_READ:
		ret = rbd_aio_readv(image, iov, n, pos, c);
		rqrbd_count(&ctr->read_calls, 1);
		break;
	case RQ_OP_WRITE:
		ret = rbd_aio_writev(image, iov, n, pos, c);
		rqrbd_count(&ctr->write_calls, 1);
		break;
	case RQ_OP_DISCARD:
		ret = rbd_aio_discard(image, pos, len, c);
		rqrbd_count(&ctr->discard_calls, 1);
		break;
	case RQ_OP_WRITE_ZEROES:
		ret = rbd_aio_write_zeroes(image, pos, len, c, 0, 0);
		rqrbd_count(&ctr->zero_calls, 1);
		break;
	default:
		ret = rbd_aio_flush(image, c);
		break;
	}
	if (ret < 0) {
		/* not accepted: the callback will not run */
		rbd_aio_release(c);
		atomic_fetch_sub_explicit(&cmd->pending, 1, memory_order_relaxed);
	}
	return ret;
}

/*
 * Issue @rq as calls that each stay within one object piece (or one call
 * with span_objects, and for a flush).  Return: 0, or the negative errno
 * of the first call librbd refused (the calls before it still end).
 */
static int rqrbd_issue_rq(struct rqrbd_cmd *cmd, struct rq_request *rq, rbd_image_t image)
{
	struct rqrbd_dev *dev = cmd->hq->dev;
	uint64_t pos = rq->sector << RQ_SECTOR_SHIFT, off = 0, len = rq->bytes;
	unsigned calls = 0;
	int ret = 0;

	if (rq->op == RQ_OP_FLUSH || dev->cfg.span_objects)
		return rqrbd_issue(cmd, image, rq->op, pos, 0, len);
	while (off < len && ret >= 0) {
		uint64_t piece = dev->unit - (pos + off) % dev->unit;

		if (piece > len - off)
			piece = len - off;
		ret = rqrbd_issue(cmd, image, rq->op, pos + off, off, piece);
		off += piece;
		calls++;
	}
	if (calls > 1)
		rqrbd_count(&dev->c.split, 1);
	return ret < 0 ? ret : 0;
}

/* Fill @cmd's iovecs from @rq's segments, joining contiguous ones. */
static bool rqrbd_cmd_map(struct rqrbd_cmd *cmd, struct rq_request *rq)
{
	struct rq_req_iter ri;
	struct rq_segment seg;
	unsigned n = 0;

	rq_req_iter_init(&ri, rq);
	while (rq_req_iter_next(&ri, &seg)) {
		if (n && (char *)cmd->iov[n - 1].iov_base + cmd->iov[n - 1].iov_len ==
			 (char *)seg.base) {
			cmd->iov[n - 1].iov_len += seg.len;
			continue;
		}
		if (n == RQRBD_MAX_SEGMENTS)
			return false;
		cmd->iov[n].iov_base = seg.base;
		cmd->iov[n].iov_len = seg.len;
		n++;
	}
	cmd->nr_iov = (uint16_t)n;
	return true;
}

static void rqrbd_account(struct rqrbd_dev *dev, const struct rq_request *rq)
{
	static const size_t field[] = {
		[RQ_OP_READ] = offsetof(struct rqrbd_counters, reads),
		[RQ_OP_WRITE] = offsetof(struct rqrbd_counters, writes),
		[RQ_OP_FLUSH] = offsetof(struct rqrbd_counters, flushes),
		[RQ_OP_DISCARD] = offsetof(struct rqrbd_counters, discards),
		[RQ_OP_WRITE_ZEROES] = offsetof(struct rqrbd_counters, write_zeroes),
	};

	if (rq->op < RQ_OP_LAST)
		rqrbd_count((atomic_uint_fast64_t *)((char *)&dev->c + field[rq->op]), 1);
}

static int rqrbd_reopen(struct rqrbd_hq *hq);

/**
 * rqrbd_queue_rq() - turn a request into librbd calls.
 * @hctx: hardware queue (its image handle).
 * @rq: the request.
 * @last: unused: librbd sends each call at once.
 *
 * Context: dispatch; never concurrently on one hctx.  May wait for the
 * cluster when the handle must be reopened after a blocklisting, or when
 * librbd throttles (RQ_TAG_SET_BLOCKING).
 * Return: RQ_STS_OK (the request ends through the callback, perhaps
 * already), RQ_STS_IOERR for more segments than advertised, RQ_STS_NOTSUPP
 * for an unknown op, RQ_STS_OFFLINE when a reopen failed.
 */
static rq_status_t rqrbd_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct rqrbd_hq *hq = rq_hctx_driver_data(hctx);
	struct rqrbd_cmd *cmd = rq_request_pdu(rq);
	int ret;

	(void)last;
	if (rq->op >= RQ_OP_LAST)
		return RQ_STS_NOTSUPP;
	if (atomic_load(&hq->stale) && rqrbd_reopen(hq) < 0)
		return RQ_STS_OFFLINE;
	pthread_mutex_lock(&hq->lock);
	cmd->hq = hq;
	cmd->nr_iov = 0;
	cmd->piece_used = 0;
	atomic_store_explicit(&cmd->err, 0, memory_order_relaxed);
	atomic_store_explicit(&cmd->pending, 1, memory_order_relaxed);
	if ((rq->op == RQ_OP_READ || rq->op == RQ_OP_WRITE) && !rqrbd_cmd_map(cmd, rq)) {
		pthread_mutex_unlock(&hq->lock);
		return RQ_STS_IOERR;
	}
	rqrbd_account(hq->dev, rq);
	ret = rqrbd_issue_rq(cmd, rq, hq->h->image);
	pthread_mutex_unlock(&hq->lock);
	rqrbd_cmd_put(cmd, ret < 0 ? -ret : 0);
	return RQ_STS_OK;
}

/**
 * rqrbd_complete_rq() - ops->complete: end a request with the status given
 * to rq_mq_complete_request().
 * @rq: the request.
 */
static void rqrbd_complete_rq(struct rq_request *rq)
{
	rq_mq_end_request(rq, rq_mq_complete_status(rq));
}

/**
 * rqrbd_timeout() - ops->timeout: a request outlived the op timeout plus a
 * margin.  librbd still holds its buffers, and every RADOS op under it has
 * its own timeout, so the request is given more time, never ended here.
 * @rq: the request.
 * Return: RQ_EH_RESET_TIMER.
 */
static enum rq_timeout_ret rqrbd_timeout(struct rq_request *rq)
{
	struct rqrbd_cmd *cmd = rq_request_pdu(rq);

	rqrbd_count(&cmd->hq->dev->c.timeouts, 1);
	return RQ_EH_RESET_TIMER;
}

/**
 * rqrbd_init_hctx() - tie a hw queue to its image handle.
 * @hctx: hardware queue.
 * @set_data: the struct rqrbd_dev.
 * @idx: hardware queue index.
 * Return: 0.
 */
static int rqrbd_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	struct rqrbd_dev *dev = set_data;

	rq_hctx_set_driver_data(hctx, &dev->hqs[idx]);
	return 0;
}

static const struct rq_mq_ops rqrbd_mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = rqrbd_queue_rq,
	.complete = rqrbd_complete_rq,
	.timeout = rqrbd_timeout,
	.init_hctx = rqrbd_init_hctx,
};

/* ------------------------------------------------------- opening the image */

static void rqrbd_handle_close(struct rqrbd_handle *h)
{
	if (h->image_open)
		rbd_close(h->image);   /* waits for its calls */
	if (h->io_open)
		rados_ioctx_destroy(h->io);
	rqrbd_conn_put(h->conn);
	memset(h, 0, sizeof(*h));
}

/* Connect (or share the connection) and open the image. */
static int rqrbd_handle_open(struct rqrbd_dev *dev, struct rqrbd_handle *h)
{
	int ret;

	memset(h, 0, sizeof(*h));
	ret = rqrbd_conn_get(dev->conf, dev->id, dev->cfg.op_timeout_s, dev->cfg.rbd_cache,
			     &h->conn);
	if (ret < 0)
		return ret;
	ret = rados_ioctx_create(h->conn->cluster, dev->pool, &h->io);
	if (ret < 0)
		goto fail;
	h->io_open = true;
	if (dev->cfg.read_only || dev->snap)
		ret = rbd_open_read_only(h->io, dev->image, &h->image, dev->snap);
	else
		ret = rbd_open(h->io, dev->image, &h->image, NULL);
	if (ret < 0)
		goto fail;
	h->image_open = true;
	return 0;
fail:
	rqrbd_handle_close(h);
	return ret;
}

/*
 * The handle of @hq came back blocklisted: give up its connection and open
 * the image again on a new one.  Every hw queue sharing the handle sees the
 * new one.  Context: queue_rq of @hq (may sleep).  Return: 0 or -errno.
 */
static int rqrbd_reopen(struct rqrbd_hq *hq)
{
	struct rqrbd_dev *dev = hq->dev;
	struct rqrbd_handle *h = hq->h, fresh, old;
	unsigned i, n = dev->cfg.nr_hw_queues;
	int ret = 0;

	pthread_mutex_lock(&dev->reopen_lock);
	if (!atomic_load(&hq->stale))
		goto out;  /* another hw queue sharing the handle did it */
	rqrbd_conn_mark_dead(h->conn);
	ret = rqrbd_handle_open(dev, &fresh);
	if (ret < 0)
		goto out;
	/* nobody issues on the handle while it changes (index order) */
	for (i = 0; i < n; i++)
		if (dev->hqs[i].h == h)
			pthread_mutex_lock(&dev->hqs[i].lock);
	old = *h;
	*h = fresh;
	for (i = 0; i < n; i++) {
		if (dev->hqs[i].h == h) {
			atomic_store(&dev->hqs[i].stale, false);
			pthread_mutex_unlock(&dev->hqs[i].lock);
		}
	}
	rqrbd_count(&dev->c.reopens, 1);
	pthread_mutex_unlock(&dev->reopen_lock);
	rqrbd_handle_close(&old);   /* waits for calls still on it */
	return 0;
out:
	pthread_mutex_unlock(&dev->reopen_lock);
	return ret;
}

/* Size, object piece and features of the open image. */
static int rqrbd_probe(struct rqrbd_dev *dev)
{
	rbd_image_info_t info;
	uint64_t unit = 0, features = 0;
	int ret;

	ret = rbd_stat(dev->handles[0].image, &info, sizeof(info));
	if (ret < 0)
		return ret;
	if (rbd_get_stripe_unit(dev->handles[0].image, &unit) < 0 || !unit)
		unit = info.obj_size;
	if (rbd_get_features(dev->handles[0].image, &features) < 0)
		features = 0;
	dev->size = info.size & ~(uint64_t)(RQ_SECTOR_SIZE - 1);
	dev->unit = unit;
	dev->exclusive_lock = features & RBD_FEATURE_EXCLUSIVE_LOCK;
	if (!dev->size || unit < 4096 || unit > (1ull << 31) || (unit & (unit - 1)))
		return -EINVAL;
	return 0;
}

/* Queue limits: a request is one object piece at most (unless spanning). */
static void rqrbd_limits(struct rqrbd_dev *dev, struct rq_queue_limits *lim)
{
	uint64_t max = dev->unit;

	if (dev->cfg.span_objects)
		max = dev->unit * RQRBD_SPAN_OBJECTS;
	if (max > RQRBD_MAX_REQ_BYTES)
		max = RQRBD_MAX_REQ_BYTES;
	*lim = dev->cfg.limits;
	lim->size = sizeof(*lim);
	if (!lim->logical_block_size)
		lim->logical_block_size = RQ_SECTOR_SIZE;
	/* never more than one piece: rqrbd_cmd.piece has room for two */
	if (!lim->max_hw_sectors || lim->max_hw_sectors > (max >> RQ_SECTOR_SHIFT))
		lim->max_hw_sectors = (uint32_t)(max >> RQ_SECTOR_SHIFT);
	if (!lim->max_sectors || lim->max_sectors > lim->max_hw_sectors)
		lim->max_sectors = lim->max_hw_sectors;
	if (!lim->max_segments || lim->max_segments > RQRBD_MAX_SEGMENTS)
		lim->max_segments = RQRBD_MAX_SEGMENTS;
	if (!lim->max_segment_size)
		lim->max_segment_size = lim->max_hw_sectors << RQ_SECTOR_SHIFT;
	if (!dev->cfg.read_only && !dev->snap) {
		if (!lim->max_discard_sectors || lim->max_discard_sectors > (max >> RQ_SECTOR_SHIFT))
			lim->max_discard_sectors = (uint32_t)(max >> RQ_SECTOR_SHIFT);
		if (!lim->max_write_zeroes_sectors ||
		    lim->max_write_zeroes_sectors > (max >> RQ_SECTOR_SHIFT))
			lim->max_write_zeroes_sectors = (uint32_t)(max >> RQ_SECTOR_SHIFT);
	}
	/* the library cuts and stops merges at object boundaries, as the
	 * kernel's rbd sets chunk_sectors; --span-objects lets them cross */
	if (!dev->cfg.span_objects)
		lim->chunk_sectors = (uint32_t)(dev->unit >> RQ_SECTOR_SHIFT);
	/* librbd's cache (rbd_cache) is volatile; FUA is a write + flush */
	lim->features |= RQ_FEAT_WRITE_CACHE;
}

static int rqrbd_open_handles(struct rqrbd_dev *dev)
{
	unsigned i;
	int ret;

	dev->nr_handles = 1;
	ret = rqrbd_handle_open(dev, &dev->handles[0]);
	if (ret < 0)
		return ret;
	ret = rqrbd_probe(dev);
	if (ret < 0)
		return ret;
	/*
	 * One handle: while the image passes a lock between writers, or with
	 * librbd's cache on (each handle would cache on its own).
	 */
	if ((!dev->exclusive_lock || dev->cfg.read_only || dev->snap) && !dev->cfg.rbd_cache)
		dev->nr_handles = dev->cfg.nr_hw_queues;
	for (i = 1; i < dev->nr_handles; i++) {
		ret = rqrbd_handle_open(dev, &dev->handles[i]);
		if (ret < 0) {
			dev->nr_handles = i;
			return ret;
		}
	}
	for (i = 0; i < dev->cfg.nr_hw_queues; i++) {
		dev->hqs[i].dev = dev;
		dev->hqs[i].idx = i;
		dev->hqs[i].h = &dev->handles[i % dev->nr_handles];
		pthread_mutex_init(&dev->hqs[i].lock, NULL);
	}
	return 0;
}

/* Copy the strings of @cfg into @dev.  Return: 0 or -ENOMEM. */
static int rqrbd_copy_config(struct rqrbd_dev *dev, const struct rqrbd_config *cfg)
{
	dev->cfg = *cfg;
	dev->pool = strdup(cfg->pool);
	dev->image = strdup(cfg->image);
	dev->snap = cfg->snap ? strdup(cfg->snap) : NULL;
	dev->conf = cfg->ceph_conf ? strdup(cfg->ceph_conf) : NULL;
	dev->id = cfg->client_id ? strdup(cfg->client_id) : NULL;
	dev->sched = cfg->sched ? strdup(cfg->sched) : NULL;
	if (!dev->pool || !dev->image || (cfg->snap && !dev->snap) ||
	    (cfg->ceph_conf && !dev->conf) || (cfg->client_id && !dev->id) ||
	    (cfg->sched && !dev->sched))
		return -ENOMEM;
	if (!dev->cfg.nr_hw_queues)
		dev->cfg.nr_hw_queues = 1;
	if (!dev->cfg.hw_queue_depth)
		dev->cfg.hw_queue_depth = RQRBD_DEFAULT_DEPTH;
	if (!dev->cfg.op_timeout_s)
		dev->cfg.op_timeout_s = RQRBD_DEFAULT_TIMEOUT_S;
	return 0;
}

static int rqrbd_make_queue(struct rqrbd_dev *dev)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	struct rq_queue_limits lim;
	int ret;

	rqrbd_limits(dev, &lim);
	sc.ops = &rqrbd_mq_ops;
	sc.nr_hw_queues = dev->cfg.nr_hw_queues;
	sc.queue_depth = dev->cfg.hw_queue_depth;
	sc.cmd_size = sizeof(struct rqrbd_cmd);
	sc.numa_node = -1;
	sc.timeout_ms = dev->cfg.op_timeout_s * 1000u + RQRBD_TIMEOUT_MARGIN_MS;
	sc.flags = dev->cfg.flags | RQ_TAG_SET_BLOCKING;
	sc.driver_data = dev;
	ret = rq_tag_set_alloc(&sc, &dev->set);
	if (ret)
		return ret;
	qc.limits = &lim;
	qc.capacity = dev->size >> RQ_SECTOR_SHIFT;
	qc.scheduler = dev->sched;
	qc.queuedata = dev;
	return rq_mq_alloc_queue(dev->set, &qc, &dev->q);
}

/**
 * rqrbd_create() - open an image and make a queue over it.  See rbd_drv.h.
 * @cfg: configuration.
 * @out: receives the device.
 * Return: 0 or a negative errno.
 */
int rqrbd_create(const struct rqrbd_config *cfg, struct rqrbd_dev **out)
{
	struct rqrbd_dev *dev;
	int ret;

	if (!cfg || !out || !cfg->pool || !cfg->image || !cfg->pool[0] || !cfg->image[0] ||
	    cfg->nr_hw_queues > 1024 || cfg->hw_queue_depth > 4096)
		return -EINVAL;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	pthread_mutex_init(&dev->reopen_lock, NULL);
	ret = rqrbd_copy_config(dev, cfg);
	if (ret)
		goto fail;
	ret = -ENOMEM;
	dev->handles = calloc(dev->cfg.nr_hw_queues, sizeof(*dev->handles));
	dev->hqs = calloc(dev->cfg.nr_hw_queues, sizeof(*dev->hqs));
	if (!dev->handles || !dev->hqs)
		goto fail;
	ret = rqrbd_open_handles(dev);
	if (ret)
		goto fail;
	ret = rqrbd_make_queue(dev);
	if (ret)
		goto fail;
	if (!dev->cfg.quiet)
		fprintf(stderr, "rbd: %s/%s%s%s: %llu bytes, %llu-byte objects%s, "
			"%u handle%s for %u hw queue%s%s\n", dev->pool, dev->image,
			dev->snap ? "@" : "", dev->snap ? dev->snap : "",
			(unsigned long long)dev->size, (unsigned long long)dev->unit,
			dev->cfg.span_objects ? " (requests may span them)" : "",
			dev->nr_handles, dev->nr_handles == 1 ? "" : "s",
			dev->cfg.nr_hw_queues, dev->cfg.nr_hw_queues == 1 ? "" : "s",
			dev->nr_handles == 1 && dev->cfg.nr_hw_queues > 1 ?
			(dev->cfg.rbd_cache ? " (librbd cache: one shared handle)" :
			 " (exclusive-lock: one shared handle)") : "");
	*out = dev;
	return 0;
fail:
	rqrbd_destroy(dev);
	return ret;
}

/** rqrbd_queue() - the device's queue. */
struct rq_queue *rqrbd_queue(struct rqrbd_dev *dev)
{
	return dev->q;
}

/** rqrbd_size() - the image size in bytes. */
uint64_t rqrbd_size(struct rqrbd_dev *dev)
{
	return dev->size;
}

/** rqrbd_object_size() - the object piece in bytes. */
uint64_t rqrbd_object_size(struct rqrbd_dev *dev)
{
	return dev->unit;
}

/** rqrbd_nr_handles() - image handles open. */
unsigned rqrbd_nr_handles(struct rqrbd_dev *dev)
{
	return dev->nr_handles;
}

/** rqrbd_get_stats() - read the counters.  See rbd_drv.h. */
void rqrbd_get_stats(struct rqrbd_dev *dev, struct rqrbd_stats *st)
{
	struct rqrbd_counters *c = &dev->c;

	st->reads = rqrbd_read_counter(&c->reads);
	st->writes = rqrbd_read_counter(&c->writes);
	st->flushes = rqrbd_read_counter(&c->flushes);
	st->discards = rqrbd_read_counter(&c->discards);
	st->write_zeroes = rqrbd_read_counter(&c->write_zeroes);
	st->read_calls = rqrbd_read_counter(&c->read_calls);
	st->write_calls = rqrbd_read_counter(&c->write_calls);
	st->discard_calls = rqrbd_read_counter(&c->discard_calls);
	st->zero_calls = rqrbd_read_counter(&c->zero_calls);
	st->split = rqrbd_read_counter(&c->split);
	st->bytes = rqrbd_read_counter(&c->bytes);
	st->errors = rqrbd_read_counter(&c->errors);
	st->timeouts = rqrbd_read_counter(&c->timeouts);
	st->reopens = rqrbd_read_counter(&c->reopens);
	st->last_errno = rqrbd_read_counter(&c->last_errno);
}

/** rqrbd_stats_format() - the counters in one line.  See rbd_drv.h. */
void rqrbd_stats_format(const struct rqrbd_stats *st, char *buf, size_t len)
{
	snprintf(buf, len, "requests: %llu reads, %llu writes, %llu flushes, %llu discards, "
		 "%llu write-zeroes; librbd calls: %llu reads, %llu writes, %llu discards, "
		 "%llu write-zeroes; %llu split at object boundaries; %llu errors "
		 "(last errno %llu), %llu timeouts, %llu reopens",
		 (unsigned long long)st->reads, (unsigned long long)st->writes,
		 (unsigned long long)st->flushes, (unsigned long long)st->discards,
		 (unsigned long long)st->write_zeroes, (unsigned long long)st->read_calls,
		 (unsigned long long)st->write_calls, (unsigned long long)st->discard_calls,
		 (unsigned long long)st->zero_calls, (unsigned long long)st->split,
		 (unsigned long long)st->errors, (unsigned long long)st->last_errno,
		 (unsigned long long)st->timeouts, (unsigned long long)st->reopens);
}

/** rqrbd_stats_json() - the counters as JSON members.  See rbd_drv.h. */
void rqrbd_stats_json(const struct rqrbd_stats *st, FILE *f)
{
	static const struct {
		const char *name;
		size_t off;
	} fields[] = {
#define RQRBD_FIELD(x) { #x, offsetof(struct rqrbd_stats, x) }
		RQRBD_FIELD(reads), RQRBD_FIELD(writes), RQRBD_FIELD(flushes),
		RQRBD_FIELD(discards), RQRBD_FIELD(write_zeroes), RQRBD_FIELD(read_calls),
		RQRBD_FIELD(write_calls), RQRBD_FIELD(discard_calls), RQRBD_FIELD(zero_calls),
		RQRBD_FIELD(split), RQRBD_FIELD(bytes), RQRBD_FIELD(errors),
		RQRBD_FIELD(timeouts), RQRBD_FIELD(reopens), RQRBD_FIELD(last_errno),
#undef RQRBD_FIELD
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		uint64_t v;

		memcpy(&v, (const char *)st + fields[i].off, sizeof(v));
		fprintf(f, "%s\"%s\": %llu", i ? ", " : "", fields[i].name, (unsigned long long)v);
	}
}

/**
 * rqrbd_destroy() - tear a device down.  See rbd_drv.h.
 * @dev: the device, or NULL.
 */
void rqrbd_destroy(struct rqrbd_dev *dev)
{
	if (!dev)
		return;
	/* waits for requests with librbd: its callbacks still run */
	if (dev->q)
		rq_queue_destroy(dev->q);
	if (dev->set)
		rq_tag_set_free(dev->set);
	for (unsigned i = 0; dev->handles && i < dev->nr_handles; i++)
		rqrbd_handle_close(&dev->handles[i]);
	for (unsigned i = 0; dev->hqs && i < dev->cfg.nr_hw_queues; i++)
		if (dev->hqs[i].dev)
			pthread_mutex_destroy(&dev->hqs[i].lock);
	pthread_mutex_destroy(&dev->reopen_lock);
	free(dev->handles);
	free(dev->hqs);
	free(dev->pool);
	free(dev->image);
	free(dev->snap);
	free(dev->conf);
	free(dev->id);
	free(dev->sched);
	free(dev);
}
