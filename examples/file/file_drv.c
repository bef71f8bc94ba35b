/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * file_drv: a queue over a file or block device through io_uring.  See
 * file_drv.h.
 *
 * Reading order: the per-request command and per-hw-queue ring, how a
 * command becomes an SQE (file_prep), what a CQE does to it (file_cqe:
 * short transfers, end of file, fallbacks), the reaper thread and the poll
 * hook, the rq_mq_ops, then opening the file (the O_DIRECT probe), creation
 * and teardown.
 *
 * Concurrency, per hw queue: queue_rq (one thread at a time, by the core's
 * rule), the reaper thread (or rq_mq_poll callers) and resubmissions from
 * it all fill the ring's submission queue, so that side takes sq_lock.  The
 * completion queue has one consumer: the reaper, or for a poll queue the
 * caller holding cq_lock.  A command has at most one SQE in flight, so the
 * ring, sized to the tag depth plus one, never runs out of SQEs.
 * Counters are relaxed atomics shared by all hw queues.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "file_drv.h"

#define FILE_DEFAULT_DEPTH 64
#define FILE_MAX_SEGMENTS 128        /* iovecs per command (max_segments) */
#define FILE_DEFAULT_MAX_SECTORS 2048 /* 1 MiB per request */
#define FILE_ZERO_BUF (64u * 1024)    /* write-zeroes fallback chunk */
#define FILE_PROBE_ALIGN 4096
#define FILE_CUT_NONE UINT16_MAX

/* What a command is doing now (changes: zero range -> zero writes). */
enum file_kind {
	FILE_KIND_RW = 0,
	FILE_KIND_FLUSH,
	FILE_KIND_DISCARD,
	FILE_KIND_ZERO_RANGE,
	FILE_KIND_ZERO_WRITE,
};

/*
 * The driver's payload of every request.  The iovec array is the request's
 * data, advanced in place as transfers complete; it lives here because the
 * kernel may read it after the SQE was submitted.
 */
struct file_cmd {
	struct file_hq *hq;
	uint64_t pos;        /* file offset of the next byte to move */
	uint32_t left;       /* bytes still to move (or zero, or punch) */
	uint32_t cut_len;    /* injection: full length of iov[cut_idx] */
	uint16_t nr_iov;
	uint16_t first;      /* first iovec not wholly moved */
	uint16_t cut_idx;    /* iovec shortened for this submission */
	uint8_t kind;        /* enum file_kind */
	bool write;
	bool fua;
	int err;             /* positive errno of the failure, 0 */
	struct iovec iov[];  /* FILE_MAX_SEGMENTS */
};

/* One hardware queue: its ring and who reaps it. */
struct file_hq {
	struct file_dev *dev;
	unsigned idx;
	bool poll;
	bool ring_ready;
	bool reaper_started;
	struct io_uring ring;
	pthread_mutex_t sq_lock;  /* submission side of the ring */
	pthread_mutex_t cq_lock;  /* poll queues: one reaper at a time */
	pthread_t reaper;
};

/* Counters shared by every hw queue (relaxed atomics). */
struct file_counters {
	atomic_uint_fast64_t reads, writes, fua_writes, flushes, discards,
		write_zeroes, bytes, submissions, short_ios, eof_zeroed,
		unaligned, zero_writes, errors;
};

struct file_dev {
	struct file_config cfg;
	char *path;
	int fd;              /* buffered descriptor: always open */
	int dfd;             /* O_DIRECT descriptor, -1 when buffered */
	unsigned align;      /* O_DIRECT offset and length alignment */
	unsigned mem_align;  /* O_DIRECT buffer alignment */
	bool is_bdev;
	uint64_t size;       /* capacity in bytes */
	char reason[192];    /* the mode line printed at creation */
	void *zero_buf;      /* FILE_ZERO_BUF zeros, page aligned */
	atomic_bool no_zero_range; /* fallocate(ZERO_RANGE) is unsupported */
	atomic_int last_errno;
	struct file_counters c;
	struct rq_tag_set *set;
	struct rq_queue *q;
	struct file_hq *hqs;
};

static inline void file_count(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t file_read_counter(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/**
 * file_config_default() - fill @cfg with the defaults.
 * @cfg: configuration to overwrite.
 */
void file_config_default(struct file_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->direct = FILE_DIRECT_AUTO;
	cfg->nr_hw_queues = 1;
	cfg->hw_queue_depth = FILE_DEFAULT_DEPTH;
}

/* ------------------------------------------------------- command -> SQE */

/* True if the next submission of @cmd (@n iovecs from first) suits O_DIRECT. */
static bool file_cmd_aligned(const struct file_dev *dev, const struct file_cmd *cmd,
			     unsigned n)
{
	unsigned i;

	if (cmd->pos % dev->align)
		return false;
	for (i = cmd->first; i < cmd->first + n; i++) {
		if ((uintptr_t)cmd->iov[i].iov_base % dev->mem_align ||
		    cmd->iov[i].iov_len % dev->align)
			return false;
	}
	return true;
}

/*
 * Fault injection: shorten this submission to max_io_bytes by cutting the
 * iovec where the cap falls (restored by file_cqe).  Returns the iovec count.
 */
static unsigned file_cmd_cap(struct file_cmd *cmd, uint32_t cap)
{
	unsigned n = cmd->nr_iov - cmd->first, i;
	uint32_t acc = 0;

	if (!cap || cmd->left <= cap)
		return n;
	for (i = 0; i < n; i++) {
		struct iovec *v = &cmd->iov[cmd->first + i];

		if (acc + v->iov_len >= cap) {
			cmd->cut_idx = cmd->first + i;
			cmd->cut_len = v->iov_len;
			v->iov_len = cap - acc;
			return i + 1;
		}
		acc += v->iov_len;
	}
	return n;
}

/*
 * Put the next step of @cmd in the submission queue (not yet submitted).
 * Caller holds hq->sq_lock.  Return: 0, or -EBUSY if no SQE is free even
 * after submitting what was queued.
 */
static int file_prep(struct file_hq *hq, struct file_cmd *cmd)
{
	struct file_dev *dev = hq->dev;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&hq->ring);
	unsigned n;
	int fd = dev->fd;

	if (!sqe) {
		io_uring_submit(&hq->ring);
		sqe = io_uring_get_sqe(&hq->ring);
		if (!sqe)
			return -EBUSY;
	}
	switch (cmd->kind) {
	case FILE_KIND_RW:
		n = file_cmd_cap(cmd, dev->cfg.max_io_bytes);
		/* misaligned buffers (counted in queue_rq) use the page cache */
		if (dev->dfd >= 0 && file_cmd_aligned(dev, cmd, n))
			fd = dev->dfd;
		if (cmd->write)
			io_uring_prep_writev2(sqe, fd, &cmd->iov[cmd->first], n, cmd->pos,
					      cmd->fua ? RWF_DSYNC : 0);
		else
			io_uring_prep_readv(sqe, fd, &cmd->iov[cmd->first], n, cmd->pos);
		break;
	case FILE_KIND_ZERO_WRITE:
		/* one chunk of the shared zero buffer at a time */
		cmd->iov[0].iov_base = dev->zero_buf;
		cmd->iov[0].iov_len = cmd->left < FILE_ZERO_BUF ? cmd->left : FILE_ZERO_BUF;
		if (dev->dfd >= 0 && cmd->pos % dev->align == 0 &&
		    cmd->iov[0].iov_len % dev->align == 0)
			fd = dev->dfd;
		io_uring_prep_writev(sqe, fd, cmd->iov, 1, cmd->pos);
		break;
	case FILE_KIND_ZERO_RANGE:
		io_uring_prep_fallocate(sqe, fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
					cmd->pos, cmd->left);
		break;
	case FILE_KIND_DISCARD:
		io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					cmd->pos, cmd->left);
		break;
	case FILE_KIND_FLUSH:
	default:
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		break;
	}
	io_uring_sqe_set_data(sqe, cmd);
	file_count(&dev->c.submissions, 1);
	return 0;
}

/* Queue the next step of @cmd and submit it (resubmission after a CQE). */
static int file_resubmit(struct file_hq *hq, struct file_cmd *cmd)
{
	int ret;

	pthread_mutex_lock(&hq->sq_lock);
	ret = file_prep(hq, cmd);
	if (!ret) {
		ret = io_uring_submit(&hq->ring);
		ret = ret < 0 ? ret : 0;
	}
	pthread_mutex_unlock(&hq->sq_lock);
	return ret;
}

/* ----------------------------------------------------------- CQE -> command */

/* @bytes of @cmd moved: advance the position and the iovecs. */
static void file_cmd_advance(struct file_cmd *cmd, uint32_t bytes)
{
	cmd->pos += bytes;
	cmd->left -= bytes;
	while (bytes && cmd->first < cmd->nr_iov) {
		struct iovec *v = &cmd->iov[cmd->first];

		if (bytes >= v->iov_len) {
			bytes -= v->iov_len;
			v->iov_len = 0;
			cmd->first++;
		} else {
			v->iov_base = (char *)v->iov_base + bytes;
			v->iov_len -= bytes;
			bytes = 0;
		}
	}
}

/* A read met the end of the file: the rest reads as zeros. */
static void file_cmd_zero_rest(struct file_cmd *cmd)
{
	unsigned i;

	for (i = cmd->first; i < cmd->nr_iov; i++)
		memset(cmd->iov[i].iov_base, 0, cmd->iov[i].iov_len);
	cmd->pos += cmd->left;
	cmd->left = 0;
	cmd->first = cmd->nr_iov;
}

/*
 * What CQE result @res does to @cmd.  Resubmits the rest of a short
 * transfer or the next step of a fallback.
 * Context: the ring's only completion consumer; no lock held.
 * Return: true if the command is finished (cmd->err says how).
 */
static bool file_cqe(struct file_hq *hq, struct file_cmd *cmd, int res)
{
	struct file_dev *dev = hq->dev;

	if (cmd->cut_idx != FILE_CUT_NONE) {
		struct iovec *v = &cmd->iov[cmd->cut_idx];

		/* whole again before advancing by what moved */
		v->iov_len = cmd->cut_len;
		cmd->cut_idx = FILE_CUT_NONE;
	}
	if (res == -EINTR || res == -EAGAIN)
		goto again;

	switch (cmd->kind) {
	case FILE_KIND_RW:
		if (res < 0) {
			cmd->err = -res;
			return true;
		}
		if (res == 0) {
			if (cmd->write) {
				cmd->err = EIO; /* no progress: do not spin */
				return true;
			}
			file_count(&dev->c.eof_zeroed, 1);
			file_cmd_zero_rest(cmd);
			return true;
		}
		file_cmd_advance(cmd, (uint32_t)res);
		if (!cmd->left)
			return true;
		file_count(&dev->c.short_ios, 1);
		goto again;
	case FILE_KIND_ZERO_RANGE:
		if (res == -EOPNOTSUPP || res == -EINVAL || res == -ENODEV) {
			/* this file system cannot: write zeros, now and later */
			atomic_store(&dev->no_zero_range, true);
			cmd->kind = FILE_KIND_ZERO_WRITE;
			file_count(&dev->c.zero_writes, 1);
			goto again;
		}
		if (res < 0)
			cmd->err = -res;
		return true;
	case FILE_KIND_ZERO_WRITE:
		if (res <= 0) {
			cmd->err = res ? -res : EIO;
			return true;
		}
		cmd->pos += res;
		cmd->left -= res;
		if (!cmd->left)
			return true;
		goto again;
	default:
		if (res < 0)
			cmd->err = -res;
		return true;
	}
again:
	if (file_resubmit(hq, cmd) < 0) {
		cmd->err = EIO;
		return true;
	}
	return false;
}

/*
 * A command is finished: its request joins the completion batch @cb, which
 * the caller ends once it has taken every CQE there is (tags back a word at
 * a time; rq_affinity honoured by the library).
 */
static void file_finish(struct file_dev *dev, struct file_cmd *cmd, struct rq_comp_batch *cb)
{
	struct rq_request *rq = rq_request_from_pdu(cmd);
	rq_status_t status = RQ_STS_OK;

	if (cmd->err) {
		status = rq_errno_to_status(cmd->err);
		atomic_store_explicit(&dev->last_errno, cmd->err, memory_order_relaxed);
		file_count(&dev->c.errors, 1);
	} else if (rq->op == RQ_OP_READ || rq->op == RQ_OP_WRITE) {
		file_count(&dev->c.bytes, rq->bytes);
	}
	rq_mq_add_to_batch(cb, rq, status);
}

/* ---------------------------------------------------- reaping completions */

/**
 * file_reaper() - a non-polled hw queue's completion thread: waits for
 * CQEs and finishes or resubmits their commands, until the stop NOP.
 * @arg: the struct file_hq.
 *
 * Context: own thread, from file_create() until file_destroy().
 * Return: NULL.
 */
static void *file_reaper(void *arg)
{
	struct file_hq *hq = arg;
	bool stop = false;

	while (!stop) {
		struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
		struct io_uring_cqe *cqe;
		int ret = io_uring_wait_cqe(&hq->ring, &cqe);

		if (ret == -EINTR || ret == -EAGAIN)
			continue;
		if (ret < 0)
			break;
		/* take what is there one at a time: a finish may submit */
		while (io_uring_peek_cqe(&hq->ring, &cqe) == 0) {
			struct file_cmd *cmd = io_uring_cqe_get_data(cqe);
			int res = cqe->res;

			io_uring_cqe_seen(&hq->ring, cqe);
			if (!cmd) {
				stop = true;
				continue;
			}
			if (file_cqe(hq, cmd, res))
				file_finish(hq->dev, cmd, &cb);
		}
		/* ending may dispatch (queue_rq on this ring): after the CQEs */
		rq_mq_end_request_batch(&cb);
	}
	return NULL;
}

static struct file_hq *file_hq_of(struct rq_hw_ctx *hctx)
{
	return rq_hctx_driver_data(hctx);
}

/**
 * file_poll() - ops->poll: reap up to @max finished requests of a poll
 * queue's ring without waiting.
 * @hctx: a poll hw queue.
 * @max: most requests to end.
 *
 * Context: rq_mq_poll() callers; one at a time per ring (others return 0).
 * Return: requests ended.
 */
static int file_poll(struct rq_hw_ctx *hctx, unsigned max)
{
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	struct file_hq *hq = file_hq_of(hctx);
	struct io_uring_cqe *cqe;
	int ended = 0;

	if (pthread_mutex_trylock(&hq->cq_lock))
		return 0;
	while ((unsigned)ended < max && io_uring_peek_cqe(&hq->ring, &cqe) == 0) {
		struct file_cmd *cmd = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&hq->ring, cqe);
		if (cmd && file_cqe(hq, cmd, res)) {
			file_finish(hq->dev, cmd, &cb);
			ended++;
		}
	}
	pthread_mutex_unlock(&hq->cq_lock);
	rq_mq_end_request_batch(&cb);
	return ended;
}

/* ------------------------------------------------------------- mq ops */

/* Fill @cmd's iovecs from @rq's segments, joining contiguous ones. */
static bool file_cmd_map(struct file_cmd *cmd, struct rq_request *rq)
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
		if (n == FILE_MAX_SEGMENTS)
			return false;
		cmd->iov[n].iov_base = seg.base;
		cmd->iov[n].iov_len = seg.len;
		n++;
	}
	cmd->nr_iov = n;
	return true;
}

static void file_account(struct file_dev *dev, const struct rq_request *rq)
{
	switch (rq->op) {
	case RQ_OP_READ:
		file_count(&dev->c.reads, 1);
		break;
	case RQ_OP_WRITE:
		file_count(&dev->c.writes, 1);
		if (rq->opf & RQ_BIO_FUA)
			file_count(&dev->c.fua_writes, 1);
		break;
	case RQ_OP_FLUSH:
		file_count(&dev->c.flushes, 1);
		break;
	case RQ_OP_DISCARD:
		file_count(&dev->c.discards, 1);
		break;
	case RQ_OP_WRITE_ZEROES:
		file_count(&dev->c.write_zeroes, 1);
		break;
	}
}

/**
 * file_queue_rq() - turn a request into an SQE; submit when @last.
 * @hctx: hardware queue (its ring).
 * @rq: the request.
 * @last: false when more requests follow at once (submitted together).
 *
 * Context: dispatch; never concurrently on one hctx; does not sleep
 * beyond the ring's submission lock.
 * Return: RQ_STS_OK, RQ_STS_DEV_RESOURCE if the ring is full (the core
 * retries), RQ_STS_IOERR for a request with more segments than the driver
 * advertised, RQ_STS_NOTSUPP for an unknown op.
 */
static rq_status_t file_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct file_hq *hq = file_hq_of(hctx);
	struct file_dev *dev = hq->dev;
	struct file_cmd *cmd = rq_request_pdu(rq);
	int ret;

	cmd->hq = hq;
	cmd->pos = rq->sector << RQ_SECTOR_SHIFT;
	cmd->left = rq->bytes;
	cmd->first = 0;
	cmd->nr_iov = 0;
	cmd->cut_idx = FILE_CUT_NONE;
	cmd->err = 0;
	cmd->write = rq->op == RQ_OP_WRITE;
	cmd->fua = cmd->write && (rq->opf & RQ_BIO_FUA);
	switch (rq->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		cmd->kind = FILE_KIND_RW;
		if (!file_cmd_map(cmd, rq))
			return RQ_STS_IOERR;
		if (dev->dfd >= 0 && !file_cmd_aligned(dev, cmd, cmd->nr_iov))
			file_count(&dev->c.unaligned, 1);
		break;
	case RQ_OP_FLUSH:
		cmd->kind = FILE_KIND_FLUSH;
		break;
	case RQ_OP_DISCARD:
		cmd->kind = FILE_KIND_DISCARD;
		break;
	case RQ_OP_WRITE_ZEROES:
		if (atomic_load_explicit(&dev->no_zero_range, memory_order_relaxed)) {
			cmd->kind = FILE_KIND_ZERO_WRITE;
			file_count(&dev->c.zero_writes, 1);
		} else {
			cmd->kind = FILE_KIND_ZERO_RANGE;
		}
		break;
	default:
		return RQ_STS_NOTSUPP;
	}

	pthread_mutex_lock(&hq->sq_lock);
	ret = file_prep(hq, cmd);
	if (!ret && last)
		io_uring_submit(&hq->ring);
	pthread_mutex_unlock(&hq->sq_lock);
	if (ret)
		return RQ_STS_DEV_RESOURCE;
	file_account(dev, rq);
	return RQ_STS_OK;
}

/**
 * file_commit_rqs() - submit SQEs queued by a batch that ended without
 * @last.
 * @hctx: hardware queue.
 */
static void file_commit_rqs(struct rq_hw_ctx *hctx)
{
	struct file_hq *hq = file_hq_of(hctx);

	pthread_mutex_lock(&hq->sq_lock);
	io_uring_submit(&hq->ring);
	pthread_mutex_unlock(&hq->sq_lock);
}

/**
 * file_complete_rq() - ops->complete: end a request with the status given
 * to rq_mq_complete_request().
 * @rq: the request.
 */
static void file_complete_rq(struct rq_request *rq)
{
	rq_mq_end_request(rq, rq_mq_complete_status(rq));
}

/**
 * file_init_hctx() - tie a hw queue to its ring.
 * @hctx: hardware queue.
 * @set_data: the struct file_dev.
 * @idx: hardware queue index.
 * Return: 0.
 */
static int file_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	struct file_dev *dev = set_data;

	rq_hctx_set_driver_data(hctx, &dev->hqs[idx]);
	return 0;
}

static const struct rq_mq_ops file_mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = file_queue_rq,
	.commit_rqs = file_commit_rqs,
	.complete = file_complete_rq,
	.poll = file_poll,
	.init_hctx = file_init_hctx,
};

/* ------------------------------------------------------- opening the file */

/*
 * Find out whether O_DIRECT works on @dev->path and with what alignment:
 * statx(STATX_DIOALIGN) where the kernel knows, then an aligned read (the
 * proof), else probing 512 then 4096 bytes.  Sets dev->dfd, align,
 * mem_align and reason; buffered is not an error.
 */
static void file_probe_direct(struct file_dev *dev, int flags)
{
	struct statx stx;
	void *buf = NULL;
	unsigned align = 0, mem_align = 0;
	ssize_t r;
	int dfd;

	dfd = open(dev->path, flags | O_DIRECT);
	if (dfd < 0) {
		snprintf(dev->reason, sizeof(dev->reason), "buffered: open(O_DIRECT): %s",
			 strerror(errno));
		return;
	}
	if (statx(dfd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN)) {
		if (!stx.stx_dio_offset_align) {
			snprintf(dev->reason, sizeof(dev->reason),
				 "buffered: the file system does not support O_DIRECT here");
			close(dfd);
			return;
		}
		align = stx.stx_dio_offset_align;
		mem_align = stx.stx_dio_mem_align ? stx.stx_dio_mem_align : align;
	}
	if (posix_memalign(&buf, FILE_PROBE_ALIGN, 2 * FILE_PROBE_ALIGN)) {
		snprintf(dev->reason, sizeof(dev->reason), "buffered: out of memory");
		close(dfd);
		return;
	}
	/* the proof: an aligned read (0 bytes at end of file is fine too) */
	r = pread(dfd, buf, FILE_PROBE_ALIGN, 0);
	if (r < 0) {
		snprintf(dev->reason, sizeof(dev->reason),
			 "buffered: aligned O_DIRECT read failed: %s", strerror(errno));
		close(dfd);
		free(buf);
		return;
	}
	if (!align) {
		r = pread(dfd, (char *)buf + 512, 512, 512);
		align = (r < 0 && errno == EINVAL) ? FILE_PROBE_ALIGN : 512;
		mem_align = align;
	}
	free(buf);
	if (align > FILE_PROBE_ALIGN || (align & (align - 1))) {
		snprintf(dev->reason, sizeof(dev->reason),
			 "buffered: O_DIRECT alignment %u is not supported", align);
		close(dfd);
		return;
	}
	dev->dfd = dfd;
	dev->align = align;
	dev->mem_align = mem_align < 512 ? 512 : mem_align;
	snprintf(dev->reason, sizeof(dev->reason), "O_DIRECT, %u-byte alignment", align);
}

/* Open the file, find its size and the I/O mode.  Return: 0 or -errno. */
static int file_open(struct file_dev *dev)
{
	int flags = (dev->cfg.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
	struct stat st;

	dev->fd = open(dev->path, flags);
	if (dev->fd < 0)
		return -errno;
	if (fstat(dev->fd, &st))
		return -errno;
	if (S_ISBLK(st.st_mode)) {
		uint64_t bytes = 0;

		if (ioctl(dev->fd, BLKGETSIZE64, &bytes))
			return -errno;
		dev->is_bdev = true;
		dev->size = bytes;
	} else if (S_ISREG(st.st_mode)) {
		dev->size = (uint64_t)st.st_size;
	} else {
		return -EINVAL;
	}
	if (dev->cfg.size_bytes) {
		/* a block device cannot grow */
		if (dev->is_bdev && dev->cfg.size_bytes > dev->size)
			return -EINVAL;
		dev->size = dev->cfg.size_bytes;
	}

	if (dev->cfg.direct == FILE_DIRECT_OFF)
		snprintf(dev->reason, sizeof(dev->reason), "buffered: asked for");
	else
		file_probe_direct(dev, flags);
	if (dev->cfg.direct == FILE_DIRECT_ON && dev->dfd < 0)
		return -EINVAL;
	return 0;
}

/* ----------------------------------------------------- create / destroy */

static int file_limits(struct file_dev *dev, struct rq_queue_limits *lim)
{
	unsigned bs = dev->cfg.blocksize;

	*lim = dev->cfg.limits;
	lim->size = sizeof(*lim);
	if (!bs)
		bs = dev->dfd >= 0 && dev->align > 512 ? dev->align : 512;
	if (bs < 512 || bs > 65536 || (bs & (bs - 1)))
		return -EINVAL;
	if (!lim->logical_block_size)
		lim->logical_block_size = bs;
	else if (lim->logical_block_size != bs)
		return -EINVAL;
	if (!lim->max_hw_sectors)
		lim->max_hw_sectors = FILE_DEFAULT_MAX_SECTORS;
	if (!lim->max_sectors)
		lim->max_sectors = lim->max_hw_sectors < FILE_DEFAULT_MAX_SECTORS ?
				   lim->max_hw_sectors : FILE_DEFAULT_MAX_SECTORS;
	if (!lim->max_segments || lim->max_segments > FILE_MAX_SEGMENTS)
		lim->max_segments = FILE_MAX_SEGMENTS;
	if (!lim->max_discard_sectors)
		lim->max_discard_sectors = (UINT32_MAX >> RQ_SECTOR_SHIFT) & ~(bs / 512 - 1);
	if (!lim->max_write_zeroes_sectors)
		lim->max_write_zeroes_sectors = (UINT32_MAX >> RQ_SECTOR_SHIFT) & ~(bs / 512 - 1);
	/* a page cache (or a disk cache) sits under us; RWF_DSYNC is FUA */
	lim->features |= RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA;
	dev->size -= dev->size % bs;
	return dev->size ? 0 : -EINVAL;
}

static int file_start_rings(struct file_dev *dev)
{
	unsigned i, nr = dev->cfg.nr_hw_queues;
	int ret;

	for (i = 0; i < nr; i++) {
		struct file_hq *hq = &dev->hqs[i];

		hq->dev = dev;
		hq->idx = i;
		hq->poll = i >= nr - dev->cfg.nr_poll_queues;
		pthread_mutex_init(&hq->sq_lock, NULL);
		pthread_mutex_init(&hq->cq_lock, NULL);
		/* every command holds at most one SQE; one more for the stop NOP */
		ret = io_uring_queue_init(dev->cfg.hw_queue_depth + 1, &hq->ring, 0);
		if (ret < 0)
			return ret;
		hq->ring_ready = true;
		if (hq->poll)
			continue;
		if (pthread_create(&hq->reaper, NULL, file_reaper, hq))
			return -EAGAIN;
		hq->reaper_started = true;
	}
	return 0;
}

/**
 * file_create() - open a file and make a queue over it.  See file_drv.h.
 * @cfg: configuration.
 * @out: receives the device.
 * Return: 0 or a negative errno.
 */
int file_create(const struct file_config *cfg, struct file_dev **out)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	struct rq_queue_limits lim;
	struct file_dev *dev;
	int ret;

	if (!cfg || !out || !cfg->path || cfg->direct > FILE_DIRECT_ON)
		return -EINVAL;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->cfg = *cfg;
	dev->fd = dev->dfd = -1;
	if (!dev->cfg.nr_hw_queues)
		dev->cfg.nr_hw_queues = 1;
	if (!dev->cfg.hw_queue_depth)
		dev->cfg.hw_queue_depth = FILE_DEFAULT_DEPTH;
	dev->cfg.max_io_bytes &= ~(RQ_SECTOR_SIZE - 1);
	ret = -EINVAL;
	if (dev->cfg.nr_poll_queues >= dev->cfg.nr_hw_queues + 1 ||
	    dev->cfg.hw_queue_depth > 4096)
		goto fail;
	ret = -ENOMEM;
	dev->path = strdup(cfg->path);
	dev->hqs = calloc(dev->cfg.nr_hw_queues, sizeof(*dev->hqs));
	if (!dev->path || !dev->hqs ||
	    posix_memalign(&dev->zero_buf, FILE_PROBE_ALIGN, FILE_ZERO_BUF))
		goto fail;
	memset(dev->zero_buf, 0, FILE_ZERO_BUF);

	ret = file_open(dev);
	if (ret)
		goto fail;
	ret = file_limits(dev, &lim);
	if (ret)
		goto fail;
	ret = file_start_rings(dev);
	if (ret)
		goto fail;
	if (!dev->cfg.quiet)
		fprintf(stderr, "file: %s: %s\n", dev->path, dev->reason);

	sc.ops = &file_mq_ops;
	sc.nr_hw_queues = dev->cfg.nr_hw_queues;
	sc.nr_poll_queues = dev->cfg.nr_poll_queues;
	sc.queue_depth = dev->cfg.hw_queue_depth;
	sc.cmd_size = sizeof(struct file_cmd) + FILE_MAX_SEGMENTS * sizeof(struct iovec);
	sc.numa_node = -1;
	sc.flags = dev->cfg.flags;
	sc.driver_data = dev;
	ret = rq_tag_set_alloc(&sc, &dev->set);
	if (ret)
		goto fail;

	qc.limits = &lim;
	qc.capacity = dev->size >> RQ_SECTOR_SHIFT;
	qc.scheduler = dev->cfg.sched;
	qc.queuedata = dev;
	ret = rq_mq_alloc_queue(dev->set, &qc, &dev->q);
	if (ret)
		goto fail;
	*out = dev;
	return 0;
fail:
	file_destroy(dev);
	return ret;
}

/** file_queue() - the device's queue. */
struct rq_queue *file_queue(struct file_dev *dev)
{
	return dev->q;
}

/** file_is_direct() - O_DIRECT in use?  See file_drv.h. */
bool file_is_direct(struct file_dev *dev, unsigned *align)
{
	if (align)
		*align = dev->dfd >= 0 ? dev->align : 0;
	return dev->dfd >= 0;
}

/** file_mode_reason() - the mode line.  See file_drv.h. */
const char *file_mode_reason(struct file_dev *dev)
{
	return dev->reason;
}

/** file_last_errno() - errno of the latest failure.  See file_drv.h. */
int file_last_errno(struct file_dev *dev)
{
	return atomic_load_explicit(&dev->last_errno, memory_order_relaxed);
}

/** file_request_errno() - errno kept in a request's payload. */
int file_request_errno(struct rq_request *rq)
{
	return ((struct file_cmd *)rq_request_pdu(rq))->err;
}

/** file_get_stats() - read the counters.  See file_drv.h. */
void file_get_stats(struct file_dev *dev, struct file_stats *st)
{
	struct file_counters *c = &dev->c;

	st->reads = file_read_counter(&c->reads);
	st->writes = file_read_counter(&c->writes);
	st->fua_writes = file_read_counter(&c->fua_writes);
	st->flushes = file_read_counter(&c->flushes);
	st->discards = file_read_counter(&c->discards);
	st->write_zeroes = file_read_counter(&c->write_zeroes);
	st->bytes = file_read_counter(&c->bytes);
	st->submissions = file_read_counter(&c->submissions);
	st->short_ios = file_read_counter(&c->short_ios);
	st->eof_zeroed = file_read_counter(&c->eof_zeroed);
	st->unaligned = file_read_counter(&c->unaligned);
	st->zero_writes = file_read_counter(&c->zero_writes);
	st->errors = file_read_counter(&c->errors);
}

/* Stop a reaper: a NOP with no command is its signal. */
static void file_stop_reaper(struct file_hq *hq)
{
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&hq->sq_lock);
	sqe = io_uring_get_sqe(&hq->ring);
	if (!sqe) {
		io_uring_submit(&hq->ring);
		sqe = io_uring_get_sqe(&hq->ring);
	}
	if (sqe) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, NULL);
		io_uring_submit(&hq->ring);
	}
	pthread_mutex_unlock(&hq->sq_lock);
	if (sqe)
		pthread_join(hq->reaper, NULL);
	else
		pthread_cancel(hq->reaper);
	hq->reaper_started = false;
}

/**
 * file_destroy() - tear a device down.  See file_drv.h.
 * @dev: the device, or NULL.
 */
void file_destroy(struct file_dev *dev)
{
	unsigned i;

	if (!dev)
		return;
	/* waits for requests with the driver: the reapers still run */
	if (dev->q)
		rq_queue_destroy(dev->q);
	if (dev->set)
		rq_tag_set_free(dev->set);
	for (i = 0; dev->hqs && i < dev->cfg.nr_hw_queues; i++) {
		struct file_hq *hq = &dev->hqs[i];

		if (hq->reaper_started)
			file_stop_reaper(hq);
		if (hq->ring_ready)
			io_uring_queue_exit(&hq->ring);
		if (hq->dev) {
			pthread_mutex_destroy(&hq->sq_lock);
			pthread_mutex_destroy(&hq->cq_lock);
		}
	}
	if (dev->dfd >= 0)
		close(dev->dfd);
	if (dev->fd >= 0)
		close(dev->fd);
	free(dev->zero_buf);
	free(dev->hqs);
	free(dev->path);
	free(dev);
}
