/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rqnbd --iostat: the queue's diskstats turned into iostat -x's columns
 * (sysstat's formulas over the interval: r/s = reads completed / seconds,
 * r_await = read ticks / reads, aqu-sz = time in queue / interval, %util =
 * io_ticks / interval), plus the 99th percentile of the interval's
 * queue-to-complete latency per direction from the log2 histograms (the
 * upper end of the bucket that holds it, so within a factor of two).
 */
#include "nbd_iostat.h"

#include <errno.h>
#include <string.h>

/* The smallest log2 bucket end (ns) holding the @pct-th percentile of @b. */
static uint64_t hist_pct_ns(const uint64_t *b, const uint64_t *prev, double pct)
{
	uint64_t total = 0, seen = 0, want;
	unsigned i;

	for (i = 0; i < RQ_LAT_BUCKETS; i++)
		total += b[i] - prev[i];
	if (!total)
		return 0;
	want = (uint64_t)(pct / 100.0 * (double)total + 0.999999);
	for (i = 0; i < RQ_LAT_BUCKETS; i++) {
		seen += b[i] - prev[i];
		if (seen >= want)
			break;
	}
	return i < RQ_LAT_BUCKETS ? 1ull << i : 1ull << (RQ_LAT_BUCKETS - 1);
}

int nbd_iostat_start(struct nbd_iostat *s, struct rq_queue *q, const char *name,
		     unsigned interval_ms, uint64_t now_ms)
{
	int ret;

	*s = (struct nbd_iostat){ .q = q, .interval_ms = interval_ms, .last_ms = now_ms };
	if (name)
		snprintf(s->prefix, sizeof(s->prefix), "rqnbd: %s: ", name);
	else
		snprintf(s->prefix, sizeof(s->prefix), "rqnbd: ");
	ret = rq_queue_attr_set(q, "iostats", "1");
	if (ret < 0)
		return ret;
	rq_queue_get_diskstats(q, &s->prev, sizeof(s->prev));
	rq_queue_get_latency_hist(q, &s->prev_h, sizeof(s->prev_h));
	return 0;
}

int nbd_iostat_timeout(const struct nbd_iostat *s, uint64_t now_ms)
{
	uint64_t due;

	if (!s->q || !s->interval_ms)
		return -1;
	due = s->last_ms + s->interval_ms;
	return now_ms >= due ? 0 : (int)(due - now_ms);
}

/* Per second over @secs, 0 when the interval is empty. */
static double rate(uint64_t d, double secs)
{
	return secs > 0 ? (double)d / secs : 0;
}

static double ratio(uint64_t num, uint64_t den)
{
	return den ? (double)num / (double)den : 0;
}

void nbd_iostat_tick(struct nbd_iostat *s, uint64_t now_ms, FILE *f)
{
	struct rq_diskstats d;
	struct rq_latency_hist h;
	const struct rq_diskstats *p = &s->prev;
	double secs, ms;

	if (nbd_iostat_timeout(s, now_ms) != 0)
		return;
	rq_queue_get_diskstats(s->q, &d, sizeof(d));
	rq_queue_get_latency_hist(s->q, &h, sizeof(h));
	ms = (double)(now_ms - s->last_ms);
	secs = ms / 1000.0;
	if (s->lines++ % 20 == 0)
		fprintf(f, "%siostat %8s %9s %7s %8s %8s %9s %7s %8s %7s %7s %6s %6s "
			"%9s %9s\n", s->prefix, "r/s", "rkB/s", "rrqm/s", "r_await", "w/s", "wkB/s",
			"wrqm/s", "w_await", "d/s", "f/s", "aqu-sz", "%util", "r_p99_us",
			"w_p99_us");
	fputs(s->prefix, f);
	fprintf(f, "iostat %8.1f %9.1f %7.1f %8.2f %8.1f %9.1f %7.1f %8.2f %7.1f %7.1f "
		"%6.2f %6.1f %9.1f %9.1f\n",
		rate(d.read_ios - p->read_ios, secs),
		rate(d.read_sectors - p->read_sectors, secs) / 2,
		rate(d.read_merges - p->read_merges, secs),
		ratio(d.read_ticks_ms - p->read_ticks_ms, d.read_ios - p->read_ios),
		rate(d.write_ios - p->write_ios, secs),
		rate(d.write_sectors - p->write_sectors, secs) / 2,
		rate(d.write_merges - p->write_merges, secs),
		ratio(d.write_ticks_ms - p->write_ticks_ms, d.write_ios - p->write_ios),
		rate(d.discard_ios - p->discard_ios, secs),
		rate(d.flush_ios - p->flush_ios, secs),
		ms > 0 ? (double)(d.time_in_queue_ms - p->time_in_queue_ms) / ms : 0,
		ms > 0 ? 100.0 * (double)(d.io_ticks_ms - p->io_ticks_ms) / ms : 0,
		hist_pct_ns(h.q2c[RQ_LAT_READ], s->prev_h.q2c[RQ_LAT_READ], 99) / 1000.0,
		hist_pct_ns(h.q2c[RQ_LAT_WRITE], s->prev_h.q2c[RQ_LAT_WRITE], 99) / 1000.0);
	fflush(f);
	s->prev = d;
	s->prev_h = h;
	s->last_ms = now_ms;
}

/* One attribute as "PREFIX ATTR: VALUE" lines. */
static void dump_attr(const struct nbd_iostat *s, const char *name, FILE *f)
{
	struct rq_queue *q = s->q;
	char buf[8192], *line, *save = NULL;
	int n = rq_queue_attr_get(q, name, buf, sizeof(buf));

	if (n < 0) {
		fprintf(f, "%s%s: %s\n", s->prefix, name, strerror(-n));
		return;
	}
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		fprintf(f, "%s%s: %s\n", s->prefix, name, line);
}

void nbd_iostat_dump(struct nbd_iostat *s, FILE *f)
{
	if (!s->q)
		return;
	dump_attr(s, "stat", f);
	dump_attr(s, "inflight", f);
	dump_attr(s, "latency_hist", f);
	fflush(f);
}
