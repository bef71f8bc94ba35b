/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay: the replay itself.  One thread, pinned to one CPU, drives an
 * event loop on the device's virtual clock:
 *
 *   1. submit what is due: open loop, every I/O whose arrival time has come;
 *      closed loop, each stream up to its depth, in stream order;
 *   2. open a dispatch window at the current time (run_until(now));
 *   3. move to the earliest of: the next arrival, the device's next event
 *      (a command ends, the library's service work falls due).
 *
 * Nothing depends on real time or on other threads, so a run repeats byte
 * for byte.  The library's service is application-driven
 * (rq_service_manual()), measured on the device's clock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/librequest.h>

#include "replay-internal.h"
#include "result.h"

/* ------------------------------------------------------------ devices */

struct dev {
	enum replay_kind kind;
	struct hddsim_dev *h;
	struct flashsim_dev *f;
};

static struct rq_queue *dev_queue(struct dev *d)
{
	return d->kind == REPLAY_HDD ? hddsim_queue(d->h) : flashsim_queue(d->f);
}

static uint64_t dev_now(struct dev *d)
{
	return d->kind == REPLAY_HDD ? hddsim_now_ns(d->h) : flashsim_now_ns(d->f);
}

static uint64_t dev_next(struct dev *d)
{
	return d->kind == REPLAY_HDD ? hddsim_next_event_ns(d->h) : flashsim_next_event_ns(d->f);
}

static void dev_run_until(struct dev *d, uint64_t t)
{
	if (d->kind == REPLAY_HDD)
		hddsim_run_until(d->h, t);
	else
		flashsim_run_until(d->f, t);
}

static void dev_destroy(struct dev *d)
{
	if (d->kind == REPLAY_HDD)
		hddsim_destroy(d->h);
	else
		flashsim_destroy(d->f);
	d->h = NULL;
	d->f = NULL;
}

/* The device's counters, by name, into the result. */
static void dev_counters(struct dev *d, struct rq_replay_result *r)
{
#define C(n, v) result_counter(r, n, v)
	if (d->kind == REPLAY_HDD) {
		struct hddsim_stats s;

		hddsim_get_stats(d->h, &s);
		C("commands", s.commands);
		C("reads", s.reads);
		C("writes", s.writes);
		C("flushes", s.flushes);
		C("cache_hits", s.cache_hits);
		C("seeks", s.seeks);
		C("seek_ns", s.seek_ns);
		C("rotation_ns", s.rotation_ns);
		C("transfer_ns", s.transfer_ns);
		C("busy_ns", s.busy_ns);
	} else {
		struct flashsim_stats s;

		flashsim_get_stats(d->f, &s);
		C("commands", s.commands);
		C("reads", s.reads);
		C("writes", s.writes);
		C("flushes", s.flushes);
		C("discards", s.discards);
		C("pages_read", s.pages_read);
		C("pages_programmed", s.pages_programmed);
		C("buffer_waits", s.buffer_waits);
		C("gc_runs", s.gc_runs);
		C("gc_ns", s.gc_ns);
	}
#undef C
}

/* ------------------------------------------------------------ the run */

struct slot {
	struct rq_bio bio;
	struct run *run;
	size_t io;              /* index in the trace */
	uint32_t stream;
	uint64_t q_ns;
	uint64_t d_sector;      /* the request it went out in (blktrace C) */
	uint32_t d_bytes;
	bool d_first;           /* the request's first bio: it writes the C */
	bool d_seen;
	struct slot *next_free; /* free list, or the blocked FIFO */
};

struct stream {
	char key[64];
	uint32_t pid;
	struct rq_io_context *ioc;
	size_t *ios;            /* its I/Os, in arrival order */
	size_t n, next;
	unsigned inflight;
};

struct run {
	const struct rq_replay_trace *t;
	const struct rq_replay_config *cfg;
	struct dev dev;
	struct rq_queue *q;
	uint64_t t0;            /* virtual time of trace time 0 */
	size_t *order;          /* open loop: I/Os by arrival time */
	size_t next_arrival;
	uint32_t *stream_of;    /* I/O -> stream */
	struct stream *streams;
	unsigned nr_streams;
	struct rq_io_group **groups;
	unsigned nr_groups;
	struct slot *free_slots;
	struct slot **chunks;
	unsigned nr_chunks;
	char *buf;
	uint64_t *lat;          /* per I/O; UINT64_MAX until done */
	uint64_t *done_at;
	size_t outstanding, completed, submitted;
	uint64_t errors;
	bool refill;            /* closed loop: a stream has room */
	struct slot *blocked, *blocked_tail; /* refused for want of a request
						(RQ_STS_AGAIN): retried first */
	bool again;             /* the last submission was refused */
	bool retrying;          /* issuing the head of the blocked FIFO */
	struct rq_replay_blk_writer *bw;
	char *err;
	size_t errlen;
};

static int run_err(struct run *r, int ret, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int run_err(struct run *r, int ret, const char *fmt, ...)
{
	va_list ap;

	if (r->err && r->errlen) {
		va_start(ap, fmt);
		vsnprintf(r->err, r->errlen, fmt, ap);
		va_end(ap);
	}
	return ret;
}

#define SLOT_CHUNK 1024

static struct slot *slot_get(struct run *r)
{
	struct slot *s = r->free_slots;

	if (!s) {
		struct slot **c = realloc(r->chunks, (r->nr_chunks + 1) * sizeof(*c));
		unsigned i;

		if (!c)
			return NULL;
		r->chunks = c;
		c[r->nr_chunks] = calloc(SLOT_CHUNK, sizeof(struct slot));
		if (!c[r->nr_chunks])
			return NULL;
		for (i = 0; i < SLOT_CHUNK; i++) {
			c[r->nr_chunks][i].next_free = r->free_slots;
			r->free_slots = &c[r->nr_chunks][i];
		}
		r->nr_chunks++;
		s = r->free_slots;
	}
	r->free_slots = s->next_free;
	return s;
}

static uint32_t blk_category(unsigned op)
{
	switch (op) {
	case RQ_OP_READ:
		return RQ_REPLAY_TC_READ;
	case RQ_OP_WRITE:
	case RQ_OP_WRITE_ZEROES:
		return RQ_REPLAY_TC_WRITE;
	case RQ_OP_FLUSH:
		return RQ_REPLAY_TC_FLUSH;
	default:
		return RQ_REPLAY_TC_DISCARD | RQ_REPLAY_TC_WRITE;
	}
}

static void blk_event(struct run *r, unsigned act, uint32_t tc, unsigned op, uint64_t sector,
		      uint32_t bytes, uint32_t pid, uint64_t when, uint16_t error)
{
	struct rq_replay_blk_event ev = {
		.time_ns = when - r->t0,
		.sector = sector,
		.bytes = bytes,
		.action = ((blk_category(op) | tc) << 16) | act,
		.pid = pid,
		.device = (7u << 20) | 0, /* a loop device's major; minor 0 */
		.cpu = 0,
		.error = error,
	};

	if (r->bw)
		rq_replay_blk_write(r->bw, &ev);
}

static struct slot *bio_slot(struct rq_bio *bio)
{
	if (bio->private_data)
		return bio->private_data;
	return NULL; /* a split piece: the library's own bio */
}

/* D: the drive accepted @rq (called by the model, under its lock). */
static void on_dispatch(void *arg, struct rq_request *rq, uint64_t now)
{
	struct run *r = arg;
	uint32_t bytes = rq_request_sectors(rq) << 9;
	struct rq_bio *bio;
	uint32_t pid = 0;

	for (bio = rq->bio; bio; bio = bio->next) {
		struct slot *s = bio_slot(bio);

		if (!s)
			continue;
		if (!pid)
			pid = r->streams[s->stream].pid;
		s->d_sector = rq->sector;
		s->d_bytes = bytes;
		s->d_first = bio == rq->bio;
		s->d_seen = true;
	}
	if (rq->op == RQ_OP_FLUSH)
		bytes = 0;
	blk_event(r, RQ_REPLAY_TA_ISSUE, RQ_REPLAY_TC_ISSUE, rq->op, rq->sector, bytes, pid, now,
		  0);
}

static void on_end_io(struct rq_bio *bio)
{
	struct slot *s = bio->private_data;
	struct run *r = s->run;
	struct stream *st = &r->streams[s->stream];
	uint64_t now = dev_now(&r->dev);
	const struct rq_replay_io *io = &r->t->io[s->io];

	if (bio->status == RQ_STS_AGAIN) {
		/*
		 * No request or tag free: a kernel submitter would sleep until
		 * one is.  Park the I/O; it is retried, in order, before any
		 * new one, each time the loop submits.
		 */
		if (r->retrying) {
			s->next_free = r->blocked;
			r->blocked = s;
			if (!r->blocked_tail)
				r->blocked_tail = s;
		} else {
			s->next_free = NULL;
			if (r->blocked_tail)
				r->blocked_tail->next_free = s;
			else
				r->blocked = s;
			r->blocked_tail = s;
		}
		r->again = true;
		return;
	}
	r->lat[s->io] = now - s->q_ns;
	r->done_at[s->io] = now - r->t0;
	if (bio->status != RQ_STS_OK)
		r->errors++;
	if (r->bw && (!s->d_seen || s->d_first)) {
		bool own = !s->d_seen;

		blk_event(r, RQ_REPLAY_TA_COMPLETE, RQ_REPLAY_TC_COMPLETE, bio->op,
			  own ? io->offset >> 9 : s->d_sector, own ? io->bytes : s->d_bytes,
			  st->pid, now, bio->status == RQ_STS_OK ? 0 : 5);
	}
	st->inflight--;
	if (r->cfg->closed_loop && st->next < st->n)
		r->refill = true;
	r->outstanding--;
	r->completed++;
	s->next_free = r->free_slots;
	r->free_slots = s;
}

static const uint8_t rq_ops[] = { RQ_OP_READ, RQ_OP_WRITE, RQ_OP_FLUSH, RQ_OP_DISCARD };

/* (Re)build the bio of @s and submit it; Return: false if it was refused. */
static bool issue(struct run *r, struct slot *s)
{
	const struct rq_replay_io *io = &r->t->io[s->io];
	struct stream *st = &r->streams[s->stream];

	memset(&s->bio, 0, sizeof(s->bio));
	rq_bio_init(&s->bio, NULL, 1);
	s->bio.op = rq_ops[io->op];
	s->bio.iter.sector = io->offset >> 9;
	if (io->op == RQ_REPLAY_READ || io->op == RQ_REPLAY_WRITE)
		rq_bio_add_vec(&s->bio, r->buf, io->bytes);
	else if (io->op == RQ_REPLAY_DISCARD)
		s->bio.iter.size = io->bytes;
	s->bio.opf = (io->op == RQ_REPLAY_READ ? RQ_BIO_SYNC : 0) | RQ_BIO_NOWAIT;
	s->bio.end_io = on_end_io;
	s->bio.private_data = s;
	s->bio.ioc = st->ioc;
	s->d_seen = false;
	r->again = false;
	rq_submit_bio(r->q, &s->bio);
	return !r->again;
}

/* Retry the refused I/Os in order until one is refused again. */
static void retry_blocked(struct run *r)
{
	if (r->blocked)
		r->submitted++; /* a retry is a submission too */
	while (r->blocked) {
		struct slot *s = r->blocked;
		bool ok;

		r->blocked = s->next_free;
		if (!r->blocked)
			r->blocked_tail = NULL;
		r->retrying = true; /* refused again: back to the head */
		ok = issue(r, s);
		r->retrying = false;
		if (!ok)
			return;
	}
}

static int submit_io(struct run *r, size_t i)
{
	const struct rq_replay_io *io = &r->t->io[i];
	struct stream *st = &r->streams[r->stream_of[i]];
	struct slot *s = slot_get(r);
	uint64_t now = dev_now(&r->dev);

	if (!s)
		return run_err(r, -ENOMEM, "out of memory");
	s->run = r;
	s->io = i;
	s->stream = r->stream_of[i];
	s->q_ns = now;
	st->inflight++;
	r->outstanding++;
	r->submitted++;
	blk_event(r, RQ_REPLAY_TA_QUEUE, RQ_REPLAY_TC_QUEUE, rq_ops[io->op], io->offset >> 9,
		  io->bytes, st->pid, now, 0);
	if (r->blocked)
		retry_blocked(r);
	if (r->blocked) { /* still blocked: queue behind them, in order */
		s->next_free = NULL;
		r->blocked_tail->next_free = s;
		r->blocked_tail = s;
		return 0;
	}
	issue(r, s);
	return 0;
}

/* Submit what is due at the current time.  Return: 0 or -errno. */
static int submit_due(struct run *r)
{
	uint64_t now = dev_now(&r->dev);
	unsigned k;
	int ret;

	retry_blocked(r);
	if (!r->cfg->closed_loop) {
		while (r->next_arrival < r->t->nr) {
			size_t i = r->order[r->next_arrival];

			if (r->t0 + replay_scaled(r->t->io[i].time_ns, r->cfg->speed) > now)
				break;
			r->next_arrival++;
			ret = submit_io(r, i);
			if (ret)
				return ret;
		}
		return 0;
	}
	r->refill = false;
	for (k = 0; k < r->nr_streams; k++) {
		struct stream *st = &r->streams[k];

		while (st->inflight < r->cfg->depth && st->next < st->n) {
			ret = submit_io(r, st->ios[st->next++]);
			if (ret)
				return ret;
		}
	}
	return 0;
}

static uint64_t next_arrival_time(struct run *r)
{
	if (r->cfg->closed_loop || r->next_arrival >= r->t->nr)
		return UINT64_MAX;
	return r->t0 + replay_scaled(r->t->io[r->order[r->next_arrival]].time_ns, r->cfg->speed);
}

static bool work_left(struct run *r)
{
	return r->outstanding || r->completed < r->t->nr;
}

/* The event loop.  Return: 0, or -EIO if the queue stalls. */
static int event_loop(struct run *r)
{
	uint64_t last = 0, spins = 0;
	int ret;

	while (work_left(r)) {
		uint64_t now, ta, td, t;

		size_t before = r->submitted;

		ret = submit_due(r);
		if (ret)
			return ret;
		now = dev_now(&r->dev);
		if (r->submitted != before)
			dev_run_until(&r->dev, now); /* dispatch what was submitted */
		if (r->refill)
			continue;
		ta = next_arrival_time(r);
		td = dev_next(&r->dev);
		t = ta < td ? ta : td;
		if (t == UINT64_MAX) {
			if (!work_left(r))
				break;
			return run_err(r, -EIO, "the queue stalled: %zu I/Os in flight, "
				       "no completion or timer pending", r->outstanding);
		}
		if (t <= now) {
			/* due now (service work asked for again): guard against a spin */
			if (r->completed == last && ++spins > 1000000)
				return run_err(r, -EIO, "no progress at virtual time %" PRIu64, now);
			t = now;
		} else {
			spins = 0;
		}
		last = r->completed;
		dev_run_until(&r->dev, t);
	}
	return 0;
}

/* ------------------------------------------------------------ streams */

static int cmp_stream_key(const void *a, const void *b)
{
	const struct stream *x = a, *y = b;

	/* pids sort as numbers, file names as strings */
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->key, y->key);
}

static void stream_key(const struct run *r, const struct rq_replay_io *io, char *key, size_t n,
		       uint32_t *pid)
{
	const char *name;

	if (r->cfg->map == RQ_REPLAY_BY_FILE) {
		name = rq_replay_trace_file_name(r->t, io->file);
		if (name)
			snprintf(key, n, "%s", name);
		else
			snprintf(key, n, "file%u", io->file);
		*pid = 0;
		return;
	}
	snprintf(key, n, "%u", io->pid);
	*pid = io->pid;
}

/* Group the I/Os into streams, sorted by key, each in arrival order. */
static int make_streams(struct run *r)
{
	size_t i, k;
	char key[64];
	uint32_t pid;

	r->stream_of = calloc(r->t->nr, sizeof(uint32_t));
	if (!r->stream_of)
		return -ENOMEM;
	for (k = 0; k < r->t->nr; k++) {
		const struct rq_replay_io *io = &r->t->io[r->order[k]];
		unsigned s;

		stream_key(r, io, key, sizeof(key), &pid);
		for (s = 0; s < r->nr_streams; s++)
			if (!strcmp(r->streams[s].key, key))
				break;
		if (s == r->nr_streams) {
			struct stream *v;

			if (s % 16 == 0) {
				v = realloc(r->streams, (s + 16) * sizeof(*v));
				if (!v)
					return -ENOMEM;
				r->streams = v;
			}
			memset(&r->streams[s], 0, sizeof(r->streams[s]));
			snprintf(r->streams[s].key, sizeof(r->streams[s].key), "%s", key);
			r->streams[s].pid = pid;
			r->nr_streams++;
		}
		r->streams[s].n++;
	}
	replay_stable_sort(r->streams, r->nr_streams, sizeof(*r->streams), cmp_stream_key);
	for (i = 0; i < r->nr_streams; i++) {
		if (r->cfg->map == RQ_REPLAY_BY_FILE)
			r->streams[i].pid = (uint32_t)i + 1; /* blktrace output: one pid a file */
		r->streams[i].ios = malloc(r->streams[i].n * sizeof(size_t));
		if (!r->streams[i].ios)
			return -ENOMEM;
		r->streams[i].n = 0;
	}
	for (k = 0; k < r->t->nr; k++) {
		size_t io = r->order[k];
		unsigned s;

		stream_key(r, &r->t->io[io], key, sizeof(key), &pid);
		for (s = 0; s < r->nr_streams; s++)
			if (!strcmp(r->streams[s].key, key))
				break;
		r->stream_of[io] = s;
		r->streams[s].ios[r->streams[s].n++] = io;
	}
	return 0;
}

static int cmp_order(const void *a, const void *b, void *arg)
{
	const struct rq_replay_trace *t = arg;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	if (t->io[x].time_ns != t->io[y].time_ns)
		return t->io[x].time_ns < t->io[y].time_ns ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Contexts, weights, priorities and groups of the streams. */
static int make_contexts(struct run *r)
{
	const struct rq_replay_config *c = r->cfg;
	unsigned i, k;

	r->groups = calloc(c->nr_groups + 1, sizeof(*r->groups));
	if (!r->groups)
		return -ENOMEM;
	for (i = 0; i < c->nr_groups; i++) {
		r->groups[i] = rq_iog_create(c->groups[i].weight);
		if (!r->groups[i])
			return run_err(r, -EINVAL, "io group %u: bad weight %u", c->groups[i].id,
				       c->groups[i].weight);
		r->nr_groups++;
	}
	for (k = 0; k < r->nr_streams; k++) {
		r->streams[k].ioc = rq_ioc_create(0);
		if (!r->streams[k].ioc)
			return -ENOMEM;
	}
	for (i = 0; i < c->nr_streams; i++) {
		const struct rq_replay_stream_opt *o = &c->streams[i];
		struct rq_io_context *ioc = NULL;

		for (k = 0; k < r->nr_streams; k++)
			if (!strcmp(r->streams[k].key, o->key))
				ioc = r->streams[k].ioc;
		if (!ioc)
			return run_err(r, -EINVAL, "stream \"%s\" is not in the trace", o->key);
		if ((o->weight && rq_ioc_set_weight(ioc, o->weight)) ||
		    (o->ioprio && rq_ioc_set_prio(ioc, o->ioprio)))
			return run_err(r, -EINVAL, "stream \"%s\": bad weight or priority", o->key);
		if (o->group) {
			for (k = 0; k < c->nr_groups; k++)
				if (c->groups[k].id == o->group)
					break;
			if (k == c->nr_groups)
				return run_err(r, -EINVAL, "stream \"%s\": no io group %u", o->key,
					       o->group);
			rq_ioc_set_group(ioc, r->groups[k]);
		}
	}
	return 0;
}

/* ------------------------------------------------------- setup, teardown */

static int make_device(struct run *r, const struct rq_replay_model *m)
{
	const struct rq_replay_config *c = r->cfg;
	int ret;

	r->dev.kind = m->kind;
	if (m->kind == REPLAY_HDD) {
		struct hddsim_config hc;

		hddsim_config_default(&hc);
		hc.model = m->hdd;
		hc.ncq_depth = m->ncq_depth ? m->ncq_depth : 1;
		hc.front = c->front == RQ_REPLAY_FRONT_SQ ? HDDSIM_FRONT_SQ : HDDSIM_FRONT_MQ;
		hc.sched = c->sched;
		ret = hddsim_create(&hc, &r->dev.h);
		if (!ret)
			hddsim_set_dispatch_hook(r->dev.h, on_dispatch, r);
	} else {
		struct flashsim_config fc = {
			.model = m->flash,
			.front = c->front == RQ_REPLAY_FRONT_SQ ? FLASHSIM_FRONT_SQ :
								  FLASHSIM_FRONT_MQ,
			.sched = c->sched,
		};

		ret = flashsim_create(&fc, &r->dev.f);
		if (!ret)
			flashsim_set_dispatch_hook(r->dev.f, on_dispatch, r);
	}
	if (ret)
		return run_err(r, ret, "cannot make the %s device with scheduler %s on %s: %s",
			       m->name, c->sched ? c->sched : "(default)",
			       c->front == RQ_REPLAY_FRONT_SQ ? "sq" : "mq", strerror(-ret));
	r->q = dev_queue(&r->dev);
	return 0;
}

static int apply_attrs(struct run *r)
{
	const char *const *a;

	for (a = r->cfg->attrs; a && *a; a++) {
		char name[128];
		const char *eq = strchr(*a, '=');
		int ret;

		if (!eq || eq == *a || (size_t)(eq - *a) >= sizeof(name))
			return run_err(r, -EINVAL, "tunable \"%s\": expected NAME=VALUE", *a);
		memcpy(name, *a, (size_t)(eq - *a));
		name[eq - *a] = 0;
		ret = rq_queue_attr_set(r->q, name, eq + 1);
		if (ret)
			return run_err(r, -EINVAL, "tunable %s=%s: %s", name, eq + 1,
				       strerror(-ret));
	}
	return 0;
}

static int check_capacity(struct run *r)
{
	uint64_t cap = rq_queue_capacity(r->q) << 9;
	size_t i;

	for (i = 0; i < r->t->nr; i++) {
		const struct rq_replay_io *io = &r->t->io[i];

		if (io->op != RQ_REPLAY_FLUSH && io->offset + io->bytes > cap)
			return run_err(r, -EINVAL, "I/O %zu ends at byte %" PRIu64
				       ", past the model's capacity (%" PRIu64 " bytes)", i,
				       io->offset + io->bytes, cap);
	}
	return 0;
}

static void run_free(struct run *r)
{
	unsigned i;

	for (i = 0; i < r->nr_streams; i++) {
		rq_ioc_put(r->streams[i].ioc);
		free(r->streams[i].ios);
	}
	for (i = 0; i < r->nr_groups; i++)
		rq_iog_put(r->groups[i]);
	for (i = 0; i < r->nr_chunks; i++)
		free(r->chunks[i]);
	free(r->chunks);
	free(r->groups);
	free(r->streams);
	free(r->stream_of);
	free(r->order);
	free(r->buf);
	free(r->lat);
	free(r->done_at);
}

static void pin_one_cpu(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	CPU_ZERO(&set);
	CPU_SET(cpu < 0 ? 0 : cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static int run_prepare(struct run *r, const struct rq_replay_model *m)
{
	uint32_t maxb = 4096;
	size_t i;
	int ret;

	r->order = malloc(r->t->nr * sizeof(size_t));
	r->lat = malloc(r->t->nr * sizeof(uint64_t));
	r->done_at = malloc(r->t->nr * sizeof(uint64_t));
	if (!r->order || !r->lat || !r->done_at)
		return run_err(r, -ENOMEM, "out of memory");
	for (i = 0; i < r->t->nr; i++) {
		r->order[i] = i;
		r->lat[i] = UINT64_MAX;
		if (r->t->io[i].bytes > maxb)
			maxb = r->t->io[i].bytes;
	}
	qsort_r(r->order, r->t->nr, sizeof(size_t), cmp_order, (void *)r->t); /* total order */
	r->buf = calloc(1, maxb);
	if (!r->buf || make_streams(r))
		return run_err(r, -ENOMEM, "out of memory");
	pin_one_cpu();
	ret = rq_service_manual();
	if (ret)
		return run_err(r, ret, "librequest service: %s", strerror(-ret));
	ret = make_device(r, m);
	if (!ret)
		ret = apply_attrs(r);
	if (!ret)
		ret = check_capacity(r);
	if (!ret)
		ret = make_contexts(r);
	if (!ret && r->cfg->blktrace_out) {
		ret = rq_replay_blk_open(r->cfg->blktrace_out, 1, &r->bw);
		if (ret)
			return run_err(r, ret, "%s.blktrace.0: %s", r->cfg->blktrace_out,
				       strerror(-ret));
	}
	return ret;
}

int rq_replay_run(const struct rq_replay_trace *t, const struct rq_replay_model *m,
		  const struct rq_replay_config *cfg, struct rq_replay_result **out,
		  char *err, size_t errlen)
{
	struct rq_replay_config c = { RQ_REPLAY_CONFIG_INIT };
	struct run r = { .t = t, .cfg = &c, .err = err, .errlen = errlen };
	struct rq_replay_result *res = NULL;
	int ret;

	if (!t || !m || !cfg || !out || cfg->size < offsetof(struct rq_replay_config, streams) ||
	    !t->nr)
		return run_err(&r, -EINVAL, "nothing to replay");
	memcpy(&c, cfg, cfg->size < sizeof(c) ? cfg->size : sizeof(c));
	c.size = sizeof(c);
	if (!c.depth)
		c.depth = 1;
	if (!(c.speed > 0))
		c.speed = 1.0;
	ret = run_prepare(&r, m);
	if (!ret) {
		r.t0 = dev_now(&r.dev);
		ret = event_loop(&r);
	}
	if (!ret && r.errors && r.errors == t->nr)
		ret = run_err(&r, -EIO, "every I/O failed");
	if (!ret) {
		const char **keys = calloc(r.nr_streams, sizeof(char *));
		unsigned k;

		for (k = 0; keys && k < r.nr_streams; k++)
			keys[k] = r.streams[k].key;
		res = keys ? result_build(t, m, &c, r.q, r.lat, r.done_at, r.stream_of, keys,
					  r.nr_streams, r.errors) : NULL;
		free(keys);
		if (!res)
			ret = run_err(&r, -ENOMEM, "out of memory");
		else
			dev_counters(&r.dev, res);
	}
	if (r.bw) {
		int cret = rq_replay_blk_close(r.bw);

		if (!ret && cret)
			ret = run_err(&r, cret, "writing the blktrace output: %s", strerror(-cret));
	}
	if (r.outstanding == 0 && (r.dev.h || r.dev.f))
		dev_destroy(&r.dev);
	run_free(&r);
	if (ret) {
		rq_replay_result_free(res);
		return ret;
	}
	*out = res;
	return 0;
}
