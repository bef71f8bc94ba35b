/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_server: the NBD protocol side of rqnbd.  One or more exports, any
 * number of connections, a thread per connection.  Each connection does
 * the fixed newstyle handshake, picks its export by name (NBD_OPT_GO,
 * NBD_OPT_EXPORT_NAME; "" is the first export), then turns every request
 * into a bio on that export's queue and sends the replies as the bios end.
 *
 * Tenants: a policy (nbd_server_set_policy) may turn export names that are
 * not exports into exports (aliases naming a client), and is asked, when a
 * connection has chosen its export, to admit it and to set up its io
 * context (io group, weight, priority class); nbd_server_reapply() asks it
 * again for every connection being served (a reload).
 *
 * What may run at the same time:
 *
 *   operation              concurrent with
 *   nbd_server_create      anything
 *   nbd_server_add         itself (from one accept loop), nbd_server_stop
 *   nbd_server_set_policy  nothing: before the first nbd_server_add
 *   nbd_server_reapply     everything but nbd_server_destroy
 *   nbd_server_export_conns everything but nbd_server_destroy
 *   nbd_server_stop        everything but nbd_server_destroy
 *   nbd_server_wait        nbd_server_stop
 *   nbd_server_destroy     nothing: after nbd_server_wait
 */
#ifndef NBD_SERVER_H
#define NBD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librequest/iocontext.h>
#include <librequest/queue.h>

/**
 * struct nbd_extent - one run of bytes in one allocation state, as a
 * backend's block_status query reports it.
 * @length: bytes (the run's end must be a multiple of 512, unless it is the
 *	end of the range asked about).
 * @flags: NBD_STATE_HOLE (not allocated), NBD_STATE_ZERO (reads as zeros),
 *	or 0 for data.
 */
struct nbd_extent {
	uint64_t length;
	uint32_t flags;
};

/**
 * nbd_block_status_fn - a backend's allocation query (NBD_CMD_BLOCK_STATUS).
 * @backend: struct nbd_export's @backend.
 * @offset: first byte asked about (a multiple of 512).
 * @length: bytes asked about (> 0, within the export).
 * @ext: receives up to @max runs, in order from @offset, at least one.
 * @max: room in @ext (>= 1).
 *
 * The runs may cover less than @length (the server asks again or answers
 * with what it has), never more.  Called on the connection's thread, outside
 * the queue: it must not block for long (no network round trips).
 * Return: the number of runs filled, or a negative errno.
 */
typedef int (*nbd_block_status_fn)(void *backend, uint64_t offset, uint64_t length,
				   struct nbd_extent *ext, unsigned max);

/**
 * nbd_cache_fn - a backend's prefetch (NBD_CMD_CACHE) of [@offset,
 * @offset + @length): start reading it into a cache and return (a hint,
 * like posix_fadvise(WILLNEED)).  Return: 0 or a negative errno.
 */
typedef int (*nbd_cache_fn)(void *backend, uint64_t offset, uint64_t length);

/** struct nbd_export - what is served. */
struct nbd_export {
	struct rq_queue *q;        /* the queue bios go to */
	uint64_t size;             /* bytes, a multiple of min_block */
	const char *name;          /* export name (for the first export, ""
				      matches it too) */
	const char *description;   /* NBD_INFO_DESCRIPTION and NBD_OPT_LIST's
				      text, may be NULL */
	bool read_only;            /* writes, trims and zeroes fail with EPERM */
	unsigned max_conns;        /* connections served this export at once;
				      more get NBD_REP_ERR_POLICY (0: no limit
				      of its own) */
	uint32_t min_block;        /* advertised and enforced alignment (512) */
	uint32_t pref_block;       /* advertised preferred size (4096) */
	uint32_t max_block;        /* advertised maximum payload (32 MiB) */
	/*
	 * Backend queries (NBD_CMD_BLOCK_STATUS, NBD_CMD_CACHE, fast zero).
	 * block_status NULL: every byte reported as data.  cache NULL: a
	 * cache request is a read of its first max_block bytes into a pool
	 * buffer, through the queue (RQ_BIO_RAHEAD), the data dropped.
	 * zero_fast: WRITE_ZEROES is done by unmapping or a device's zeroing
	 * command, never by writing zeros; false makes NBD_CMD_FLAG_FAST_ZERO
	 * fail with NBD_ENOTSUP.  @backend is handed to both functions.
	 */
	nbd_block_status_fn block_status;
	nbd_cache_fn cache;
	void *backend;
	bool zero_fast;
};

/*
 * Defaults of struct nbd_limits (rqnbd prints them in --help).  Each
 * connection costs two descriptors (socket, eventfd) and a thread.
 */
#define NBD_DEF_MAX_CONNS 256
#define NBD_DEF_MAX_PER_CLIENT 64
#define NBD_DEF_RESERVE 16
#define NBD_DEF_CONN_REQUESTS 64
#define NBD_DEF_CONN_BUFFER (8u << 20)
#define NBD_DEF_BUFFER_TOTAL (256u << 20)
#define NBD_DEF_HANDSHAKE_S 10
#define NBD_DEF_IDLE_S 0
#define NBD_DEF_STALL_S 30
#define NBD_DEF_MIN_RATE 4096

/**
 * struct nbd_limits - what one client, and all of them, may hold.
 *
 * Connections: at most @max_conns at once and @max_per_client from one
 * client (one IP address; on a unix socket, one user id).  When fewer than
 * @reserve places are left, or a client is at its own limit, a new
 * connection is taken by closing the connection that has been idle longest
 * (a handshake, or a connection with nothing in flight; oldest activity
 * first); only when none is idle is it refused.  @reserve 0: never close
 * one for another.
 *
 * Memory: a connection has at most @conn_requests requests in flight and
 * @conn_buffer bytes of request data (read results not yet sent, write
 * payloads being received; a single request larger than that is taken only
 * alone); all connections together at most @buffer_total (a bounded pool).
 * When a budget is spent the connection stops reading requests until
 * replies have gone (back-pressure), it buffers nothing more.
 *
 * Time: the whole handshake must end within @handshake_ms of accept.  In
 * transmission, while the server waits for the rest of a request or for
 * the client to take its replies, the client must move at least @min_rate
 * bytes/s, judged over windows of @stall_ms; a connection with nothing in
 * flight is closed after @idle_ms (0: never).  0 for @stall_ms: no rate
 * check.
 */
struct nbd_limits {
	unsigned max_conns;
	unsigned max_per_client;
	unsigned reserve;
	unsigned conn_requests;
	uint64_t conn_buffer;
	uint64_t buffer_total;
	unsigned handshake_ms;
	unsigned idle_ms;
	unsigned stall_ms;
	uint64_t min_rate;
};

/** nbd_limits_default() - fill @l with the NBD_DEF_* values. */
void nbd_limits_default(struct nbd_limits *l);

/** struct nbd_server_stats - counters over all connections so far. */
struct nbd_server_stats {
	uint64_t connections;  /* accepted */
	uint64_t handshakes;   /* reached transmission */
	uint64_t requests;     /* transmission requests parsed */
	uint64_t errors;       /* replies with an error */
	uint64_t dropped;      /* connections closed for a protocol violation */
	uint64_t refused;      /* not taken: a connection limit, no descriptor */
	uint64_t evicted;      /* idle ones closed to take a new one */
	uint64_t timeouts;     /* closed: handshake deadline, too slow, idle */
};

struct nbd_server;

#define NBD_MAX_EXPORTS 64

/**
 * nbd_server_create() - a server for @nexps exports.
 * @exps: the exports, listed by NBD_OPT_LIST in this order; @exps[0] is the
 *	one the empty name selects.  Copied, their names and descriptions
 *	too.  Names must differ.  Export @i has index @i.
 * @nexps: 1 to NBD_MAX_EXPORTS.
 * @lim: the limits (NULL: the defaults); copied.  Each export's max_block
 *	must fit in @lim->conn_buffer and @lim->buffer_total.
 * @out: receives the server.
 * Return: 0, -EINVAL, -ENOMEM.
 */
int nbd_server_create(const struct nbd_export *exps, unsigned nexps,
		      const struct nbd_limits *lim, struct nbd_server **out);

/** struct nbd_client_info - a connection that has chosen its export. */
struct nbd_client_info {
	const char *name;          /* the export name it asked for */
	unsigned export;           /* index of the export it is served */
	const char *peer;          /* nbd_peer_name() of its socket */
	const char *tls_identity;  /* nbd_conn_tls_identity(), NULL without TLS */
};

/**
 * struct nbd_policy - who gets what (rqnbd's tenants).  Both hooks may be
 * NULL; they run on connection threads (admit also in nbd_server_reapply's
 * caller), under no lock of the server's but the one said.
 * @resolve: an export name that is no export's (and not ""): the index of
 *	the export it stands for, or -1 for NBD_REP_ERR_UNKNOWN.
 * @admit: @ci is about to be served (NBD_OPT_GO, NBD_OPT_EXPORT_NAME) or
 *	is being served (nbd_server_reapply, @reapply true; then under the
 *	server's lock, so it must not block): set up @ioc (rq_ioc_set_group,
 *	rq_ioc_set_prio, rq_ioc_set_weight).  Return 0, or -EACCES to refuse
 *	(NBD_REP_ERR_POLICY; ignored on reapply).
 * @arg: passed to both.
 */
struct nbd_policy {
	int (*resolve)(void *arg, const char *name);
	int (*admit)(void *arg, const struct nbd_client_info *ci, struct rq_io_context *ioc,
		     bool reapply);
	void *arg;
};

/** nbd_server_set_policy() - install @p (copied) before serving. */
void nbd_server_set_policy(struct nbd_server *srv, const struct nbd_policy *p);

/**
 * nbd_server_reapply() - call the policy's admit hook again for every
 * connection in transmission (after the policy's rules changed).
 * Return: the number of connections it was called for.
 */
unsigned nbd_server_reapply(struct nbd_server *srv);

/** nbd_server_export_conns() - connections served export @idx now. */
unsigned nbd_server_export_conns(struct nbd_server *srv, unsigned idx);

/*
 * Exports while serving.  An export is LIVE (listed by NBD_OPT_LIST,
 * selected by name), RETIRING (neither, but still serving the connections
 * it has: their requests go to its queue as before), or its slot is free.
 * The first export (index 0, the one "" selects) is LIVE for the server's
 * life.
 */

/**
 * nbd_server_add_export() - serve @exp from now on (copied, strings too).
 * Return: its index (the first free slot: it stays the export's index, for
 * nbd_client_info.export and the calls below), -EINVAL (@exp is bad as
 * nbd_server_create() judges, or a LIVE export has its name), -ENOSPC
 * (NBD_MAX_EXPORTS slots in use, retiring ones counted), -ENOMEM.
 */
int nbd_server_add_export(struct nbd_server *srv, const struct nbd_export *exp);

/**
 * nbd_server_retire_export() - stop listing and selecting LIVE export @idx
 * (not 0).  A client that chose it and is not served yet is told
 * NBD_REP_ERR_UNKNOWN; connections served it go on until they close.
 * Return: the connections it still serves (free it once that is 0, see
 * nbd_server_export_conns()), or -EINVAL.
 */
int nbd_server_retire_export(struct nbd_server *srv, unsigned idx);

/**
 * nbd_server_free_export() - forget RETIRING export @idx: the server no
 * longer touches its queue or backend, and its slot may be filled again.
 * Return: 0, -EBUSY (it still serves connections), -EINVAL.
 */
int nbd_server_free_export(struct nbd_server *srv, unsigned idx);

/**
 * nbd_server_add() - serve an accepted connection on a new thread.
 * @srv: the server.
 * @fd: the connected socket; the server owns it from now on (closes it on
 *	failure too).
 * Return: 0, -EBUSY (max_conns reached, none idle, or stopping), -EMLINK
 * (the client's own limit reached, none of its connections idle), -EAGAIN
 * (no thread), -EMFILE/-ENFILE/-ENOMEM.
 */
int nbd_server_add(struct nbd_server *srv, int fd);

/**
 * nbd_peer_name() - the client of socket @fd for messages: "ADDR" for TCP,
 * "uid N" for a unix socket.
 */
void nbd_peer_name(int fd, char *buf, size_t n);

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

enum nbd_tls_mode {
	NBD_TLS_OFF = 0,   /* NBD_OPT_STARTTLS answered NBD_REP_ERR_UNSUP */
	NBD_TLS_ON,        /* plain and TLS clients both served */
	NBD_TLS_REQUIRE,   /* before STARTTLS every option but STARTTLS and
			      ABORT is answered NBD_REP_ERR_TLS_REQD (and
			      NBD_OPT_EXPORT_NAME closes the connection) */
};

struct nbd_tls;

/**
 * nbd_server_set_tls() - offer TLS (NBD_OPT_STARTTLS) with credentials
 * @tls (nbd_tls.h; must outlive the server) in @mode.  Call before the
 * first nbd_server_add().  Return: 0, -EINVAL (@tls NULL with a mode other
 * than NBD_TLS_OFF).
 *
 * After STARTTLS every byte of the connection (the rest of the handshake
 * and transmission) goes through the TLS session; the handshake deadline,
 * the min-rate check and the buffer budgets count plaintext bytes the same
 * way as on a plain connection, and the TLS handshake itself must end by
 * the handshake deadline.  Options negotiated before STARTTLS (structured
 * replies, meta contexts) are forgotten, as the protocol asks.
 */
int nbd_server_set_tls(struct nbd_server *srv, struct nbd_tls *tls, enum nbd_tls_mode mode);

struct nbd_conn;

/**
 * nbd_conn_tls_identity() - who the client proved to be over TLS: the PSK
 * username it used (--tls-psk), or the distinguished name of its verified
 * certificate (--tls-verify-peer), as GnuTLS writes it (RFC 4514 order
 * as in the certificate, e.g. "C=GB,O=Example,CN=client1"), or NULL
 * (a plain connection, TLS without a client certificate, or the handshake
 * not yet past STARTTLS).  The string lives as long as the connection.
 * Context: the connection's own thread (in the handshake once STARTTLS is
 * done, then in transmission), e.g. to pick the client's io group at
 * NBD_OPT_GO.
 */
const char *nbd_conn_tls_identity(const struct nbd_conn *c);

/** nbd_server_destroy() - free the server (after nbd_server_wait). */
void nbd_server_destroy(struct nbd_server *srv);

#endif /* NBD_SERVER_H */
