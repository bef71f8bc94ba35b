/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay: traces.  The container, and the readers of fio iolog (v2,
 * v3), blkparse text, rqreplay CSV and blktrace binary, plus the blktrace
 * binary writer.  A reader parses the whole input before it returns; the
 * first malformed line (or record) fails the load with "FILE:LINE: what".
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "replay-internal.h"

/* ------------------------------------------------------------ container */

struct rq_replay_trace *rq_replay_trace_new(void)
{
	return calloc(1, sizeof(struct rq_replay_trace));
}

int rq_replay_trace_add(struct rq_replay_trace *t, const struct rq_replay_io *io)
{
	if (!t || !io || io->op > RQ_REPLAY_DISCARD || io->offset % 512 || io->bytes % 512)
		return -EINVAL;
	if (t->nr == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;
		struct rq_replay_io *v = realloc(t->io, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->io = v;
		t->cap = cap;
	}
	t->io[t->nr++] = *io;
	return 0;
}

size_t rq_replay_trace_count(const struct rq_replay_trace *t)
{
	return t ? t->nr : 0;
}

const struct rq_replay_io *rq_replay_trace_io(const struct rq_replay_trace *t, size_t i)
{
	return t && i < t->nr ? &t->io[i] : NULL;
}

const char *rq_replay_trace_file_name(const struct rq_replay_trace *t, unsigned idx)
{
	return t && idx < t->nr_files ? t->files[idx] : NULL;
}

void rq_replay_trace_free(struct rq_replay_trace *t)
{
	unsigned i;

	if (!t)
		return;
	for (i = 0; i < t->nr_files; i++)
		free(t->files[i]);
	free(t->files);
	free(t->file_end);
	free(t->io);
	free(t);
}

static const char *const op_names[] = { "R", "W", "F", "D" };

int rq_replay_trace_write_csv(const struct rq_replay_trace *t, FILE *f)
{
	size_t i;

	fprintf(f, "time_ns,pid,op,offset,bytes\n");
	for (i = 0; i < t->nr; i++) {
		const struct rq_replay_io *io = &t->io[i];

		fprintf(f, "%" PRIu64 ",%u,%s,%" PRIu64 ",%u\n", io->time_ns, io->pid,
			op_names[io->op], io->offset, io->bytes);
	}
	return ferror(f) ? -EIO : 0;
}

/* ------------------------------------------------------------- helpers */

struct parse {
	const char *path;
	unsigned long line;
	char *err;
	size_t errlen;
	struct rq_replay_trace *t;
};

static int perr(struct parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int perr(struct parse *p, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (p->err && p->errlen)
		snprintf(p->err, p->errlen, "%s:%lu: %s", p->path, p->line, msg);
	return -EINVAL;
}

/* A whole unsigned decimal number, nothing else. */
static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* Split @line on blanks (or @sep if not 0) into at most @max fields. */
static unsigned split(char *line, char sep, char **f, unsigned max)
{
	unsigned n = 0;
	char *s = line, *save = NULL;
	char delim[3] = { ' ', '\t', 0 };

	if (sep) {
		f[n++] = s;
		while ((s = strchr(s, sep)) && n < max) {
			*s++ = 0;
			f[n++] = s;
		}
		return s ? max + 1 : n;
	}
	for (s = strtok_r(line, delim, &save); s; s = strtok_r(NULL, delim, &save)) {
		if (n == max)
			return max + 1;
		f[n++] = s;
	}
	return n;
}

static void chomp(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = 0;
}

static int add_io(struct parse *p, uint64_t time_ns, uint64_t off, uint64_t bytes, unsigned op,
		  uint32_t pid, uint32_t file)
{
	struct rq_replay_io io = { time_ns, off, (uint32_t)bytes, op, pid, file };

	if (off % 512 || bytes % 512)
		return perr(p, "offset %" PRIu64 " or length %" PRIu64
			    " is not a multiple of 512 bytes", off, bytes);
	if (bytes > (64u << 20))
		return perr(p, "length %" PRIu64 " is above 64 MiB", bytes);
	if ((op == RQ_REPLAY_READ || op == RQ_REPLAY_WRITE) && !bytes)
		return perr(p, "a read or write of 0 bytes");
	return rq_replay_trace_add(p->t, &io) ? perr(p, "out of memory") : 0;
}

/* -------------------------------------------------------------- fio iolog */

static int fio_file(struct parse *p, const char *name, bool add)
{
	unsigned i;

	for (i = 0; i < p->t->nr_files; i++)
		if (!strcmp(p->t->files[i], name))
			return add ? perr(p, "file %s added twice", name) : (int)i;
	if (!add)
		return perr(p, "file %s used before it was added", name);
	if (i % 16 == 0) {
		char **f = realloc(p->t->files, (i + 16) * sizeof(*f));
		uint64_t *e = realloc(p->t->file_end, (i + 16) * sizeof(*e));

		if (f)
			p->t->files = f;
		if (e)
			p->t->file_end = e;
		if (!f || !e)
			return perr(p, "out of memory");
	}
	p->t->files[i] = strdup(name);
	p->t->file_end[i] = 0;
	if (!p->t->files[i])
		return perr(p, "out of memory");
	p->t->nr_files++;
	return (int)i;
}

/* One line of an iolog after its timestamp (v3) was taken off. */
static int fio_line(struct parse *p, char **f, unsigned n, uint64_t *time_ns, bool v3)
{
	static const char *const io_acts[] = { "read", "write", "sync", "datasync", "trim" };
	static const unsigned io_ops[] = { RQ_REPLAY_READ, RQ_REPLAY_WRITE, RQ_REPLAY_FLUSH,
					   RQ_REPLAY_FLUSH, RQ_REPLAY_DISCARD };
	uint64_t off = 0, len = 0;
	unsigned a;
	int file;

	if (n < 2)
		return perr(p, "expected \"FILENAME ACTION [OFFSET LENGTH]\"");
	if (!strcmp(f[1], "add"))
		return n == 2 ? (fio_file(p, f[0], true) < 0 ? -EINVAL : 0) :
				perr(p, "\"add\" takes no offset");
	file = fio_file(p, f[0], false);
	if (file < 0)
		return file;
	if (!strcmp(f[1], "open") || !strcmp(f[1], "close"))
		return n == 2 ? 0 : perr(p, "\"%s\" takes no offset", f[1]);
	if (!strcmp(f[1], "wait")) {
		if (v3)
			return perr(p, "\"wait\" is not allowed in a version 3 iolog");
		if (n != 4 || !parse_u64(f[2], &off))
			return perr(p, "expected \"FILENAME wait MICROSECONDS LENGTH\"");
		if (off >= 100) /* as fio: shorter waits are discarded */
			*time_ns += off * 1000;
		return 0;
	}
	for (a = 0; a < 5; a++)
		if (!strcmp(f[1], io_acts[a]))
			break;
	if (a == 5)
		return perr(p, "unknown action \"%s\"", f[1]);
	if (io_ops[a] == RQ_REPLAY_FLUSH) {
		if (n != 2 && n != 4)
			return perr(p, "expected \"FILENAME %s\"", f[1]);
		return add_io(p, *time_ns, 0, 0, RQ_REPLAY_FLUSH, 0, (uint32_t)file);
	}
	if (n != 4 || !parse_u64(f[2], &off) || !parse_u64(f[3], &len))
		return perr(p, "expected \"FILENAME %s OFFSET LENGTH\" in bytes", f[1]);
	if (off + len > p->t->file_end[file])
		p->t->file_end[file] = off + len;
	return add_io(p, *time_ns, off, len, io_ops[a], 0, (uint32_t)file);
}

/* Lay the files out one after the other, each on a 1 MiB boundary. */
static void fio_layout(struct rq_replay_trace *t)
{
	uint64_t *base = calloc(t->nr_files + 1, sizeof(uint64_t));
	unsigned i;
	size_t k;

	if (!base)
		return;
	for (i = 0; i < t->nr_files; i++)
		base[i + 1] = base[i] + ((t->file_end[i] + (1u << 20) - 1) & ~((uint64_t)(1u << 20) - 1));
	for (k = 0; k < t->nr; k++)
		if (t->io[k].op != RQ_REPLAY_FLUSH)
			t->io[k].offset += base[t->io[k].file];
	free(base);
}

static int parse_fio(struct parse *p, FILE *in)
{
	char *line = NULL, *f[8];
	size_t cap = 0;
	uint64_t time_ns = 0, ts;
	bool v3 = false;
	int ret = 0;
	unsigned n;

	while (!ret && getline(&line, &cap, in) >= 0) {
		p->line++;
		chomp(line);
		if (p->line == 1) {
			if (!strcmp(line, "fio version 3 iolog"))
				v3 = true;
			else if (strcmp(line, "fio version 2 iolog"))
				ret = perr(p, "not a fio iolog: the first line must be "
					   "\"fio version 2 iolog\" or \"fio version 3 iolog\"");
			continue;
		}
		n = split(line, 0, f, 7);
		if (!n)
			continue;
		if (n > 6) {
			ret = perr(p, "too many fields");
			break;
		}
		if (v3) {
			if (!parse_u64(f[0], &ts)) {
				ret = perr(p, "expected a timestamp (microseconds) first, not \"%s\"",
					   f[0]);
				break;
			}
			time_ns = ts * 1000;
			ret = fio_line(p, f + 1, n - 1, &time_ns, true);
		} else {
			ret = fio_line(p, f, n, &time_ns, false);
		}
	}
	free(line);
	if (!ret && p->line == 0)
		ret = perr(p, "empty file");
	if (!ret)
		fio_layout(p->t);
	return ret;
}

/* ------------------------------------------------------------- blkparse */

/* RWBS of blkparse: D discard, W write, R read, F flush (alone: a flush). */
static int rwbs_op(const char *s)
{
	if (strchr(s, 'D'))
		return RQ_REPLAY_DISCARD;
	if (strchr(s, 'W'))
		return RQ_REPLAY_WRITE;
	if (strchr(s, 'R'))
		return RQ_REPLAY_READ;
	if (strchr(s, 'F'))
		return RQ_REPLAY_FLUSH;
	return -1;
}

/* "SEC.NSEC" with nine digits of nanoseconds. */
static bool parse_time(const char *s, uint64_t *ns)
{
	const char *dot = strchr(s, '.');
	char sec[24];
	uint64_t a, b;

	if (!dot || dot - s >= (long)sizeof(sec) || strlen(dot + 1) != 9)
		return false;
	memcpy(sec, s, (size_t)(dot - s));
	sec[dot - s] = 0;
	if (!parse_u64(sec, &a) || !parse_u64(dot + 1, &b))
		return false;
	*ns = a * 1000000000ull + b;
	return true;
}

static bool is_devno(const char *s)
{
	unsigned a, b;
	char c;

	return sscanf(s, "%u,%u%c", &a, &b, &c) == 2;
}

/* One event line: "MAJ,MIN CPU SEQ SEC.NSEC PID ACT RWBS [SECTOR + N] [COMM]". */
static int blkparse_line(struct parse *p, char *line)
{
	char *f[12];
	uint64_t cpu, seq, ns, pid, sector, nr;
	unsigned n = split(line, 0, f, 11);
	int op;

	if (n < 6 || !is_devno(f[0]) || !parse_u64(f[1], &cpu) || !parse_u64(f[2], &seq) ||
	    !parse_time(f[3], &ns) || !parse_u64(f[4], &pid))
		return perr(p, "not a blkparse event line "
			    "(\"MAJ,MIN CPU SEQ SEC.NSEC PID ACTION RWBS ...\")");
	if (strcmp(f[5], "Q"))
		return 0; /* only queue events make the workload */
	if (n < 7 || (op = rwbs_op(f[6])) < 0)
		return perr(p, "Q event without an RWBS field");
	if (n >= 10 && !strcmp(f[8], "+")) {
		if (!parse_u64(f[7], &sector) || !parse_u64(f[9], &nr) || nr > (1u << 17))
			return perr(p, "Q event: expected \"SECTOR + BLOCKS\"");
		return add_io(p, ns, sector * 512, nr * 512, (unsigned)op, (uint32_t)pid, 0);
	}
	if (strchr(f[6], 'F')) /* "Q FWS [comm]": an empty preflush, a flush */
		return add_io(p, ns, 0, 0, RQ_REPLAY_FLUSH, (uint32_t)pid, 0);
	return perr(p, "Q event: expected \"SECTOR + BLOCKS\"");
}

static int parse_blkparse(struct parse *p, FILE *in)
{
	char *line = NULL;
	size_t cap = 0;
	int ret = 0;

	while (!ret && getline(&line, &cap, in) >= 0) {
		char *s = line;

		p->line++;
		chomp(line);
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s || !strncmp(s, "CPU", 3) || !strncmp(s, "Total", 5))
			break; /* blkparse's summary follows the events */
		ret = blkparse_line(p, s);
	}
	free(line);
	if (!ret && !p->t->nr)
		ret = perr(p, "no Q events");
	return ret;
}

/* ----------------------------------------------------------------- CSV */

static int csv_op(const char *s)
{
	static const char *const names[][2] = {
		{ "R", "read" }, { "W", "write" }, { "F", "flush" }, { "D", "discard" },
	};
	unsigned i;

	for (i = 0; i < 4; i++)
		if (!strcasecmp(s, names[i][0]) || !strcasecmp(s, names[i][1]))
			return (int)i;
	return -1;
}

static int parse_csv(struct parse *p, FILE *in)
{
	char *line = NULL, *f[8];
	size_t cap = 0;
	int ret = 0;

	while (!ret && getline(&line, &cap, in) >= 0) {
		uint64_t v[4];
		unsigned n;
		int op;

		p->line++;
		chomp(line);
		if (!line[0] || line[0] == '#' || (p->line == 1 && !strncmp(line, "time", 4)))
			continue;
		n = split(line, ',', f, 5);
		if (n != 5) {
			ret = perr(p, "expected 5 fields \"time_ns,pid,op,offset,bytes\", got %u", n);
			break;
		}
		if (!parse_u64(f[0], &v[0]) || !parse_u64(f[1], &v[1]) || v[1] > UINT32_MAX ||
		    !parse_u64(f[3], &v[2]) || !parse_u64(f[4], &v[3])) {
			ret = perr(p, "a field is not a whole number");
			break;
		}
		op = csv_op(f[2]);
		if (op < 0) {
			ret = perr(p, "unknown op \"%s\" (R, W, F, D)", f[2]);
			break;
		}
		ret = add_io(p, v[0], v[2], v[3], (unsigned)op, (uint32_t)v[1], 0);
	}
	free(line);
	if (!ret && !p->t->nr)
		ret = perr(p, "no I/O");
	return ret;
}

/* ------------------------------------------------------- blktrace binary */

#define BLK_MAGIC 0x65617400u
#define BLK_VERSION 7
#define BLK_TC_SHIFT 16
#define BLK_TC_NOTIFY (1u << 10)

/* struct blk_io_trace as blktrace writes it: 48 bytes, host order. */
struct blk_record {
	uint32_t magic, sequence;
	uint64_t time, sector;
	uint32_t bytes, action, pid, device, cpu;
	uint16_t error, pdu_len;
};
_Static_assert(sizeof(struct blk_record) == 48, "struct blk_io_trace is 48 bytes");

static uint32_t bswap32_if(uint32_t v, bool sw)
{
	return sw ? __builtin_bswap32(v) : v;
}

static uint64_t bswap64_if(uint64_t v, bool sw)
{
	return sw ? __builtin_bswap64(v) : v;
}

static int blk_op(uint32_t action)
{
	uint32_t cat = action >> BLK_TC_SHIFT;

	if (cat & RQ_REPLAY_TC_DISCARD)
		return RQ_REPLAY_DISCARD;
	if (cat & RQ_REPLAY_TC_WRITE)
		return RQ_REPLAY_WRITE;
	if (cat & RQ_REPLAY_TC_READ)
		return RQ_REPLAY_READ;
	return RQ_REPLAY_FLUSH;
}

/* One per-CPU file; p->line counts records. */
static int parse_blk_file(struct parse *p, FILE *in)
{
	struct blk_record r;
	uint64_t at = 0;
	size_t got;

	while ((got = fread(&r, 1, sizeof(r), in)) > 0) {
		bool sw;
		uint32_t magic, action, bytes;
		uint16_t pdu;

		p->line++;
		if (got != sizeof(r))
			return perr(p, "record at byte %" PRIu64 " is truncated (%zu of 48 bytes)",
				    at, got);
		magic = r.magic;
		sw = (magic & 0xffffff00u) != BLK_MAGIC;
		if (sw)
			magic = __builtin_bswap32(magic);
		if ((magic & 0xffffff00u) != BLK_MAGIC || (magic & 0xff) != BLK_VERSION)
			return perr(p, "record at byte %" PRIu64 ": bad magic 0x%08x "
				    "(want 0x%08x, blk_io_trace version 7)", at, magic,
				    BLK_MAGIC | BLK_VERSION);
		pdu = sw ? __builtin_bswap16(r.pdu_len) : r.pdu_len;
		if (pdu && fseek(in, pdu, SEEK_CUR))
			return perr(p, "record at byte %" PRIu64 ": payload truncated", at);
		at += sizeof(r) + pdu;
		action = bswap32_if(r.action, sw);
		if ((action & 0xffff) != RQ_REPLAY_TA_QUEUE ||
		    (action >> BLK_TC_SHIFT) & BLK_TC_NOTIFY)
			continue;
		bytes = bswap32_if(r.bytes, sw);
		if (add_io(p, bswap64_if(r.time, sw), bswap64_if(r.sector, sw) * 512, bytes,
			   (unsigned)blk_op(action), bswap32_if(r.pid, sw), 0))
			return -EINVAL;
		/* a byte position says more than a record number here */
	}
	if (ferror(in))
		return perr(p, "read error");
	return 0;
}

static int cmp_time(const void *a, const void *b)
{
	const struct rq_replay_io *x = a, *y = b;

	return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

/* NAME, or NAME.blktrace.N: read NAME.blktrace.0, 1, ... while they exist. */
static int parse_blktrace(struct parse *p, const char *path)
{
	char prefix[4096], name[4200];
	const char *s = strstr(path, ".blktrace.");
	unsigned cpu, nfiles = 0;
	uint64_t t0 = UINT64_MAX;
	size_t i;

	snprintf(prefix, sizeof(prefix), "%.*s", s ? (int)(s - path) : (int)strlen(path), path);
	for (cpu = 0; cpu < 4096; cpu++) {
		struct parse fp = *p;
		FILE *in;
		int ret;

		snprintf(name, sizeof(name), "%s.blktrace.%u", prefix, cpu);
		in = fopen(name, "rb");
		if (!in) {
			struct stat st;

			/* CPUs may be missing in the middle (offline): look a little further */
			if (cpu < 1024 && errno == ENOENT && nfiles && cpu < nfiles + 64)
				continue;
			if (!nfiles && stat(name, &st)) {
				p->line = 0;
				perr(p, "no %s.blktrace.0", prefix);
				return -ENOENT;
			}
			break;
		}
		nfiles = cpu + 1;
		fp.path = name;
		fp.line = 0;
		ret = parse_blk_file(&fp, in);
		fclose(in);
		if (ret)
			return ret;
	}
	/* per-CPU files interleave: order by time (stable: CPU, then sequence) */
	for (i = 0; i < p->t->nr; i++)
		if (p->t->io[i].time_ns < t0)
			t0 = p->t->io[i].time_ns;
	for (i = 0; i < p->t->nr; i++)
		p->t->io[i].time_ns -= t0;
	replay_stable_sort(p->t->io, p->t->nr, sizeof(*p->t->io), cmp_time);
	if (!p->t->nr) {
		p->line = 0;
		return perr(p, "no Q events in %s.blktrace.*", prefix);
	}
	return 0;
}

/* -------------------------------------------------------------- loading */

static enum rq_replay_format guess_format(const char *path, FILE *in)
{
	char head[64] = "";
	size_t n;

	if (strstr(path, ".blktrace."))
		return RQ_REPLAY_FMT_BLKTRACE;
	n = fread(head, 1, sizeof(head) - 1, in);
	head[n] = 0;
	rewind(in);
	if (!strncmp(head, "fio version", 11))
		return RQ_REPLAY_FMT_FIO;
	if (n >= 4 && ((head[0] & 0xff) == 0x07 || (head[3] & 0xff) == 0x07) &&
	    memchr(head, 0, n))
		return RQ_REPLAY_FMT_BLKTRACE;
	{
		char *s = head, *sp;

		while (*s == ' ')
			s++;
		sp = strchr(s, ' ');
		if (sp) {
			*sp = 0;
			if (is_devno(s))
				return RQ_REPLAY_FMT_BLKPARSE;
		}
	}
	return RQ_REPLAY_FMT_CSV;
}

int rq_replay_trace_load(const char *path, enum rq_replay_format fmt,
			 struct rq_replay_trace **out, char *err, size_t errlen)
{
	struct parse p = { .path = path, .err = err, .errlen = errlen };
	FILE *in = NULL;
	int ret;

	if (!path || !out || fmt > RQ_REPLAY_FMT_CSV)
		return -EINVAL;
	if (fmt != RQ_REPLAY_FMT_BLKTRACE) {
		in = fopen(path, "rb");
		if (!in && !(fmt == RQ_REPLAY_FMT_AUTO && errno == ENOENT)) {
			ret = -errno;
			if (err && errlen)
				snprintf(err, errlen, "%s: %s", path, strerror(-ret));
			return ret;
		}
		if (!in)
			fmt = RQ_REPLAY_FMT_BLKTRACE; /* NAME of NAME.blktrace.N */
		else if (fmt == RQ_REPLAY_FMT_AUTO)
			fmt = guess_format(path, in);
	}
	if (fmt == RQ_REPLAY_FMT_BLKTRACE && in) {
		fclose(in);
		in = NULL;
	}
	p.t = rq_replay_trace_new();
	if (!p.t) {
		if (in)
			fclose(in);
		return -ENOMEM;
	}
	switch (fmt) {
	case RQ_REPLAY_FMT_FIO:
		ret = parse_fio(&p, in);
		break;
	case RQ_REPLAY_FMT_BLKPARSE:
		ret = parse_blkparse(&p, in);
		break;
	case RQ_REPLAY_FMT_CSV:
		ret = parse_csv(&p, in);
		break;
	default:
		ret = parse_blktrace(&p, path);
		break;
	}
	if (in)
		fclose(in);
	if (ret) {
		rq_replay_trace_free(p.t);
		return ret;
	}
	*out = p.t;
	return 0;
}

/* ------------------------------------------------------- blktrace writer */

struct rq_replay_blk_writer {
	unsigned nr;
	FILE **f;
	uint32_t *seq;
	int error;
};

int rq_replay_blk_open(const char *prefix, unsigned nr_cpus, struct rq_replay_blk_writer **out)
{
	struct rq_replay_blk_writer *w;
	char name[4200];
	unsigned i;

	if (!prefix || !nr_cpus || nr_cpus > 4096 || !out)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->f = calloc(nr_cpus, sizeof(*w->f));
	w->seq = calloc(nr_cpus, sizeof(*w->seq));
	if (!w->f || !w->seq) {
		rq_replay_blk_close(w);
		return -ENOMEM;
	}
	w->nr = nr_cpus;
	for (i = 0; i < nr_cpus; i++) {
		snprintf(name, sizeof(name), "%s.blktrace.%u", prefix, i);
		w->f[i] = fopen(name, "wb");
		if (!w->f[i]) {
			int ret = -errno;

			rq_replay_blk_close(w);
			return ret;
		}
	}
	*out = w;
	return 0;
}

int rq_replay_blk_write(struct rq_replay_blk_writer *w, const struct rq_replay_blk_event *ev)
{
	struct blk_record r;

	if (!w || !ev || ev->cpu >= w->nr)
		return -EINVAL;
	memset(&r, 0, sizeof(r));
	r.magic = BLK_MAGIC | BLK_VERSION;
	r.sequence = ++w->seq[ev->cpu];
	r.time = ev->time_ns;
	r.sector = ev->sector;
	r.bytes = ev->bytes;
	r.action = ev->action;
	r.pid = ev->pid;
	r.device = ev->device;
	r.cpu = ev->cpu;
	r.error = ev->error;
	if (fwrite(&r, sizeof(r), 1, w->f[ev->cpu]) != 1) {
		w->error = -EIO;
		return -EIO;
	}
	return 0;
}

int rq_replay_blk_close(struct rq_replay_blk_writer *w)
{
	unsigned i;
	int ret;

	if (!w)
		return 0;
	ret = w->error;
	for (i = 0; i < w->nr; i++)
		if (w->f[i] && fclose(w->f[i]) && !ret)
			ret = -EIO;
	free(w->f);
	free(w->seq);
	free(w);
	return ret;
}
