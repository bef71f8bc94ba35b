/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_rbd: rqnbd's --rbd device, a Ceph RBD image through the librbd driver
 * of examples/rbd (one rados connection, one image handle per hardware
 * queue, requests cut at object boundaries).  Built where librbd is found
 * (RQNBD_HAVE_RBD); elsewhere nbd_rbd_create() fails with -EOPNOTSUPP.
 *
 * What may run at the same time:
 *
 *   operation              concurrent with
 *   nbd_rbd_create         anything
 *   nbd_rbd_queue,
 *   nbd_rbd_size           everything
 *   nbd_rbd_destroy        nothing on that device: stop submitting first
 */
#ifndef NBD_RBD_H
#define NBD_RBD_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <librequest/mq.h>

/** struct nbd_rbd_config - which image, and how to make its queue. */
struct nbd_rbd_config {
	const char *spec;       /* POOL/IMAGE or POOL/IMAGE@SNAP (read-only) */
	const char *ceph_conf;  /* NULL: librados' search ($CEPH_CONF, /etc/ceph) */
	const char *client_id;  /* cephx id without "client."; NULL: admin */
	bool read_only;         /* open the image read-only */
	unsigned nr_hw_queues;  /* >= 1: image handles */
	unsigned queue_depth;   /* tags per hw queue; 0: 64 */
	const char *sched;      /* NULL: the library's choice */
};

struct nbd_rbd;

#ifdef RQNBD_HAVE_RBD
/**
 * nbd_rbd_create() - connect, open the image, make the queue.
 * @cfg: configuration; copied.
 * @out: receives the device.
 *
 * Prints one line on stderr naming the image, its size and object size.
 * Context: may sleep (up to the driver's 30 s op timeout when no cluster
 * answers).
 * Return: 0, or a negative errno: -EINVAL (bad spec), -ENOENT (no such pool
 * or image), -ETIMEDOUT (no cluster), -EACCES/-EPERM (refused), -ENOMEM.
 */
int nbd_rbd_create(const struct nbd_rbd_config *cfg, struct nbd_rbd **out);

/** nbd_rbd_queue() - the queue to submit bios to. */
struct rq_queue *nbd_rbd_queue(struct nbd_rbd *r);

/** nbd_rbd_size() - the exported size in bytes (a multiple of 512). */
uint64_t nbd_rbd_size(struct nbd_rbd *r);

/**
 * nbd_rbd_destroy() - tear the queue down (waiting for requests), print the
 * driver's counters on stderr in one line ("rbd: ..."), close the image,
 * drop the connection.  NULL is allowed.
 */
void nbd_rbd_destroy(struct nbd_rbd *r);
#else
static inline int nbd_rbd_create(const struct nbd_rbd_config *cfg, struct nbd_rbd **out)
{
	(void)cfg;
	(void)out;
	return -EOPNOTSUPP;
}
static inline struct rq_queue *nbd_rbd_queue(struct nbd_rbd *r)
{
	(void)r;
	return NULL;
}
static inline uint64_t nbd_rbd_size(struct nbd_rbd *r)
{
	(void)r;
	return 0;
}
static inline void nbd_rbd_destroy(struct nbd_rbd *r)
{
	(void)r;
}
#endif

#endif /* NBD_RBD_H */
