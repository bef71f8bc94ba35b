/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * file_drv: a queue backed by a file or a block device, through io_uring.
 *
 * The example driver that does real I/O.  Every hardware queue has its own
 * io_uring; requests become readv/writev (FUA writes carry RWF_DSYNC),
 * fdatasync, fallocate(PUNCH_HOLE) for discard and fallocate(ZERO_RANGE) for
 * write-zeroes (falling back to writing zeros where the file system lacks
 * it).  O_DIRECT is used when the file allows it, found out at creation by an
 * aligned read; otherwise the page cache is used, and creation says so on
 * stderr.  Completions are reaped by one thread per ring, or on poll queues
 * by whoever calls rq_mq_poll().  Short transfers are resubmitted for the
 * rest; a read that meets the end of the file reads zeros from there.
 *
 * What may run at the same time:
 *
 *   operation                          concurrent with
 *   file_create                        anything (devices are independent)
 *   file_queue, file_is_direct,
 *   file_last_errno, file_get_stats    everything
 *   file_request_errno                 everything, on a request the caller holds
 *   file_destroy                       nothing on that device: stop submitting first
 */
#ifndef FILE_DRV_H
#define FILE_DRV_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/mq.h>

#ifdef __cplusplus
extern "C" {
#endif

/** enum file_direct - whether to bypass the page cache. */
enum file_direct {
	FILE_DIRECT_AUTO = 0, /* O_DIRECT if an aligned read works, else buffered */
	FILE_DIRECT_OFF = 1,  /* always buffered */
	FILE_DIRECT_ON = 2,   /* O_DIRECT or fail with -EINVAL */
};

/**
 * struct file_config - how to make a file device.  Zero fields take the
 * defaults in brackets; file_config_default() fills them explicitly.
 */
struct file_config {
	const char *path;           /* file or block device; required */
	bool read_only;             /* open O_RDONLY (writes then fail: EBADF) */
	enum file_direct direct;    /* [FILE_DIRECT_AUTO] */
	unsigned nr_hw_queues;      /* [1] one ring (and reaper) per queue */
	unsigned nr_poll_queues;    /* [0] of those, the last ones are polled:
				       no reaper, completions are reaped by
				       rq_mq_poll() */
	unsigned hw_queue_depth;    /* [64] tags per hw queue (= ring size) */
	uint64_t size_bytes;        /* [0] capacity; 0: the file's size or the
				       device's (BLKGETSIZE64).  A regular
				       file shorter than this reads as zeros
				       past its end and grows when written */
	unsigned blocksize;         /* [0] logical block size; 0: 512, or the
				       O_DIRECT alignment if larger */
	struct rq_queue_limits limits; /* zero fields: the driver's choice */
	const char *sched;          /* NULL: the library's choice */
	unsigned flags;             /* extra RQ_TAG_SET_* flags */
	bool quiet;                 /* don't print the I/O mode at creation */
	uint32_t max_io_bytes;      /* [0] fault injection: no single read or
				       write syscall moves more than this,
				       so requests complete through short
				       transfers and resubmission */
};

/** struct file_stats - what the driver did, summed over hw queues. */
struct file_stats {
	uint64_t reads;          /* requests */
	uint64_t writes;
	uint64_t fua_writes;     /* of those, with RWF_DSYNC */
	uint64_t flushes;
	uint64_t discards;
	uint64_t write_zeroes;
	uint64_t bytes;          /* data bytes of completed reads and writes */
	uint64_t submissions;    /* SQEs submitted (more than requests when
				    transfers come back short) */
	uint64_t short_ios;      /* short transfers resubmitted for the rest */
	uint64_t eof_zeroed;     /* reads that met end of file and were zero-filled */
	uint64_t unaligned;      /* O_DIRECT device: requests whose buffers
				    were not aligned, done through the page cache */
	uint64_t zero_writes;    /* write-zeroes done by writing zeros */
	uint64_t errors;         /* requests ended with an error status */
};

struct file_dev;

/**
 * file_config_default() - fill @cfg with the defaults (path NULL).
 * @cfg: configuration to overwrite.
 */
void file_config_default(struct file_config *cfg);

/**
 * file_create() - open @cfg->path and make a queue over it.
 * @cfg: configuration; copied (the path too).
 * @out: receives the device.
 *
 * Probes O_DIRECT (unless told not to) and prints one line on stderr saying
 * which mode it uses and why (unless @cfg->quiet).
 *
 * Context: may sleep; starts one reaper thread per non-polled hw queue.
 * Return: 0, -EINVAL for a bad configuration (no path, a size of 0 that
 * cannot be found out, FILE_DIRECT_ON where O_DIRECT does not work), the
 * negative errno of open(), io_uring_queue_init() or the library.
 */
int file_create(const struct file_config *cfg, struct file_dev **out);

/** file_queue() - the queue to submit bios to. */
struct rq_queue *file_queue(struct file_dev *dev);

/**
 * file_is_direct() - true if the device uses O_DIRECT.
 * @dev: the device.
 * @align: if not NULL, receives the O_DIRECT offset/length alignment in
 *	bytes (0 when buffered).
 */
bool file_is_direct(struct file_dev *dev, unsigned *align);

/**
 * file_mode_reason() - why the device uses the mode it uses, as printed at
 * creation ("O_DIRECT, 512-byte alignment", "buffered: open(O_DIRECT): ...").
 */
const char *file_mode_reason(struct file_dev *dev);

/**
 * file_last_errno() - the positive errno of the most recent failed
 * operation on @dev, 0 if none failed yet.  Requests end with
 * rq_errno_to_status() of it.
 */
int file_last_errno(struct file_dev *dev);

/**
 * file_request_errno() - the positive errno kept in @rq's payload by the
 * last failed operation of its current issue, 0 if none.  For code that
 * sees requests (e.g. an ops->complete wrapper or a timeout handler);
 * meaningful only while the request is in flight.
 */
int file_request_errno(struct rq_request *rq);

/** file_get_stats() - read the counters (exact once the device is idle). */
void file_get_stats(struct file_dev *dev, struct file_stats *st);

/**
 * file_destroy() - tear the queue down (waiting for every request), stop
 * the reapers, close the rings and the file.
 * @dev: the device; NULL is allowed.
 * Context: may sleep; the caller has stopped submitting.
 */
void file_destroy(struct file_dev *dev);

#ifdef __cplusplus
}
#endif

#endif /* FILE_DRV_H */
