/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_server: the NBD protocol side of rqnbd.  See nbd_server.h.
 *
 * Reading order: limits, the per-request and per-connection state, the
 * handshake (blocking, with a timeout), then the transmission loop: parse
 * requests into bios, end_io, replies, the event loop, and the connection
 * thread; last the server object.
 *
 * Threads.  One thread per connection does everything for it.  In
 * transmission it runs an event loop over a non-blocking socket and an
 * eventfd:
 *
 *   read what the socket has -> parse every complete request in it, each
 *   one a bio submitted under one plug -> collect ended bios -> write all
 *   pending replies with one sendmsg -> poll when there is nothing to do.
 *
 * A bio's end_io runs wherever the driver ends it (inside the plug flush on
 * this thread for the memory device, on a worker for the file device).  It
 * only pushes the command onto the connection's lock-free "done" stack and,
 * if the loop is asleep in poll, wakes it through the eventfd.  No thread
 * ever waits for one request.  Replies go out in completion order, matched
 * by cookie.
 *
 * Back-pressure: a connection has lim.conn_requests commands and may hold
 * lim.conn_buffer bytes of data buffers, taken from the server's bounded
 * pool (nbd_pool.h) before a request is taken; while all commands are busy,
 * the budget is spent or the pool is empty, the loop stops parsing and
 * stops reading the socket, so a fast client fills its socket buffer and
 * waits.  Nothing is allocated per request: buffers come from the pool's
 * cache, commands from the connection's array.
 *
 * Time: the handshake polls against one deadline (lim.handshake_ms after
 * accept); in transmission two rate meters (input while a request is
 * incomplete, output while replies wait for the socket) close a
 * connection that moves fewer than lim.min_rate bytes/s over a window of
 * lim.stall_ms, and lim.idle_ms closes one with nothing in flight.
 *
 * TLS: after NBD_OPT_STARTTLS every read and write of the connection goes
 * through conn_recv()/conn_sendv(), which call GnuTLS (nbd_tls.c) instead
 * of the socket; the loop, the timers and the budgets do not change.  Two
 * things differ: decrypted bytes may wait inside GnuTLS where poll cannot
 * see them (checked before sleeping), and a send that met EAGAIN must be
 * repeated with the same bytes (the reply queue keeps them in place).
 *
 * Block status is answered on the loop's thread from the export's
 * block_status query (no bio: it is metadata); CACHE is the export's cache
 * query or a read-ahead bio; fast zero is decided by exp.zero_fast.
 *
 * Admission (nbd_server_add): the global and per-client limits, and the
 * eviction of the connection idle longest when the reserve is reached;
 * each connection publishes "busy" and the time of its last activity for
 * that.
 *
 * What touches a connection from outside its thread: end_io (the done
 * stack, the sleeping flag, the eventfd, the cb_active count),
 * nbd_server_stop (the eventfd, or shutdown() of the socket during the
 * handshake, under the server lock) and nbd_server_add's eviction (reads
 * busy and last_ms, sets evicted and shuts the socket down, under the
 * server lock; the socket stays open until the connection's own thread
 * has taken it off the list).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <librequest/librequest.h>

#include "nbd_parse.h"
#include "nbd_pool.h"
#include "nbd_proto.h"
#include "nbd_server.h"
#include "nbd_tls.h"

#define NBD_MAX_SKIP (64ull << 20)      /* refused write payload we still read */
#define NBD_IN_BUF (128u << 10)         /* socket read buffer (mmap) */
#define NBD_DIRECT_READ (64u << 10)     /* payload rest read straight into place */
#define NBD_POOL_KEEP (16u << 20)       /* cached buffers kept after a close */
#define NBD_POOL_RETRY_MS 10            /* pool empty: try again after */
#define NBD_IDLE_TRIM_MS 1000           /* idle this long: trim the pool's cache */
#define NBD_SHORT_WINDOW_MS 1000        /* rate window while the pool runs short */
#define NBD_EVICT_ESTABLISHED (1ull << 62) /* eviction rank: after any handshake */
#define NBD_THREAD_STACK (1u << 20)     /* connection threads' stacks */
#define NBD_MAX_OPTIONS 1024            /* options per handshake */
#define NBD_MAX_OPT_LEN 65536u          /* option data we look at */
#define NBD_MAX_OPT_SKIP (1u << 20)     /* longer options: disconnect */
#define NBD_DRAIN_TIMEOUT_MS 5000       /* at stop: time to send the last replies */
#define NBD_IOV_MAX 64                  /* iovecs per sendmsg */
#define NBD_MAX_STRING 4096             /* names and descriptions we send or take */
#define NBD_BS_MAX_DESC 511             /* descriptors per block status reply */
#define NBD_BS_BATCH 64                 /* runs asked of the backend at once */
#define NBD_TLS_RECORD 16384            /* plaintext per TLS record we send */

enum conn_state {
	CONN_HANDSHAKE = 0,
	CONN_TRANSMISSION = 1,
};

/* One request from receipt to the last byte of its reply. */
struct nbd_cmd {
	struct rq_bio bio;          /* the request's bio (caller memory) */
	struct nbd_conn *conn;
	struct nbd_cmd *next;       /* free list, done stack, or reply queue */
	uint64_t cookie;
	uint64_t offset;
	uint32_t len;               /* request length; block status: reply bytes */
	uint16_t type;              /* NBD_CMD_* */
	uint16_t flags;             /* NBD_CMD_FLAG_* */
	uint32_t error;             /* NBD error of the reply; 0: success */
	uint32_t rx_done;           /* write payload bytes received */
	char *buf;                  /* data from the pool: read result or write payload */
	uint32_t buf_len;           /* the length buf was taken for */
	uint32_t hdr_len;           /* reply header bytes in hdr */
	uint32_t data_len;          /* reply data bytes (from buf) */
	unsigned char hdr[32];      /* reply header */
};

/* Who a client is, for the per-client limit: an IP address or a unix uid. */
struct nbd_peer {
	int family;
	unsigned char addr[16];
};

/* Bytes moved in a window of lim.stall_ms, while the client is waited for. */
struct rate_meter {
	uint64_t start;             /* ms; window start */
	uint64_t bytes;             /* moved since start */
	bool on;
};

struct nbd_conn {
	struct nbd_server *srv;
	struct nbd_conn *prev_conn, *next_conn; /* srv->conns, under srv->lock */
	pthread_t thread;
	int fd;
	int efd;                    /* eventfd: completions, stop */
	enum conn_state state;      /* under srv->lock */
	atomic_bool evicted;        /* shut down to make room (set under srv->lock) */
	struct nbd_peer peer;
	struct rq_io_context *ioc;  /* this client's io context */
	const struct nbd_export *exp; /* the export chosen (or last asked about) */
	unsigned exp_idx;
	bool exp_counted;           /* counted in srv->exp_conns[exp_idx] */
	unsigned exp_gen;           /* srv->exp_gen[exp_idx] when it was chosen */
	char *name;                 /* the export name it was served by */
	bool structured;            /* structured replies negotiated */
	bool meta_alloc;            /* base:allocation selected */
	struct nbd_tls_session *tls; /* after STARTTLS: all I/O goes through it */
	unsigned char *tls_stage;   /* replies gathered into one TLS record */
	const void *tls_retry;      /* a send that met EAGAIN: again, the same */
	size_t tls_retry_len;
	bool no_zeroes;             /* NBD_FLAG_C_NO_ZEROES */
	uint64_t hs_deadline;       /* ms: the handshake must end before */
	atomic_uint_fast64_t last_ms; /* last byte in or out (for idle, eviction) */
	atomic_bool busy;           /* requests in flight or half received */
	struct nbd_req_limits rlim; /* what requests are checked against */

	/* transmission: loop thread only, unless said otherwise */
	struct nbd_cmd *free_cmds;
	unsigned inflight;          /* commands not on the free list */
	uint64_t held;              /* pool bytes (class sizes) of those */
	bool blocked;               /* a request waits for budget or pool */
	bool pool_wait;             /* ... and the pool was empty */
	bool trimmed;               /* trimmed the pool since last busy */
	struct rate_meter m_in, m_out;
	uint64_t drain_deadline;    /* ms, once stopping */
	_Atomic(struct nbd_cmd *) done; /* pushed by end_io */
	atomic_bool sleeping;       /* the loop is (about to be) in poll */
	atomic_int cb_active;       /* end_io calls running */
	struct nbd_cmd *out_head, *out_tail; /* replies to send, in order */
	size_t out_off;             /* bytes of out_head already sent */
	struct nbd_cmd *rx_cmd;     /* write whose payload is arriving */
	uint64_t rx_skip;           /* payload bytes to read and drop */
	unsigned char *in;          /* socket read buffer */
	size_t in_start, in_end;
	bool eof;                   /* the client closed its side */
	bool disc;                  /* NBD_CMD_DISC received */
	bool dead;                  /* the socket is unusable: drop replies */
	bool stopping;              /* the server is stopping */
	struct nbd_cmd *cmds;       /* lim.conn_requests of them */
};

/*
 * An export slot's life: FREE (never used, or freed), LIVE (listed and
 * selectable), RETIRING (removed: neither listed nor selectable, still
 * serving the connections it has; freed by its owner once they are gone).
 * The first slot is LIVE for the server's life.  A slot's name and
 * description are the server's own copies; connections read a slot only
 * under the lock while choosing it, or while counted in exp_conns (then
 * it cannot be freed).  exp_gen changes each time a slot is filled, so a
 * choice made before a slot was refilled is seen to be stale.
 */
enum { EXP_FREE, EXP_LIVE, EXP_RETIRING };

struct nbd_server {
	struct nbd_export exps[NBD_MAX_EXPORTS];   /* under lock (see above) */
	unsigned nexps;                            /* under lock: slots ever used */
	unsigned char exp_state[NBD_MAX_EXPORTS];  /* under lock */
	unsigned exp_gen[NBD_MAX_EXPORTS];         /* under lock */
	unsigned exp_conns[NBD_MAX_EXPORTS]; /* under lock: served each export */
	struct nbd_policy policy;
	struct nbd_limits lim;
	struct nbd_pool *pool;      /* request data buffers */
	struct nbd_tls *tls;        /* credentials, or NULL */
	enum nbd_tls_mode tls_mode;
	pthread_mutex_t lock;
	pthread_cond_t cond;        /* nthreads reached 0 */
	struct nbd_conn *conns;     /* under lock */
	unsigned nconns;            /* under lock: on the list */
	unsigned nthreads;          /* under lock: connection threads not yet ended */
	unsigned nevicting;         /* under lock: evicted, not yet gone */
	atomic_bool stopping;
	atomic_uint_fast64_t pool_short_ms; /* last time a buffer was refused */
	atomic_uint_fast64_t st_refused;
	atomic_uint_fast64_t st_evicted;
	atomic_uint_fast64_t st_timeouts;
	atomic_uint_fast64_t st_connections;
	atomic_uint_fast64_t st_handshakes;
	atomic_uint_fast64_t st_requests;
	atomic_uint_fast64_t st_errors;
	atomic_uint_fast64_t st_dropped;
};

static void count(atomic_uint_fast64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Transmission flags for this connection, of an export @read_only or not. */
static uint16_t conn_tflags(const struct nbd_conn *c, bool read_only)
{
	uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
		     NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
		     NBD_FLAG_CAN_MULTI_CONN | NBD_FLAG_SEND_CACHE | NBD_FLAG_SEND_FAST_ZERO;

	if (read_only)
		f |= NBD_FLAG_READ_ONLY;
	if (c->structured)
		f |= NBD_FLAG_SEND_DF; /* a read is always one data chunk */
	return f;
}

/* ---------------------------------------------------------- socket I/O */

/*
 * Receive up to @n bytes, never blocking: through the TLS session after
 * STARTTLS, else from the socket.  Return: bytes, 0 at end of stream, -1
 * with errno (EAGAIN: nothing yet).
 */
static ssize_t conn_recv(struct nbd_conn *c, void *buf, size_t n)
{
	if (c->tls)
		return nbd_tls_recv(c->tls, buf, n);
	return recv(c->fd, buf, n, MSG_DONTWAIT);
}

/*
 * Send @len bytes at @p through the TLS session, at most one record.  A
 * send that met EAGAIN is repeated with the very same bytes first (GnuTLS
 * holds part of them): @p must stay valid until it has gone, which holds
 * for a reply's header and data and for the staging buffer, since nothing
 * leaves the reply queue before it is sent.  Return: bytes, or -1 with errno.
 */
static ssize_t conn_tls_send(struct nbd_conn *c, const void *p, size_t len)
{
	ssize_t r;

	if (c->tls_retry_len) {
		p = c->tls_retry;
		len = c->tls_retry_len;
	}
	r = nbd_tls_send(c->tls, p, len);
	if (r < 0 && errno == EAGAIN) {
		c->tls_retry = p;
		c->tls_retry_len = len;
	} else {
		c->tls_retry_len = 0;
	}
	return r;
}

/*
 * Send from @n vectors, never blocking.  Plain: one sendmsg.  TLS: one
 * record, gathered into the staging buffer unless the first vector fills
 * a record alone.  Return: bytes taken, or -1 with errno.
 */
static ssize_t conn_sendv(struct nbd_conn *c, const struct iovec *iov, int n)
{
	struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = n };
	size_t len = 0;
	int i;

	if (!c->tls)
		return sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (c->tls_retry_len || (n && iov[0].iov_len >= NBD_TLS_RECORD) || !c->tls_stage)
		return conn_tls_send(c, iov[0].iov_base,
				     iov[0].iov_len < NBD_TLS_RECORD ? iov[0].iov_len
								    : NBD_TLS_RECORD);
	for (i = 0; i < n && len < NBD_TLS_RECORD; i++) {
		size_t k = iov[i].iov_len < NBD_TLS_RECORD - len ? iov[i].iov_len
								 : NBD_TLS_RECORD - len;

		memcpy(c->tls_stage + len, iov[i].iov_base, k);
		len += k;
	}
	return conn_tls_send(c, c->tls_stage, len);
}

/* ------------------------------------------------------------ handshake */

/*
 * Wait until the socket is ready for @events, or the handshake's deadline
 * passes: however slowly a client trickles, the whole handshake ends by
 * then.  Return: 0, or -1 (deadline, error).
 */
static int hs_wait(struct nbd_conn *c, short events)
{
	for (;;) {
		struct pollfd pfd = { c->fd, events, 0 };
		uint64_t now = now_ms();
		int r;

		if (now >= c->hs_deadline) {
			count(&c->srv->st_timeouts);
			return -1;
		}
		r = poll(&pfd, 1, (int)(c->hs_deadline - now));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

/* Has the handshake's deadline passed?  (Counted as a time-out.) */
static bool hs_expired(struct nbd_conn *c)
{
	if (now_ms() < c->hs_deadline)
		return false;
	count(&c->srv->st_timeouts);
	return true;
}

/*
 * Read @n bytes by the handshake's deadline: what is there is taken at
 * once (TLS may hold decrypted bytes the socket does not show), the socket
 * is polled only when nothing is.  Return: 0, or -1 on any failure.
 */
static int hs_read(struct nbd_conn *c, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r;

		if (hs_expired(c))
			return -1; /* a client that never pauses is bounded too */
		r = conn_recv(c, p, n);
		if (r > 0) {
			p += r;
			n -= r;
			atomic_store_explicit(&c->last_ms, now_ms(), memory_order_relaxed);
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* TLS: nothing is left decrypted when it says EAGAIN */
			if (hs_wait(c, POLLIN))
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

static int hs_skip(struct nbd_conn *c, uint64_t n)
{
	char junk[4096];

	while (n) {
		size_t k = n < sizeof(junk) ? n : sizeof(junk);

		if (hs_read(c, junk, k))
			return -1;
		n -= k;
	}
	return 0;
}

static int hs_writev(struct nbd_conn *c, struct iovec *iov, int n)
{
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n };

	while (mh.msg_iovlen) {
		ssize_t r;

		if (!mh.msg_iov->iov_len) { /* an empty vector: TLS sends one each */
			mh.msg_iov++;
			mh.msg_iovlen--;
			continue;
		}
		if (hs_expired(c))
			return -1;
		r = conn_sendv(c, mh.msg_iov, (int)mh.msg_iovlen);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if ((errno == EAGAIN || errno == EWOULDBLOCK) && !hs_wait(c, POLLOUT))
				continue;
			return -1;
		}
		while (mh.msg_iovlen && (size_t)r >= mh.msg_iov->iov_len) {
			r -= mh.msg_iov->iov_len;
			mh.msg_iov++;
			mh.msg_iovlen--;
		}
		if (mh.msg_iovlen) {
			mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + r;
			mh.msg_iov->iov_len -= r;
		}
	}
	return 0;
}

static int hs_write(struct nbd_conn *c, const void *buf, size_t n)
{
	struct iovec iov = { (void *)buf, n };

	return hs_writev(c, &iov, 1);
}

/* Send one option reply: header and @len bytes of @data. */
static int hs_reply(struct nbd_conn *c, uint32_t opt, uint32_t type,
		    const void *data, uint32_t len)
{
	unsigned char h[20];
	struct iovec iov[2] = { { h, sizeof(h) }, { (void *)data, len } };

	nbd_put64(h, NBD_REP_MAGIC);
	nbd_put32(h + 8, opt);
	nbd_put32(h + 12, type);
	nbd_put32(h + 16, len);
	return hs_writev(c, iov, len ? 2 : 1);
}

/* The TLS identity of @c (certificate DN or PSK username) for the policy,
 * NULL without TLS. */
static const char *conn_tls_identity(const struct nbd_conn *c)
{
	return c->tls ? nbd_tls_identity(c->tls) : NULL;
}

/* What a handshake tells of an export, copied under the server's lock. */
struct exp_view {
	uint64_t size;
	uint32_t min_block, pref_block, max_block;
	bool read_only;
	char name[NBD_MAX_STRING + 1];
	char description[NBD_MAX_STRING + 1];
};

/* The LIVE export named @name (@len bytes), or -1.  Context: srv->lock. */
static int export_by_name(const struct nbd_server *srv, const void *name, size_t len)
{
	for (unsigned k = 0; k < srv->nexps; k++)
		if (srv->exp_state[k] == EXP_LIVE && strlen(srv->exps[k].name) == len &&
		    !memcmp(srv->exps[k].name, name, len))
			return (int)k;
	return -1;
}

static void view_of(const struct nbd_export *e, struct exp_view *v)
{
	v->size = e->size;
	v->min_block = e->min_block;
	v->pref_block = e->pref_block;
	v->max_block = e->max_block;
	v->read_only = e->read_only;
	snprintf(v->name, sizeof(v->name), "%s", e->name);
	snprintf(v->description, sizeof(v->description), "%s",
		 e->description ? e->description : "");
}

/*
 * The export @name (of @len bytes) selects: a LIVE export's own name, ""
 * for the first, else what the policy resolves it to (if LIVE).  Sets
 * c->exp to it and, with @v, copies what a reply tells of it.
 * Return: its index, or -1 (unknown).
 */
static int hs_find_export(struct nbd_conn *c, const unsigned char *name, uint32_t len,
			  struct exp_view *v)
{
	struct nbd_server *srv = c->srv;
	char buf[NBD_MAX_STRING + 1];
	int i, r = -1;

	pthread_mutex_lock(&srv->lock);
	i = len ? export_by_name(srv, name, len) : 0;
	pthread_mutex_unlock(&srv->lock);
	if (i < 0 && srv->policy.resolve && len <= NBD_MAX_STRING &&
	    !memchr(name, '\0', len)) {
		memcpy(buf, name, len);
		buf[len] = '\0';
		r = srv->policy.resolve(srv->policy.arg, buf);
	}
	pthread_mutex_lock(&srv->lock);
	if (i < 0 && r >= 0 && r < (int)srv->nexps && srv->exp_state[r] == EXP_LIVE)
		i = r;
	if (i >= 0) {
		c->exp = &srv->exps[i];
		c->exp_idx = (unsigned)i;
		c->exp_gen = srv->exp_gen[i];
		if (v)
			view_of(c->exp, v);
	}
	pthread_mutex_unlock(&srv->lock);
	return i;
}

/*
 * Connection @c is to be served the export hs_find_export() chose, by
 * @name (@len bytes): take a place under the export's connection limit,
 * ask the policy.  Return: 0, or the NBD_REP_ERR_* to refuse with.
 */
static uint32_t hs_admit(struct nbd_conn *c, const unsigned char *name, uint32_t len)
{
	struct nbd_server *srv = c->srv;
	struct nbd_client_info ci;
	char peer[64];
	bool full, gone;

	free(c->name);
	c->name = strndup((const char *)name, len);
	if (!c->name)
		return NBD_REP_ERR_SHUTDOWN;
	pthread_mutex_lock(&srv->lock);
	gone = srv->exp_state[c->exp_idx] != EXP_LIVE || srv->exp_gen[c->exp_idx] != c->exp_gen;
	full = c->exp->max_conns && srv->exp_conns[c->exp_idx] >= c->exp->max_conns;
	if (!gone && !full) {
		srv->exp_conns[c->exp_idx]++;
		c->exp_counted = true;
	}
	pthread_mutex_unlock(&srv->lock);
	if (gone) /* removed since it was chosen */
		return NBD_REP_ERR_UNKNOWN;
	if (full)
		return NBD_REP_ERR_POLICY;
	if (!srv->policy.admit)
		return 0;
	nbd_peer_name(c->fd, peer, sizeof(peer));
	ci = (struct nbd_client_info){ .name = c->name, .export = c->exp_idx, .peer = peer,
				       .tls_identity = conn_tls_identity(c) };
	if (!srv->policy.admit(srv->policy.arg, &ci, c->ioc, false))
		return 0;
	pthread_mutex_lock(&srv->lock);
	srv->exp_conns[c->exp_idx]--;
	c->exp_counted = false;
	pthread_mutex_unlock(&srv->lock);
	return NBD_REP_ERR_POLICY;
}

/* NBD_OPT_INFO / NBD_OPT_GO.  Return: 1 to enter transmission, 0 to go on,
 * -1 to close. */
static int hs_info(struct nbd_conn *c, uint32_t opt, const unsigned char *d, uint32_t len)
{
	struct exp_view v; /* 8 KiB, on a 1 MiB stack */
	const struct exp_view *exp = &v;
	struct nbd_info_req ir;
	bool want_name, want_desc;
	unsigned char info[14];
	uint32_t err = nbd_info_parse(d, len, &ir);

	if (err)
		return hs_reply(c, opt, err, NULL, 0);
	if (hs_find_export(c, ir.name, ir.namelen, &v) < 0)
		return hs_reply(c, opt, NBD_REP_ERR_UNKNOWN, NULL, 0);
	if (opt == NBD_OPT_GO && (err = hs_admit(c, ir.name, ir.namelen)))
		return hs_reply(c, opt, err, NULL, 0);
	want_name = ir.want_name;
	want_desc = ir.want_desc;

	nbd_put16(info, NBD_INFO_EXPORT);
	nbd_put64(info + 2, exp->size);
	nbd_put16(info + 10, conn_tflags(c, exp->read_only));
	if (hs_reply(c, opt, NBD_REP_INFO, info, 12))
		return -1;
	/* sent whether asked or not: we enforce a 512-byte minimum */
	nbd_put16(info, NBD_INFO_BLOCK_SIZE);
	nbd_put32(info + 2, exp->min_block);
	nbd_put32(info + 6, exp->pref_block);
	nbd_put32(info + 10, exp->max_block);
	if (hs_reply(c, opt, NBD_REP_INFO, info, 14))
		return -1;
	if (want_name || want_desc) {
		const char *s = want_name ? exp->name : NULL;
		int pass;

		for (pass = 0; pass < 2; pass++) {
			unsigned char buf[2 + 4096];
			size_t n;

			if (pass == 1)
				s = want_desc && exp->description[0] ? exp->description : NULL;
			if (!s)
				continue;
			n = strlen(s);
			if (n > 4096)
				n = 4096;
			nbd_put16(buf, pass ? NBD_INFO_DESCRIPTION : NBD_INFO_NAME);
			memcpy(buf + 2, s, n);
			if (hs_reply(c, opt, NBD_REP_INFO, buf, 2 + n))
				return -1;
		}
	}
	if (hs_reply(c, opt, NBD_REP_ACK, NULL, 0))
		return -1;
	return opt == NBD_OPT_GO ? 1 : 0;
}

/* NBD_OPT_EXPORT_NAME: the export's size and flags.  Return: 1 or -1. */
static int hs_export_name(struct nbd_conn *c, const unsigned char *name, uint32_t len)
{
	unsigned char r10[10], zeros[124] = { 0 };
	struct iovec iov[2] = { { r10, 10 }, { zeros, 124 } };

	if (hs_find_export(c, name, len, NULL) < 0 || hs_admit(c, name, len))
		return -1; /* no way to say no but to hang up */
	nbd_put64(r10, c->exp->size); /* counted: the slot stays */
	nbd_put16(r10 + 8, conn_tflags(c, c->exp->read_only));
	return hs_writev(c, iov, c->no_zeroes ? 1 : 2) ? -1 : 1;
}

/* NBD_OPT_LIST: every export, its description as the reply's text (aliases
 * are not listed).  Return: 0 or -1. */
static int hs_list(struct nbd_conn *c, uint32_t opt, uint32_t len)
{
	unsigned char rep[4 + 2 * NBD_MAX_STRING];
	unsigned i;

	if (len)
		return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	for (i = 0; i < NBD_MAX_EXPORTS; i++) {
		struct nbd_server *srv = c->srv;
		size_t n = 0, dn = 0;

		pthread_mutex_lock(&srv->lock); /* not held while sending */
		if (i < srv->nexps && srv->exp_state[i] == EXP_LIVE) {
			const struct nbd_export *e = &srv->exps[i];

			n = strnlen(e->name, NBD_MAX_STRING);
			dn = e->description ? strnlen(e->description, NBD_MAX_STRING) : 0;
			nbd_put32(rep, n);
			memcpy(rep + 4, e->name, n);
			memcpy(rep + 4 + n, e->description ? e->description : "", dn);
			n += 4;
		}
		pthread_mutex_unlock(&srv->lock);
		if (n && hs_reply(c, opt, NBD_REP_SERVER, rep, n + dn))
			return -1;
	}
	return hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
}

/*
 * NBD_OPT_STARTTLS: ACK, then the TLS handshake by the handshake's
 * deadline; from then on every byte goes through the session, and what was
 * negotiated in the clear is forgotten.  Return: 0 to go on, -1 to close.
 */
static int hs_starttls(struct nbd_conn *c, uint32_t opt, uint32_t len)
{
	struct nbd_server *srv = c->srv;
	int r;

	if (srv->tls_mode == NBD_TLS_OFF)
		return hs_reply(c, opt, NBD_REP_ERR_UNSUP, NULL, 0);
	if (len || c->tls) /* a second STARTTLS is invalid, not a new session */
		return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	c->tls_stage = malloc(NBD_TLS_RECORD);
	if (!c->tls_stage)
		return hs_reply(c, opt, NBD_REP_ERR_PLATFORM, NULL, 0);
	if (hs_reply(c, opt, NBD_REP_ACK, NULL, 0) ||
	    nbd_tls_session_new(srv->tls, c->fd, &c->tls))
		return -1;
	while ((r = nbd_tls_handshake(c->tls)) == -EAGAIN)
		if (hs_wait(c, nbd_tls_poll_events(c->tls)))
			return -1;
	if (r)
		return -1;
	atomic_store_explicit(&c->last_ms, now_ms(), memory_order_relaxed);
	c->structured = false;
	c->meta_alloc = false;
	return 0;
}

/*
 * NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT: the one context we
 * have, base:allocation, listed for no query, "base:" or its own name, and
 * selected (SET) when named; a SET naming nothing we know selects nothing.
 * Return: 0 or -1.
 */
static int hs_meta(struct nbd_conn *c, uint32_t opt, const unsigned char *d, uint32_t len)
{
	static const char name[] = NBD_META_BASE_ALLOCATION;
	bool list = opt == NBD_OPT_LIST_META_CONTEXT, found;
	unsigned char rep[4 + sizeof(name) - 1];
	struct nbd_meta_req m;
	const unsigned char *q;
	uint32_t qlen, err;

	if (!c->structured) /* contexts need structured replies */
		return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	err = nbd_meta_parse(d, len, &m);
	if (err)
		return hs_reply(c, opt, err, NULL, 0);
	if (hs_find_export(c, m.name, m.namelen, NULL) < 0)
		return hs_reply(c, opt, NBD_REP_ERR_UNKNOWN, NULL, 0);
	found = list && !m.nqueries;
	while (nbd_meta_next(&m, &q, &qlen))
		found |= nbd_meta_match(q, qlen, list);
	if (!list)
		c->meta_alloc = found;
	if (found) {
		nbd_put32(rep, NBD_META_ID_ALLOCATION);
		memcpy(rep + 4, name, sizeof(name) - 1);
		if (hs_reply(c, opt, NBD_REP_META_CONTEXT, rep, sizeof(rep)))
			return -1;
	}
	return hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
}

#define HS_ABORT 2 /* hs_option(): the client asked to close */

/*
 * Answer one option (its @len bytes of data at @data).  Return: 1 to enter
 * transmission, 0 to read the next option, -1 to close (the client broke
 * the protocol or vanished), HS_ABORT to close cleanly.
 */
static int hs_option(struct nbd_conn *c, uint32_t opt, const unsigned char *data,
		     uint32_t len)
{
	if (c->srv->tls_mode == NBD_TLS_REQUIRE && !c->tls && opt != NBD_OPT_STARTTLS &&
	    opt != NBD_OPT_ABORT) {
		if (opt == NBD_OPT_EXPORT_NAME)
			return -1; /* no way to say TLS is required but to hang up */
		return hs_reply(c, opt, NBD_REP_ERR_TLS_REQD, NULL, 0);
	}
	switch (opt) {
	case NBD_OPT_EXPORT_NAME:
		return hs_export_name(c, data, len);
	case NBD_OPT_ABORT:
		hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
		return HS_ABORT;
	case NBD_OPT_LIST:
		return hs_list(c, opt, len);
	case NBD_OPT_INFO:
	case NBD_OPT_GO:
		return hs_info(c, opt, data, len);
	case NBD_OPT_STRUCTURED_REPLY:
		if (len || c->structured)
			return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
		c->structured = true;
		return hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
	case NBD_OPT_LIST_META_CONTEXT:
	case NBD_OPT_SET_META_CONTEXT:
		return hs_meta(c, opt, data, len);
	case NBD_OPT_STARTTLS:
		return hs_starttls(c, opt, len);
	default: /* EXTENDED_HEADERS and anything unknown */
		return hs_reply(c, opt, NBD_REP_ERR_UNSUP, NULL, 0);
	}
}

/*
 * The fixed newstyle handshake, by the connection's deadline.  Return: 1
 * to enter transmission, 0 to close cleanly (abort, stop), -1 to close
 * because the client broke the protocol, vanished or was too slow.
 */
static int conn_handshake(struct nbd_conn *c)
{
	unsigned char g[18], data[NBD_MAX_OPT_LEN];
	uint32_t cflags;
	int i;

	nbd_put64(g, NBD_INIT_MAGIC);
	nbd_put64(g + 8, NBD_OPTS_MAGIC);
	nbd_put16(g + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
	if (hs_write(c, g, sizeof(g)) || hs_read(c, g, 4))
		return -1;
	cflags = nbd_get32(g);
	if (cflags & ~(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES))
		return -1;
	c->no_zeroes = cflags & NBD_FLAG_C_NO_ZEROES;

	for (i = 0; i < NBD_MAX_OPTIONS; i++) {
		unsigned char h[16];
		uint32_t opt, len;
		int r;

		if (hs_read(c, h, sizeof(h)) || nbd_opt_parse(h, &opt, &len))
			return -1;
		if (len > NBD_MAX_OPT_LEN) {
			if (opt == NBD_OPT_EXPORT_NAME || len > NBD_MAX_OPT_SKIP ||
			    hs_skip(c, len) ||
			    hs_reply(c, opt, NBD_REP_ERR_TOO_BIG, NULL, 0))
				return -1;
			continue;
		}
		if (hs_read(c, data, len))
			return -1;
		if (atomic_load(&c->srv->stopping) && opt != NBD_OPT_ABORT) {
			if (opt == NBD_OPT_EXPORT_NAME ||
			    hs_reply(c, opt, NBD_REP_ERR_SHUTDOWN, NULL, 0))
				return -1;
			continue;
		}
		r = hs_option(c, opt, data, len);
		if (r == HS_ABORT)
			return 0;
		if (r)
			return r;
	}
	return -1;
}

/* ------------------------------------------------------- transmission */

/* The NBD error for a bio status. */
static uint32_t status_to_nbd(rq_status_t status)
{
	switch (-rq_status_to_errno(status)) {
	case 0:
		return 0;
	case EPERM:
		return NBD_EPERM;
	case ENOMEM:
		return NBD_ENOMEM;
	case EINVAL:
	case EOPNOTSUPP:
		return NBD_EINVAL;
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return NBD_ENOSPC;
	case ESHUTDOWN:
		return NBD_ESHUTDOWN;
	default:
		return NBD_EIO;
	}
}

/**
 * nbd_end_io() - a request's bio has ended: queue its reply.
 * @bio: the bio inside a struct nbd_cmd.
 *
 * Context: whichever thread ended the bio (the connection's own thread
 * inside a plug flush, or a driver thread); never blocks: one
 * compare-and-swap, and an eventfd write if the loop sleeps.
 */
static void nbd_end_io(struct rq_bio *bio)
{
	struct nbd_cmd *cmd = bio->private_data;
	struct nbd_conn *c = cmd->conn;
	struct nbd_cmd *head;

	atomic_fetch_add(&c->cb_active, 1);
	cmd->error = status_to_nbd(bio->status);
	head = atomic_load_explicit(&c->done, memory_order_relaxed);
	do {
		cmd->next = head;
	} while (!atomic_compare_exchange_weak_explicit(&c->done, &head, cmd,
							memory_order_seq_cst,
							memory_order_relaxed));
	if (atomic_load(&c->sleeping) && atomic_exchange(&c->sleeping, false)) {
		uint64_t one = 1;
		ssize_t r = write(c->efd, &one, sizeof(one));

		(void)r;
	}
	atomic_fetch_sub_explicit(&c->cb_active, 1, memory_order_release);
}

/* Take a free command (the caller checked there is one). */
static struct nbd_cmd *cmd_get(struct nbd_conn *c)
{
	struct nbd_cmd *cmd = c->free_cmds;

	c->free_cmds = cmd->next;
	cmd->next = NULL;
	cmd->error = 0;
	cmd->data_len = 0;
	cmd->rx_done = 0;
	c->inflight++;
	return cmd;
}

/* A command's reply has gone (or been dropped): make it free again, its
 * buffer back to the pool. */
static void cmd_put(struct nbd_conn *c, struct nbd_cmd *cmd)
{
	if (cmd->buf) {
		nbd_pool_put(c->srv->pool, cmd->buf, cmd->buf_len);
		c->held -= nbd_pool_class_size(cmd->buf_len);
		cmd->buf = NULL;
		cmd->buf_len = 0;
	}
	cmd->next = c->free_cmds;
	c->free_cmds = cmd;
	c->inflight--;
}

/*
 * May a request needing @need bytes of buffer be taken now?  Takes the
 * buffer (*@buf, NULL when @need is 0) from the pool if so.  Within the
 * connection's budget, a request is taken alone when it is larger.
 */
static bool conn_budget(struct nbd_conn *c, uint32_t need, char **buf)
{
	uint64_t cls;

	*buf = NULL;
	if (!c->free_cmds)
		return false;
	if (!need)
		return true;
	cls = nbd_pool_class_size(need);
	if (c->held && c->held + cls > c->srv->lim.conn_buffer)
		return false;
	*buf = nbd_pool_get(c->srv->pool, need);
	if (!*buf) {
		c->pool_wait = true;
		atomic_store_explicit(&c->srv->pool_short_ms, now_ms(), memory_order_relaxed);
		return false;
	}
	c->held += cls;
	return true;
}

/* Build @cmd's reply header and append it to the reply queue. */
static void conn_queue_reply(struct nbd_conn *c, struct nbd_cmd *cmd)
{
	unsigned char *h = cmd->hdr;

	if (cmd->error)
		count(&c->srv->st_errors);
	cmd->data_len = 0;
	if (!cmd->error && cmd->type == NBD_CMD_BLOCK_STATUS) {
		/* one chunk: context id and descriptors, already in buf */
		nbd_put32(h, NBD_STRUCTURED_REPLY_MAGIC);
		nbd_put16(h + 4, NBD_REPLY_FLAG_DONE);
		nbd_put16(h + 6, NBD_REPLY_TYPE_BLOCK_STATUS);
		nbd_put64(h + 8, cmd->cookie);
		nbd_put32(h + 16, cmd->len);
		cmd->hdr_len = NBD_CHUNK_HEADER_SIZE;
		cmd->data_len = cmd->len;
	} else if (c->structured && (cmd->error || cmd->type == NBD_CMD_READ)) {
		uint16_t type;
		uint32_t plen;

		nbd_put32(h, NBD_STRUCTURED_REPLY_MAGIC);
		nbd_put64(h + 8, cmd->cookie);
		if (cmd->error) {
			type = NBD_REPLY_TYPE_ERROR;
			plen = 6;
			nbd_put32(h + 20, cmd->error);
			nbd_put16(h + 24, 0); /* no message */
			cmd->hdr_len = NBD_CHUNK_HEADER_SIZE + 6;
		} else if (!cmd->len) {
			type = NBD_REPLY_TYPE_NONE;
			plen = 0;
			cmd->hdr_len = NBD_CHUNK_HEADER_SIZE;
		} else {
			type = NBD_REPLY_TYPE_OFFSET_DATA;
			plen = 8 + cmd->len;
			nbd_put64(h + 20, cmd->offset);
			cmd->hdr_len = NBD_CHUNK_HEADER_SIZE + 8;
			cmd->data_len = cmd->len;
		}
		nbd_put16(h + 4, NBD_REPLY_FLAG_DONE);
		nbd_put16(h + 6, type);
		nbd_put32(h + 16, plen);
	} else {
		nbd_put32(h, NBD_SIMPLE_REPLY_MAGIC);
		nbd_put32(h + 4, cmd->error);
		nbd_put64(h + 8, cmd->cookie);
		cmd->hdr_len = NBD_SIMPLE_REPLY_SIZE;
		if (cmd->type == NBD_CMD_READ && !cmd->error)
			cmd->data_len = cmd->len;
	}
	cmd->next = NULL;
	if (c->out_tail)
		c->out_tail->next = cmd;
	else
		c->out_head = cmd;
	c->out_tail = cmd;
}

/* Reply to @cmd at once with @error (0: success without data). */
static void conn_reply_now(struct nbd_conn *c, struct nbd_cmd *cmd, uint32_t error)
{
	cmd->error = error;
	conn_queue_reply(c, cmd);
}

/* CACHE by a read: from the sector holding @offset. */
static uint64_t cache_start(uint64_t offset)
{
	return offset & ~(uint64_t)(RQ_SECTOR_SIZE - 1);
}

/* CACHE by a read: its length, whole sectors, at most max_block. */
static uint32_t cache_len(const struct nbd_conn *c, const struct nbd_req *r)
{
	const struct nbd_export *exp = c->exp;
	uint64_t start = cache_start(r->offset);
	uint64_t end = (r->offset + r->len + RQ_SECTOR_SIZE - 1) &
		       ~(uint64_t)(RQ_SECTOR_SIZE - 1);

	if (end > exp->size)
		end = exp->size;
	return end - start < exp->max_block ? (uint32_t)(end - start) : exp->max_block;
}

/* Turn a checked request into a bio and submit it. */
static void conn_submit(struct nbd_conn *c, struct nbd_cmd *cmd)
{
	struct rq_bio *bio = &cmd->bio;
	uint64_t start = cmd->offset, end = cmd->offset + cmd->len;

	rq_bio_init(bio, NULL, 1);
	bio->ioc = c->ioc;
	bio->end_io = nbd_end_io;
	bio->private_data = cmd;
	if (cmd->flags & NBD_CMD_FLAG_FUA)
		bio->opf |= RQ_BIO_FUA;

	switch (cmd->type) {
	case NBD_CMD_READ:
		bio->op = RQ_OP_READ;
		bio->opf = RQ_BIO_SYNC;
		rq_bio_add_vec(bio, cmd->buf, cmd->len);
		break;
	case NBD_CMD_WRITE:
		bio->op = RQ_OP_WRITE;
		rq_bio_add_vec(bio, cmd->buf, cmd->len);
		break;
	case NBD_CMD_FLUSH:
		bio->op = RQ_OP_FLUSH;
		bio->opf = 0;
		break;
	case NBD_CMD_TRIM:
		/* a hint: discard only the whole sectors inside the range */
		start = (start + RQ_SECTOR_SIZE - 1) & ~(uint64_t)(RQ_SECTOR_SIZE - 1);
		end &= ~(uint64_t)(RQ_SECTOR_SIZE - 1);
		if (end <= start) {
			conn_reply_now(c, cmd, 0);
			return;
		}
		bio->op = RQ_OP_DISCARD;
		bio->iter.size = (uint32_t)(end - start);
		break;
	case NBD_CMD_WRITE_ZEROES:
		bio->op = RQ_OP_WRITE_ZEROES;
		bio->iter.size = cmd->len;
		break;
	case NBD_CMD_CACHE:
		/* a read ahead into a pool buffer, dropped when it ends */
		bio->op = RQ_OP_READ;
		bio->opf = RQ_BIO_RAHEAD;
		rq_bio_add_vec(bio, cmd->buf, cmd->buf_len);
		start = cache_start(cmd->offset);
		break;
	default:
		conn_reply_now(c, cmd, NBD_EINVAL);
		return;
	}
	bio->iter.sector = start >> RQ_SECTOR_SHIFT;
	rq_submit_bio(c->exp->q, bio);
}

/* The descriptors of a block status reply, built run by run. */
struct bs_reply {
	unsigned char *p;  /* the next descriptor */
	unsigned n, max;   /* written, room */
	uint32_t align;    /* min_block: descriptor ends fall on it */
	uint64_t len;      /* the descriptor being built (0: none) */
	uint32_t flags;
};

static void bs_emit(struct bs_reply *b)
{
	nbd_put32(b->p, (uint32_t)b->len);
	nbd_put32(b->p + 4, b->flags);
	b->p += NBD_BS_DESC_SIZE;
	b->n++;
	b->len = 0;
}

/*
 * Add a run of @len bytes in state @flags.  A descriptor ends on a
 * multiple of min_block: a run that ends inside a block lends the rest of
 * that block to the next one, whose state is then what both have in common
 * (a hole that is half data is data).  Return: false when full.
 */
static bool bs_add(struct bs_reply *b, uint64_t len, uint32_t flags)
{
	while (len) {
		uint64_t take = len;

		if (!b->len) {
			b->flags = flags;
		} else if (b->len % b->align) {
			take = b->align - b->len % b->align;
			if (take > len)
				take = len;
			b->flags &= flags;
		} else if (flags != b->flags) {
			bs_emit(b);
			if (b->n == b->max)
				return false;
			continue;
		}
		b->len += take;
		len -= take;
	}
	return true;
}

/*
 * NBD_CMD_BLOCK_STATUS for base:allocation: ask the backend about
 * [offset, offset + len) and write the reply's payload into @cmd's buffer
 * (cmd->len becomes its size).  Never more than the range, never more
 * than NBD_BS_MAX_DESC descriptors (one with NBD_CMD_FLAG_REQ_ONE), the
 * first always.  Return: 0 or the NBD error.
 */
static uint32_t conn_block_status(struct nbd_conn *c, struct nbd_cmd *cmd,
				  const struct nbd_req *r)
{
	const struct nbd_export *exp = c->exp;
	struct bs_reply b = {
		.p = (unsigned char *)cmd->buf + 4,
		.max = r->flags & NBD_CMD_FLAG_REQ_ONE ? 1 : NBD_BS_MAX_DESC,
		.align = exp->min_block,
	};
	uint64_t pos = r->offset, end = r->offset + r->len;
	struct nbd_extent ext[NBD_BS_BATCH];
	bool room = true;

	while (pos < end && room) {
		int i, k = 1;

		ext[0] = (struct nbd_extent){ .length = end - pos, .flags = 0 };
		if (exp->block_status)
			k = exp->block_status(exp->backend, pos, end - pos, ext, NBD_BS_BATCH);
		if (k <= 0 && pos == r->offset)
			return k == -ENOMEM ? NBD_ENOMEM : NBD_EIO;
		if (k <= 0)
			break; /* answer with what we have */
		for (i = 0; i < k && room && pos < end; i++) {
			uint64_t n = ext[i].length < end - pos ? ext[i].length : end - pos;

			if (!n)
				break;
			room = bs_add(&b, n, ext[i].flags & (NBD_STATE_HOLE | NBD_STATE_ZERO));
			pos += n;
		}
		if (i < k && !ext[i].length)
			break;
	}
	if (b.len && b.n < b.max)
		bs_emit(&b);
	nbd_put32((unsigned char *)cmd->buf, NBD_META_ID_ALLOCATION);
	cmd->len = 4 + b.n * NBD_BS_DESC_SIZE;
	return 0;
}

/*
 * Handle one decoded request @r; @buf is its data buffer of @buf_len bytes
 * (from conn_budget, req_need()) or NULL.
 */
static void conn_request(struct nbd_conn *c, const struct nbd_req *r, char *buf,
			 uint32_t buf_len)
{
	struct nbd_cmd *cmd;
	uint32_t error;

	count(&c->srv->st_requests);
	if (r->type == NBD_CMD_DISC) {
		c->disc = true;
		return;
	}

	cmd = cmd_get(c);
	cmd->cookie = r->cookie;
	cmd->type = r->type;
	cmd->flags = r->flags;
	cmd->offset = r->offset;
	cmd->len = 0;
	cmd->buf = buf;
	cmd->buf_len = buf ? buf_len : 0;
	error = nbd_req_check(&c->rlim, r);

	if (r->type == NBD_CMD_WRITE) {
		if (error) {
			if (r->len > NBD_MAX_SKIP) {
				/* a payload this size is an attack, or garbage */
				count(&c->srv->st_dropped);
				cmd_put(c, cmd);
				c->dead = true;
				return;
			}
			c->rx_skip = r->len;
			conn_reply_now(c, cmd, error);
			return;
		}
		if (!r->len) {
			conn_reply_now(c, cmd, 0);
			return;
		}
		cmd->len = r->len;
		c->rx_cmd = cmd;
		return;
	}
	if (!error && r->type == NBD_CMD_WRITE_ZEROES && (r->flags & NBD_CMD_FLAG_FAST_ZERO) &&
	    !c->exp->zero_fast)
		error = NBD_ENOTSUP; /* it would be written: the client does it better */
	if (!error && r->type == NBD_CMD_BLOCK_STATUS) {
		conn_reply_now(c, cmd, conn_block_status(c, cmd, r));
		return;
	}
	if (!error && r->type == NBD_CMD_CACHE && c->exp->cache && r->len)
		error = c->exp->cache(c->exp->backend, r->offset, r->len) ? NBD_EIO : 0;
	if (error || (r->type == NBD_CMD_CACHE && !buf) ||
	    (!r->len && r->type != NBD_CMD_FLUSH)) {
		conn_reply_now(c, cmd, error);
		return;
	}
	if (r->type == NBD_CMD_CACHE) {
		conn_submit(c, cmd);
		return;
	}
	cmd->len = r->type == NBD_CMD_FLUSH ? 0 : r->len; /* READ, WRITE_ZEROES, TRIM */
	conn_submit(c, cmd);
}

/*
 * Buffer bytes request @r needs: a valid read or write with data, a block
 * status reply, a cache request done by a read.
 */
static uint32_t req_need(const struct nbd_conn *c, const struct nbd_req *r)
{
	if (!r->len || nbd_req_check(&c->rlim, r))
		return 0;
	switch (r->type) {
	case NBD_CMD_READ:
	case NBD_CMD_WRITE:
		return r->len;
	case NBD_CMD_BLOCK_STATUS:
		return 4 + NBD_BS_MAX_DESC * NBD_BS_DESC_SIZE;
	case NBD_CMD_CACHE:
		return c->exp->cache ? 0 : cache_len(c, r);
	default:
		return 0;
	}
}

/*
 * Take the request header at the read buffer's start, if its command and
 * buffer can be had now (else mark the connection blocked).  Return: true
 * if it was taken.
 */
static bool conn_take(struct nbd_conn *c)
{
	struct nbd_req r;
	uint32_t need;
	char *buf;

	if (nbd_req_parse(c->in + c->in_start, &r)) {
		count(&c->srv->st_dropped);
		c->dead = true; /* out of sync: nothing we could answer */
		return false;
	}
	need = req_need(c, &r);
	if (!conn_budget(c, need, &buf)) {
		c->blocked = true;
		return false;
	}
	c->in_start += NBD_REQUEST_SIZE;
	conn_request(c, &r, buf, need);
	return true;
}

/*
 * Parse what the read buffer holds: write payloads, dropped payloads and
 * request headers, submitting bios as requests complete.  Return: true if
 * anything was consumed.
 */
static bool conn_parse(struct nbd_conn *c)
{
	bool progress = false;

	c->blocked = c->pool_wait = false;
	while (!c->dead) {
		size_t avail = c->in_end - c->in_start;

		if (c->rx_skip) {
			size_t n = avail < c->rx_skip ? avail : c->rx_skip;

			if (!n)
				break;
			c->in_start += n;
			c->rx_skip -= n;
			progress = true;
			continue;
		}
		if (c->rx_cmd) {
			struct nbd_cmd *cmd = c->rx_cmd;
			size_t need = cmd->len - cmd->rx_done;
			size_t n = avail < need ? avail : need;

			if (!n)
				break;
			memcpy(cmd->buf + cmd->rx_done, c->in + c->in_start, n);
			cmd->rx_done += n;
			c->in_start += n;
			progress = true;
			if (cmd->rx_done == cmd->len) {
				c->rx_cmd = NULL;
				conn_submit(c, cmd);
			}
			continue;
		}
		if (c->disc || c->stopping || avail < NBD_REQUEST_SIZE || !conn_take(c))
			break;
		progress = true;
	}
	if (c->in_start == c->in_end)
		c->in_start = c->in_end = 0;
	return progress;
}

/* Parse under one plug, so the bios of one read() batch and merge. */
static void conn_parse_plugged(struct nbd_conn *c)
{
	struct rq_plug plug;

	if (c->in_start == c->in_end)
		return;
	rq_start_plug(&plug);
	conn_parse(c);
	rq_finish_plug(&plug);
}

/* @n bytes went in or out: the client is active. */
static void conn_moved(struct nbd_conn *c, struct rate_meter *m, size_t n)
{
	m->bytes += n;
	atomic_store_explicit(&c->last_ms, now_ms(), memory_order_relaxed);
}

/*
 * Read from the socket: straight into a large write payload, or into the
 * read buffer; *@asked says how much was asked for.  Return: bytes read, 0
 * at end of file, -1 with errno.
 */
static ssize_t conn_read(struct nbd_conn *c, size_t *asked)
{
	ssize_t r;

	if (c->rx_cmd && c->in_start == c->in_end &&
	    c->rx_cmd->len - c->rx_cmd->rx_done >= NBD_DIRECT_READ) {
		struct nbd_cmd *cmd = c->rx_cmd;

		*asked = cmd->len - cmd->rx_done;
		r = conn_recv(c, cmd->buf + cmd->rx_done, *asked);
		if (r > 0) {
			conn_moved(c, &c->m_in, r);
			cmd->rx_done += r;
			if (cmd->rx_done == cmd->len) {
				c->rx_cmd = NULL;
				conn_submit(c, cmd);
			}
		}
		return r;
	}
	if (c->in_start) {
		memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
		c->in_end -= c->in_start;
		c->in_start = 0;
	}
	if (c->in_end == NBD_IN_BUF) {
		errno = EAGAIN; /* full of requests we cannot take yet */
		return -1;
	}
	*asked = NBD_IN_BUF - c->in_end;
	r = conn_recv(c, c->in + c->in_end, *asked);
	if (r > 0) {
		conn_moved(c, &c->m_in, r);
		c->in_end += r;
	}
	return r;
}

/* Move ended commands from the done stack to the reply queue, oldest first. */
static void conn_collect(struct nbd_conn *c)
{
	struct nbd_cmd *list = atomic_exchange(&c->done, NULL), *rev = NULL;

	while (list) {
		struct nbd_cmd *next = list->next;

		list->next = rev;
		rev = list;
		list = next;
	}
	while (rev) {
		struct nbd_cmd *next = rev->next;

		conn_queue_reply(c, rev);
		rev = next;
	}
}

/* Drop every queued reply (the client is gone). */
static void conn_drop_replies(struct nbd_conn *c)
{
	while (c->out_head) {
		struct nbd_cmd *cmd = c->out_head;

		c->out_head = cmd->next;
		cmd_put(c, cmd);
	}
	c->out_tail = NULL;
	c->out_off = 0;
}

/*
 * Send queued replies with as few sendmsg calls as the socket allows.
 * Return: 0 when all went, 1 when the socket is full, -1 on error.
 */
static int conn_send(struct nbd_conn *c)
{
	while (c->out_head) {
		struct iovec iov[NBD_IOV_MAX];
		struct nbd_cmd *cmd;
		size_t skip = c->out_off;
		int n = 0;
		ssize_t r;

		for (cmd = c->out_head; cmd && n <= NBD_IOV_MAX - 2; cmd = cmd->next) {
			if (skip < cmd->hdr_len) {
				iov[n].iov_base = cmd->hdr + skip;
				iov[n++].iov_len = cmd->hdr_len - skip;
				skip = 0;
			} else {
				skip -= cmd->hdr_len;
			}
			if (cmd->data_len) {
				iov[n].iov_base = cmd->buf + skip;
				iov[n++].iov_len = cmd->data_len - skip;
			}
			skip = 0;
		}
		r = conn_sendv(c, iov, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
		}
		conn_moved(c, &c->m_out, (size_t)r);
		while (r > 0) {
			size_t left;

			cmd = c->out_head;
			left = cmd->hdr_len + cmd->data_len - c->out_off;
			if ((size_t)r < left) {
				c->out_off += r;
				break;
			}
			r -= left;
			c->out_off = 0;
			c->out_head = cmd->next;
			if (!c->out_head)
				c->out_tail = NULL;
			cmd_put(c, cmd);
		}
	}
	return 0;
}

/* Set up the transmission state.  Return: 0 or -ENOMEM. */
static int conn_transmit_init(struct nbd_conn *c)
{
	unsigned i, n = c->srv->lim.conn_requests;
	void *in = mmap(NULL, NBD_IN_BUF, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (in == MAP_FAILED)
		return -ENOMEM;
	c->in = in;
	c->cmds = calloc(n, sizeof(*c->cmds));
	if (!c->cmds)
		return -ENOMEM;
	for (i = n; i-- > 0;) {
		c->cmds[i].conn = c;
		c->cmds[i].next = c->free_cmds;
		c->free_cmds = &c->cmds[i];
	}
	c->rlim = (struct nbd_req_limits){
		.size = c->exp->size,
		.min_block = c->exp->min_block,
		.max_block = c->exp->max_block,
		.read_only = c->exp->read_only,
		.structured = c->structured,
		.block_status = c->meta_alloc,
	};
	return 0;
}

/*
 * Check @m, active while the client is waited for: false when the client
 * moved fewer than lim.min_rate bytes/s over a whole window of @window ms.
 */
static bool meter_ok(const struct nbd_conn *c, struct rate_meter *m, bool active,
		     uint64_t now, uint64_t window)
{
	const struct nbd_limits *l = &c->srv->lim;

	if (!active || !window) {
		m->on = false;
		return true;
	}
	if (!m->on) {
		*m = (struct rate_meter){ .start = now, .on = true };
		return true;
	}
	if (now - m->start < window)
		return true;
	if (m->bytes * 1000 < (uint64_t)l->min_rate * (now - m->start))
		return false;
	*m = (struct rate_meter){ .start = now, .on = true };
	return true;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/*
 * The window of the output meter: lim.stall_ms, or NBD_SHORT_WINDOW_MS
 * while the pool has refused a buffer in the last window, so that clients
 * that hold buffers and do not read their replies are closed within a
 * second when others wait for those buffers.
 */
static uint64_t out_window(const struct nbd_conn *c, uint64_t now)
{
	uint64_t stall = c->srv->lim.stall_ms;
	uint64_t shortage = atomic_load_explicit(&c->srv->pool_short_ms, memory_order_relaxed);

	if (stall > NBD_SHORT_WINDOW_MS && c->held && shortage &&
	    now - shortage < NBD_SHORT_WINDOW_MS)
		return NBD_SHORT_WINDOW_MS;
	return stall;
}

/*
 * An idle connection: after NBD_IDLE_TRIM_MS give the pool's cached
 * buffers back to the system (down to NBD_POOL_KEEP), so that idle clients
 * leave the server near its idle size; after lim.idle_ms close it (dead).
 * Return: when to look again (ms).
 */
static uint64_t conn_idle(struct nbd_conn *c, uint64_t now)
{
	const struct nbd_limits *l = &c->srv->lim;
	uint64_t last = atomic_load_explicit(&c->last_ms, memory_order_relaxed);
	uint64_t next = UINT64_MAX;

	if (!c->trimmed) {
		if (now - last >= NBD_IDLE_TRIM_MS) {
			nbd_pool_trim(c->srv->pool, NBD_POOL_KEEP);
			c->trimmed = true;
		} else {
			next = last + NBD_IDLE_TRIM_MS;
		}
	}
	if (l->idle_ms && !c->stopping) {
		if (now - last >= l->idle_ms)
			c->dead = true;
		next = min_u64(next, last + l->idle_ms);
	}
	return next;
}

/*
 * The transmission timers: close the connection (dead) when the client is
 * too slow, idle too long, or does not take its last replies at stop;
 * publish busy for eviction.  Return: the poll timeout in ms (-1: none).
 */
static int conn_timers(struct nbd_conn *c, bool reading, bool want_out)
{
	const struct nbd_limits *l = &c->srv->lim;
	uint64_t now = now_ms(), next = UINT64_MAX;
	size_t avail = c->in_end - c->in_start;
	bool waiting_in = reading && (c->rx_cmd || c->rx_skip ||
				      (avail && avail < NBD_REQUEST_SIZE));
	/* a request waiting for the pool is not idle: never evict it */
	bool idle = !c->inflight && !waiting_in && !avail;

	if (c->dead)
		return -1; /* only waiting for what is in flight to end */
	atomic_store_explicit(&c->busy, !idle, memory_order_relaxed);
	if (!meter_ok(c, &c->m_in, waiting_in, now, l->stall_ms) ||
	    !meter_ok(c, &c->m_out, want_out, now, out_window(c, now)))
		goto expired;
	if (c->m_in.on)
		next = c->m_in.start + l->stall_ms;
	if (c->m_out.on) /* look again after a short window: the pool may run short */
		next = min_u64(next, c->m_out.start +
			       min_u64(l->stall_ms, NBD_SHORT_WINDOW_MS * ((now - c->m_out.start) /
									NBD_SHORT_WINDOW_MS + 1)));
	if (idle)
		next = min_u64(next, conn_idle(c, now));
	else
		c->trimmed = false;
	if (c->dead)
		goto expired;
	if (c->stopping) {
		if (now >= c->drain_deadline) {
			c->dead = true; /* the client does not take its replies */
			return 0;
		}
		next = min_u64(next, c->drain_deadline);
	}
	if (c->blocked && c->pool_wait)
		next = min_u64(next, now + NBD_POOL_RETRY_MS);
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)min_u64(next - now, INT_MAX);
expired:
	count(&c->srv->st_timeouts);
	c->dead = true;
	return 0;
}

/* Sleep in poll until the socket, a completion or a timer wants us. */
static void conn_sleep(struct nbd_conn *c, bool reading, bool want_out, int timeout,
		       bool *try_read)
{
	struct pollfd pfd[2];

	/* a socket we neither read nor wait to write to stays out */
	pfd[0].fd = reading || want_out ? c->fd : -1;
	pfd[0].events = (reading ? POLLIN : 0) | (want_out ? POLLOUT : 0);
	pfd[0].revents = 0;
	pfd[1].fd = c->efd;
	pfd[1].events = POLLIN;
	pfd[1].revents = 0;
	if (reading && c->tls && nbd_tls_pending(c->tls)) {
		*try_read = true; /* decrypted already: the socket would not say */
		return;
	}
	atomic_store(&c->sleeping, true);
	if (atomic_load(&c->done)) {
		atomic_store(&c->sleeping, false);
		return;
	}
	poll(pfd, 2, timeout);
	atomic_store(&c->sleeping, false);
	if (pfd[1].revents & POLLIN) {
		uint64_t v;
		ssize_t r = read(c->efd, &v, sizeof(v));

		(void)r;
	}
	if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
		*try_read = true;
	if ((pfd[0].revents & (POLLERR | POLLNVAL)) ||
	    ((pfd[0].revents & POLLHUP) && !reading))
		c->dead = true; /* gone both ways: replies cannot go */
}

/*
 * Try one read when the socket may hold more.  Return: true to go round
 * the loop again at once.
 */
static bool conn_try_read(struct nbd_conn *c, bool *try_read)
{
	size_t asked = 0;
	ssize_t r = conn_read(c, &asked);

	if (r > 0) {
		/* a short read drained the socket: poll before the next (TLS:
		 * one record at a time says nothing; read until EAGAIN) */
		*try_read = (size_t)r == asked || c->tls;
		conn_parse_plugged(c);
		return true;
	}
	if (r == 0)
		c->eof = true;
	else if (errno == EAGAIN || errno == EWOULDBLOCK)
		*try_read = false;
	else if (errno != EINTR)
		c->dead = true;
	return r == 0 || c->dead;
}

/**
 * conn_transmit() - the transmission phase: the event loop of one
 * connection, until the client disconnects (or vanishes, or breaks the
 * protocol) or the server stops, and every request it sent has ended.
 * @c: the connection, handshake done.
 *
 * Context: the connection's thread.
 */
static void conn_transmit(struct nbd_conn *c)
{
	bool try_read = true; /* the socket may hold more than we took */
	int flags = fcntl(c->fd, F_GETFL);

	if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    conn_transmit_init(c))
		return;

	for (;;) {
		bool reading, want_out = false;
		int timeout;

		if (!c->stopping && atomic_load(&c->srv->stopping)) {
			c->stopping = true;
			c->drain_deadline = now_ms() + NBD_DRAIN_TIMEOUT_MS;
		}
		conn_collect(c);
		if (!c->dead && c->out_head) {
			int r = conn_send(c);

			if (r < 0)
				c->dead = true;
			want_out = r == 1;
		}
		if (c->dead)
			conn_drop_replies(c);
		else
			conn_parse_plugged(c); /* input held back by back-pressure */

		reading = !c->dead && !c->eof && !c->disc && !c->stopping &&
			  (c->rx_skip || c->rx_cmd || (c->free_cmds && !c->blocked)) &&
			  c->in_end - c->in_start < NBD_IN_BUF;
		if (!reading && c->rx_cmd) {
			/* its payload will never arrive: it was never submitted */
			cmd_put(c, c->rx_cmd);
			c->rx_cmd = NULL;
		}
		if (!reading && !c->inflight && (!c->blocked || c->dead || c->stopping))
			break; /* nothing in flight, nothing more to read */
		if (reading && try_read && conn_try_read(c, &try_read))
			continue;
		if (atomic_load(&c->done))
			continue;
		timeout = conn_timers(c, reading, want_out);
		if (c->dead && timeout == 0)
			continue; /* just expired */
		conn_sleep(c, reading, want_out, timeout, &try_read);
	}
	/* an end_io may still be leaving after its push */
	while (atomic_load_explicit(&c->cb_active, memory_order_acquire))
		sched_yield();
}

/* ------------------------------------------------------- connections */

static void conn_free(struct nbd_conn *c)
{
	unsigned i;

	if (c->cmds) {
		for (i = 0; i < c->srv->lim.conn_requests; i++)
			if (c->cmds[i].buf)
				nbd_pool_put(c->srv->pool, c->cmds[i].buf, c->cmds[i].buf_len);
		free(c->cmds);
	}
	if (c->in)
		munmap(c->in, NBD_IN_BUF);
	if (c->ioc)
		rq_ioc_put(c->ioc);
	free(c->name);
	if (c->efd >= 0)
		close(c->efd);
	nbd_tls_session_free(c->tls);
	free(c->tls_stage);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

/* Take @c off the server's list; give memory back as connections end. */
static void conn_unlist(struct nbd_conn *c)
{
	struct nbd_server *srv = c->srv;
	bool last, counted = c->exp_counted;
	unsigned idx = c->exp_idx;

	pthread_mutex_lock(&srv->lock);
	if (c->prev_conn)
		c->prev_conn->next_conn = c->next_conn;
	else
		srv->conns = c->next_conn;
	if (c->next_conn)
		c->next_conn->prev_conn = c->prev_conn;
	if (c->evicted)
		srv->nevicting--;
	last = !--srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	conn_free(c); /* its io context too: then the export may go */
	/* the pool's cache, and whatever the malloc arenas kept */
	nbd_pool_trim(srv->pool, last ? 0 : NBD_POOL_KEEP);
	if (last)
		malloc_trim(0);
	pthread_mutex_lock(&srv->lock);
	if (counted)
		srv->exp_conns[idx]--;
	if (!--srv->nthreads)
		pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
}

/**
 * conn_thread() - one connection from handshake to close.
 * @arg: the struct nbd_conn, on the server's list.
 *
 * Context: own detached thread.
 * Return: NULL.
 */
static void *conn_thread(void *arg)
{
	struct nbd_conn *c = arg;
	struct nbd_server *srv = c->srv;
	int r;

	r = conn_handshake(c);
	if (r < 0 && !c->evicted)
		count(&srv->st_dropped);
	if (r > 0) {
		pthread_mutex_lock(&srv->lock);
		if (atomic_load(&srv->stopping) || c->evicted)
			r = 0;
		else
			c->state = CONN_TRANSMISSION;
		pthread_mutex_unlock(&srv->lock);
	}
	if (r > 0) {
		count(&srv->st_handshakes);
		conn_transmit(c);
	}
	conn_unlist(c);
	return NULL;
}

/* ------------------------------------------------------------ server */

void nbd_limits_default(struct nbd_limits *l)
{
	*l = (struct nbd_limits){
		.max_conns = NBD_DEF_MAX_CONNS,
		.max_per_client = NBD_DEF_MAX_PER_CLIENT,
		.reserve = NBD_DEF_RESERVE,
		.conn_requests = NBD_DEF_CONN_REQUESTS,
		.conn_buffer = NBD_DEF_CONN_BUFFER,
		.buffer_total = NBD_DEF_BUFFER_TOTAL,
		.handshake_ms = NBD_DEF_HANDSHAKE_S * 1000,
		.idle_ms = NBD_DEF_IDLE_S * 1000,
		.stall_ms = NBD_DEF_STALL_S * 1000,
		.min_rate = NBD_DEF_MIN_RATE,
	};
}

static bool limits_ok(const struct nbd_limits *l)
{
	return l->max_conns && l->max_per_client && l->reserve < l->max_conns &&
	       l->conn_requests && l->handshake_ms && l->handshake_ms <= INT_MAX;
}

/* One export: a queue, a name, sane blocks that fit the buffers. */
static bool export_ok(const struct nbd_export *exp, const struct nbd_limits *l)
{
	return exp->q && exp->name && strlen(exp->name) <= NBD_MAX_STRING &&
	       (!exp->description || strlen(exp->description) <= NBD_MAX_STRING) &&
	       exp->min_block >= 512 && !(exp->min_block & (exp->min_block - 1)) &&
	       exp->max_block >= exp->min_block && exp->max_block <= l->conn_buffer &&
	       nbd_pool_class_size(exp->max_block) <= l->buffer_total;
}

static void slot_clear(struct nbd_server *srv, unsigned i)
{
	free((char *)srv->exps[i].name);
	free((char *)srv->exps[i].description);
	memset(&srv->exps[i], 0, sizeof(srv->exps[i]));
	srv->exp_state[i] = EXP_FREE;
}

/* Put @exp in the first FREE slot, LIVE.  Return: its index, -EINVAL (bad,
 * or a LIVE export has its name), -ENOSPC, -ENOMEM.  Context: srv->lock. */
static int slot_fill(struct nbd_server *srv, const struct nbd_export *exp)
{
	unsigned i;

	if (!export_ok(exp, &srv->lim) ||
	    export_by_name(srv, exp->name, strlen(exp->name)) >= 0)
		return -EINVAL;
	for (i = 0; i < NBD_MAX_EXPORTS && srv->exp_state[i] != EXP_FREE; i++)
		;
	if (i == NBD_MAX_EXPORTS)
		return -ENOSPC;
	srv->exps[i] = *exp;
	srv->exps[i].name = strdup(exp->name);
	srv->exps[i].description = exp->description ? strdup(exp->description) : NULL;
	if (!srv->exps[i].name || (exp->description && !srv->exps[i].description)) {
		slot_clear(srv, i);
		return -ENOMEM;
	}
	srv->exp_state[i] = EXP_LIVE;
	srv->exp_gen[i]++;
	if (i >= srv->nexps)
		srv->nexps = i + 1;
	return (int)i;
}

/**
 * nbd_server_create() - see nbd_server.h.
 * @exps: the exports.
 * @nexps: how many.
 * @lim: the limits, or NULL.
 * @out: receives the server.
 * Return: 0 or a negative errno.
 */
int nbd_server_create(const struct nbd_export *exps, unsigned nexps,
		      const struct nbd_limits *lim, struct nbd_server **out)
{
	struct nbd_server *srv;
	struct nbd_limits def;
	unsigned i;
	int ret = 0;

	if (!lim) {
		nbd_limits_default(&def);
		lim = &def;
	}
	if (!exps || !nexps || nexps > NBD_MAX_EXPORTS || !out || !limits_ok(lim))
		return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->lim = *lim;
	for (i = 0; i < nexps && ret >= 0; i++)
		ret = slot_fill(srv, &exps[i]);
	if (ret >= 0 && nbd_pool_create(lim->buffer_total, &srv->pool))
		ret = -ENOMEM;
	if (ret < 0) {
		for (i = 0; i < srv->nexps; i++)
			slot_clear(srv, i);
		free(srv);
		return ret;
	}
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	*out = srv;
	return 0;
}

/**
 * nbd_server_add_export() - see nbd_server.h.
 * @srv: the server.
 * @exp: the export (copied, strings too).
 * Return: its index, or a negative errno.
 */
int nbd_server_add_export(struct nbd_server *srv, const struct nbd_export *exp)
{
	int ret;

	if (!exp)
		return -EINVAL;
	pthread_mutex_lock(&srv->lock);
	ret = slot_fill(srv, exp);
	pthread_mutex_unlock(&srv->lock);
	return ret;
}

/**
 * nbd_server_retire_export() - see nbd_server.h.
 * @srv: the server.
 * @idx: a LIVE export's index, not the first.
 * Return: the connections it still serves, or -EINVAL.
 */
int nbd_server_retire_export(struct nbd_server *srv, unsigned idx)
{
	int ret = -EINVAL;

	pthread_mutex_lock(&srv->lock);
	if (idx > 0 && idx < srv->nexps && srv->exp_state[idx] == EXP_LIVE) {
		srv->exp_state[idx] = EXP_RETIRING;
		ret = (int)srv->exp_conns[idx];
	}
	pthread_mutex_unlock(&srv->lock);
	return ret;
}

/**
 * nbd_server_free_export() - see nbd_server.h.
 * @srv: the server.
 * @idx: a RETIRING export's index.
 * Return: 0, -EBUSY (it still serves connections), -EINVAL.
 */
int nbd_server_free_export(struct nbd_server *srv, unsigned idx)
{
	int ret = -EINVAL;

	pthread_mutex_lock(&srv->lock);
	if (idx < srv->nexps && srv->exp_state[idx] == EXP_RETIRING) {
		ret = srv->exp_conns[idx] ? -EBUSY : 0;
		if (!ret)
			slot_clear(srv, idx);
	}
	pthread_mutex_unlock(&srv->lock);
	return ret;
}

/* Who is at the other end of @fd: its IP address, or its uid on a unix socket. */
static void peer_of(int fd, struct nbd_peer *p)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	memset(p, 0, sizeof(*p));
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
		return;
	p->family = ss.ss_family;
	if (ss.ss_family == AF_INET) {
		memcpy(p->addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	} else if (ss.ss_family == AF_INET6) {
		memcpy(p->addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	} else if (ss.ss_family == AF_UNIX) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);

		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
			memcpy(p->addr, &cr.uid, sizeof(cr.uid));
	}
}

void nbd_peer_name(int fd, char *buf, size_t n)
{
	struct nbd_peer p;
	uint32_t uid;

	peer_of(fd, &p);
	if (p.family == AF_INET || p.family == AF_INET6) {
		if (inet_ntop(p.family, p.addr, buf, (socklen_t)n))
			return;
	} else if (p.family == AF_UNIX) {
		memcpy(&uid, p.addr, sizeof(uid));
		snprintf(buf, n, "uid %u", uid);
		return;
	}
	snprintf(buf, n, "unknown peer");
}

/*
 * Shut down the connection idle longest (of client @key, or of anyone when
 * NULL): not busy, a handshake before an established connection, then
 * the one whose last byte is the oldest.  A client in the middle of
 * its handshake has just moved, so a flood evicts itself first.  Context:
 * under srv->lock.  Return: true if one was.
 */
static bool srv_evict(struct nbd_server *srv, const struct nbd_peer *key)
{
	uint64_t oldest = UINT64_MAX;
	struct nbd_conn *c, *victim = NULL;

	for (c = srv->conns; c; c = c->next_conn) {
		uint64_t rank = atomic_load_explicit(&c->last_ms, memory_order_relaxed);

		/* handshakes first: an established client is worth more */
		if (c->state == CONN_TRANSMISSION)
			rank += NBD_EVICT_ESTABLISHED;
		if (atomic_load(&c->evicted) || atomic_load(&c->busy) ||
		    (key && memcmp(&c->peer, key, sizeof(*key))) || rank >= oldest)
			continue;
		oldest = rank;
		victim = c;
	}
	if (!victim)
		return false;
	atomic_store(&victim->evicted, true);
	srv->nevicting++;
	shutdown(victim->fd, SHUT_RDWR);
	count(&srv->st_evicted);
	return true;
}

/*
 * Make room for a connection from @key.  Context: under srv->lock.
 * Return: 0, -EMLINK (its client's limit), -EBUSY (the global one).
 */
static int srv_admit(struct nbd_server *srv, const struct nbd_peer *key)
{
	const struct nbd_limits *l = &srv->lim;
	unsigned live = srv->nconns - srv->nevicting, same = 0;
	struct nbd_conn *c;

	for (c = srv->conns; c; c = c->next_conn)
		same += !atomic_load(&c->evicted) && !memcmp(&c->peer, key, sizeof(*key));
	if (same >= l->max_per_client)
		return l->reserve && srv_evict(srv, key) ? 0 : -EMLINK;
	if (live + l->reserve >= l->max_conns) {
		if (l->reserve && srv_evict(srv, NULL))
			return 0;
		if (live >= l->max_conns)
			return -EBUSY;
	}
	return 0;
}

/* Start @c's thread and put it on the list.  Context: under srv->lock. */
static int srv_start(struct nbd_server *srv, struct nbd_conn *c)
{
	pthread_attr_t attr;
	int ret;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, NBD_THREAD_STACK);
	ret = pthread_create(&c->thread, &attr, conn_thread, c);
	pthread_attr_destroy(&attr);
	if (ret)
		return -EAGAIN;
	/* the thread takes the lock before it touches the list */
	c->next_conn = srv->conns;
	if (srv->conns)
		srv->conns->prev_conn = c;
	srv->conns = c;
	srv->nconns++;
	srv->nthreads++;
	return 0;
}

/**
 * nbd_server_add() - see nbd_server.h.
 * @srv: the server.
 * @fd: the connected socket, now the server's.
 * Return: 0 or a negative errno.
 */
int nbd_server_add(struct nbd_server *srv, int fd)
{
	struct nbd_conn *c;
	int ret = -ENOMEM;

	count(&srv->st_connections);
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		goto out;
	}
	c->srv = srv;
	c->fd = fd;
	c->exp = &srv->exps[0];
	c->hs_deadline = now_ms() + srv->lim.handshake_ms;
	atomic_init(&c->last_ms, now_ms());
	peer_of(fd, &c->peer);
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0)
		ret = -errno;
	c->ioc = rq_ioc_create(0);
	if (c->efd < 0 || !c->ioc)
		goto fail;

	pthread_mutex_lock(&srv->lock);
	ret = atomic_load(&srv->stopping) ? -EBUSY : srv_admit(srv, &c->peer);
	if (!ret)
		ret = srv_start(srv, c);
	pthread_mutex_unlock(&srv->lock);
	if (!ret)
		return 0;
fail:
	conn_free(c);
out:
	count(&srv->st_refused);
	return ret;
}

/**
 * nbd_server_set_policy() - see nbd_server.h.
 * @srv: the server.
 * @p: the policy, copied.
 */
void nbd_server_set_policy(struct nbd_server *srv, const struct nbd_policy *p)
{
	srv->policy = *p;
}

/**
 * nbd_server_reapply() - see nbd_server.h.
 * @srv: the server.
 * Return: connections the policy was asked about.
 */
unsigned nbd_server_reapply(struct nbd_server *srv)
{
	struct nbd_conn *c;
	unsigned n = 0;

	if (!srv->policy.admit)
		return 0;
	pthread_mutex_lock(&srv->lock);
	for (c = srv->conns; c; c = c->next_conn) {
		struct nbd_client_info ci;
		char peer[64];

		if (c->state != CONN_TRANSMISSION || !c->exp_counted || atomic_load(&c->evicted))
			continue;
		nbd_peer_name(c->fd, peer, sizeof(peer));
		ci = (struct nbd_client_info){ .name = c->name, .export = c->exp_idx,
					       .peer = peer, .tls_identity = conn_tls_identity(c) };
		srv->policy.admit(srv->policy.arg, &ci, c->ioc, true);
		n++;
	}
	pthread_mutex_unlock(&srv->lock);
	return n;
}

/**
 * nbd_server_export_conns() - see nbd_server.h.
 * @srv: the server.
 * @idx: the export's index.
 * Return: its connections.
 */
unsigned nbd_server_export_conns(struct nbd_server *srv, unsigned idx)
{
	unsigned n;

	pthread_mutex_lock(&srv->lock);
	n = idx < srv->nexps ? srv->exp_conns[idx] : 0;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

/**
 * nbd_server_stop() - see nbd_server.h.
 * @srv: the server.
 */
void nbd_server_stop(struct nbd_server *srv)
{
	struct nbd_conn *c;

	pthread_mutex_lock(&srv->lock);
	atomic_store(&srv->stopping, true);
	for (c = srv->conns; c; c = c->next_conn) {
		if (c->state == CONN_HANDSHAKE) {
			shutdown(c->fd, SHUT_RDWR);
		} else {
			uint64_t one = 1;
			ssize_t r = write(c->efd, &one, sizeof(one));

			(void)r;
		}
	}
	pthread_mutex_unlock(&srv->lock);
}

/**
 * nbd_server_wait() - see nbd_server.h.
 * @srv: the server.
 */
void nbd_server_wait(struct nbd_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	while (srv->nthreads)
		pthread_cond_wait(&srv->cond, &srv->lock);
	pthread_mutex_unlock(&srv->lock);
}

/**
 * nbd_server_get_stats() - see nbd_server.h.
 * @srv: the server.
 * @st: receives the counters.
 */
void nbd_server_get_stats(struct nbd_server *srv, struct nbd_server_stats *st)
{
	st->connections = atomic_load(&srv->st_connections);
	st->handshakes = atomic_load(&srv->st_handshakes);
	st->requests = atomic_load(&srv->st_requests);
	st->errors = atomic_load(&srv->st_errors);
	st->dropped = atomic_load(&srv->st_dropped);
	st->refused = atomic_load(&srv->st_refused);
	st->evicted = atomic_load(&srv->st_evicted);
	st->timeouts = atomic_load(&srv->st_timeouts);
}

/**
 * nbd_server_set_tls() - see nbd_server.h.
 * @srv: the server, before its first connection.
 * @tls: the credentials, or NULL for NBD_TLS_OFF.
 * @mode: off, on, require.
 * Return: 0 or -EINVAL.
 */
int nbd_server_set_tls(struct nbd_server *srv, struct nbd_tls *tls, enum nbd_tls_mode mode)
{
	if (mode != NBD_TLS_OFF && !tls)
		return -EINVAL;
	srv->tls = tls;
	srv->tls_mode = mode;
	return 0;
}

/**
 * nbd_conn_tls_identity() - see nbd_server.h.
 * @c: the connection.
 * Return: the PSK user or the client certificate's DN, or NULL.
 */
const char *nbd_conn_tls_identity(const struct nbd_conn *c)
{
	return conn_tls_identity(c);
}

/**
 * nbd_server_destroy() - see nbd_server.h.
 * @srv: the server, or NULL.
 */
void nbd_server_destroy(struct nbd_server *srv)
{
	if (!srv)
		return;
	for (unsigned i = 0; i < srv->nexps; i++)
		slot_clear(srv, i);
	nbd_pool_destroy(srv->pool);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	free(srv);
}
