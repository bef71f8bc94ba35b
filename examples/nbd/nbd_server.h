/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_server: the NBD protocol side of rqnbd.  One export, any number of
 * connections, a thread per connection.  Each connection does the fixed
 * newstyle handshake, then turns every request into a bio on the export's
 * queue and sends the replies as the bios end.
 *
 * What may run at the same time:
 *
 *   operation              concurrent with
 *   nbd_server_create      anything
 *   nbd_server_add         itself (from one accept loop), nbd_server_stop
 *   nbd_server_stop        everything but nbd_server_destroy
 *   nbd_server_wait        nbd_server_stop
 *   nbd_server_destroy     nothing: after nbd_server_wait
 */
#ifndef NBD_SERVER_H
#define NBD_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/queue.h>

/** struct nbd_export - what is served. */
struct nbd_export {
	struct rq_queue *q;        /* the queue bios go to */
	uint64_t size;             /* bytes, a multiple of min_block */
	const char *name;          /* export name ("" matches it too) */
	const char *description;   /* NBD_INFO_DESCRIPTION, may be NULL */
	bool read_only;            /* writes, trims and zeroes fail with EPERM */
	uint32_t min_block;        /* advertised and enforced alignment (512) */
	uint32_t pref_block;       /* advertised preferred size (4096) */
	uint32_t max_block;        /* advertised maximum payload (32 MiB) */
};

/** struct nbd_server_stats - counters over all connections so far. */
struct nbd_server_stats {
	uint64_t connections;  /* accepted */
	uint64_t handshakes;   /* reached transmission */
	uint64_t requests;     /* transmission requests parsed */
	uint64_t errors;       /* replies with an error */
	uint64_t dropped;      /* connections closed for a protocol violation */
};

struct nbd_server;

/**
 * nbd_server_create() - a server for @exp.
 * @exp: the export; copied (strings must outlive the server).
 * @out: receives the server.
 * Return: 0, -EINVAL, -ENOMEM.
 */
int nbd_server_create(const struct nbd_export *exp, struct nbd_server **out);

/**
 * nbd_server_add() - serve an accepted connection on a new thread.
 * @srv: the server.
 * @fd: the connected socket; the server owns it from now on (closes it on
 *	failure too).
 * Return: 0, -EBUSY (too many connections, or stopping), -EAGAIN.
 */
int nbd_server_add(struct nbd_server *srv, int fd);

/**
 * nbd_server_stop() - stop every connection: handshakes are cut, connections
 * in transmission stop reading, finish what is in flight, send the replies
 * and close.  Context: any thread (not a signal handler).
 */
void nbd_server_stop(struct nbd_server *srv);

/** nbd_server_wait() - wait until every connection thread has ended. */
void nbd_server_wait(struct nbd_server *srv);

/** nbd_server_get_stats() - copy the counters. */
void nbd_server_get_stats(struct nbd_server *srv, struct nbd_server_stats *st);

/** nbd_server_destroy() - free the server (after nbd_server_wait). */
void nbd_server_destroy(struct nbd_server *srv);

#endif /* NBD_SERVER_H */
