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
 * Back-pressure: a connection has NBD_MAX_INFLIGHT commands; while all are
 * busy (or NBD_MAX_INFLIGHT_BYTES of data are held), the loop stops
 * parsing and stops reading the socket, so a fast client fills its socket
 * buffer and waits.
 *
 * What touches a connection from outside its thread: end_io (the done
 * stack, the sleeping flag, the eventfd, the cb_active count) and
 * nbd_server_stop (the eventfd, or shutdown() of the socket during the
 * handshake, under the server lock).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <librequest/librequest.h>

#include "nbd_proto.h"
#include "nbd_server.h"

#define NBD_MAX_CONNS 256               /* connections at once */
#define NBD_MAX_INFLIGHT 64             /* requests in flight per connection */
#define NBD_MAX_INFLIGHT_BYTES (64u << 20) /* data held per connection */
#define NBD_MAX_SKIP (64ull << 20)      /* refused write payload we still read */
#define NBD_IN_BUF (256u << 10)         /* socket read buffer */
#define NBD_DIRECT_READ (64u << 10)     /* payload rest read straight into place */
#define NBD_BUF_KEEP (1u << 20)         /* larger command buffers are freed */
#define NBD_HANDSHAKE_TIMEOUT_S 30      /* per receive or send in the handshake */
#define NBD_MAX_OPTIONS 1024            /* options per handshake */
#define NBD_MAX_OPT_LEN 65536u          /* option data we look at */
#define NBD_MAX_OPT_SKIP (1u << 20)     /* longer options: disconnect */
#define NBD_DRAIN_TIMEOUT_MS 5000       /* at stop: time to send the last replies */
#define NBD_IOV_MAX 64                  /* iovecs per sendmsg */

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
	uint32_t len;               /* request length */
	uint16_t type;              /* NBD_CMD_* */
	uint16_t flags;             /* NBD_CMD_FLAG_* */
	uint32_t error;             /* NBD error of the reply; 0: success */
	uint32_t rx_done;           /* write payload bytes received */
	char *buf;                  /* data: read result or write payload */
	uint32_t cap;               /* bytes allocated at buf */
	uint32_t hdr_len;           /* reply header bytes in hdr */
	uint32_t data_len;          /* reply data bytes (from buf) */
	unsigned char hdr[32];      /* reply header */
};

struct nbd_conn {
	struct nbd_server *srv;
	struct nbd_conn *prev_conn, *next_conn; /* srv->conns, under srv->lock */
	pthread_t thread;
	int fd;
	int efd;                    /* eventfd: completions, stop */
	enum conn_state state;      /* under srv->lock */
	struct rq_io_context *ioc;  /* this client's io context */
	bool structured;            /* structured replies negotiated */
	bool no_zeroes;             /* NBD_FLAG_C_NO_ZEROES */

	/* transmission: loop thread only, unless said otherwise */
	struct nbd_cmd *free_cmds;
	unsigned inflight;          /* commands not on the free list */
	uint64_t inflight_bytes;    /* data bytes of those */
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
	struct nbd_cmd cmds[NBD_MAX_INFLIGHT];
};

struct nbd_server {
	struct nbd_export exp;
	pthread_mutex_t lock;
	pthread_cond_t cond;        /* nconns reached 0 */
	struct nbd_conn *conns;     /* under lock */
	unsigned nconns;            /* under lock */
	atomic_bool stopping;
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

/* Transmission flags for this connection. */
static uint16_t conn_tflags(const struct nbd_conn *c)
{
	uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
		     NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
		     NBD_FLAG_CAN_MULTI_CONN;

	if (c->srv->exp.read_only)
		f |= NBD_FLAG_READ_ONLY;
	if (c->structured)
		f |= NBD_FLAG_SEND_DF; /* a read is always one data chunk */
	return f;
}

/* ------------------------------------------------------------ handshake */

/* Blocking I/O with the socket's timeouts.  Return: 0, or -1 on any failure. */
static int hs_read(struct nbd_conn *c, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = recv(c->fd, p, n, 0);

		if (r > 0) {
			p += r;
			n -= r;
		} else if (r < 0 && errno == EINTR) {
			continue;
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
		ssize_t r = sendmsg(c->fd, &mh, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
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

/* Does @name (of @len bytes) name our export?  The empty name does. */
static bool hs_name_ok(const struct nbd_conn *c, const unsigned char *name, uint32_t len)
{
	const char *ours = c->srv->exp.name;

	return !len || (len == strlen(ours) && !memcmp(name, ours, len));
}

/* NBD_OPT_INFO / NBD_OPT_GO.  Return: 1 to enter transmission, 0 to go on,
 * -1 to close. */
static int hs_info(struct nbd_conn *c, uint32_t opt, const unsigned char *d, uint32_t len)
{
	const struct nbd_export *exp = &c->srv->exp;
	bool want_name = false, want_desc = false;
	unsigned char info[14];
	uint32_t namelen;
	uint16_t nreq, i;

	if (len < 6)
		return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	namelen = nbd_get32(d);
	if (namelen > len - 6)
		return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	nreq = nbd_get16(d + 4 + namelen);
	if ((uint64_t)4 + namelen + 2 + 2ull * nreq != len)
		return hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	if (!hs_name_ok(c, d + 4, namelen))
		return hs_reply(c, opt, NBD_REP_ERR_UNKNOWN, NULL, 0);
	for (i = 0; i < nreq; i++) {
		uint16_t what = nbd_get16(d + 4 + namelen + 2 + 2 * i);

		want_name |= what == NBD_INFO_NAME;
		want_desc |= what == NBD_INFO_DESCRIPTION;
	}

	nbd_put16(info, NBD_INFO_EXPORT);
	nbd_put64(info + 2, exp->size);
	nbd_put16(info + 10, conn_tflags(c));
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
				s = want_desc ? exp->description : NULL;
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

/*
 * The fixed newstyle handshake.  Return: 1 to enter transmission, 0 to
 * close cleanly (abort, stop), -1 to close because the client broke the
 * protocol or vanished.
 */
static int conn_handshake(struct nbd_conn *c)
{
	const struct nbd_export *exp = &c->srv->exp;
	unsigned char g[18], *data;
	uint32_t cflags;
	int i, ret = -1;

	nbd_put64(g, NBD_INIT_MAGIC);
	nbd_put64(g + 8, NBD_OPTS_MAGIC);
	nbd_put16(g + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
	if (hs_write(c, g, sizeof(g)) || hs_read(c, g, 4))
		return -1;
	cflags = nbd_get32(g);
	if (cflags & ~(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES))
		return -1;
	c->no_zeroes = cflags & NBD_FLAG_C_NO_ZEROES;

	data = malloc(NBD_MAX_OPT_LEN);
	if (!data)
		return -1;
	for (i = 0; i < NBD_MAX_OPTIONS; i++) {
		unsigned char h[16];
		uint32_t opt, len;
		int r;

		if (hs_read(c, h, sizeof(h)) || nbd_get64(h) != NBD_OPTS_MAGIC)
			goto out;
		opt = nbd_get32(h + 8);
		len = nbd_get32(h + 12);
		if (len > NBD_MAX_OPT_LEN) {
			if (opt == NBD_OPT_EXPORT_NAME || len > NBD_MAX_OPT_SKIP ||
			    hs_skip(c, len) ||
			    hs_reply(c, opt, NBD_REP_ERR_TOO_BIG, NULL, 0))
				goto out;
			continue;
		}
		if (hs_read(c, data, len))
			goto out;
		if (atomic_load(&c->srv->stopping) && opt != NBD_OPT_ABORT) {
			if (opt == NBD_OPT_EXPORT_NAME ||
			    hs_reply(c, opt, NBD_REP_ERR_SHUTDOWN, NULL, 0))
				goto out;
			continue;
		}

		switch (opt) {
		case NBD_OPT_EXPORT_NAME: {
			unsigned char r10[10], zeros[124] = { 0 };
			struct iovec iov[2] = { { r10, 10 }, { zeros, 124 } };

			if (!hs_name_ok(c, data, len))
				goto out; /* no way to say no but to hang up */
			nbd_put64(r10, exp->size);
			nbd_put16(r10 + 8, conn_tflags(c));
			if (hs_writev(c, iov, c->no_zeroes ? 1 : 2))
				goto out;
			ret = 1;
			goto out;
		}
		case NBD_OPT_ABORT:
			hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
			ret = 0;
			goto out;
		case NBD_OPT_LIST: {
			unsigned char srv[4 + 4096];
			size_t n = strlen(exp->name);

			if (len) {
				r = hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
				break;
			}
			if (n > 4096)
				n = 4096;
			nbd_put32(srv, n);
			memcpy(srv + 4, exp->name, n);
			r = hs_reply(c, opt, NBD_REP_SERVER, srv, 4 + n);
			if (!r)
				r = hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
			break;
		}
		case NBD_OPT_INFO:
		case NBD_OPT_GO:
			r = hs_info(c, opt, data, len);
			if (r == 1) {
				ret = 1;
				goto out;
			}
			break;
		case NBD_OPT_STRUCTURED_REPLY:
			if (len || c->structured) {
				r = hs_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
				break;
			}
			c->structured = true;
			r = hs_reply(c, opt, NBD_REP_ACK, NULL, 0);
			break;
		case NBD_OPT_LIST_META_CONTEXT:
		case NBD_OPT_SET_META_CONTEXT:
			/* we offer no metadata context: an empty list */
			r = hs_reply(c, opt, c->structured ? NBD_REP_ACK : NBD_REP_ERR_INVALID,
				     NULL, 0);
			break;
		default: /* STARTTLS, EXTENDED_HEADERS and anything unknown */
			r = hs_reply(c, opt, NBD_REP_ERR_UNSUP, NULL, 0);
			break;
		}
		if (r < 0)
			goto out;
	}
out:
	free(data);
	return ret;
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

/* A command's reply has gone (or been dropped): make it free again. */
static void cmd_put(struct nbd_conn *c, struct nbd_cmd *cmd)
{
	if (cmd->type == NBD_CMD_READ || cmd->type == NBD_CMD_WRITE)
		c->inflight_bytes -= cmd->len;
	if (cmd->cap > NBD_BUF_KEEP) {
		free(cmd->buf);
		cmd->buf = NULL;
		cmd->cap = 0;
	}
	cmd->next = c->free_cmds;
	c->free_cmds = cmd;
	c->inflight--;
}

/* Make sure @cmd has room for @len bytes.  Return: 0 or -ENOMEM. */
static int cmd_reserve(struct nbd_cmd *cmd, uint32_t len)
{
	void *p;

	if (cmd->cap >= len)
		return 0;
	/* page-aligned, so a file device could do O_DIRECT with it */
	if (posix_memalign(&p, 4096, len))
		return -ENOMEM;
	free(cmd->buf);
	cmd->buf = p;
	cmd->cap = len;
	return 0;
}

/* Build @cmd's reply header and append it to the reply queue. */
static void conn_queue_reply(struct nbd_conn *c, struct nbd_cmd *cmd)
{
	unsigned char *h = cmd->hdr;

	if (cmd->error)
		count(&c->srv->st_errors);
	cmd->data_len = 0;
	if (c->structured && (cmd->error || cmd->type == NBD_CMD_READ)) {
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
	default:
		conn_reply_now(c, cmd, NBD_EINVAL);
		return;
	}
	bio->iter.sector = start >> RQ_SECTOR_SHIFT;
	rq_submit_bio(c->srv->exp.q, bio);
}

/*
 * Check a request against the protocol and the export.
 * Return: 0 or the NBD error to answer with.
 */
static uint32_t conn_check(const struct nbd_conn *c, uint16_t type, uint16_t flags,
			   uint64_t offset, uint32_t len)
{
	const struct nbd_export *exp = &c->srv->exp;
	uint32_t allowed = NBD_CMD_FLAG_FUA;
	uint64_t align = exp->min_block - 1;
	bool in_bounds = offset <= exp->size && len <= exp->size - offset;
	bool aligned = !(offset & align) && !(len & align);

	switch (type) {
	case NBD_CMD_READ:
		if (c->structured)
			allowed |= NBD_CMD_FLAG_DF;
		if (flags & ~allowed || !aligned || len > exp->max_block || !in_bounds)
			return NBD_EINVAL;
		return 0;
	case NBD_CMD_WRITE:
		if (flags & ~allowed || !aligned || len > exp->max_block)
			return NBD_EINVAL;
		if (exp->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_ENOSPC;
	case NBD_CMD_FLUSH:
		return flags & ~allowed ? NBD_EINVAL : 0;
	case NBD_CMD_TRIM:
		if (flags & ~allowed)
			return NBD_EINVAL;
		if (exp->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_EINVAL;
	case NBD_CMD_WRITE_ZEROES:
		allowed |= NBD_CMD_FLAG_NO_HOLE;
		if (flags & ~allowed || !aligned)
			return NBD_EINVAL;
		if (exp->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_ENOSPC;
	case NBD_CMD_CACHE:
		/* not advertised, but some clients send it: a no-op */
		return flags & ~allowed || !in_bounds ? NBD_EINVAL : 0;
	default: /* BLOCK_STATUS without a context, and unknown commands */
		return NBD_EINVAL;
	}
}

/* Handle one request header @p (NBD_REQUEST_SIZE bytes). */
static void conn_request(struct nbd_conn *c, const unsigned char *p)
{
	struct nbd_cmd *cmd;
	uint16_t flags, type;
	uint32_t len, error;
	uint64_t offset;

	if (nbd_get32(p) != NBD_REQUEST_MAGIC) {
		count(&c->srv->st_dropped);
		c->dead = true; /* out of sync: nothing we could answer */
		return;
	}
	count(&c->srv->st_requests);
	flags = nbd_get16(p + 4);
	type = nbd_get16(p + 6);
	offset = nbd_get64(p + 16);
	len = nbd_get32(p + 24);
	if (type == NBD_CMD_DISC) {
		c->disc = true;
		return;
	}

	cmd = cmd_get(c);
	cmd->cookie = nbd_get64(p + 8);
	cmd->type = type;
	cmd->flags = flags;
	cmd->offset = offset;
	cmd->len = 0;
	error = conn_check(c, type, flags, offset, len);

	if (type == NBD_CMD_WRITE) {
		if (!error && len && cmd_reserve(cmd, len))
			error = NBD_ENOMEM;
		if (error) {
			if (len > NBD_MAX_SKIP) {
				/* a payload this size is an attack, or garbage */
				count(&c->srv->st_dropped);
				cmd_put(c, cmd);
				c->dead = true;
				return;
			}
			c->rx_skip = len;
			conn_reply_now(c, cmd, error);
			return;
		}
		if (!len) {
			conn_reply_now(c, cmd, 0);
			return;
		}
		cmd->len = len;
		c->inflight_bytes += len;
		c->rx_cmd = cmd;
		return;
	}
	if (error) {
		conn_reply_now(c, cmd, error);
		return;
	}
	switch (type) {
	case NBD_CMD_READ:
		if (!len || cmd_reserve(cmd, len)) {
			conn_reply_now(c, cmd, len ? NBD_ENOMEM : 0);
			return;
		}
		cmd->len = len;
		c->inflight_bytes += len;
		break;
	case NBD_CMD_WRITE_ZEROES:
	case NBD_CMD_TRIM:
		if (!len) {
			conn_reply_now(c, cmd, 0);
			return;
		}
		cmd->len = len;
		break;
	case NBD_CMD_CACHE:
		conn_reply_now(c, cmd, 0);
		return;
	}
	conn_submit(c, cmd);
}

/* May another request be taken on? */
static bool conn_can_take(const struct nbd_conn *c)
{
	return c->free_cmds &&
	       (!c->inflight || c->inflight_bytes < NBD_MAX_INFLIGHT_BYTES);
}

/*
 * Parse what the read buffer holds: write payloads, dropped payloads and
 * request headers, submitting bios as requests complete.  Return: true if
 * anything was consumed.
 */
static bool conn_parse(struct nbd_conn *c)
{
	bool progress = false;

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
		if (c->disc || c->stopping || avail < NBD_REQUEST_SIZE || !conn_can_take(c))
			break;
		conn_request(c, c->in + c->in_start);
		c->in_start += NBD_REQUEST_SIZE;
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
		r = read(c->fd, cmd->buf + cmd->rx_done, *asked);
		if (r > 0) {
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
	r = read(c->fd, c->in + c->in_end, *asked);
	if (r > 0)
		c->in_end += r;
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
		struct msghdr mh = { .msg_iov = iov };
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
		mh.msg_iovlen = n;
		r = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
		}
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
	int i;

	c->in = malloc(NBD_IN_BUF);
	if (!c->in)
		return -ENOMEM;
	for (i = NBD_MAX_INFLIGHT - 1; i >= 0; i--) {
		c->cmds[i].conn = c;
		c->cmds[i].next = c->free_cmds;
		c->free_cmds = &c->cmds[i];
	}
	return 0;
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
	uint64_t deadline = 0;
	bool try_read = true; /* the socket may hold more than we took */
	int flags = fcntl(c->fd, F_GETFL);

	if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    conn_transmit_init(c))
		return;

	for (;;) {
		struct pollfd pfd[2];
		bool reading, want_out = false;
		int timeout = -1;

		if (!c->stopping && atomic_load(&c->srv->stopping)) {
			c->stopping = true;
			deadline = now_ms() + NBD_DRAIN_TIMEOUT_MS;
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
			  (c->rx_skip || c->rx_cmd || conn_can_take(c)) &&
			  c->in_end - c->in_start < NBD_IN_BUF;
		if (!reading && c->rx_cmd) {
			/* its payload will never arrive: it was never submitted */
			cmd_put(c, c->rx_cmd);
			c->rx_cmd = NULL;
		}
		if (!reading && !c->inflight)
			break; /* nothing in flight, nothing more to read */
		if (reading && try_read) {
			size_t asked = 0;
			ssize_t r = conn_read(c, &asked);

			if (r > 0) {
				/* a short read drained the socket: poll before the next */
				try_read = (size_t)r == asked;
				conn_parse_plugged(c);
				continue;
			}
			if (r == 0)
				c->eof = true;
			else if (errno == EAGAIN || errno == EWOULDBLOCK)
				try_read = false;
			else if (errno != EINTR)
				c->dead = true;
			if (r == 0 || c->dead)
				continue;
		}
		if (atomic_load(&c->done))
			continue;

		if (c->stopping) {
			uint64_t now = now_ms();

			if (now >= deadline) {
				c->dead = true; /* the client does not take its replies */
				continue;
			}
			timeout = (int)(deadline - now);
		}
		/* a socket we neither read nor wait to write to stays out */
		pfd[0].fd = reading || want_out ? c->fd : -1;
		pfd[0].events = (reading ? POLLIN : 0) | (want_out ? POLLOUT : 0);
		pfd[1].fd = c->efd;
		pfd[1].events = POLLIN;
		atomic_store(&c->sleeping, true);
		if (atomic_load(&c->done)) {
			atomic_store(&c->sleeping, false);
			continue;
		}
		poll(pfd, 2, timeout);
		atomic_store(&c->sleeping, false);
		if (pfd[1].revents & POLLIN) {
			uint64_t v;
			ssize_t r = read(c->efd, &v, sizeof(v));

			(void)r;
		}
		if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
			try_read = true;
		if ((pfd[0].revents & (POLLERR | POLLNVAL)) ||
		    ((pfd[0].revents & POLLHUP) && !reading))
			c->dead = true; /* gone both ways: replies cannot go */
	}
	/* an end_io may still be leaving after its push */
	while (atomic_load_explicit(&c->cb_active, memory_order_acquire))
		sched_yield();
}

/* ------------------------------------------------------- connections */

static void conn_free(struct nbd_conn *c)
{
	int i;

	for (i = 0; i < NBD_MAX_INFLIGHT; i++)
		free(c->cmds[i].buf);
	free(c->in);
	if (c->ioc)
		rq_ioc_put(c->ioc);
	if (c->efd >= 0)
		close(c->efd);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
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
	struct timeval tv = { NBD_HANDSHAKE_TIMEOUT_S, 0 };
	int r;

	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	r = conn_handshake(c);
	if (r < 0)
		count(&srv->st_dropped);
	if (r > 0) {
		pthread_mutex_lock(&srv->lock);
		if (atomic_load(&srv->stopping))
			r = 0;
		else
			c->state = CONN_TRANSMISSION;
		pthread_mutex_unlock(&srv->lock);
	}
	if (r > 0) {
		count(&srv->st_handshakes);
		conn_transmit(c);
	}

	pthread_mutex_lock(&srv->lock);
	if (c->prev_conn)
		c->prev_conn->next_conn = c->next_conn;
	else
		srv->conns = c->next_conn;
	if (c->next_conn)
		c->next_conn->prev_conn = c->prev_conn;
	if (!--srv->nconns)
		pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
	conn_free(c);
	return NULL;
}

/* ------------------------------------------------------------ server */

/**
 * nbd_server_create() - see nbd_server.h.
 * @exp: the export.
 * @out: receives the server.
 * Return: 0 or a negative errno.
 */
int nbd_server_create(const struct nbd_export *exp, struct nbd_server **out)
{
	struct nbd_server *srv;

	if (!exp || !exp->q || !exp->name || !out || exp->min_block < 512 ||
	    (exp->min_block & (exp->min_block - 1)) || exp->max_block < exp->min_block)
		return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->exp = *exp;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	*out = srv;
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
	pthread_attr_t attr;
	int ret = -ENOMEM;

	count(&srv->st_connections);
	c = calloc(1, sizeof(*c));
	if (!c)
		goto fail_fd;
	c->srv = srv;
	c->fd = fd;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->ioc = rq_ioc_create(0);
	if (c->efd < 0 || !c->ioc)
		goto fail;

	pthread_mutex_lock(&srv->lock);
	if (atomic_load(&srv->stopping) || srv->nconns >= NBD_MAX_CONNS) {
		pthread_mutex_unlock(&srv->lock);
		ret = -EBUSY;
		goto fail;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&c->thread, &attr, conn_thread, c)) {
		pthread_attr_destroy(&attr);
		pthread_mutex_unlock(&srv->lock);
		ret = -EAGAIN;
		goto fail;
	}
	pthread_attr_destroy(&attr);
	/* the thread takes the lock before it touches the list */
	c->next_conn = srv->conns;
	if (srv->conns)
		srv->conns->prev_conn = c;
	srv->conns = c;
	srv->nconns++;
	pthread_mutex_unlock(&srv->lock);
	return 0;
fail:
	conn_free(c);
	return ret;
fail_fd:
	close(fd);
	return ret;
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
	while (srv->nconns)
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
}

/**
 * nbd_server_destroy() - see nbd_server.h.
 * @srv: the server, or NULL.
 */
void nbd_server_destroy(struct nbd_server *srv)
{
	if (!srv)
		return;
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	free(srv);
}
