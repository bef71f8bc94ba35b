/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue attributes, as /sys/block/X/queue/<name>.
 *
 * Every write is parsed completely before anything changes; a bad value,
 * an unknown name or a read-only attribute gives -EINVAL and changes
 * nothing.  Writes take q->sysfs_lock; those that change what requests may
 * look like (limits, depth, the scheduler) also freeze the queue, so no
 * request in flight ever sees a half-applied change.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/queue.h"
#include "internal/elevator.h"
#include "internal/trace.h"

/* ------------------------------------------------------------ scheduler */

/* Switch @q to scheduler @name ("none" for none), as a "scheduler" write does. */
int queue_elevator_switch(struct rq_queue *q, const char *name)
{
	int ret;

	pthread_mutex_lock(&q->sysfs_lock);
	ret = q->fe->elevator_switch(q, name);
	pthread_mutex_unlock(&q->sysfs_lock);
	return ret;
}

/* -------------------------------------------------------------- parsing */

/*
 * A whole unsigned decimal number within [@min, @max], optionally followed by
 * one newline (as sysfs writes arrive).  Shared by the queue attributes and
 * the schedulers' tunables.
 */
RQ_EXPORT int rq_sched_parse_uint(const char *s, unsigned long min, unsigned long max,
				unsigned long *out)
{
	unsigned long v = 0;
	const char *p = s;

	if (!s || !out || !isdigit((unsigned char)*p))
		return -EINVAL;
	while (isdigit((unsigned char)*p)) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (max - d) / 10 && v > (~0ul - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
		if (v > max)
			return -EINVAL;
		p++;
	}
	if (*p == '\n')
		p++;
	if (*p || v < min)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	return rq_sched_parse_uint(s, min, max, out);
}

/* @s equals @word, optionally followed by one newline. */
static bool word_is(const char *s, const char *word)
{
	size_t n = strlen(word);

	return !strncmp(s, word, n) && (!s[n] || (s[n] == '\n' && !s[n + 1]));
}

static int emit(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int emit(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= len)
		return -ENOSPC;
	return n;
}

/* ----------------------------------------------------------- attributes */

/*
 * An attribute: show/store functions, or (show NULL) a plain unsigned field
 * of the queue at @field, writable within [@min, @max].
 */
struct queue_attr {
	const char *name;
	int (*show)(struct rq_queue *q, char *buf, size_t len);
	int (*store)(struct rq_queue *q, const char *val); /* NULL: read-only */
	size_t field;
	unsigned long min, max;
};

#define UINT_ATTR(n, member, lo, hi) \
	{ .name = n, .field = offsetof(struct rq_queue, member), .min = lo, .max = hi }

static unsigned *attr_field(struct rq_queue *q, const struct queue_attr *a)
{
	return (unsigned *)(void *)((char *)q + a->field);
}

static int attr_show(struct rq_queue *q, const struct queue_attr *a, char *buf, size_t len)
{
	if (a->show)
		return a->show(q, buf, len);
	return emit(buf, len, "%u\n", READ_ONCE(*attr_field(q, a)));
}

/* Return -EINVAL for read-only attributes and bad values. */
static int attr_store(struct rq_queue *q, const struct queue_attr *a, const char *val)
{
	unsigned long v;

	if (a->show)
		return a->store ? a->store(q, val) : -EINVAL;
	if (parse_ulong(val, a->min, a->max, &v))
		return -EINVAL;
	WRITE_ONCE(*attr_field(q, a), (unsigned)v);
	return 0;
}

static int scheduler_show(struct rq_queue *q, char *buf, size_t len)
{
	return elevator_list_names(buf, len, q->elevator ? q->elevator->type->name : "none",
				   q->fe->elv_features);
}

static int scheduler_store(struct rq_queue *q, const char *val)
{
	char name[32];
	size_t n = strcspn(val, " \t\n");

	if (!n || n >= sizeof(name) || val[n + strspn(val + n, " \t\n")])
		return -EINVAL;
	memcpy(name, val, n);
	name[n] = 0;
	return q->fe->elevator_switch(q, name);
}

static int nr_requests_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->nr_requests);
}

static int nr_requests_store(struct rq_queue *q, const char *val)
{
	return q->fe->set_nr_requests(q, val);
}

static int max_sectors_kb_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.max_sectors >> 1);
}

static int max_sectors_kb_store(struct rq_queue *q, const char *val)
{
	unsigned long v;
	unsigned lbs_kb = q->limits.logical_block_size >> 10;

	if (parse_ulong(val, 4, q->limits.max_hw_sectors >> 1, &v))
		return -EINVAL;
	if (lbs_kb > 1 && v % lbs_kb)
		return -EINVAL;
	rq_queue_freeze(q);
	q->limits.max_sectors = (uint32_t)v << 1;
	queue_limits_changed(q);
	rq_queue_unfreeze(q);
	return 0;
}

static int max_hw_sectors_kb_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.max_hw_sectors >> 1);
}

static int chunk_sectors_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.chunk_sectors);
}

static int max_segments_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.max_segments);
}

static int max_segment_size_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.max_segment_size);
}

static int logical_block_size_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.logical_block_size);
}

static int physical_block_size_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->limits.physical_block_size);
}

static int discard_max_bytes_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%llu\n", (unsigned long long)q->limits.max_discard_sectors << 9);
}

static int write_zeroes_max_bytes_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%llu\n",
		    (unsigned long long)q->limits.max_write_zeroes_sectors << 9);
}

static int rotational_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", (q->limits.features & RQ_FEAT_ROTATIONAL) ? 1u : 0u);
}

static int rotational_store(struct rq_queue *q, const char *val)
{
	unsigned long v;

	if (parse_ulong(val, 0, 1, &v))
		return -EINVAL;
	if (v)
		q->limits.features |= RQ_FEAT_ROTATIONAL;
	else
		q->limits.features &= ~RQ_FEAT_ROTATIONAL;
	return 0;
}

static int write_cache_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%s\n",
		    (q->limits.features & RQ_FEAT_WRITE_CACHE) ? "write back" : "write through");
}

static int write_cache_store(struct rq_queue *q, const char *val)
{
	bool on;

	if (word_is(val, "write back"))
		on = true;
	else if (word_is(val, "write through") || word_is(val, "none"))
		on = false;
	else
		return -EINVAL;
	/*
	 * As the kernel (6.11 on): the write only says whether a cache the
	 * device has is used; "write back" on a device without one is accepted
	 * and changes nothing.
	 */
	rq_queue_freeze(q);
	if (on && q->hw_write_cache)
		q->limits.features |= RQ_FEAT_WRITE_CACHE;
	else
		q->limits.features &= ~RQ_FEAT_WRITE_CACHE;
	rq_queue_unfreeze(q);
	return 0;
}

static int counters_show(struct rq_queue *q, char *buf, size_t len)
{
	struct rq_queue_stats st;

	rq_queue_get_stats(q, &st, sizeof(st));
	return emit(buf, len,
		    "bios %llu splits %llu requests %llu dispatched %llu completed %llu "
		    "merges_back %llu merges_front %llu merges_rq %llu plug_merges %llu "
		    "resource %llu requeues %llu timeouts %llu flushes %llu errors %llu "
		    "invalid %llu\n",
		    (unsigned long long)st.bios, (unsigned long long)st.splits,
		    (unsigned long long)st.requests, (unsigned long long)st.dispatched,
		    (unsigned long long)st.completed, (unsigned long long)st.merges_back,
		    (unsigned long long)st.merges_front, (unsigned long long)st.merges_rq,
		    (unsigned long long)st.plug_merges, (unsigned long long)st.resource,
		    (unsigned long long)st.requeues, (unsigned long long)st.timeouts,
		    (unsigned long long)st.flushes, (unsigned long long)st.errors,
		    (unsigned long long)st.invalid);
}

/* /sys/block/X/stat: the 17 diskstats fields, as the kernel prints them. */
static int stat_show(struct rq_queue *q, char *buf, size_t len)
{
	struct rq_diskstats d;

	rq_queue_get_diskstats(q, &d, sizeof(d));
	return emit(buf, len,
		    "%8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu "
		    "%8llu %8llu %8llu %8llu %8llu %8llu\n",
		    (unsigned long long)d.read_ios, (unsigned long long)d.read_merges,
		    (unsigned long long)d.read_sectors, (unsigned long long)d.read_ticks_ms,
		    (unsigned long long)d.write_ios, (unsigned long long)d.write_merges,
		    (unsigned long long)d.write_sectors, (unsigned long long)d.write_ticks_ms,
		    (unsigned long long)d.in_flight, (unsigned long long)d.io_ticks_ms,
		    (unsigned long long)d.time_in_queue_ms, (unsigned long long)d.discard_ios,
		    (unsigned long long)d.discard_merges, (unsigned long long)d.discard_sectors,
		    (unsigned long long)d.discard_ticks_ms, (unsigned long long)d.flush_ios,
		    (unsigned long long)d.flush_ticks_ms);
}

/* /sys/block/X/inflight: requests with the driver, reads and writes. */
static int inflight_show(struct rq_queue *q, char *buf, size_t len)
{
	struct rq_diskstats d;

	rq_queue_get_diskstats(q, &d, sizeof(d));
	return emit(buf, len, "%8llu %8llu\n", (unsigned long long)d.in_flight_read,
		    (unsigned long long)d.in_flight_write);
}

static int iostats_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", (atomic_load(&q->obs_flags) & OBS_IOSTAT) ? 1u : 0u);
}

static int iostats_store(struct rq_queue *q, const char *val)
{
	unsigned long v;

	if (parse_ulong(val, 0, 1, &v))
		return -EINVAL;
	return iostat_set_locked(q, v);
}

static int trace_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%s\n", trace_path(q));
}

/* "0": stop; a directory: start a trace named rq<minor> there. */
static int trace_store(struct rq_queue *q, const char *val)
{
	char dir[4096], name[32];
	size_t n = strcspn(val, "\n");

	if (word_is(val, "0")) {
		int ret = trace_stop_locked(q, NULL);

		return ret == -ENOENT ? 0 : ret;
	}
	if (!n || n >= sizeof(dir) || val[n + (val[n] == '\n')])
		return -EINVAL;
	memcpy(dir, val, n);
	dir[n] = '\0';
	snprintf(name, sizeof(name), "rq%u",
		 (unsigned)(rq_queue_trace_dev(q) & ((1u << RQ_TRACE_MINOR_BITS) - 1)));
	return trace_start_locked(q, dir, name);
}

static int trace_dropped_show(struct rq_queue *q, char *buf, size_t len)
{
	struct rq_trace_info info = { .dropped = 0 };

	trace_info_locked(q, &info);
	return emit(buf, len, "%llu\n", (unsigned long long)info.dropped);
}

static const char *const lat_op_names[RQ_LAT_NR_OPS] = { "read", "write", "discard", "flush" };

/*
 * One line per op and kind: "read q2c" then, for every non-empty bucket,
 * " UPPER:COUNT" (UPPER the bucket's end in ns, 2^b).
 */
static int latency_hist_show(struct rq_queue *q, char *buf, size_t len)
{
	struct rq_latency_hist h;
	size_t off = 0;
	int n;

	rq_queue_get_latency_hist(q, &h, sizeof(h));
	for (unsigned k = 0; k < 2; k++)
		for (unsigned o = 0; o < RQ_LAT_NR_OPS; o++) {
			const uint64_t *b = k ? h.d2c[o] : h.q2c[o];

			n = emit(buf + off, len - off, "%s %s", lat_op_names[o], k ? "d2c" : "q2c");
			if (n < 0)
				return n;
			off += (size_t)n;
			for (unsigned i = 0; i < RQ_LAT_BUCKETS; i++) {
				if (!b[i])
					continue;
				n = emit(buf + off, len - off, " %llu:%llu", 1ull << i,
					 (unsigned long long)b[i]);
				if (n < 0)
					return n;
				off += (size_t)n;
			}
			n = emit(buf + off, len - off, "\n");
			if (n < 0)
				return n;
			off += (size_t)n;
		}
	return (int)off;
}

static int latency_hist_store(struct rq_queue *q, const char *val)
{
	if (!word_is(val, "0"))
		return -EINVAL;
	return rq_queue_reset_latency_hist(q);
}

static int nr_hw_queues_show(struct rq_queue *q, char *buf, size_t len)
{
	return emit(buf, len, "%u\n", q->nr_hw_queues);
}

static const struct queue_attr queue_attrs[] = {
	{ "scheduler", scheduler_show, scheduler_store },
	{ "nr_requests", nr_requests_show, nr_requests_store },
	UINT_ATTR("nomerges", nomerges, 0, 2),
	{ "max_sectors_kb", max_sectors_kb_show, max_sectors_kb_store },
	{ "max_hw_sectors_kb", max_hw_sectors_kb_show, NULL },
	{ "max_segments", max_segments_show, NULL },
	{ "chunk_sectors", chunk_sectors_show, NULL },
	{ "max_segment_size", max_segment_size_show, NULL },
	{ "logical_block_size", logical_block_size_show, NULL },
	{ "physical_block_size", physical_block_size_show, NULL },
	{ "discard_max_bytes", discard_max_bytes_show, NULL },
	{ "write_zeroes_max_bytes", write_zeroes_max_bytes_show, NULL },
	{ "rotational", rotational_show, rotational_store },
	UINT_ATTR("rq_affinity", rq_affinity, 0, 2),
	UINT_ATTR("io_timeout", io_timeout_ms, 1, 0xffffffffu),
	{ "write_cache", write_cache_show, write_cache_store },
	{ "stat", stat_show, NULL },
	{ "nr_hw_queues", nr_hw_queues_show, NULL },
	{ "counters", counters_show, NULL },
	{ "inflight", inflight_show, NULL },
	{ "iostats", iostats_show, iostats_store },
	{ "latency_hist", latency_hist_show, latency_hist_store },
	{ "trace", trace_show, trace_store },
	{ "trace_dropped", trace_dropped_show, NULL },
};

static const struct queue_attr *find_attr(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(queue_attrs); i++)
		if (!strcmp(queue_attrs[i].name, name))
			return &queue_attrs[i];
	return NULL;
}

#define IOSCHED_PREFIX "iosched/"

RQ_EXPORT int rq_queue_attr_get(struct rq_queue *q, const char *name, char *buf, size_t len)
{
	const struct queue_attr *a;
	int ret;

	if (!q || !name || !buf || !len)
		return -EINVAL;
	pthread_mutex_lock(&q->sysfs_lock);
	if (!strncmp(name, IOSCHED_PREFIX, strlen(IOSCHED_PREFIX))) {
		const char *tun = name + strlen(IOSCHED_PREFIX);

		ret = -EINVAL;
		if (q->elevator && *tun) {
			ret = elevator_attr_show(q->elevator->type, q->elevator->data, tun, buf, len);
			if (ret == -ENOENT)
				ret = -EINVAL;
		}
	} else if ((a = find_attr(name))) {
		ret = attr_show(q, a, buf, len);
	} else {
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&q->sysfs_lock);
	return ret;
}

RQ_EXPORT int rq_queue_attr_set(struct rq_queue *q, const char *name, const char *value)
{
	const struct queue_attr *a;
	int ret;

	if (!q || !name || !value)
		return -EINVAL;
	pthread_mutex_lock(&q->sysfs_lock);
	if (!strncmp(name, IOSCHED_PREFIX, strlen(IOSCHED_PREFIX))) {
		const char *tun = name + strlen(IOSCHED_PREFIX);

		ret = -EINVAL;
		if (q->elevator && *tun) {
			ret = elevator_attr_store(q->elevator->type, q->elevator->data, tun, value);
			if (ret == -ENOENT)
				ret = -EINVAL;
		}
	} else if ((a = find_attr(name))) {
		ret = attr_store(q, a, value);
	} else {
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&q->sysfs_lock);
	return ret;
}

RQ_EXPORT int rq_queue_attr_list(struct rq_queue *q, char *buf, size_t len)
{
	size_t off = 0;
	int n;

	if (!q || !buf || !len)
		return -EINVAL;
	buf[0] = 0;
	for (size_t i = 0; i < ARRAY_SIZE(queue_attrs); i++) {
		n = emit(buf + off, len - off, "%s\n", queue_attrs[i].name);
		if (n < 0)
			return n;
		off += (size_t)n;
	}
	pthread_mutex_lock(&q->sysfs_lock);
	if (q->elevator) {
		n = elevator_attr_list(q->elevator->type, buf + off, len - off);
		if (n < 0) {
			pthread_mutex_unlock(&q->sysfs_lock);
			return n == -ENOSPC ? n : -EINVAL;
		}
		off += (size_t)n;
	}
	pthread_mutex_unlock(&q->sysfs_lock);
	return (int)off;
}
