/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rqnbd: an NBD block server whose I/O goes through librequest.
 *
 *   rqnbd (--unix PATH | --port N [--bind ADDR]) (--memory SIZE | --file PATH |
 *          --rbd POOL/IMAGE [--ceph-conf FILE] [--ceph-id ID])
 *         [--front mq|sq] [--sched NAME] [--queues N] [--depth N]
 *         [--read-only] [--export-name NAME]
 *   rqnbd --config FILE [--unix PATH | --port N [--bind ADDR]] [--check-config]
 *   rqnbd [--front mq|sq] --list-scheds
 *   rqnbd -h|--help | --version
 *
 * One export from the command line, or several from a configuration file
 * (nbd_config.h) with tenants: clients named by export-name alias put in
 * io groups with weights and priority classes.  Served in the foreground
 * to any number of clients at once.  The device under each queue is the
 * null driver of examples/null keeping its data in memory (--memory;
 * "paced": one request at a time at a set rate) or the small file driver
 * of this folder (--file).  SIGHUP re-reads the configuration file and
 * applies weights, classes, schedulers and tunables live.  SIGINT or
 * SIGTERM stop accepting, let every connection finish what it has in
 * flight, flush the devices and exit 0.
 *
 * Reading order: options, the device, the listening socket, main.
 * See README.md in this folder and doc/nbd.md.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <librequest/librequest.h>

#include "nbd_config.h"
#include "nbd_file.h"
#include "nbd_iostat.h"
#include "nbd_memory.h"
#include "nbd_rbd.h"
#include "nbd_server.h"
#include "nbd_tls.h"
#include "null_blk.h"
#include "progopt.h"

#define RQNBD_MIN_BLOCK 512u
#define RQNBD_PREF_BLOCK 4096u
#define RQNBD_MAX_BLOCK (32u << 20)   /* the protocol's portable maximum */
#define RQNBD_MAX_REQ_SECTORS 2048u   /* 1 MiB requests */
#define RQNBD_DEFAULT_DEPTH 128
#define RQNBD_PACED_BLOCK 4096u        /* paced exports: requests of one block */
#define RQNBD_MAX_QUEUES 64

#define RQNBD_MAX_DEPTH 4096           /* tags per hardware queue */
#define RQNBD_MAX_TAGS 16384           /* queues x depth */
#define RQNBD_MAX_MEMORY (16ull << 40) /* --memory: 16 TiB (its page table) */
#define RQNBD_MAX_CONNS 4096
#define RQNBD_MAX_CONN_REQUESTS 1024
#define RQNBD_MIN_CONN_BUFFER (64u << 10)
#define RQNBD_MAX_CONN_BUFFER (1u << 30)
#define RQNBD_MAX_BUFFER_TOTAL (64ull << 30)
#define RQNBD_MAX_TIMEOUT_S 86400
#define RQNBD_LOG_WINDOW_S 10          /* repeated lines: a summary per window */
#define RQNBD_LOG_BURST 5              /* lines of one kind printed per window */
#define RQNBD_ACCEPT_PAUSE_MS 100      /* no descriptor even after the spare */
#define RQNBD_BACKLOG 1024             /* listen(): a burst waits, not refused */
#define RQNBD_ACCEPT_BATCH 32          /* accepts per wakeup, then signals */

/* Exit codes. */
#define RQNBD_EXIT_FAIL 1       /* set-up failed (bad usage: PROG_EXIT_USAGE, 2) */

struct opts {
	const char *unix_path;
	const char *port;
	const char *bind_addr;
	uint64_t memory;
	const char *file;
	const char *rbd, *ceph_conf, *ceph_id;   /* --rbd POOL/IMAGE[@SNAP] */
	const char *front;
	const char *sched;
	unsigned queues;
	unsigned depth;
	bool read_only;
	const char *export_name;
	bool list_scheds;
	const char *lock;       /* auto, exclusive, shared, off */
	const char *user;
	const char *group;
	struct nbd_limits lim;
	const char *trace_dir;  /* --trace: DIR/rqnbd.blktrace.CPU */
	bool iostat;            /* --iostat given: diskstats counted */
	unsigned iostat_ms;     /* a line every so often; 0: on SIGUSR1 only */
	const char *config;     /* --config FILE */
	bool check_config;      /* --check-config: parse, say, exit */
	bool export_opts;       /* an option of the one-export command line given */
	enum nbd_tls_mode tls;  /* --tls off|on|require */
	const char *tls_certs, *tls_psk;
	bool tls_verify_peer;
};

/* ----------------------------------------------------------------- options */

/*
 * The options, one row each: name, value's name in --help (NULL: a flag),
 * kind, the field it sets, the range, the help text (may hold one %s: the
 * default, printed from the field itself) and, for OPT_CUSTOM, a setter.
 * --help and the getopt table are made from these rows, so adding an
 * option is adding a row (and, for a new kind of value, a setter).
 */
enum opt_kind {
	OPT_STRING,     /* const char *: the value itself */
	OPT_FLAG,       /* bool: true */
	OPT_UINT,       /* unsigned: decimal (or 0x), within [lo, hi] */
	OPT_SIZE,       /* uint64_t: bytes, with K, M, G, T, within [lo, hi] */
	OPT_SECONDS,    /* unsigned, stored in ms: whole seconds in [lo, hi] */
	OPT_CUSTOM,     /* set() does it */
};

struct rqnbd_option {
	const char *name;
	const char *arg;
	enum opt_kind kind;
	size_t field;           /* offsetof(struct opts, ...) */
	uint64_t lo, hi;
	const char *help;
	void (*set)(struct opts *o, const char *flag, const char *v);
};

#define FIELD(f) offsetof(struct opts, f)

static void set_port(struct opts *o, const char *f, const char *v)
{
	static char port[8];

	/* getaddrinfo() wants it in decimal, as a service name */
	snprintf(port, sizeof(port), "%u", (unsigned)opt_uint(f, v, 1, 65535));
	o->port = port;
}

static void set_memory(struct opts *o, const char *f, const char *v)
{
	o->export_opts = true;
	o->memory = opt_size(f, v, RQNBD_MIN_BLOCK, RQNBD_MAX_MEMORY);
	if (o->memory % RQNBD_MIN_BLOCK)
		prog_usage_error("%s: %s is not a multiple of %u bytes", f, v, RQNBD_MIN_BLOCK);
}

static void set_front(struct opts *o, const char *f, const char *v)
{
	o->export_opts = true;
	static const char *const fronts[] = { "mq", "sq" };

	o->front = fronts[opt_choice(f, v, fronts, 2)];
}

static void set_lock(struct opts *o, const char *f, const char *v)
{
	static const char *const modes[] = { "auto", "exclusive", "shared", "off" };

	o->lock = modes[opt_choice(f, v, modes, 4)];
}

static void set_share(struct opts *o, const char *f, const char *v)
{
	(void)f;
	(void)v;
	o->lock = "shared";
}

static void set_iostat(struct opts *o, const char *f, const char *v)
{
	o->iostat = true;
	o->iostat_ms = (unsigned)opt_uint(f, v, 0, RQNBD_MAX_TIMEOUT_S) * 1000;
}

static void set_tls(struct opts *o, const char *f, const char *v)
{
	static const char *const modes[] = { "off", "on", "require" };

	o->tls = (enum nbd_tls_mode)opt_choice(f, v, modes, 3);
}

static void set_name(struct opts *o, const char *f, const char *v)
{
	o->export_opts = true;
	if (strlen(v) > 4096)
		prog_usage_error("%s: longer than 4096 bytes", f);
	o->export_name = v;
}

static const struct rqnbd_option rqnbd_options[] = {
	{ "unix", "PATH", OPT_STRING, FIELD(unix_path), 0, 0,
	  "listen on a unix socket (created; a stale one is\n"
	  "replaced, one another server listens on is refused)", NULL },
	{ "port", "N", OPT_CUSTOM, 0, 0, 0, "listen on TCP port N", set_port },
	{ "bind", "ADDR", OPT_STRING, FIELD(bind_addr), 0, 0,
	  "TCP address to bind (default 127.0.0.1)", NULL },
	{ "memory", "SIZE", OPT_CUSTOM, 0, 0, 0,
	  "serve SIZE bytes of memory (suffix K, M, G, T:\n"
	  "powers of 1024; decimal, \"010M\" is 10 MiB; at most 16T)", set_memory },
	{ "file", "PATH", OPT_STRING, FIELD(file), 0, 0, "serve a file or block device", NULL },
	{ "rbd", "POOL/IMAGE", OPT_STRING, FIELD(rbd), 0, 0,
	  "serve a Ceph RBD image (POOL/IMAGE@SNAP: read-only)", NULL },
	{ "ceph-conf", "FILE", OPT_STRING, FIELD(ceph_conf), 0, 0,
	  "ceph.conf for --rbd (default $CEPH_CONF, /etc/ceph)", NULL },
	{ "ceph-id", "ID", OPT_STRING, FIELD(ceph_id), 0, 0,
	  "cephx client id for --rbd, without \"client.\" (admin)", NULL },
	{ "lock", "MODE", OPT_CUSTOM, 0, 0, 0,
	  "auto (default: exclusive when writable, shared when\n"
	  "read-only), exclusive, shared, off: the file's OFD lock\n"
	  "(and O_EXCL on a block device when exclusive)", set_lock },
	{ "share", NULL, OPT_CUSTOM, 0, 0, 0, "the same as --lock shared", set_share },
	{ "front", "mq|sq", OPT_CUSTOM, 0, 0, 0,
	  "request-layer front end: multi-queue (default) or one\n"
	  "request_fn under one queue lock", set_front },
	{ "sched", "NAME", OPT_STRING, FIELD(sched), 0, 0,
	  "I/O scheduler of the queue (default: the library's choice)", NULL },
	{ "queues", "N", OPT_UINT, FIELD(queues), 1, RQNBD_MAX_QUEUES,
	  "hardware queues, 1 to 64 (default: online CPUs, at most 8);\n"
	  "--front sq --file: worker threads", NULL },
	{ "depth", "N", OPT_UINT, FIELD(depth), 1, RQNBD_MAX_DEPTH,
	  "tags per hardware queue, 1 to 4096, queues x depth at most\n"
	  "16384 (default %s); --front sq: requests with the device", NULL },
	{ "read-only", NULL, OPT_FLAG, FIELD(read_only), 0, 0,
	  "refuse writes, trims and zeroing with EPERM", NULL },
	{ "export-name", "NAME", OPT_CUSTOM, 0, 0, 0,
	  "the export's name (default \"\"; \"\" always matches too)", set_name },
	{ "max-connections", "N", OPT_UINT, FIELD(lim.max_conns), 1, RQNBD_MAX_CONNS,
	  "connections at once, 1 to 4096 (default %s)", NULL },
	{ "max-per-client", "N", OPT_UINT, FIELD(lim.max_per_client), 1, RQNBD_MAX_CONNS,
	  "connections from one address (unix socket: one\n"
	  "uid), 1 to 4096 (default %s)", NULL },
	{ "reserve", "N", OPT_UINT, FIELD(lim.reserve), 0, RQNBD_MAX_CONNS - 1,
	  "places kept for newcomers: below them, the connection\n"
	  "idle longest is closed for a new one; 0: never (default %s)", NULL },
	{ "conn-requests", "N", OPT_UINT, FIELD(lim.conn_requests), 1, RQNBD_MAX_CONN_REQUESTS,
	  "requests in flight per connection, 1 to 1024\n(default %s)", NULL },
	{ "conn-buffer", "SIZE", OPT_SIZE, FIELD(lim.conn_buffer), RQNBD_MIN_CONN_BUFFER,
	  RQNBD_MAX_CONN_BUFFER, "data buffered per connection, 64K to 1G; also\n"
	  "the largest request (at most 32M) (default %s)", NULL },
	{ "buffer-total", "SIZE", OPT_SIZE, FIELD(lim.buffer_total), RQNBD_MIN_CONN_BUFFER,
	  RQNBD_MAX_BUFFER_TOTAL, "data buffered by all connections, 64K to 64G\n"
	  "(default %s)", NULL },
	{ "handshake-timeout", "S", OPT_SECONDS, FIELD(lim.handshake_ms), 1, RQNBD_MAX_TIMEOUT_S,
	  "seconds for the whole handshake, 1 to 86400\n(default %s)", NULL },
	{ "idle-timeout", "S", OPT_SECONDS, FIELD(lim.idle_ms), 0, RQNBD_MAX_TIMEOUT_S,
	  "close a connection idle this long; 0: never\n(default %s)", NULL },
	{ "stall-timeout", "S", OPT_SECONDS, FIELD(lim.stall_ms), 0, RQNBD_MAX_TIMEOUT_S,
	  "window of the --min-rate check; 0: no check\n(default %s)", NULL },
	{ "min-rate", "BYTES", OPT_SIZE, FIELD(lim.min_rate), 1, 1u << 30,
	  "bytes/s a client must move while a request is half\n"
	  "sent or replies wait for it (default %s)", NULL },
	{ "user", "USER", OPT_STRING, FIELD(user), 0, 0,
	  "after binding and opening: become USER (name or uid)", NULL },
	{ "group", "GROUP", OPT_STRING, FIELD(group), 0, 0,
	  "... and GROUP (default: USER's group)", NULL },
	{ "trace", "DIR", OPT_STRING, FIELD(trace_dir), 0, 0,
	  "write a blktrace trace of each export's queue to\n"
	  "DIR/rqnbd.blktrace.CPU (the default export) and\n"
	  "DIR/rqnbd-NAME.blktrace.CPU until the server stops\n"
	  "(blkparse -D DIR -i rqnbd)", NULL },
	{ "iostat", "S", OPT_CUSTOM, 0, 0, 0,
	  "count diskstats and latency histograms; every S\n"
	  "seconds an iostat -x line on stderr (0: none);\n"
	  "SIGUSR1 prints stat, inflight and latency_hist\n"
	  "(with --config, each line names its export)", set_iostat },
	{ "tls", "MODE", OPT_CUSTOM, 0, 0, 0,
	  "off (default), on (TLS and plain clients), require\n"
	  "(options before NBD_OPT_STARTTLS are refused)", set_tls },
	{ "tls-certificates", "DIR", OPT_STRING, FIELD(tls_certs), 0, 0,
	  "X.509: DIR/ca-cert.pem, server-cert.pem, server-key.pem,\n"
	  "optional ca-crl.pem (as nbdkit and qemu-nbd)", NULL },
	{ "tls-psk", "FILE", OPT_STRING, FIELD(tls_psk), 0, 0,
	  "pre-shared keys, \"username:hexkey\" lines (psktool)", NULL },
	{ "tls-verify-peer", NULL, OPT_FLAG, FIELD(tls_verify_peer), 0, 0,
	  "X.509: clients must show a certificate signed by the CA", NULL },
	{ "list-scheds", NULL, OPT_FLAG, FIELD(list_scheds), 0, 0,
	  "print the schedulers the queue offers, one per line", NULL },
	{ "config", "FILE", OPT_STRING, FIELD(config), 0, 0,
	  "serve the exports and tenants of FILE (doc/nbd.md,\n"
	  "rqnbd(1)); SIGHUP re-reads it; --unix/--port\n"
	  "override its [server] listening", NULL },
	{ "check-config", NULL, OPT_FLAG, FIELD(check_config), 0, 0,
	  "with --config: check FILE, print what it serves, exit", NULL },
};

/* Apply option row @r with value @v (NULL for a flag) to @o. */
static void option_set(const struct rqnbd_option *r, struct opts *o, const char *v)
{
	char *field = (char *)o + r->field, flag[40];

	snprintf(flag, sizeof(flag), "--%s", r->name);
	switch (r->kind) {
	case OPT_STRING:
		*(const char **)field = v;
		break;
	case OPT_FLAG:
		*(bool *)field = true;
		break;
	case OPT_UINT:
		*(unsigned *)field = (unsigned)opt_uint(flag, v, r->lo, r->hi);
		break;
	case OPT_SIZE:
		*(uint64_t *)field = opt_size(flag, v, r->lo, r->hi);
		break;
	case OPT_SECONDS:
		*(unsigned *)field = (unsigned)opt_uint(flag, v, r->lo, r->hi) * 1000;
		break;
	case OPT_CUSTOM:
		r->set(o, flag, v);
		break;
	}
}

/* The default of row @r, from the field in the defaults @o, for --help. */
static void option_default(const struct rqnbd_option *r, const struct opts *o, char *buf,
			   size_t n)
{
	const char *field = (const char *)o + r->field;
	uint64_t v = 0;

	if (r->kind == OPT_UINT)
		v = *(const unsigned *)field;
	else if (r->kind == OPT_SECONDS)
		v = *(const unsigned *)field / 1000;
	else if (r->kind == OPT_SIZE)
		v = *(const uint64_t *)field;
	if (r->kind == OPT_SIZE && v >= (1u << 20) && !(v & ((1u << 20) - 1)))
		snprintf(buf, n, "%lluM", (unsigned long long)(v >> 20));
	else
		snprintf(buf, n, "%llu", (unsigned long long)v);
}

#define RQNBD_NOPTS (sizeof(rqnbd_options) / sizeof(rqnbd_options[0]))

static void opts_default(struct opts *o);

static void usage(FILE *f)
{
	struct opts def;
	unsigned i;

	opts_default(&def);
	fprintf(f,
"usage: rqnbd (--unix PATH | --port N [--bind ADDR])\n"
"             (--memory SIZE | --file PATH | --rbd POOL/IMAGE [--ceph-conf FILE] [--ceph-id ID])\n"
"             [--front mq|sq] [--sched NAME] [--queues N] [--depth N]\n"
"             [--read-only] [--export-name NAME] [--lock MODE] [limits]\n"
"             [--user USER] [--group GROUP] [--trace DIR] [--iostat S]\n"
"       rqnbd --config FILE [--unix PATH | --port N [--bind ADDR]] [--check-config]\n"
"             [--tls off|on|require (--tls-certificates DIR [--tls-verify-peer] |\n"
"                                       --tls-psk FILE)]\n"
"       rqnbd [--front mq|sq] --list-scheds\n"
"       rqnbd -h|--help | --version\n\n");
	for (i = 0; i < RQNBD_NOPTS; i++) {
		const struct rqnbd_option *r = &rqnbd_options[i];
		char head[40], help[512], dflt[24], *line, *save = NULL;

		snprintf(head, sizeof(head), "--%s%s%s", r->name, r->arg ? " " : "",
			 r->arg ? r->arg : "");
		option_default(r, &def, dflt, sizeof(dflt));
		snprintf(help, sizeof(help), r->help, dflt);
		for (line = strtok_r(help, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			fprintf(f, "  %-24s%s\n", head, line);
			head[0] = '\0';
		}
	}
	fprintf(f, "  %-24s%s\n  %-24s%s\n", "-h, --help", "this text", "--version",
		"the program's and the library's version");
}

/* Cross-option checks, after every option is read. */
static void check_args(struct opts *o)
{
	if (o->check_config && !o->config)
		prog_usage_error("--check-config: goes with --config");
	if (o->config) {
		if (o->export_opts || o->file || o->rbd || o->sched || o->read_only)
			prog_usage_error("--config: exports come from the file (no --memory, "
					 "--file, --rbd, --front, --sched, --read-only, "
					 "--export-name)");
		if (o->unix_path && o->port)
			prog_usage_error("--unix, --port: give at most one");
		if (o->bind_addr && !o->port)
			prog_usage_error("--bind: goes with --port");
		return; /* the listening socket is checked once the file is read */
	}
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
	if ((uint64_t)o->queues * o->depth > RQNBD_MAX_TAGS)
		prog_usage_error("--queues %u x --depth %u: more than %u requests in all",
				 o->queues, o->depth, RQNBD_MAX_TAGS);
	if (o->lim.reserve >= o->lim.max_conns)
		prog_usage_error("--reserve %u: must be below --max-connections %u",
				 o->lim.reserve, o->lim.max_conns);
	if (o->lim.buffer_total < o->lim.conn_buffer)
		prog_usage_error("--buffer-total: below --conn-buffer (%llu bytes)",
				 (unsigned long long)o->lim.conn_buffer);
	if (o->tls != NBD_TLS_OFF && !nbd_tls_available())
		prog_usage_error("--tls: rqnbd was built without GnuTLS");
	if (o->tls != NBD_TLS_OFF && !!o->tls_certs == !!o->tls_psk)
		prog_usage_error("--tls: give exactly one of --tls-certificates, --tls-psk");
	if ((o->tls_certs || o->tls_psk || o->tls_verify_peer) && o->tls == NBD_TLS_OFF)
		prog_usage_error("--tls-certificates, --tls-psk, --tls-verify-peer: go with "
				 "--tls on|require");
	if (o->tls_verify_peer && !o->tls_certs)
		prog_usage_error("--tls-verify-peer: goes with --tls-certificates");
	if (!strcmp(o->lock, "exclusive") && o->read_only)
		prog_usage_error("--lock exclusive: needs a writable export (a read-only "
				 "one takes a shared lock)");
}

static void opts_default(struct opts *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(o, 0, sizeof(*o));
	o->front = "mq";
	o->export_name = "";
	o->lock = "auto";
	o->depth = RQNBD_DEFAULT_DEPTH;
	o->queues = cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned)cpus;
	nbd_limits_default(&o->lim);
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	struct option long_opts[RQNBD_NOPTS + 3];
	unsigned i;
	int c;

	opts_default(o);
	for (i = 0; i < RQNBD_NOPTS; i++)
		long_opts[i] = (struct option){ rqnbd_options[i].name,
			rqnbd_options[i].arg ? required_argument : no_argument, NULL, 256 + (int)i };
	long_opts[i++] = (struct option){ "help", no_argument, NULL, PROG_OPT_HELP };
	long_opts[i++] = (struct option){ "version", no_argument, NULL, PROG_OPT_VERSION };
	long_opts[i] = (struct option){ NULL, 0, NULL, 0 };

	prog_init("rqnbd", usage);
	while ((c = prog_getopt(argc, argv, long_opts)) != -1)
		option_set(&rqnbd_options[c - 256], o, optarg);
	prog_no_operands(argc, argv);
	if (!o->list_scheds)
		check_args(o);
}

/* ---------------------------------------------------------------- device */

struct device {
	struct null_dev *null;
	struct nbd_file *file;
	struct nbd_rbd *rbd;
	struct rq_queue *q;
	uint64_t size;
	bool paced;             /* one request at a time: scheduler tags set up */
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

/* The defaults the command line gives a file's exports. */
static unsigned export_queues(const struct opts *o, const struct nbd_conf_export *e)
{
	return e->queues ? e->queues : o->queues;
}

static unsigned export_depth(const struct opts *o, const struct nbd_conf_export *e)
{
	return e->depth ? e->depth : o->depth;
}

/*
 * A memory export (null driver, data kept), or a paced one: the same, but
 * one request at a time, each ending 1/iops s after it started, so the
 * device is the bottleneck whatever the machine (fairness runs).
 */
static int device_open_null(const struct opts *o, const struct nbd_conf_export *e,
			    struct device *dev)
{
	struct null_config cfg;
	int ret;

	null_config_default(&cfg);
	cfg.nr_hw_queues = export_queues(o, e);
	cfg.hw_queue_depth = export_depth(o, e);
	cfg.completion = NULL_COMPLETE_INLINE;
	if (e->backend == NBD_BACKEND_PACED) {
		cfg.nr_hw_queues = 1;
		cfg.hw_queue_depth = 1;
		cfg.completion = NULL_COMPLETE_TIMER;
		cfg.completion_nsec = 1000000000ull / e->iops;
	}
	cfg.memory_backed = true;
	cfg.size_bytes = e->size;
	cfg.sched = e->sched[0] ? e->sched : NULL;
	if (e->sq)
		cfg.queue_mode = NULL_Q_RQ; /* one request_fn under one lock */
	device_limits(&cfg.limits);
	if (e->backend == NBD_BACKEND_PACED) {
		/* every request one 4 KiB block: cost follows size, merging gains nothing */
		cfg.limits.max_hw_sectors = RQNBD_PACED_BLOCK >> RQ_SECTOR_SHIFT;
		cfg.limits.max_sectors = RQNBD_PACED_BLOCK >> RQ_SECTOR_SHIFT;
		cfg.limits.max_segment_size = RQNBD_PACED_BLOCK;
	}
	ret = null_create(&cfg, &dev->null);
	if (ret)
		return ret;
	dev->q = null_queue(dev->null);
	dev->size = e->size;
	dev->paced = e->backend == NBD_BACKEND_PACED;
	return 0;
}

static int device_open(const struct opts *o, const struct nbd_conf_export *e,
		       struct device *dev)
{
	int ret;

	memset(dev, 0, sizeof(*dev));
	if (e->backend == NBD_BACKEND_MEMORY || e->backend == NBD_BACKEND_PACED) {
		ret = device_open_null(o, e, dev);
		if (ret)
			return ret;
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
			.path = e->path,
			.read_only = e->read_only,
			.lock = !strcmp(o->lock, "off") ? NBD_FILE_LOCK_OFF :
				!strcmp(o->lock, "shared") || (e->read_only && !strcmp(o->lock, "auto"))
				? NBD_FILE_LOCK_SHARED : NBD_FILE_LOCK_EXCLUSIVE,
			.single_queue = e->sq,
			.nr_hw_queues = export_queues(o, e),
			.queue_depth = export_depth(o, e),
			.sched = e->sched[0] ? e->sched : NULL,
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

/*
 * Is someone listening on the unix socket at @sa?  A connect that succeeds
 * says yes; ECONNREFUSED (nobody bound) says it is stale.
 */
static bool unix_socket_live(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool live;

	if (fd < 0)
		return true; /* cannot tell: do not take it over */
	live = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 ||
	       errno != ECONNREFUSED;
	close(fd);
	return live;
}

/* The socket file we made, so that exit removes it only if it is still ours. */
static struct stat unix_made;

/* Listen on a unix socket; a stale socket at @path is replaced, a live one
 * (a server listening on it) is refused. */
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
		if (unix_socket_live(&sa)) {
			fprintf(stderr, "rqnbd: %s: a server is listening on it already\n", path);
			return -1;
		}
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, RQNBD_BACKLOG) < 0 || lstat(path, &unix_made) < 0) {
		fprintf(stderr, "rqnbd: cannot listen on %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Remove our socket at exit, unless another server has put its own there. */
static void unlink_unix(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0 && st.st_ino == unix_made.st_ino &&
	    st.st_dev == unix_made.st_dev)
		unlink(path);
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
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, RQNBD_BACKLOG) == 0)
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

/* ------------------------------------------------------------------ logging */

/*
 * One kind of repeated line: at most RQNBD_LOG_BURST of them per window of
 * RQNBD_LOG_WINDOW_S seconds, then one summary "N more WHAT in the last S s"
 * when the window ends (at the next line of the kind, or at exit).
 */
struct ratelog {
	const char *what;       /* "refused connections" */
	uint64_t start;         /* ms, window start */
	unsigned printed;
	unsigned long long suppressed;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Print the summary of the window if lines were held back. */
static void ratelog_flush(struct ratelog *rl, uint64_t now)
{
	if (rl->suppressed)
		fprintf(stderr, "rqnbd: %llu more %s in the last %llu s\n", rl->suppressed,
			rl->what, (unsigned long long)((now - rl->start + 999) / 1000));
	rl->suppressed = 0;
	rl->printed = 0;
	rl->start = now;
}

static void __attribute__((format(printf, 2, 3)))
ratelog(struct ratelog *rl, const char *fmt, ...)
{
	uint64_t now = mono_ms();
	va_list ap;

	if (now - rl->start >= RQNBD_LOG_WINDOW_S * 1000)
		ratelog_flush(rl, now);
	if (rl->printed >= RQNBD_LOG_BURST) {
		rl->suppressed++;
		return;
	}
	rl->printed++;
	fputs("rqnbd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ----------------------------------------------------------- privileges */

/* A user or group given by name or number. */
static int lookup_id(const char *what, const char *name, bool group, uid_t *id, gid_t *gid)
{
	char *end;
	unsigned long v = strtoul(name, &end, 10);

	if (group) {
		struct group *gr = getgrnam(name);

		if (gr || (*name && !*end)) {
			*id = gr ? gr->gr_gid : (gid_t)v;
			return 0;
		}
	} else {
		struct passwd *pw = getpwnam(name);

		if (!pw && *name && !*end)
			pw = getpwuid((uid_t)v);
		if (pw || (*name && !*end)) {
			*id = pw ? pw->pw_uid : (uid_t)v;
			*gid = pw ? pw->pw_gid : (gid_t)v;
			return 0;
		}
	}
	fprintf(stderr, "rqnbd: %s: no such %s\n", name, what);
	return -1;
}

/*
 * --user/--group: after the socket is bound and the file opened, give up
 * root for good (supplementary groups, gid, then uid).  Return: 0 or -1.
 */
static int drop_privileges(const struct opts *o)
{
	uid_t uid = 0;
	gid_t gid = 0, ugid = 0;

	if (!o->user && !o->group)
		return 0;
	if (o->user && lookup_id("user", o->user, false, &uid, &ugid))
		return -1;
	gid = ugid;
	if (o->group && lookup_id("group", o->group, true, &gid, NULL))
		return -1;
	/* the socket becomes the user's, so that exit can remove it */
	if (o->unix_path && lchown(o->unix_path, o->user ? uid : (uid_t)-1, gid) == 0)
		lstat(o->unix_path, &unix_made);
	if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || (o->user && setuid(uid) < 0)) {
		fprintf(stderr, "rqnbd: cannot drop privileges: %s\n", strerror(errno));
		return -1;
	}
	if (o->user && uid && setuid(0) == 0) {
		fprintf(stderr, "rqnbd: could regain root after dropping it\n");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ accept */

struct acceptor {
	int lfd;
	int spare;              /* a descriptor kept to give back at EMFILE */
	bool tcp;
	uint64_t paused_until;  /* ms: do not poll the listening socket before */
	struct ratelog refused, nofd, evicted;
	unsigned long long evicted_seen;
};

/*
 * Out of descriptors with a client waiting: free the spare, take the
 * client and close it at once (it learns it was refused rather than
 * waiting in the backlog, and poll stops reporting it), take the spare
 * again.  Without a spare, pause the listening socket a while.  Either
 * way no busy loop.
 */
static void accept_no_fd(struct acceptor *a, int err)
{
	ratelog(&a->nofd, "out of file descriptors (%s): refusing connections",
		strerror(err));
	if (a->spare >= 0) {
		int fd;

		close(a->spare);
		fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			close(fd);
		a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (a->spare < 0)
		a->paused_until = mono_ms() + RQNBD_ACCEPT_PAUSE_MS;
}

/* Accept one waiting client and hand it to the server.  Return: false
 * when none was waiting (or accept failed). */
static bool accept_one(struct acceptor *a, struct nbd_server *srv)
{
	struct nbd_server_stats st;
	char peer[64];
	int cfd, one = 1, ret;

	cfd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (cfd < 0) {
		if (errno == EMFILE || errno == ENFILE)
			accept_no_fd(a, errno);
		else if (errno == ENOBUFS || errno == ENOMEM)
			a->paused_until = mono_ms() + RQNBD_ACCEPT_PAUSE_MS;
		return false; /* or none is waiting, or the client went away */
	}
	if (a->tcp)
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	nbd_peer_name(cfd, peer, sizeof(peer));
	ret = nbd_server_add(srv, cfd);
	if (ret < 0)
		ratelog(&a->refused, "refused a connection from %s: %s", peer,
			ret == -EMLINK ? "its connection limit reached" :
			ret == -EBUSY ? "connection limit reached" : strerror(-ret));
	nbd_server_get_stats(srv, &st);
	if (st.evicted > a->evicted_seen)
		ratelog(&a->evicted, "closed %llu idle connection(s) to take one from %s",
			st.evicted - a->evicted_seen, peer);
	a->evicted_seen = st.evicted;
	return true;
}

/* Each connection holds two descriptors: say so when the limit is short. */
static void check_fd_limit(const struct nbd_limits *lim)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < 2ull * lim->max_conns + 32)
		fprintf(stderr, "rqnbd: warning: %llu file descriptors (ulimit -n) are fewer "
			"than 2 per connection for --max-connections %u; beyond them, "
			"connections are refused\n", (unsigned long long)rl.rlim_cur,
			lim->max_conns);
}

/* ------------------------------------------------------------------ main */

/*
 * Signals: SIGINT/SIGTERM arrive through a signalfd (every thread blocks
 * them); SIGPIPE and SIGXFSZ are ignored, so a write to a vanished client
 * or past ulimit -f fails with EPIPE or EFBIG and is answered per request
 * (EFBIG as NBD_ENOSPC) instead of killing the server.  Return: the
 * signalfd, or -1.
 */
static int setup_signals(void)
{
	sigset_t sigs;

	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	return signalfd(-1, &sigs, SFD_CLOEXEC);
}

/* The device's failure, in words: a lock held elsewhere is the usual one. */
static void device_error(const struct opts *o, const struct nbd_conf_export *e, int ret)
{
	if (ret == -EBUSY && e->backend == NBD_BACKEND_FILE)
		fprintf(stderr, "rqnbd: %s is in use (locked by another server, or a busy "
			"block device); --lock off to serve it anyway\n", e->path);
	else
		fprintf(stderr, "rqnbd: cannot set up the %s device%s%s%s%s: %s\n",
			e->backend == NBD_BACKEND_MEMORY ? "memory" :
			e->backend == NBD_BACKEND_PACED ? "paced" : o->rbd ? "rbd" : "file",
			o->config ? " of export " : "", o->config ? e->name : "",
			e->sched[0] ? " with scheduler " : "", e->sched, strerror(-ret));
}

/* The active scheduler of @q: the bracketed name of the attribute. */
static void queue_sched(struct rq_queue *q, char *buf, size_t n)
{
	char *open, *close;

	buf[0] = '\0';
	if (rq_queue_attr_get(q, "scheduler", buf, n) <= 0)
		return;
	open = strchr(buf, '[');
	close = open ? strchr(open, ']') : NULL;
	if (open && close) {
		*close = '\0';
		memmove(buf, open + 1, strlen(open + 1) + 1);
	}
}

/* The one line saying what an export is and where it is served. */
static void banner(const struct opts *o, const struct nbd_conf_export *e, struct device *dev)
{
	char sched[128], shape[48], what[64];

	queue_sched(dev->q, sched, sizeof(sched));
	if (e->backend == NBD_BACKEND_PACED)
		snprintf(shape, sizeof(shape), "paced at %u IOPS, one at a time", e->iops);
	else if (!e->sq)
		snprintf(shape, sizeof(shape), "%u hw queues", export_queues(o, e));
	else if (e->backend == NBD_BACKEND_FILE)
		snprintf(shape, sizeof(shape), "single queue, %u workers", export_queues(o, e));
	else
		snprintf(shape, sizeof(shape), "single queue");
	if (o->config)
		snprintf(what, sizeof(what), "export '%.40s': ", e->name);
	else
		what[0] = '\0';
	fprintf(stderr, "rqnbd: %sserving %llu bytes (%s%s, %s, depth %u, "
		"scheduler %s) on %s%s%s\n", what,
		(unsigned long long)dev->size,
		e->backend == NBD_BACKEND_FILE ? e->path : o->rbd ? o->rbd : "memory",
		e->read_only ? ", read-only" : "", shape, export_depth(o, e), sched,
		o->unix_path ? o->unix_path : o->bind_addr ? o->bind_addr : "127.0.0.1",
		o->port ? " port " : "", o->port ? o->port : "");
}

/* The export of @dev: the largest request is a power of two that fits the
 * connection's buffer budget, at most the protocol's 32 MiB. */
static void make_export(const struct opts *o, const struct nbd_conf_export *e,
			const struct device *dev, struct nbd_export *exp)
{
	uint32_t max_block = RQNBD_MAX_BLOCK;

	while (max_block > o->lim.conn_buffer)
		max_block >>= 1;
	*exp = (struct nbd_export){
		.q = dev->q,
		.size = dev->size,
		.name = e->name,
		.description = e->description[0] ? e->description :
			       e->backend == NBD_BACKEND_MEMORY ? "rqnbd memory export" :
			       e->backend == NBD_BACKEND_PACED ? "rqnbd paced memory export" :
			       o->rbd ? "rqnbd rbd export" : "rqnbd file export",
		.read_only = e->read_only || (o->rbd && strchr(o->rbd, '@')), /* a snapshot */
		.max_conns = e->max_conns,
		.min_block = RQNBD_MIN_BLOCK,
		.pref_block = RQNBD_PREF_BLOCK,
		.max_block = max_block,
	};
	/* backend queries; rbd: all data, cache by a read ahead, no fast zero */
	if (dev->null) {
		exp->block_status = nbd_memory_block_status;
		exp->backend = dev->null; /* cache: a read ahead through the queue */
		exp->zero_fast = true; /* whole pages freed, the rest cleared */
	} else if (dev->file) {
		exp->block_status = nbd_file_block_status;
		exp->cache = nbd_file_cache;
		exp->backend = dev->file;
		exp->zero_fast = nbd_file_zero_fast(dev->file);
	}
}

/* ---------------------------------------------------------------- tenants */

#define RQNBD_PACED_NR_REQUESTS "128"  /* scheduler requests of a paced export */
#define RQNBD_MAX_LIVE_GROUPS 256       /* io groups made over all reloads */
#define RQNBD_TRACE_NAME_MAX 80         /* "rqnbd-" and an export's name, cut */
#define RQNBD_RETIRE_POLL_MS 200        /* a removed export's clients: looked at */

/* An io group by its name in the file; kept until exit (contexts in it
 * hold their own references, a reload may name it again). */
struct live_group {
	char name[NBD_CONF_NAME_MAX + 1];
	struct rq_io_group *g;
};

/* Everything served, and the rules clients are placed by. */
struct rqnbd {
	struct opts *o;
	pthread_rwlock_t lock;          /* cfg, groups: read by the policy hooks */
	struct nbd_config *boot;        /* as started: the exports' names and
					   descriptions the server points to */
	struct nbd_config *cfg;         /* what is served now (exports: as started) */
	struct live_group groups[RQNBD_MAX_LIVE_GROUPS];
	unsigned ngroups;
	struct device dev[NBD_MAX_EXPORTS];
	struct nbd_export exps[NBD_MAX_EXPORTS];
	struct nbd_server *srv;
	struct nbd_tls *tls;             /* --tls credentials, or NULL */
	/* --trace and --iostat, one of each per export */
	char trace_name[NBD_MAX_EXPORTS][RQNBD_TRACE_NAME_MAX];
	bool traced[NBD_MAX_EXPORTS];
	struct nbd_iostat io[NBD_MAX_EXPORTS];
	/* exports a reload removed that still serve clients (their slot in
	 * cfg is empty; the device stays until the last client leaves) */
	bool retiring[NBD_MAX_EXPORTS];
	char gone[NBD_MAX_EXPORTS][NBD_CONF_NAME_MAX + 1];
};

/* What a reload changes in the list of exports (slots, see below). */
struct reload_plan {
	unsigned add[NBD_MAX_EXPORTS], nadd;   /* new exports: their slots in m */
	unsigned rm[NBD_MAX_EXPORTS], nrm;     /* removed: their slots */
};

/* The live group named @name, or NULL.  Context: under r->lock. */
static struct rq_io_group *live_group(struct rqnbd *r, const char *name)
{
	unsigned i;

	for (i = 0; i < r->ngroups; i++)
		if (!strcmp(r->groups[i].name, name))
			return r->groups[i].g;
	return NULL;
}

/* Make the groups of @cfg that do not exist yet (weights are set at the
 * switch).  Context: under r->lock for writing once serving.  Return: 0,
 * or -ENOMEM / -ENOSPC. */
static int live_groups_make(struct rqnbd *r, const struct nbd_config *cfg)
{
	unsigned i;

	for (i = 0; i < cfg->ngroups; i++) {
		const struct nbd_conf_group *cg = &cfg->groups[i];
		struct live_group *lg;

		if (live_group(r, cg->name))
			continue;
		if (r->ngroups == RQNBD_MAX_LIVE_GROUPS)
			return -ENOSPC;
		lg = &r->groups[r->ngroups];
		lg->g = rq_iog_create(cg->weight);
		if (!lg->g)
			return -ENOMEM;
		strcpy(lg->name, cg->name);
		r->ngroups++;
	}
	return 0;
}

/* nbd_policy.resolve: an alias of a [client] names its export. */
static int tenant_resolve(void *arg, const char *name)
{
	struct rqnbd *r = arg;
	int i;

	pthread_rwlock_rdlock(&r->lock);
	i = nbd_config_resolve_alias(r->cfg, name);
	pthread_rwlock_unlock(&r->lock);
	return i;
}

/*
 * nbd_policy.admit: a named client goes into its group with its class,
 * level and weight; one not named by the [server] unnamed policy.  A
 * client named by TLS identity may use its own export only.
 */
static int tenant_admit(void *arg, const struct nbd_client_info *ci, struct rq_io_context *ioc,
			bool reapply)
{
	struct rqnbd *r = arg;
	const struct nbd_config *cfg;
	struct rq_io_group *g = NULL;
	uint16_t prio = 0;
	unsigned weight = 0;
	int k, ret = 0;

	(void)reapply;
	pthread_rwlock_rdlock(&r->lock);
	cfg = r->cfg;
	k = nbd_config_match_client(cfg, ci->name, ci->tls_identity);
	if (k >= 0) {
		const struct nbd_conf_client *cl = &cfg->clients[k];

		if (nbd_config_find_export(cfg, cl->export) != (int)ci->export)
			ret = -EACCES;
		if (cl->group >= 0)
			g = live_group(r, cfg->groups[cl->group].name);
		if (cl->ioclass)
			prio = RQ_IOPRIO_VALUE(cl->ioclass, cl->level);
		weight = cl->weight;
	} else if (cfg->unnamed == NBD_UNNAMED_REFUSE) {
		ret = -EACCES;
	} else if (cfg->unnamed == NBD_UNNAMED_GROUP) {
		g = live_group(r, cfg->groups[cfg->unnamed_group].name);
	}
	if (!ret) {
		rq_ioc_set_group(ioc, g);
		rq_ioc_set_prio(ioc, prio);
		rq_ioc_set_weight(ioc, weight);
	}
	pthread_rwlock_unlock(&r->lock);
	return ret;
}

/*
 * Write export @e's tunables to @q (a paced export on mq first gets room
 * for its scheduler: RQNBD_PACED_NR_REQUESTS).  Return: 0, or -errno with
 * *@bad the tunable refused (NULL: the nr_requests of a paced export).
 */
static int tunables_apply(struct rq_queue *q, const struct nbd_conf_export *e, bool paced,
			  const struct nbd_conf_tunable **bad)
{
	char sched[256];
	unsigned i;
	int ret;

	*bad = NULL;
	queue_sched(q, sched, sizeof(sched));
	if (paced && !e->sq && strcmp(sched, "none") &&
	    (ret = rq_queue_attr_set(q, "nr_requests", RQNBD_PACED_NR_REQUESTS)))
		return ret;
	for (i = 0; i < e->ntunables; i++) {
		ret = rq_queue_attr_set(q, e->tunables[i].name, e->tunables[i].value);
		if (ret) {
			*bad = &e->tunables[i];
			return ret;
		}
	}
	return 0;
}

/* "FILE:LINE: attr.NAME = VALUE: the queue refuses it (reason)" into @err. */
static void tunable_error(const char *file, const struct nbd_conf_tunable *t, int ret,
			  char *err, size_t n)
{
	if (t)
		snprintf(err, n, "%s:%u: %s = %s: the queue refuses it (%s)", file, t->line,
			 t->name, t->value, strerror(-ret));
	else
		snprintf(err, n, "%s: nr_requests %s: %s", file, RQNBD_PACED_NR_REQUESTS,
			 strerror(-ret));
}

/*
 * Would export @e's scheduler and tunables be taken?  Tried on a scratch
 * null queue of the same front end and shape, so that a reload with a
 * bad name changes nothing.  Return: 0, or -EINVAL with @err said.
 */
static int tunables_check(const char *file, const struct opts *o,
			  const struct nbd_conf_export *e, const char *sched, char *err,
			  size_t n)
{
	struct nbd_conf_export scratch = *e;
	const struct nbd_conf_tunable *bad;
	struct device dev;
	int ret;

	scratch.backend = e->backend == NBD_BACKEND_PACED ? NBD_BACKEND_PACED
							  : NBD_BACKEND_MEMORY;
	scratch.size = 1 << 20;
	snprintf(scratch.sched, sizeof(scratch.sched), "%.63s", sched);
	scratch.iops = 1000000;
	ret = device_open_null(o, &scratch, &dev);
	if (ret) {
		snprintf(err, n, "%s:%u: [export %s]: scheduler '%s' is not one of the %s front "
			 "end (rqnbd --front %s --list-scheds)", file, e->line, e->name, sched,
			 e->sq ? "sq" : "mq", e->sq ? "sq" : "mq");
		return -EINVAL;
	}
	ret = tunables_apply(dev.q, e, dev.paced, &bad);
	null_destroy(dev.null);
	if (ret)
		tunable_error(file, bad, ret, err, n);
	return ret ? -EINVAL : 0;
}

/* What cannot change on a running export: its device and what clients saw. */
static bool export_same_shape(const struct nbd_conf_export *a, const struct nbd_conf_export *b)
{
	return a->backend == b->backend && !strcmp(a->path, b->path) && a->size == b->size &&
	       a->iops == b->iops && a->sq == b->sq && a->read_only == b->read_only &&
	       a->queues == b->queues && a->depth == b->depth &&
	       a->max_conns == b->max_conns && !strcmp(a->description, b->description) &&
	       a->is_default == b->is_default;
}

/*
 * The slot a new export will get: the server fills its first free slot,
 * and the server's free slots are the ones empty in @m that no retiring
 * or removed export holds.
 */
static int free_slot(const struct rqnbd *r, const struct nbd_config *m,
		     const struct reload_plan *p)
{
	unsigned i, k;

	for (i = 1; i < NBD_MAX_EXPORTS; i++) {
		bool used = (i < m->nexports && m->exports[i].name[0]) || r->retiring[i];

		for (k = 0; k < p->nrm && !used; k++)
			used = p->rm[k] == i;
		if (!used)
			return (int)i;
	}
	return -1;
}

/*
 * The exports of a reload: those running and still in @n keep their slot
 * and take @n's scheduler and tunables (what else changed is said and
 * kept); those running and not in @n are removed (their slot emptied in
 * @m; the default export stays); those of @n not running are added in
 * the slots the server will give them.  Return: 0 or -EINVAL with @err.
 */
static int reload_exports(struct rqnbd *r, const char *file, const struct nbd_config *n,
			  struct nbd_config *m, struct reload_plan *p, char *err, size_t errn)
{
	const struct nbd_config *cur = r->cfg;
	unsigned i;

	m->nexports = cur->nexports;
	memset(m->exports, 0, sizeof(m->exports));
	memcpy(m->exports, cur->exports, sizeof(cur->exports[0]) * cur->nexports);
	for (i = 0; i < cur->nexports; i++) {
		struct nbd_conf_export *e = &m->exports[i];
		int j = e->name[0] ? nbd_config_find_export(n, e->name) : -2;
		char sched[256];

		if (j == -2)
			continue; /* an empty slot */
		if (j < 0 && i == 0) {
			fprintf(stderr, "rqnbd: reload: export '%s' is the default export: it "
				"cannot be removed live: kept\n", e->name);
			continue;
		}
		if (j < 0) {
			p->rm[p->nrm++] = i;
			memset(e, 0, sizeof(*e));
			continue;
		}
		if (!export_same_shape(e, &n->exports[j]))
			fprintf(stderr, "rqnbd: reload: export '%s': backend, size, front, "
				"queues, depth, read-only, description, default and "
				"max-connections cannot change live: kept\n", e->name);
		queue_sched(r->dev[i].q, sched, sizeof(sched));
		if (n->exports[j].sched[0])
			snprintf(e->sched, sizeof(e->sched), "%s", n->exports[j].sched);
		else
			snprintf(e->sched, sizeof(e->sched), "%.63s", sched);
		e->ntunables = n->exports[j].ntunables;
		memcpy(e->tunables, n->exports[j].tunables, sizeof(e->tunables));
		if (tunables_check(file, r->o, e, e->sched, err, errn))
			return -EINVAL;
	}
	for (i = 0; i < n->nexports; i++) {
		int slot;

		if (nbd_config_find_export(cur, n->exports[i].name) >= 0)
			continue;
		if (tunables_check(file, r->o, &n->exports[i], n->exports[i].sched, err, errn))
			return -EINVAL;
		slot = free_slot(r, m, p);
		if (slot < 0) {
			snprintf(err, errn, "%s: export '%s': no room for more than %u exports "
				 "(removed ones still served count)", file, n->exports[i].name,
				 NBD_MAX_EXPORTS);
			return -EINVAL;
		}
		m->exports[slot] = n->exports[i];
		if (m->exports[slot].is_default)
			fprintf(stderr, "rqnbd: reload: export '%s' is new: it cannot become "
				"the default export live (the default stays '%s')\n",
				n->exports[i].name, cur->exports[0].name);
		m->exports[slot].is_default = false;
		if ((unsigned)slot >= m->nexports)
			m->nexports = (unsigned)slot + 1;
		p->add[p->nadd++] = (unsigned)slot;
	}
	return 0;
}

/*
 * The configuration a reload switches to: @n's groups, clients and policy
 * for unnamed clients, and the exports of reload_exports().  Clients of
 * exports no longer served are said and skipped.
 * Return: 0, or -EINVAL with @err (a scheduler or tunable refused).
 */
static int reload_merge(struct rqnbd *r, const char *file, struct nbd_config *n,
			struct nbd_config *m, struct reload_plan *p, char *err, size_t errn)
{
	unsigned i, k;

	*m = *n;
	if (reload_exports(r, file, n, m, p, err, errn))
		return -EINVAL;
	for (i = k = 0; i < n->nclients; i++) {
		if (nbd_config_find_export(m, n->clients[i].export) < 0) {
			fprintf(stderr, "rqnbd: reload: client '%s': export '%s' is not served: "
				"skipped\n", n->clients[i].name, n->clients[i].export);
			continue;
		}
		m->clients[k++] = n->clients[i];
	}
	m->nclients = k;
	return 0;
}

/* Switch export @i to the scheduler and tunables of @e (a reload).
 * Return: true if something failed (said). */
static bool reload_export(struct rqnbd *r, unsigned i, const struct nbd_conf_export *e)
{
	const struct nbd_conf_tunable *bad;
	char sched[256], err[NBD_CONF_ERR_MAX];
	int ret;

	queue_sched(r->dev[i].q, sched, sizeof(sched));
	if (strcmp(sched, e->sched)) {
		ret = rq_queue_attr_set(r->dev[i].q, "scheduler", e->sched);
		if (ret) {
			fprintf(stderr, "rqnbd: reload: export '%s': scheduler %s: %s\n",
				e->name, e->sched, strerror(-ret));
			return true;
		}
		fprintf(stderr, "rqnbd: reload: export '%s': scheduler %s -> %s\n", e->name,
			sched, e->sched);
	}
	ret = tunables_apply(r->dev[i].q, e, r->dev[i].paced, &bad);
	if (ret) {
		tunable_error(r->o->config, bad, ret, err, sizeof(err));
		fprintf(stderr, "rqnbd: reload: %s\n", err);
	}
	return ret != 0;
}

/* ------------------------------------------------------- --trace, --iostat */

/*
 * The trace name of export @i: "rqnbd" for the default export (the first),
 * "rqnbd-NAME" for the others, NAME cut to fit and every character but
 * letters, digits, '.', '_' and '-' made '_' (names may hold '/').  Two
 * names that come out alike get "-I" (the export's index) added.
 */
static void trace_name(struct rqnbd *r, unsigned i, char *out, size_t n)
{
	const char *name = r->cfg->exports[i].name;
	size_t len, k;
	unsigned j;

	if (i == 0) {
		snprintf(out, n, "rqnbd");
		return;
	}
	len = (size_t)snprintf(out, n, "rqnbd-%.60s", name);
	for (k = 6; k < len && k < n; k++)
		if (!isalnum((unsigned char)out[k]) && !strchr("._-", out[k]))
			out[k] = '_';
	for (j = 0; j < NBD_MAX_EXPORTS; j++)
		if (j != i && r->traced[j] && !strcmp(r->trace_name[j], out)) {
			snprintf(out + strlen(out), n - strlen(out), "-%u", i);
			break;
		}
}

/* Export @i's trace ends (its files complete, its totals said), and its
 * iostat lines. */
static void observe_export_stop(struct rqnbd *r, unsigned i)
{
	if (r->traced[i]) {
		struct rq_trace_info ti = { .events = 0 };
		int ret = rq_queue_trace_stop(r->dev[i].q, &ti, sizeof(ti));

		fprintf(stderr, "rqnbd: trace %s/%s: %llu events, %llu dropped%s\n",
			r->o->trace_dir, r->trace_name[i], (unsigned long long)ti.events,
			(unsigned long long)ti.dropped, ret ? " (write error)" : "");
		r->traced[i] = false;
	}
	memset(&r->io[i], 0, sizeof(r->io[i]));
}

static void observe_stop(struct rqnbd *r)
{
	for (unsigned i = 0; i < NBD_MAX_EXPORTS; i++)
		observe_export_stop(r, i);
}

/*
 * --trace and --iostat on export @i's queue.  The lines of an export
 * served from a --config file name it.  Return: 0 or -errno (said).
 */
static int observe_export(struct rqnbd *r, unsigned i)
{
	const struct opts *o = r->o;
	int ret = 0;

	if (o->trace_dir) {
		trace_name(r, i, r->trace_name[i], sizeof(r->trace_name[i]));
		ret = rq_queue_trace_start(r->dev[i].q, o->trace_dir, r->trace_name[i]);
		if (ret)
			fprintf(stderr, "rqnbd: --trace %s/%s: %s\n", o->trace_dir,
				r->trace_name[i], strerror(-ret));
		r->traced[i] = !ret;
	}
	if (!ret && o->iostat) {
		ret = nbd_iostat_start(&r->io[i], r->dev[i].q,
				       o->config ? r->cfg->exports[i].name : NULL, o->iostat_ms,
				       mono_ms());
		if (ret)
			fprintf(stderr, "rqnbd: --iostat: %s\n", strerror(-ret));
	}
	return ret;
}

/* --trace and --iostat on every export.  Return: 0 or -errno (said; what
 * was started is stopped). */
static int observe_start(struct rqnbd *r)
{
	unsigned i;
	int ret = 0;

	for (i = 0; i < r->cfg->nexports && !ret; i++)
		ret = observe_export(r, i);
	if (ret)
		observe_stop(r);
	return ret;
}

/* ms until the next iostat line of any export (0: now); -1: none. */
static int observe_timeout(const struct rqnbd *r, uint64_t now)
{
	int t = -1;
	unsigned i;

	for (i = 0; i < NBD_MAX_EXPORTS; i++) {
		int ti = nbd_iostat_timeout(&r->io[i], now);

		if (ti >= 0 && (t < 0 || ti < t))
			t = ti;
	}
	return t;
}

static void observe_tick(struct rqnbd *r, uint64_t now)
{
	unsigned i;

	for (i = 0; i < NBD_MAX_EXPORTS; i++)
		nbd_iostat_tick(&r->io[i], now, stderr);
}

/*
 * Open the devices of the exports a reload adds (slots @p->add of @m).
 * Return: 0, or -1 with every one closed again (said why).
 */
static int reload_open(struct rqnbd *r, struct nbd_config *m, const struct reload_plan *p)
{
	const struct nbd_conf_tunable *bad;
	char err[NBD_CONF_ERR_MAX];
	unsigned k;
	int ret = 0;

	for (k = 0; k < p->nadd && !ret; k++) {
		unsigned i = p->add[k];
		struct nbd_conf_export *e = &m->exports[i];

		ret = device_open(r->o, e, &r->dev[i]);
		if (ret) {
			device_error(r->o, e, ret);
			break;
		}
		if (!e->sched[0]) /* the queue's default, named for later reloads */
			queue_sched(r->dev[i].q, e->sched, sizeof(e->sched));
		ret = tunables_apply(r->dev[i].q, e, r->dev[i].paced, &bad);
		if (ret) {
			tunable_error(r->o->config, bad, ret, err, sizeof(err));
			fprintf(stderr, "rqnbd: %s\n", err);
			k++;
			break;
		}
		make_export(r->o, e, &r->dev[i], &r->exps[i]);
	}
	if (!ret)
		return 0;
	while (k--) {
		device_close(&r->dev[p->add[k]]);
		memset(&r->dev[p->add[k]], 0, sizeof(r->dev[0]));
	}
	return -1;
}

/*
 * Export @i (removed by a reload) serves no client any more: flush its
 * device, end its trace, give its slot back to the server, close it.
 */
static void export_close(struct rqnbd *r, unsigned i)
{
	rq_status_t st = device_flush(&r->dev[i]);

	observe_export_stop(r, i);
	if (nbd_server_free_export(r->srv, i))
		abort(); /* retiring and without clients: cannot fail */
	device_close(&r->dev[i]);
	memset(&r->dev[i], 0, sizeof(r->dev[i]));
	r->retiring[i] = false;
	fprintf(stderr, "rqnbd: export '%s' removed (final flush %s)\n", r->gone[i],
		rq_status_name(st));
}

/* The exports a reload adds go to the server; those it removes leave the
 * list, and close now or when their last client leaves. */
static void reload_apply_exports(struct rqnbd *r, const struct nbd_config *old,
				 const struct reload_plan *p)
{
	unsigned k;

	for (k = 0; k < p->nadd; k++) {
		unsigned i = p->add[k];
		int idx = nbd_server_add_export(r->srv, &r->exps[i]);

		if (idx != (int)i) { /* the slots agree (free_slot()): cannot happen */
			fprintf(stderr, "rqnbd: reload: export '%s': the server gave slot %d, "
				"not %u\n", r->cfg->exports[i].name, idx, i);
			abort();
		}
		fprintf(stderr, "rqnbd: reload: export '%s' added\n", r->cfg->exports[i].name);
		banner(r->o, &r->cfg->exports[i], &r->dev[i]);
		observe_export(r, i);
	}
	for (k = 0; k < p->nrm; k++) {
		unsigned i = p->rm[k];
		int left = nbd_server_retire_export(r->srv, i);

		snprintf(r->gone[i], sizeof(r->gone[i]), "%s", old->exports[i].name);
		if (left == 0) {
			export_close(r, i);
			continue;
		}
		r->retiring[i] = true;
		fprintf(stderr, "rqnbd: reload: export '%s' is not in the file: no longer "
			"listed or opened; its %d client%s stay%s until they leave\n", r->gone[i],
			left, left == 1 ? "" : "s", left == 1 ? "s" : "");
	}
}

/* Exports removed while clients had them: close those the last client left. */
static void retiring_check(struct rqnbd *r)
{
	unsigned i;

	for (i = 1; i < NBD_MAX_EXPORTS; i++)
		if (r->retiring[i] && !nbd_server_export_conns(r->srv, i))
			export_close(r, i);
}

static bool any_retiring(const struct rqnbd *r)
{
	for (unsigned i = 1; i < NBD_MAX_EXPORTS; i++)
		if (r->retiring[i])
			return true;
	return false;
}

/*
 * SIGHUP: read the file again; a bad file (or a new export whose device
 * cannot be set up) changes nothing.  Otherwise the new groups, weights,
 * clients and policy take over (and are applied to every connection being
 * served), new exports are served, removed ones leave the list (and close
 * once their clients are gone), then each export's scheduler and
 * tunables.  Connections stay; a scheduler switch only holds their
 * requests while the queue is frozen.
 */
static void reload(struct rqnbd *r)
{
	struct nbd_config *n = malloc(sizeof(*n)), *m = malloc(sizeof(*m)), *old;
	struct reload_plan p = { .nadd = 0, .nrm = 0 };
	char err[NBD_CONF_ERR_MAX];
	unsigned i, moved, failed = 0;

	if (!n || !m) {
		fprintf(stderr, "rqnbd: reload: out of memory; nothing changed\n");
		goto out;
	}
	if (nbd_config_load(r->o->config, n, err) || reload_merge(r, r->o->config, n, m, &p, err,
								  sizeof(err))) {
		fprintf(stderr, "rqnbd: reload: %s; nothing changed\n", err);
		goto out;
	}
	if (reload_open(r, m, &p)) {
		fprintf(stderr, "rqnbd: reload: %s: a new export cannot be served; nothing "
			"changed\n", r->o->config);
		goto out;
	}
	pthread_rwlock_wrlock(&r->lock);
	if (live_groups_make(r, m)) { /* groups made stay unused: harmless */
		pthread_rwlock_unlock(&r->lock);
		fprintf(stderr, "rqnbd: reload: more than %u io groups made since start, or no "
			"memory; nothing changed\n", RQNBD_MAX_LIVE_GROUPS);
		for (i = 0; i < p.nadd; i++) {
			device_close(&r->dev[p.add[i]]);
			memset(&r->dev[p.add[i]], 0, sizeof(r->dev[0]));
		}
		goto out;
	}
	for (i = 0; i < m->ngroups; i++)
		rq_iog_set_weight(live_group(r, m->groups[i].name), m->groups[i].weight);
	old = r->cfg;
	r->cfg = m;
	m = old;
	pthread_rwlock_unlock(&r->lock);
	reload_apply_exports(r, m, &p);
	for (i = 0; i < r->cfg->nexports; i++)
		if (r->cfg->exports[i].name[0])
			failed += reload_export(r, i, &r->cfg->exports[i]);
	moved = nbd_server_reapply(r->srv);
	fprintf(stderr, "rqnbd: reloaded %s: %u groups, %u clients, %u connections placed "
		"again%s\n", r->o->config, r->cfg->ngroups, r->cfg->nclients, moved,
		failed ? " (some exports kept settings, see above)" : "");
out:
	free(n);
	free(m);
}

/* ------------------------------------------------------------- the file */

/* The command line's one export, as a file would give it. */
static void config_from_opts(const struct opts *o, struct nbd_config *cfg)
{
	struct nbd_conf_export *e = &cfg->exports[0];

	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->unnamed_group = -1;
	cfg->nexports = 1;
	snprintf(e->name, sizeof(e->name), "%s", o->export_name);
	e->backend = o->memory ? NBD_BACKEND_MEMORY : o->file ? NBD_BACKEND_FILE
							      : NBD_BACKEND_NONE;
	e->size = o->memory;
	if (o->file)
		snprintf(e->path, sizeof(e->path), "%s", o->file);
	e->read_only = o->read_only;
	e->sq = !strcmp(o->front, "sq");
	snprintf(e->sched, sizeof(e->sched), "%s", o->sched ? o->sched : "");
}

/* --config FILE: read it, take its listening and limits unless the
 * command line gave them.  Bad file: exit 2 with FILE:LINE: reason. */
static void config_read(struct opts *o, struct nbd_config *cfg)
{
	char err[NBD_CONF_ERR_MAX];

	if (nbd_config_load(o->config, cfg, err)) {
		fprintf(stderr, "rqnbd: %s\n", err);
		exit(PROG_EXIT_USAGE);
	}
	nbd_config_default_first(cfg);
	if (!o->unix_path && !o->port) {
		o->unix_path = cfg->unix_path[0] ? cfg->unix_path : NULL;
		o->port = cfg->port[0] ? cfg->port : NULL;
		if (!o->bind_addr && cfg->bind_addr[0])
			o->bind_addr = cfg->bind_addr;
	}
	if (o->unix_path ? !!o->port : !o->port && !o->check_config)
		prog_usage_error("%s: [server] needs exactly one of unix and port (or give "
				 "--unix or --port)", o->config);
	if (o->bind_addr && !o->port)
		prog_usage_error("%s: bind goes with port", o->config);
	if (cfg->max_conns)
		o->lim.max_conns = cfg->max_conns;
	if (cfg->max_per_client)
		o->lim.max_per_client = cfg->max_per_client;
	if (cfg->conn_requests)
		o->lim.conn_requests = cfg->conn_requests;
	if (o->lim.reserve >= o->lim.max_conns)
		o->lim.reserve = o->lim.max_conns - 1;
}

/* --check-config: what the file serves, one line each. */
static int config_print(const struct nbd_config *cfg)
{
	static const char *const backends[] = { "?", "memory", "file", "paced" };
	static const char *const unnamed[] = { "own", "group", "refuse" };
	unsigned i;

	for (i = 0; i < cfg->nexports; i++) {
		const struct nbd_conf_export *e = &cfg->exports[i];

		printf("export %s: %s %s%llu bytes%s, front %s, scheduler %s, %u tunables%s\n",
		       e->name, backends[e->backend], e->backend == NBD_BACKEND_FILE ? e->path : "",
		       (unsigned long long)e->size, e->read_only ? ", read-only" : "",
		       e->sq ? "sq" : "mq", e->sched[0] ? e->sched : "default", e->ntunables,
		       i == 0 ? ", default" : "");
	}
	for (i = 0; i < cfg->ngroups; i++)
		printf("group %s: weight %u\n", cfg->groups[i].name, cfg->groups[i].weight);
	for (i = 0; i < cfg->nclients; i++) {
		const struct nbd_conf_client *cl = &cfg->clients[i];

		printf("client %s: alias %s, tls-identity %s, export %s, group %s, class %s/%u, "
		       "weight %u\n", cl->name, cl->alias[0] ? cl->alias : "-",
		       cl->tls_identity[0] ? cl->tls_identity : "-", cl->export,
		       cl->group >= 0 ? cfg->groups[cl->group].name : "-",
		       cl->ioclass ? nbd_config_class_name(cl->ioclass) : "be",
		       cl->ioclass ? cl->level : 4, cl->weight);
	}
	printf("unnamed clients: %s%s%s\n", unnamed[cfg->unnamed],
	       cfg->unnamed == NBD_UNNAMED_GROUP ? " " : "",
	       cfg->unnamed == NBD_UNNAMED_GROUP ? cfg->unnamed_group_name : "");
	return 0;
}

/* ------------------------------------------------------------- main */

/* Stop accepting, drain the connections, flush the devices, say the counters. */
static int shutdown_all(struct rqnbd *r, struct acceptor *a)
{
	const struct opts *o = r->o;
	struct nbd_server_stats st;
	uint64_t now = mono_ms();
	rq_status_t fs = RQ_STS_OK;
	unsigned i;

	close(a->lfd);
	if (a->spare >= 0)
		close(a->spare);
	if (o->unix_path)
		unlink_unix(o->unix_path);
	nbd_server_stop(r->srv);
	nbd_server_wait(r->srv);
	for (i = 0; i < NBD_MAX_EXPORTS; i++) {
		rq_status_t s = r->dev[i].q ? device_flush(&r->dev[i]) : RQ_STS_OK;

		if (s != RQ_STS_OK)
			fs = s;
	}
	observe_stop(r);
	ratelog_flush(&a->refused, now);
	ratelog_flush(&a->nofd, now);
	ratelog_flush(&a->evicted, now);
	nbd_server_get_stats(r->srv, &st);
	fprintf(stderr, "rqnbd: %llu connections, %llu requests, %llu error replies, "
		"%llu dropped, %llu refused, %llu evicted, %llu timed out; final flush %s\n",
		(unsigned long long)st.connections, (unsigned long long)st.requests,
		(unsigned long long)st.errors, (unsigned long long)st.dropped,
		(unsigned long long)st.refused, (unsigned long long)st.evicted,
		(unsigned long long)st.timeouts, rq_status_name(fs));
	return fs == RQ_STS_OK ? 0 : RQNBD_EXIT_FAIL;
}

static void devices_close(struct rqnbd *r, unsigned n)
{
	while (n--)
		device_close(&r->dev[n]);
}

/*
 * Open every export's device, write its tunables, make its nbd_export.
 * Return: 0, or the exit status (devices opened are closed).
 */
static int devices_open(struct rqnbd *r)
{
	const struct nbd_conf_tunable *bad;
	char err[NBD_CONF_ERR_MAX];
	unsigned i;
	int ret;

	for (i = 0; i < r->boot->nexports; i++) {
		const struct nbd_conf_export *e = &r->boot->exports[i];

		ret = device_open(r->o, e, &r->dev[i]);
		if (ret) {
			device_error(r->o, e, ret);
			devices_close(r, i);
			return RQNBD_EXIT_FAIL;
		}
		ret = tunables_apply(r->dev[i].q, e, r->dev[i].paced, &bad);
		if (ret) {
			tunable_error(r->o->config ? r->o->config : "rqnbd", bad, ret, err,
				      sizeof(err));
			fprintf(stderr, "rqnbd: %s\n", err);
			devices_close(r, i + 1);
			return PROG_EXIT_USAGE;
		}
		make_export(r->o, e, &r->dev[i], &r->exps[i]);
	}
	return 0;
}

/* Signals: SIGUSR1 prints every export's counters, SIGHUP reloads;
 * SIGINT and SIGTERM stop (true). */
static bool on_signal(int sfd, struct rqnbd *r)
{
	struct signalfd_siginfo si;
	unsigned i;

	if (read(sfd, &si, sizeof(si)) != sizeof(si))
		return false;
	if (si.ssi_signo == SIGUSR1) {
		if (!r->io[0].q)
			fprintf(stderr, "rqnbd: SIGUSR1: no counters (start with --iostat S)\n");
		for (i = 0; i < NBD_MAX_EXPORTS; i++)
			nbd_iostat_dump(&r->io[i], stderr);
		return false;
	}
	if (si.ssi_signo == SIGHUP) {
		if (r->o->config)
			reload(r);
		else
			fprintf(stderr, "rqnbd: SIGHUP: no --config file to read again\n");
		return false;
	}
	fprintf(stderr, "rqnbd: %s: stopping\n", strsignal(si.ssi_signo));
	return true;
}

static void accept_loop(struct acceptor *a, struct rqnbd *r, int sfd)
{
	for (;;) {
		struct pollfd pfd[2] = { { a->lfd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		uint64_t now = mono_ms();
		int timeout = observe_timeout(r, now);

		if (any_retiring(r) && (timeout < 0 || timeout > RQNBD_RETIRE_POLL_MS))
			timeout = RQNBD_RETIRE_POLL_MS;

		if (now < a->paused_until) {
			pfd[0].fd = -1;
			if (timeout < 0 || (uint64_t)timeout > a->paused_until - now)
				timeout = (int)(a->paused_until - now);
		}
		if (poll(pfd, 2, timeout) < 0) {
			if (errno == EINTR)
				continue;
			perror("rqnbd: poll");
			return;
		}
		observe_tick(r, mono_ms());
		retiring_check(r);
		if ((pfd[1].revents & POLLIN) && on_signal(sfd, r))
			return;
		if (pfd[0].revents & POLLIN) {
			int n = 0;

			while (n++ < RQNBD_ACCEPT_BATCH && accept_one(a, r->srv))
				;
		}
	}
}

/* --tls: load the credentials and offer STARTTLS.  Return: 0 or -1 (said why). */
static int tls_start(const struct opts *o, struct nbd_server *srv, struct nbd_tls **tls)
{
	struct nbd_tls_config cfg = {
		.certs_dir = o->tls_certs,
		.psk_file = o->tls_psk,
		.verify_peer = o->tls_verify_peer,
	};
	char why[512];

	if (o->tls == NBD_TLS_OFF)
		return 0;
	if (nbd_tls_create(&cfg, tls, why, sizeof(why))) {
		fprintf(stderr, "rqnbd: --tls: %s\n", why);
		return -1;
	}
	return nbd_server_set_tls(srv, *tls, o->tls);
}

/* The server over the devices, with the tenants' policy when a file gave
 * them.  Return: 0 or the exit status. */
static int server_start(struct rqnbd *r)
{
	struct nbd_policy pol = { tenant_resolve, tenant_admit, r };
	int ret = nbd_server_create(r->exps, r->cfg->nexports, &r->o->lim, &r->srv);

	if (ret) {
		fprintf(stderr, "rqnbd: %s\n", strerror(-ret));
		return RQNBD_EXIT_FAIL;
	}
	if (tls_start(r->o, r->srv, &r->tls))
		return RQNBD_EXIT_FAIL;
	if (r->o->config) {
		ret = live_groups_make(r, r->cfg);
		if (ret) {
			fprintf(stderr, "rqnbd: io groups: %s\n", strerror(-ret));
			return RQNBD_EXIT_FAIL;
		}
		nbd_server_set_policy(r->srv, &pol);
	}
	return 0;
}

static int serve(struct rqnbd *r, int sfd)
{
	struct acceptor a = {
		.refused = { .what = "refused connections" },
		.nofd = { .what = "connections refused for want of descriptors" },
		.evicted = { .what = "idle connections closed for new ones" },
	};
	struct opts *o = r->o;
	unsigned i;
	int ret;

	ret = observe_start(r);
	if (!ret)
		ret = server_start(r);
	if (ret)
		return RQNBD_EXIT_FAIL;
	a.tcp = !!o->port;
	a.lfd = o->unix_path ? listen_unix(o->unix_path)
			     : listen_tcp(o->bind_addr ? o->bind_addr : "127.0.0.1", o->port);
	a.spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (a.lfd < 0 || drop_privileges(o)) {
		if (a.lfd >= 0) {
			close(a.lfd);
			if (o->unix_path)
				unlink_unix(o->unix_path);
		}
		return RQNBD_EXIT_FAIL;
	}
	check_fd_limit(&o->lim);
	for (i = 0; i < r->cfg->nexports; i++)
		banner(o, &r->cfg->exports[i], &r->dev[i]);
	accept_loop(&a, r, sfd);
	return shutdown_all(r, &a);
}

int main(int argc, char **argv)
{
	static struct rqnbd r;
	struct opts o;
	unsigned i;
	int sfd, ret;

	parse_args(argc, argv, &o);
	if (o.list_scheds)
		return list_scheds(o.front);
	r.o = &o;
	r.boot = malloc(sizeof(*r.boot));
	r.cfg = malloc(sizeof(*r.cfg));
	if (!r.boot || !r.cfg) {
		perror("rqnbd");
		return RQNBD_EXIT_FAIL;
	}
	if (o.config)
		config_read(&o, r.boot);
	else
		config_from_opts(&o, r.boot);
	if (o.check_config)
		return config_print(r.boot);
	*r.cfg = *r.boot;
	pthread_rwlock_init(&r.lock, NULL);
	/* fixed: no malloc arena keeps large freed blocks (doc/nbd.md) */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	sfd = setup_signals();
	if (sfd < 0) {
		perror("rqnbd: signalfd");
		return RQNBD_EXIT_FAIL;
	}
	ret = devices_open(&r);
	if (ret)
		return ret;
	ret = serve(&r, sfd);
	nbd_server_destroy(r.srv);
	nbd_tls_destroy(r.tls);
	devices_close(&r, NBD_MAX_EXPORTS); /* the removed ones were closed: zeroed */
	for (i = 0; i < r.ngroups; i++)
		rq_iog_put(r.groups[i].g);
	close(sfd);
	free(r.cfg);
	free(r.boot);
	return ret;
}
