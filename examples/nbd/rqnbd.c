/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rqnbd: an NBD block server whose I/O goes through librequest.
 *
 *   rqnbd (--unix PATH | --port N [--bind ADDR]) (--memory SIZE | --file PATH |
 *          --rbd POOL/IMAGE [--ceph-conf FILE] [--ceph-id ID])
 *         [--front mq|sq] [--sched NAME] [--queues N] [--depth N]
 *         [--read-only] [--export-name NAME]
 *   rqnbd [--front mq|sq] --list-scheds
 *   rqnbd -h|--help | --version
 *
 * One export, served in the foreground to any number of clients at once.
 * The device under the queue is the null driver of examples/null keeping
 * its data in memory (--memory) or the small file driver of this folder
 * (--file).  SIGINT or SIGTERM stop accepting, let every connection finish
 * what it has in flight, flush the device and exit 0.
 *
 * Reading order: options, the device, the listening socket, main.
 * See README.md in this folder and doc/nbd.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <librequest/librequest.h>

#include "nbd_file.h"
#include "nbd_rbd.h"
#include "nbd_server.h"
#include "null_blk.h"
#include "progopt.h"

#define RQNBD_MIN_BLOCK 512u
#define RQNBD_PREF_BLOCK 4096u
#define RQNBD_MAX_BLOCK (32u << 20)   /* the protocol's portable maximum */
#define RQNBD_MAX_REQ_SECTORS 2048u   /* 1 MiB requests */
#define RQNBD_DEFAULT_DEPTH 128
#define RQNBD_MAX_QUEUES 64

/* Exit codes. */
#define RQNBD_EXIT_FAIL 1       /* set-up failed (bad usage: PROG_EXIT_USAGE, 2) */

struct opts {
	const char *unix_path;
	const char *port;
	const char *bind_addr;
	uint64_t memory;
	const char *file;
	const char *rbd, *ceph_conf, *ceph_id;
	const char *front;
	const char *sched;
	unsigned queues;
	unsigned depth;
	bool read_only;
	const char *export_name;
	bool list_scheds;
};

/* ----------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
"usage: rqnbd (--unix PATH | --port N [--bind ADDR])\n"
"             (--memory SIZE | --file PATH | --rbd POOL/IMAGE [--ceph-conf FILE] [--ceph-id ID])\n"
"             [--front mq|sq] [--sched NAME] [--queues N] [--depth N]\n"
"             [--read-only] [--export-name NAME]\n"
"       rqnbd [--front mq|sq] --list-scheds\n"
"       rqnbd -h|--help | --version\n"
"\n"
"  --unix PATH         listen on a unix socket (created; a stale one is replaced)\n"
"  --port N            listen on TCP port N\n"
"  --bind ADDR         TCP address to bind (default 127.0.0.1)\n"
"  --memory SIZE       serve SIZE bytes of memory (suffix K, M, G, T: powers of 1024)\n"
"  --file PATH         serve a file or block device\n"
"  --rbd POOL/IMAGE    serve a Ceph RBD image (POOL/IMAGE@SNAP: read-only)\n"
"  --ceph-conf FILE    ceph.conf for --rbd (default $CEPH_CONF, /etc/ceph)\n"
"  --ceph-id ID        cephx client id for --rbd, without \"client.\" (admin)\n"
"  --front mq|sq       request-layer front end: multi-queue (default) or one\n"
"                      request_fn under one queue lock\n"
"  --sched NAME        I/O scheduler of the queue (default: the library's choice)\n"
"  --queues N          hardware queues (default: online CPUs, at most 8);\n"
"                      --front sq --file: worker threads\n"
"  --depth N           tags per hardware queue (default %d); --front sq:\n"
"                      requests with the device at most\n"
"  --read-only         refuse writes, trims and zeroing with EPERM\n"
"  --export-name NAME  the export's name (default \"\"; \"\" always matches too)\n"
"  --list-scheds       print the schedulers the queue offers, one per line\n"
"  -h, --help          this text\n"
"  --version           the program's and the library's version\n",
		RQNBD_DEFAULT_DEPTH);
}

enum {
	OPT_UNIX = 256, OPT_PORT, OPT_BIND, OPT_MEMORY, OPT_FILE, OPT_FRONT, OPT_SCHED,
	OPT_QUEUES, OPT_DEPTH, OPT_RO, OPT_NAME, OPT_LIST, OPT_RBD, OPT_CEPH_CONF, OPT_CEPH_ID,
};

static const struct option long_opts[] = {
	{ "unix", required_argument, NULL, OPT_UNIX },
	{ "port", required_argument, NULL, OPT_PORT },
	{ "bind", required_argument, NULL, OPT_BIND },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "file", required_argument, NULL, OPT_FILE },
	{ "rbd", required_argument, NULL, OPT_RBD },
	{ "ceph-conf", required_argument, NULL, OPT_CEPH_CONF },
	{ "ceph-id", required_argument, NULL, OPT_CEPH_ID },
	{ "front", required_argument, NULL, OPT_FRONT },
	{ "sched", required_argument, NULL, OPT_SCHED },
	{ "queues", required_argument, NULL, OPT_QUEUES },
	{ "depth", required_argument, NULL, OPT_DEPTH },
	{ "read-only", no_argument, NULL, OPT_RO },
	{ "export-name", required_argument, NULL, OPT_NAME },
	{ "list-scheds", no_argument, NULL, OPT_LIST },
	PROG_STD_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	static const char *const fronts[] = { "mq", "sq" };
	static char port[8];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	memset(o, 0, sizeof(*o));
	o->front = "mq";
	o->export_name = "";
	o->depth = RQNBD_DEFAULT_DEPTH;
	o->queues = cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned)cpus;

	prog_init("rqnbd", usage);
	while ((c = prog_getopt(argc, argv, long_opts)) != -1) {
		switch (c) {
		case OPT_UNIX:
			o->unix_path = optarg;
			break;
		case OPT_PORT:
			/* getaddrinfo() wants it in decimal, as a service name */
			snprintf(port, sizeof(port), "%u",
				 (unsigned)opt_uint("--port", optarg, 1, 65535));
			o->port = port;
			break;
		case OPT_BIND:
			o->bind_addr = optarg;
			break;
		case OPT_MEMORY:
			o->memory = opt_size("--memory", optarg, RQNBD_MIN_BLOCK, UINT64_MAX);
			if (o->memory % RQNBD_MIN_BLOCK)
				prog_usage_error("--memory: %s is not a multiple of %u bytes",
						 optarg, RQNBD_MIN_BLOCK);
			break;
		case OPT_FILE:
			o->file = optarg;
			break;
		case OPT_RBD:
			o->rbd = optarg;
			break;
		case OPT_CEPH_CONF:
			o->ceph_conf = optarg;
			break;
		case OPT_CEPH_ID:
			o->ceph_id = optarg;
			break;
		case OPT_FRONT:
			o->front = fronts[opt_choice("--front", optarg, fronts, 2)];
			break;
		case OPT_SCHED:
			o->sched = optarg;
			break;
		case OPT_QUEUES:
			o->queues = (unsigned)opt_uint("--queues", optarg, 1, RQNBD_MAX_QUEUES);
			break;
		case OPT_DEPTH:
			o->depth = (unsigned)opt_uint("--depth", optarg, 1, 65536);
			break;
		case OPT_RO:
			o->read_only = true;
			break;
		case OPT_NAME:
			if (strlen(optarg) > 4096)
				prog_usage_error("--export-name: longer than 4096 bytes");
			o->export_name = optarg;
			break;
		case OPT_LIST:
			o->list_scheds = true;
			break;
		}
	}
	prog_no_operands(argc, argv);
	if (o->list_scheds)
		return;
	if (!!o->unix_path == !!o->port)
		prog_usage_error("--unix, --port: give exactly one");
	if (o->bind_addr && !o->port)
		prog_usage_error("--bind: goes with --port");
	if (!!o->memory + !!o->file + !!o->rbd != 1)
		prog_usage_error("--memory, --file, --rbd: give exactly one");
	if ((o->ceph_conf || o->ceph_id) && !o->rbd)
		prog_usage_error("--ceph-conf, --ceph-id: go with --rbd");
	if (o->rbd && (!strchr(o->rbd, '/') || o->rbd[0] == '/'))
		prog_usage_error("--rbd: '%s' is not POOL/IMAGE", o->rbd);
	if (o->rbd && strcmp(o->front, "mq"))
		prog_usage_error("--rbd: needs --front mq");
}

/* ---------------------------------------------------------------- device */

struct device {
	struct null_dev *null;
	struct nbd_file *file;
	struct nbd_rbd *rbd;
	struct rq_queue *q;
	uint64_t size;
};

static void device_limits(struct rq_queue_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->size = sizeof(*lim);
	lim->logical_block_size = RQNBD_MIN_BLOCK;
	lim->max_hw_sectors = RQNBD_MAX_REQ_SECTORS;
	lim->max_sectors = RQNBD_MAX_REQ_SECTORS;
	lim->max_segments = 256;
	lim->max_segment_size = RQNBD_MAX_REQ_SECTORS << RQ_SECTOR_SHIFT;
}

static int device_open(const struct opts *o, struct device *dev)
{
	int ret;

	memset(dev, 0, sizeof(*dev));
	if (o->memory) {
		struct null_config cfg;

		null_config_default(&cfg);
		cfg.nr_hw_queues = o->queues;
		cfg.hw_queue_depth = o->depth;
		cfg.completion = NULL_COMPLETE_INLINE;
		cfg.memory_backed = true;
		cfg.size_bytes = o->memory;
		cfg.sched = o->sched;
		if (!strcmp(o->front, "sq"))
			cfg.queue_mode = NULL_Q_RQ; /* one request_fn under one lock */
		device_limits(&cfg.limits);
		ret = null_create(&cfg, &dev->null);
		if (ret)
			return ret;
		dev->q = null_queue(dev->null);
		dev->size = o->memory;
	} else if (o->rbd) {
		struct nbd_rbd_config cfg = {
			.spec = o->rbd,
			.ceph_conf = o->ceph_conf,
			.client_id = o->ceph_id,
			.read_only = o->read_only,
			.nr_hw_queues = o->queues,
			.queue_depth = o->depth,
			.sched = o->sched,
		};

		ret = nbd_rbd_create(&cfg, &dev->rbd);
		if (ret)
			return ret;
		dev->q = nbd_rbd_queue(dev->rbd);
		dev->size = nbd_rbd_size(dev->rbd);
	} else {
		struct nbd_file_config cfg = {
			.path = o->file,
			.read_only = o->read_only,
			.single_queue = !strcmp(o->front, "sq"),
			.nr_hw_queues = o->queues,
			.queue_depth = o->depth,
			.sched = o->sched,
		};
		struct rq_queue_limits lim;

		device_limits(&lim);
		cfg.limits = &lim;
		ret = nbd_file_create(&cfg, &dev->file);
		if (ret)
			return ret;
		dev->q = nbd_file_queue(dev->file);
		dev->size = nbd_file_size(dev->file);
	}
	return 0;
}

static void device_close(struct device *dev)
{
	null_destroy(dev->null);
	nbd_file_destroy(dev->file);
	nbd_rbd_destroy(dev->rbd);
}

/* A flush bio and someone waiting for it. */
struct sync_bio {
	struct rq_bio bio;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void sync_end_io(struct rq_bio *bio)
{
	struct sync_bio *sb = bio->private_data;

	pthread_mutex_lock(&sb->lock);
	sb->done = true;
	pthread_cond_signal(&sb->cond);
	pthread_mutex_unlock(&sb->lock);
}

/* Flush the device's write cache; return the bio's status. */
static rq_status_t device_flush(struct device *dev)
{
	struct sync_bio sb = { .done = false };

	pthread_mutex_init(&sb.lock, NULL);
	pthread_cond_init(&sb.cond, NULL);
	rq_bio_init(&sb.bio, NULL, 1);
	sb.bio.op = RQ_OP_FLUSH;
	sb.bio.end_io = sync_end_io;
	sb.bio.private_data = &sb;
	rq_submit_bio(dev->q, &sb.bio);
	pthread_mutex_lock(&sb.lock);
	while (!sb.done)
		pthread_cond_wait(&sb.cond, &sb.lock);
	pthread_mutex_unlock(&sb.lock);
	pthread_cond_destroy(&sb.cond);
	pthread_mutex_destroy(&sb.lock);
	return sb.bio.status;
}

/* --list-scheds: what the "scheduler" attribute of a queue of @front offers. */
static int list_scheds(const char *front)
{
	struct null_config cfg;
	struct null_dev *dev;
	char buf[1024], *tok, *save = NULL;
	int ret;

	null_config_default(&cfg);
	cfg.size_bytes = 1 << 20;
	if (!strcmp(front, "sq"))
		cfg.queue_mode = NULL_Q_RQ;
	ret = null_create(&cfg, &dev);
	if (ret) {
		fprintf(stderr, "rqnbd: cannot make a queue: %s\n", strerror(-ret));
		return RQNBD_EXIT_FAIL;
	}
	ret = rq_queue_attr_get(null_queue(dev), "scheduler", buf, sizeof(buf));
	null_destroy(dev);
	if (ret < 0) {
		fprintf(stderr, "rqnbd: cannot read the scheduler attribute: %s\n",
			strerror(-ret));
		return RQNBD_EXIT_FAIL;
	}
	for (tok = strtok_r(buf, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
		size_t n = strlen(tok);

		if (tok[0] == '[' && n > 1 && tok[n - 1] == ']') {
			tok[n - 1] = '\0';
			tok++;
		}
		printf("%s\n", tok);
	}
	return 0;
}

/* --------------------------------------------------------------- socket */

/* Listen on a unix socket; a stale socket at @path is replaced. */
static int listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "rqnbd: unix socket path too long: %s\n", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			fprintf(stderr, "rqnbd: %s exists and is not a socket\n", path);
			return -1;
		}
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 128) < 0) {
		fprintf(stderr, "rqnbd: cannot listen on %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Listen on TCP @addr:@port (IPv4 or IPv6). */
static int listen_tcp(const char *addr, const char *port)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
	};
	struct addrinfo *res, *ai;
	int fd = -1, one = 1, err;

	err = getaddrinfo(addr, port, &hints, &res);
	if (err) {
		fprintf(stderr, "rqnbd: %s: %s\n", addr, gai_strerror(err));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "rqnbd: cannot listen on %s port %s: %s\n", addr, port,
			strerror(errno));
	return fd;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	struct nbd_export exp = { 0 };
	struct nbd_server *srv = NULL;
	struct nbd_server_stats st;
	struct device dev;
	struct opts o;
	sigset_t sigs;
	int lfd, sfd, ret;
	rq_status_t fs;
	char sched[128] = "", shape[48];

	parse_args(argc, argv, &o);
	if (o.list_scheds)
		return list_scheds(o.front);

	/* SIGINT/SIGTERM arrive through a signalfd; every thread blocks them */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sfd < 0) {
		perror("rqnbd: signalfd");
		return RQNBD_EXIT_FAIL;
	}

	ret = device_open(&o, &dev);
	if (ret) {
		fprintf(stderr, "rqnbd: cannot set up the %s device%s%s: %s\n",
			o.memory ? "memory" : o.rbd ? "rbd" : "file", o.sched ? " with scheduler " : "",
			o.sched ? o.sched : "", strerror(-ret));
		return RQNBD_EXIT_FAIL;
	}
	/* the active scheduler is the bracketed name of the attribute */
	if (rq_queue_attr_get(dev.q, "scheduler", sched, sizeof(sched)) > 0) {
		char *open = strchr(sched, '['), *close = open ? strchr(open, ']') : NULL;

		if (open && close) {
			*close = '\0';
			memmove(sched, open + 1, strlen(open + 1) + 1);
		}
	}

	exp.q = dev.q;
	exp.size = dev.size;
	exp.name = o.export_name;
	exp.description = o.memory ? "rqnbd memory export" :
			  o.rbd ? "rqnbd rbd export" : "rqnbd file export";
	exp.read_only = o.read_only || (o.rbd && strchr(o.rbd, '@')); /* a snapshot */
	exp.min_block = RQNBD_MIN_BLOCK;
	exp.pref_block = RQNBD_PREF_BLOCK;
	exp.max_block = RQNBD_MAX_BLOCK;
	ret = nbd_server_create(&exp, &srv);
	if (ret) {
		fprintf(stderr, "rqnbd: %s\n", strerror(-ret));
		device_close(&dev);
		return RQNBD_EXIT_FAIL;
	}

	lfd = o.unix_path ? listen_unix(o.unix_path)
			  : listen_tcp(o.bind_addr ? o.bind_addr : "127.0.0.1", o.port);
	if (lfd < 0) {
		nbd_server_destroy(srv);
		device_close(&dev);
		return RQNBD_EXIT_FAIL;
	}
	if (!strcmp(o.front, "mq"))
		snprintf(shape, sizeof(shape), "%u hw queues", o.queues);
	else if (o.file)
		snprintf(shape, sizeof(shape), "single queue, %u workers", o.queues);
	else
		snprintf(shape, sizeof(shape), "single queue");
	fprintf(stderr, "rqnbd: serving %llu bytes (%s%s, %s, depth %u, "
		"scheduler %s) on %s%s%s\n",
		(unsigned long long)exp.size, o.memory ? "memory" : o.rbd ? o.rbd : o.file,
		o.read_only ? ", read-only" : "", shape, o.depth, sched,
		o.unix_path ? o.unix_path : o.bind_addr ? o.bind_addr : "127.0.0.1",
		o.port ? " port " : "", o.port ? o.port : "");

	for (;;) {
		struct pollfd pfd[2] = { { lfd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		int cfd, one = 1;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("rqnbd: poll");
			break;
		}
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si))
				fprintf(stderr, "rqnbd: %s: stopping\n", strsignal(si.ssi_signo));
			break;
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			continue; /* the client went away, or fds ran out */
		if (o.port)
			setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (nbd_server_add(srv, cfd) < 0)
			fprintf(stderr, "rqnbd: refused a connection (limit reached)\n");
	}

	/* stop accepting, drain the connections, flush the device */
	close(lfd);
	if (o.unix_path)
		unlink(o.unix_path);
	nbd_server_stop(srv);
	nbd_server_wait(srv);
	fs = device_flush(&dev);
	nbd_server_get_stats(srv, &st);
	fprintf(stderr, "rqnbd: %llu connections, %llu requests, %llu error replies, "
		"%llu dropped; final flush %s\n",
		(unsigned long long)st.connections, (unsigned long long)st.requests,
		(unsigned long long)st.errors, (unsigned long long)st.dropped,
		rq_status_name(fs));
	nbd_server_destroy(srv);
	device_close(&dev);
	close(sfd);
	return fs == RQ_STS_OK ? 0 : RQNBD_EXIT_FAIL;
}
