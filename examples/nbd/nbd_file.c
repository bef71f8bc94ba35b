/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_file: the file driver of rqnbd.  See nbd_file.h.
 *
 * Reading order: per-request payload and per-worker state, the I/O of one
 * request, the worker thread, the rq_mq_ops, the rq_sq_ops, creation and
 * teardown.
 *
 * The front ends differ only in how a request reaches a worker and how it
 * is ended.  Multi-queue: queue_rq appends the request to its hw queue's
 * worker list; the worker ends it with rq_mq_end_request().  Single-queue:
 * request_fn (queue lock held) fetches requests while fewer than the depth
 * are out and appends each to the next worker's list in turn; the worker
 * takes the queue lock, ends the request with rq_sq_end_request_all_locked()
 * and, still holding it, runs the same dispatch to refill the freed slot
 * (the library does not call request_fn when a request ends).  Either way
 * a worker takes its whole list, does each request with positioned system
 * calls, and nothing blocks on I/O under a lock.  The queue advertises a
 * volatile write cache and FUA: a FUA write is pwritev2(RWF_DSYNC), a flush
 * is fdatasync(), and FUA on a discard or write-zeroes is an fdatasync()
 * after it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <librequest/sq.h>

#include "nbd_file.h"
#include "nbd_proto.h"

#define NBDF_IOV_BATCH 64          /* segments per preadv/pwritev call */
#define NBDF_ZERO_BUF (256u << 10) /* fallback zero-writing chunk */
#define NBDF_DEFAULT_DEPTH 64      /* tags per hw queue / requests out (sq) */

/* The driver's payload of every request. */
struct nbdf_cmd {
	struct nbdf_cmd *next;
};

/* A worker and its list: one per hw queue, or one of the sq workers. */
struct nbdf_hq {
	struct nbd_file *f;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct nbdf_cmd *head, *tail; /* waiting, oldest first; under lock */
	bool stop;                    /* under lock */
};

struct nbd_file {
	int fd;
	uint64_t size;
	bool is_blockdev;
	bool zero_fast;         /* see nbd_file_zero_fast() */
	bool sq;                /* single-queue front end */
	unsigned depth;         /* sq: requests with the workers at most */
	unsigned next_hq;       /* sq: the worker for the next request; queue lock */
	unsigned nr_hq;
	struct nbdf_hq *hqs;
	struct rq_tag_set *set;
	struct rq_queue *q;
};

/* ------------------------------------------------------------- the I/O */

/*
 * Read or write the data of @rq at its position, in batches of segments;
 * short transfers are continued, a read past the end of the file reads
 * zeros.  Return: 0 or a negative errno.
 */
static int nbdf_rw(struct nbd_file *f, struct rq_request *rq)
{
	bool write = rq->op == RQ_OP_WRITE;
	int rwf = write && (rq->opf & RQ_BIO_FUA) ? RWF_DSYNC : 0;
	struct rq_req_iter ri;
	struct rq_segment seg;
	struct iovec iov[NBDF_IOV_BATCH];
	off_t pos = (off_t)(rq->sector << RQ_SECTOR_SHIFT);
	bool more = true;

	rq_req_iter_init(&ri, rq);
	while (more) {
		int n = 0, i = 0;

		while (n < NBDF_IOV_BATCH && (more = rq_req_iter_next(&ri, &seg))) {
			iov[n].iov_base = seg.base;
			iov[n].iov_len = seg.len;
			n++;
		}
		while (i < n) {
			ssize_t r = write ? pwritev2(f->fd, iov + i, n - i, pos, rwf)
					  : preadv(f->fd, iov + i, n - i, pos);

			if (r < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			if (r == 0) {
				if (write)
					return -EIO;
				/* past the end of the file: zeros */
				for (; i < n; i++)
					memset(iov[i].iov_base, 0, iov[i].iov_len);
				break;
			}
			pos += r;
			while (i < n && (size_t)r >= iov[i].iov_len) {
				r -= iov[i].iov_len;
				i++;
			}
			if (i < n) {
				iov[i].iov_base = (char *)iov[i].iov_base + r;
				iov[i].iov_len -= r;
			}
		}
	}
	return 0;
}

/* Write zeros the slow way, for files that cannot fallocate. */
static int nbdf_write_zeros(struct nbd_file *f, off_t pos, uint64_t len)
{
	static const char zeros[NBDF_ZERO_BUF];

	while (len) {
		size_t n = len < sizeof(zeros) ? len : sizeof(zeros);
		ssize_t r = pwrite(f->fd, zeros, n, pos);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		pos += r;
		len -= r;
	}
	return 0;
}

/* Discard or zero [pos, pos + len).  Return: 0 or a negative errno. */
static int nbdf_zero_range(struct nbd_file *f, struct rq_request *rq)
{
	off_t pos = (off_t)(rq->sector << RQ_SECTOR_SHIFT);
	uint64_t len = rq->bytes;

	if (f->is_blockdev) {
		uint64_t range[2] = { (uint64_t)pos, len };
		unsigned long cmd = rq->op == RQ_OP_DISCARD ? BLKDISCARD : BLKZEROOUT;

		if (ioctl(f->fd, cmd, range) == 0)
			return 0;
		if (rq->op == RQ_OP_DISCARD)
			return 0; /* a hint: ignoring it is allowed */
		return nbdf_write_zeros(f, pos, len);
	}
	if (rq->op == RQ_OP_DISCARD) {
		/* a hint: a file system that cannot punch holes keeps the data */
		fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, pos, len);
		return 0;
	}
	if (fallocate(f->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, pos, len) == 0)
		return 0;
	if (fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, pos, len) == 0)
		return 0;
	return nbdf_write_zeros(f, pos, len);
}

/* Do one request; return its status. */
static rq_status_t nbdf_do(struct nbd_file *f, struct rq_request *rq)
{
	int err = 0;

	switch (rq->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		err = nbdf_rw(f, rq);
		break;
	case RQ_OP_FLUSH:
		if (fdatasync(f->fd) < 0)
			err = -errno;
		break;
	case RQ_OP_DISCARD:
	case RQ_OP_WRITE_ZEROES:
		err = nbdf_zero_range(f, rq);
		if (!err && (rq->opf & RQ_BIO_FUA) && fdatasync(f->fd) < 0)
			err = -errno;
		break;
	default:
		return RQ_STS_NOTSUPP;
	}
	if (err == -EDQUOT || err == -EFBIG)
		err = -ENOSPC;
	return err ? rq_errno_to_status(err) : RQ_STS_OK;
}

/* ------------------------------------------------------------ the worker */

static void nbdf_request_fn(struct rq_queue *q);

/*
 * Append @cmd to @hq's list and wake its worker.  Context: queue_rq, or
 * request_fn under the queue lock; takes the worker's mutex briefly.
 */
static void nbdf_hq_push(struct nbdf_hq *hq, struct nbdf_cmd *cmd)
{
	bool was_empty;

	cmd->next = NULL;
	pthread_mutex_lock(&hq->lock);
	was_empty = !hq->head;
	if (hq->tail)
		hq->tail->next = cmd;
	else
		hq->head = cmd;
	hq->tail = cmd;
	pthread_mutex_unlock(&hq->lock);
	if (was_empty)
		pthread_cond_signal(&hq->cond);
}

/*
 * End a request the worker has done, on the device's front end.  Single
 * queue: under the queue lock, then refill the slot it freed; the unlock
 * ends the bios and is the worker's last touch of the queue for it.
 */
static void nbdf_end(struct nbd_file *f, struct rq_request *rq, rq_status_t status)
{
	if (!f->sq) {
		rq_mq_end_request(rq, status);
		return;
	}
	rq_sq_lock(f->q);
	rq_sq_end_request_all_locked(rq, status);
	nbdf_request_fn(f->q);
	rq_sq_unlock(f->q);
}

/**
 * nbdf_worker() - a worker: does and ends the requests of its list in
 * arrival order until told to stop with nothing left.
 * @arg: the struct nbdf_hq.
 *
 * Context: own thread, from nbd_file_create() until nbd_file_destroy().
 * Return: NULL.
 */
static void *nbdf_worker(void *arg)
{
	struct nbdf_hq *hq = arg;

	for (;;) {
		struct nbdf_cmd *list;

		pthread_mutex_lock(&hq->lock);
		while (!hq->head && !hq->stop)
			pthread_cond_wait(&hq->cond, &hq->lock);
		list = hq->head;
		hq->head = hq->tail = NULL;
		if (!list && hq->stop) {
			pthread_mutex_unlock(&hq->lock);
			break;
		}
		pthread_mutex_unlock(&hq->lock);

		while (list) {
			struct nbdf_cmd *cmd = list;
			struct rq_request *rq = rq_request_from_pdu(cmd);

			/* read the link first: the request is reused once ended */
			list = cmd->next;
			nbdf_end(hq->f, rq, nbdf_do(hq->f, rq));
		}
	}
	return NULL;
}

/* ------------------------------------------------------------- mq ops */

/**
 * nbdf_queue_rq() - hand a request to the hw queue's worker.
 * @hctx: hardware queue.
 * @rq: the request.
 * @last: unused: the worker is signalled for every request.
 *
 * Context: dispatch, never concurrently on one hctx; takes the hw queue's
 * mutex briefly, never blocks on I/O.
 * Return: RQ_STS_OK.
 */
static rq_status_t nbdf_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq,
				 bool last)
{
	nbdf_hq_push(rq_hctx_driver_data(hctx), rq_request_pdu(rq));
	return RQ_STS_OK;
}

/**
 * nbdf_init_hctx() - point the hctx at our per-hw-queue state.
 * @hctx: hardware queue.
 * @set_data: the struct nbd_file.
 * @idx: its index.
 *
 * Return: 0.
 */
static int nbdf_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	struct nbd_file *f = set_data;

	rq_hctx_set_driver_data(hctx, &f->hqs[idx]);
	return 0;
}

static const struct rq_mq_ops nbdf_mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = nbdf_queue_rq,
	.init_hctx = nbdf_init_hctx,
};

/* ------------------------------------------------------------- sq ops */

/**
 * nbdf_request_fn() - hand requests to the workers in turn while fewer
 * than the depth are with them.
 * @q: the queue.
 *
 * Context: queue lock held: called by the library when there is work, and
 * by a worker that has just ended a request (nbdf_end()).  Takes a
 * worker's mutex briefly, never blocks on I/O, never drops the queue lock.
 */
static void nbdf_request_fn(struct rq_queue *q)
{
	struct nbd_file *f = rq_queue_driver_data(q);
	struct rq_request *rq;

	while (rq_sq_in_flight(q, false) + rq_sq_in_flight(q, true) < f->depth &&
	       (rq = rq_sq_fetch_request(q))) {
		nbdf_hq_push(&f->hqs[f->next_hq], rq_request_pdu(rq));
		f->next_hq = (f->next_hq + 1) % f->nr_hq;
	}
}

static const struct rq_sq_ops nbdf_sq_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = nbdf_request_fn,
};

/* ----------------------------------------------------- create / destroy */

static int nbdf_size(struct nbd_file *f)
{
	struct stat st;

	if (fstat(f->fd, &st) < 0)
		return -errno;
	if (S_ISBLK(st.st_mode)) {
		uint64_t bytes;

		if (ioctl(f->fd, BLKGETSIZE64, &bytes) < 0)
			return -errno;
		f->size = bytes;
		f->is_blockdev = true;
	} else if (S_ISREG(st.st_mode)) {
		f->size = (uint64_t)st.st_size;
	} else {
		return -EINVAL;
	}
	f->size &= ~(uint64_t)(RQ_SECTOR_SIZE - 1);
	return f->size ? 0 : -EINVAL;
}

/*
 * Open @cfg->path as the lock mode asks: O_EXCL for a block device held
 * exclusively, then the OFD lock.  Return: 0 or a negative errno.
 */
static int nbdf_open(struct nbd_file *f, const struct nbd_file_config *cfg)
{
	struct flock fl = { .l_whence = SEEK_SET }; /* start 0, length 0: all */
	int flags = (cfg->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
	bool excl = cfg->lock == NBD_FILE_LOCK_EXCLUSIVE;
	struct stat st;

	if (excl && cfg->read_only)
		return -EINVAL;
	if (excl && stat(cfg->path, &st) == 0 && S_ISBLK(st.st_mode))
		flags |= O_EXCL; /* Linux: exclusive open of a block device */
	f->fd = open(cfg->path, flags);
	if (f->fd < 0)
		return -errno;
	if (cfg->lock == NBD_FILE_LOCK_OFF)
		return 0;
	fl.l_type = excl ? F_WRLCK : F_RDLCK;
	if (fcntl(f->fd, F_OFD_SETLK, &fl) < 0)
		return errno == EAGAIN || errno == EACCES ? -EBUSY : -errno;
	return 0;
}

/* A block device's queue/write_zeroes_max_bytes (0: none, or unknown). */
static uint64_t nbdf_sysfs_zeroes(int fd)
{
	static const char *const fmt[] = { "/sys/dev/block/%u:%u/queue/write_zeroes_max_bytes",
					   "/sys/dev/block/%u:%u/../queue/write_zeroes_max_bytes" };
	unsigned long long v = 0;
	struct stat st;
	unsigned i;

	if (fstat(fd, &st) < 0)
		return 0;
	for (i = 0; i < 2; i++) { /* a disk, or a partition of one */
		char path[128];
		FILE *fp;

		snprintf(path, sizeof(path), fmt[i], major(st.st_rdev), minor(st.st_rdev));
		fp = fopen(path, "re");
		if (!fp)
			continue;
		if (fscanf(fp, "%llu", &v) != 1)
			v = 0;
		fclose(fp);
		return v;
	}
	return 0;
}

/* Can the file be zeroed without writing zeros?  See nbd_file_zero_fast(). */
static bool nbdf_probe_zero(struct nbd_file *f)
{
	struct stat st;
	off_t past;

	if (f->is_blockdev)
		return nbdf_sysfs_zeroes(f->fd) > 0;
	if (fstat(f->fd, &st) < 0)
		return false;
	/* punching a hole past the end changes nothing, and says if it can */
	past = (st.st_size + 4095) & ~(off_t)4095;
	return fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, past, 4096) == 0;
}

bool nbd_file_zero_fast(struct nbd_file *f)
{
	return f->zero_fast;
}

int nbd_file_cache(void *backend, uint64_t offset, uint64_t length)
{
	struct nbd_file *f = backend;

	return -posix_fadvise(f->fd, (off_t)offset, (off_t)length, POSIX_FADV_WILLNEED);
}

/* Where the next data (@data) or hole starts at or after @pos; @end when none before. */
static int nbdf_seek(struct nbd_file *f, uint64_t pos, uint64_t end, bool data, uint64_t *out)
{
	off_t r = lseek(f->fd, (off_t)pos, data ? SEEK_DATA : SEEK_HOLE);

	if (r < 0) {
		if (errno != ENXIO)
			return -errno;
		r = (off_t)end; /* past the end of the file: a hole */
	}
	*out = (uint64_t)r < end ? (uint64_t)r : end;
	return 0;
}

int nbd_file_block_status(void *backend, uint64_t offset, uint64_t length,
			  struct nbd_extent *ext, unsigned max)
{
	struct nbd_file *f = backend;
	uint64_t pos = offset, end = offset + length, next = 0;
	unsigned n = 0;
	int r;

	if (f->is_blockdev) {
		ext[0] = (struct nbd_extent){ .length = length, .flags = 0 };
		return 1;
	}
	while (pos < end && n < max) {
		r = nbdf_seek(f, pos, end, true, &next);
		if (r == -EINVAL && !n) {
			/* no SEEK_DATA here: all data */
			ext[0] = (struct nbd_extent){ .length = length, .flags = 0 };
			return 1;
		}
		if (r)
			return n ? (int)n : r;
		if (next > pos) {
			ext[n++] = (struct nbd_extent){ next - pos, NBD_STATE_HOLE | NBD_STATE_ZERO };
			pos = next;
			continue;
		}
		r = nbdf_seek(f, pos, end, false, &next);
		if (r)
			return n ? (int)n : r;
		if (next <= pos)
			next = end; /* cannot be: data at pos ends after it */
		ext[n++] = (struct nbd_extent){ next - pos, 0 };
		pos = next;
	}
	return (int)n;
}

/**
 * nbd_file_create() - see nbd_file.h.
 * @cfg: configuration.
 * @out: receives the device.
 *
 * Return: 0 or a negative errno.
 */
int nbd_file_create(const struct nbd_file_config *cfg, struct nbd_file **out)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	struct rq_queue_limits lim;
	struct nbd_file *f;
	unsigned i;
	int ret;

	if (!cfg || !cfg->path || !out || !cfg->nr_hw_queues)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	ret = nbdf_open(f, cfg);
	if (ret) {
		if (f->fd >= 0)
			close(f->fd);
		free(f);
		return ret;
	}
	ret = nbdf_size(f);
	if (ret)
		goto fail;
	f->zero_fast = !cfg->read_only && nbdf_probe_zero(f);

	ret = -ENOMEM;
	f->nr_hq = cfg->nr_hw_queues;
	f->hqs = calloc(f->nr_hq, sizeof(*f->hqs));
	if (!f->hqs)
		goto fail;
	for (i = 0; i < f->nr_hq; i++) {
		struct nbdf_hq *hq = &f->hqs[i];

		hq->f = f;
		pthread_mutex_init(&hq->lock, NULL);
		pthread_cond_init(&hq->cond, NULL);
		if (pthread_create(&hq->thread, NULL, nbdf_worker, hq)) {
			ret = -EAGAIN;
			goto fail;
		}
		hq->started = true;
	}

	if (cfg->limits)
		lim = *cfg->limits;
	else
		memset(&lim, 0, sizeof(lim));
	lim.size = sizeof(lim);
	lim.features |= RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA;
	if (!lim.max_discard_sectors)
		lim.max_discard_sectors = UINT32_MAX >> RQ_SECTOR_SHIFT;
	if (!lim.max_write_zeroes_sectors)
		lim.max_write_zeroes_sectors = UINT32_MAX >> RQ_SECTOR_SHIFT;

	f->depth = cfg->queue_depth ? cfg->queue_depth : NBDF_DEFAULT_DEPTH;
	if (cfg->single_queue) {
		struct rq_sq_config sq = {
			RQ_SQ_CONFIG_INIT,
			.ops = &nbdf_sq_ops,
			.limits = &lim,
			.capacity = f->size >> RQ_SECTOR_SHIFT,
			.scheduler = cfg->sched,
			.cmd_size = sizeof(struct nbdf_cmd),
			.queuedata = f,
		};

		f->sq = true;
		ret = rq_sq_alloc_queue(&sq, &f->q);
		if (ret)
			goto fail;
		*out = f;
		return 0;
	}

	sc.ops = &nbdf_mq_ops;
	sc.nr_hw_queues = f->nr_hq;
	sc.queue_depth = f->depth;
	sc.cmd_size = sizeof(struct nbdf_cmd);
	sc.numa_node = -1;
	sc.driver_data = f;
	ret = rq_tag_set_alloc(&sc, &f->set);
	if (ret)
		goto fail;
	qc.limits = &lim;
	qc.capacity = f->size >> RQ_SECTOR_SHIFT;
	qc.scheduler = cfg->sched;
	qc.queuedata = f;
	ret = rq_mq_alloc_queue(f->set, &qc, &f->q);
	if (ret)
		goto fail;
	*out = f;
	return 0;
fail:
	nbd_file_destroy(f);
	return ret;
}

/** nbd_file_queue() - the device's queue. */
struct rq_queue *nbd_file_queue(struct nbd_file *f)
{
	return f->q;
}

/** nbd_file_size() - the exported size in bytes. */
uint64_t nbd_file_size(struct nbd_file *f)
{
	return f->size;
}

/**
 * nbd_file_destroy() - see nbd_file.h.
 * @f: the device, or NULL.
 */
void nbd_file_destroy(struct nbd_file *f)
{
	unsigned i;

	if (!f)
		return;
	/* waits for requests with the driver: the workers still run */
	if (f->q)
		rq_queue_destroy(f->q);
	for (i = 0; f->hqs && i < f->nr_hq; i++) {
		struct nbdf_hq *hq = &f->hqs[i];

		if (hq->started) {
			pthread_mutex_lock(&hq->lock);
			hq->stop = true;
			pthread_cond_signal(&hq->cond);
			pthread_mutex_unlock(&hq->lock);
			pthread_join(hq->thread, NULL);
		}
		pthread_mutex_destroy(&hq->lock);
		pthread_cond_destroy(&hq->cond);
	}
	if (f->set)
		rq_tag_set_free(f->set);
	if (f->fd >= 0)
		close(f->fd);
	free(f->hqs);
	free(f);
}
