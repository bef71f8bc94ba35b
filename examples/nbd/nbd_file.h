/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_file: a small driver over a regular file or block device, for rqnbd
 * --file, on either front end.  Worker threads do the requests with
 * preadv/pwritev2/fdatasync/fallocate and end them.  Multi-queue: one worker
 * per hardware queue takes what queue_rq hands it.  Single-queue: one queue,
 * nr_hw_queues workers; request_fn hands each worker requests in turn while
 * fewer than queue_depth are out.  Nothing blocks in queue_rq or request_fn.
 *
 * What may run at the same time:
 *
 *   operation              concurrent with
 *   nbd_file_create        anything (each device is independent)
 *   nbd_file_queue         everything
 *   nbd_file_destroy       nothing on that device: stop submitting first
 */
#ifndef NBD_FILE_H
#define NBD_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/mq.h>

#include "nbd_server.h"

/*
 * How the file is kept from other servers: an open file description lock
 * (F_OFD_SETLK) over the whole file, write (exclusive) or read (shared);
 * a block device is also opened O_EXCL when exclusive (fails while it is
 * mounted or opened exclusively elsewhere).
 */
enum nbd_file_lock {
	NBD_FILE_LOCK_EXCLUSIVE = 0, /* needs a writable file */
	NBD_FILE_LOCK_SHARED,
	NBD_FILE_LOCK_OFF,
};

/** struct nbd_file_config - how to open the file and build its queue. */
struct nbd_file_config {
	const char *path;       /* file or block device */
	bool read_only;         /* open O_RDONLY */
	enum nbd_file_lock lock;
	bool single_queue;      /* the single-queue front end (request_fn) */
	unsigned nr_hw_queues;  /* >= 1; single-queue: worker threads */
	unsigned queue_depth;   /* tags per hw queue; single-queue: requests
				   with the workers at most; 0: 64 */
	const char *sched;      /* NULL: the library's choice */
	const struct rq_queue_limits *limits; /* NULL: the driver's defaults */
};

struct nbd_file;

/**
 * nbd_file_create() - open the file, start the workers, make the queue.
 * @cfg: configuration; copied.
 * @out: receives the device.
 *
 * The capacity is the file size rounded down to 512 bytes.
 * Context: may sleep.
 * Return: 0, or a negative errno (from open/fstat, -EBUSY when another
 * process holds a conflicting lock or the block device is in use, -EINVAL
 * for an empty file, an unknown scheduler, or an exclusive lock on a
 * read-only file, -ENOMEM).
 */
int nbd_file_create(const struct nbd_file_config *cfg, struct nbd_file **out);

/** nbd_file_queue() - the queue to submit bios to. */
struct rq_queue *nbd_file_queue(struct nbd_file *f);

/** nbd_file_size() - the exported size in bytes (a multiple of 512). */
uint64_t nbd_file_size(struct nbd_file *f);

/**
 * nbd_file_block_status() - an nbd_block_status_fn (@backend: the struct
 * nbd_file): the data and holes of a sparse regular file from
 * lseek(SEEK_DATA/SEEK_HOLE), holes reported as NBD_STATE_HOLE |
 * NBD_STATE_ZERO; a block device, or a file system without SEEK_DATA, is
 * all data.
 */
int nbd_file_block_status(void *backend, uint64_t offset, uint64_t length,
			  struct nbd_extent *ext, unsigned max);

/**
 * nbd_file_cache() - an nbd_cache_fn: posix_fadvise(POSIX_FADV_WILLNEED),
 * the kernel reads the range into the page cache in the background.
 */
int nbd_file_cache(void *backend, uint64_t offset, uint64_t length);

/**
 * nbd_file_zero_fast() - is zeroing done without writing zeros?  A regular
 * file: when its file system punches holes (probed at create, past the end
 * of the file); a block device: when it has a write-zeroes command
 * (queue/write_zeroes_max_bytes in sysfs is not 0), which BLKZEROOUT then
 * uses.
 */
bool nbd_file_zero_fast(struct nbd_file *f);

/**
 * nbd_file_destroy() - tear the queue down (waiting for requests), stop the
 * workers and close the file.  NULL is allowed.
 */
void nbd_file_destroy(struct nbd_file *f);

#endif /* NBD_FILE_H */
