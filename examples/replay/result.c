/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay: results.  Summaries per stream and in total (throughput,
 * latency mean and nearest-rank percentiles), the latency CDF, and their
 * text table and JSON.  Every figure is computed from integers in a fixed
 * order, so the output repeats byte for byte.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/attr.h>

#include "result.h"

#define MAX_COUNTERS 16

struct rq_replay_result {
	char sched[32];
	char model[32];
	bool sq, closed_loop;
	unsigned depth;
	unsigned nr_streams;
	struct rq_replay_summary *sum;  /* nr_streams + 1: the last is "all" */
	uint64_t **sorted;              /* per stream + all: sorted latencies */
	size_t *nsorted;
	uint64_t *lat_by_io;            /* keep_latencies */
	uint64_t *done_by_io;
	size_t nio;
	uint64_t errors;
	const char *cname[MAX_COUNTERS];
	uint64_t cval[MAX_COUNTERS];
	unsigned nr_counters;
};

/* ---------------------------------------------------------------- sort */

/* Merge sort: stable, so equal keys keep their order. */
int replay_stable_sort(void *base, size_t n, size_t size,
		       int (*cmp)(const void *, const void *))
{
	char *a = base, *tmp;
	size_t w, i;

	if (n < 2)
		return 0;
	tmp = malloc(n * size);
	if (!tmp)
		return -ENOMEM;
	for (w = 1; w < n; w *= 2) {
		for (i = 0; i < n; i += 2 * w) {
			size_t l = i, m = i + w < n ? i + w : n, r = m, e = i + 2 * w < n ? i + 2 * w : n;
			size_t o = i;

			while (l < m && r < e) {
				if (cmp(a + r * size, a + l * size) < 0)
					memcpy(tmp + o++ * size, a + r++ * size, size);
				else
					memcpy(tmp + o++ * size, a + l++ * size, size);
			}
			memcpy(tmp + o * size, a + l * size, (m - l) * size);
			o += m - l;
			memcpy(tmp + o * size, a + r * size, (e - r) * size);
		}
		memcpy(a, tmp, n * size);
	}
	free(tmp);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------- building */

void result_counter(struct rq_replay_result *r, const char *name, uint64_t v)
{
	if (r->nr_counters < MAX_COUNTERS) {
		r->cname[r->nr_counters] = name;
		r->cval[r->nr_counters++] = v;
	}
}

/* Nearest rank: the smallest latency with at least @per10k / 10000 at or below. */
static uint64_t pct(const uint64_t *v, size_t n, unsigned per10k)
{
	size_t rank;

	if (!n)
		return 0;
	rank = (size_t)(((unsigned __int128)n * per10k + 9999) / 10000);
	return v[rank ? rank - 1 : 0];
}

static void summarize(struct rq_replay_summary *s, uint64_t *v, size_t n)
{
	unsigned __int128 sum = 0;
	uint64_t span;
	size_t i;

	qsort(v, n, sizeof(*v), cmp_u64);
	for (i = 0; i < n; i++)
		sum += v[i];
	s->lat_min_ns = n ? v[0] : 0;
	s->lat_max_ns = n ? v[n - 1] : 0;
	s->lat_mean_ns = n ? (uint64_t)(sum / n) : 0;
	s->lat_p50_ns = pct(v, n, 5000);
	s->lat_p90_ns = pct(v, n, 9000);
	s->lat_p99_ns = pct(v, n, 9900);
	s->lat_p999_ns = pct(v, n, 9990);
	span = s->last_ns > s->first_ns ? s->last_ns - s->first_ns : 0;
	s->mb_per_s = span ? (double)s->bytes * 1000.0 / (double)span : 0;
	s->iops = span ? (double)s->ios * 1e9 / (double)span : 0;
}

static void account(struct rq_replay_summary *s, const struct rq_replay_io *io, uint64_t done)
{
	if (!s->ios || io->time_ns < s->first_ns)
		s->first_ns = io->time_ns;
	if (done > s->last_ns)
		s->last_ns = done;
	s->ios++;
	s->bytes += io->bytes;
	s->reads += io->op == RQ_REPLAY_READ;
	s->writes += io->op == RQ_REPLAY_WRITE;
}

static void sched_name(struct rq_replay_result *r, struct rq_queue *q, const char *fallback)
{
	char buf[256], *a, *b;

	snprintf(r->sched, sizeof(r->sched), "%s", fallback ? fallback : "default");
	if (rq_queue_attr_get(q, "scheduler", buf, sizeof(buf)) < 0)
		return;
	a = strchr(buf, '[');
	b = a ? strchr(a, ']') : NULL;
	if (a && b) {
		*b = 0;
		snprintf(r->sched, sizeof(r->sched), "%s", a + 1);
	}
}

static int result_alloc(struct rq_replay_result *r, unsigned nr_streams, size_t nio)
{
	r->nr_streams = nr_streams;
	r->sum = calloc(nr_streams + 1, sizeof(*r->sum));
	r->sorted = calloc(nr_streams + 1, sizeof(*r->sorted));
	r->nsorted = calloc(nr_streams + 1, sizeof(*r->nsorted));
	if (!r->sum || !r->sorted || !r->nsorted)
		return -ENOMEM;
	r->sorted[nr_streams] = malloc(nio * sizeof(uint64_t));
	return r->sorted[nr_streams] ? 0 : -ENOMEM;
}

struct rq_replay_result *result_build(const struct rq_replay_trace *t,
				      const struct rq_replay_model *m,
				      const struct rq_replay_config *cfg, struct rq_queue *q,
				      const uint64_t *lat, const uint64_t *done_at,
				      const uint32_t *stream_of, const char **keys,
				      unsigned nr_streams, uint64_t errors)
{
	struct rq_replay_result *r = calloc(1, sizeof(*r));
	size_t i;
	unsigned k;

	if (!r || result_alloc(r, nr_streams, t->nr))
		goto fail;
	sched_name(r, q, cfg->sched);
	snprintf(r->model, sizeof(r->model), "%s", m->name);
	r->sq = cfg->front == RQ_REPLAY_FRONT_SQ;
	r->closed_loop = cfg->closed_loop;
	r->depth = cfg->depth;
	r->errors = errors;
	for (i = 0; i < t->nr; i++)
		r->nsorted[stream_of[i]]++;
	for (k = 0; k < nr_streams; k++) {
		r->sorted[k] = malloc((r->nsorted[k] ? r->nsorted[k] : 1) * sizeof(uint64_t));
		if (!r->sorted[k])
			goto fail;
		r->nsorted[k] = 0;
		snprintf(r->sum[k].key, sizeof(r->sum[k].key), "%s", keys[k]);
	}
	snprintf(r->sum[nr_streams].key, sizeof(r->sum[nr_streams].key), "all");
	for (i = 0; i < t->nr; i++) {
		k = stream_of[i];
		r->sorted[k][r->nsorted[k]++] = lat[i];
		r->sorted[nr_streams][r->nsorted[nr_streams]++] = lat[i];
		account(&r->sum[k], &t->io[i], done_at[i]);
		account(&r->sum[nr_streams], &t->io[i], done_at[i]);
	}
	for (k = 0; k <= nr_streams; k++)
		summarize(&r->sum[k], r->sorted[k], r->nsorted[k]);
	if (cfg->keep_latencies) {
		r->lat_by_io = malloc(t->nr * sizeof(uint64_t));
		r->done_by_io = malloc(t->nr * sizeof(uint64_t));
		if (!r->lat_by_io || !r->done_by_io)
			goto fail;
		memcpy(r->lat_by_io, lat, t->nr * sizeof(uint64_t));
		memcpy(r->done_by_io, done_at, t->nr * sizeof(uint64_t));
		r->nio = t->nr;
	}
	return r;
fail:
	rq_replay_result_free(r);
	return NULL;
}

void rq_replay_result_free(struct rq_replay_result *r)
{
	unsigned k;

	if (!r)
		return;
	for (k = 0; r->sorted && k <= r->nr_streams; k++)
		free(r->sorted[k]);
	free(r->sorted);
	free(r->nsorted);
	free(r->sum);
	free(r->lat_by_io);
	free(r->done_by_io);
	free(r);
}

/* -------------------------------------------------------------- getters */

unsigned rq_replay_result_nr_streams(const struct rq_replay_result *r)
{
	return r->nr_streams;
}

int rq_replay_result_summary(const struct rq_replay_result *r, int i,
			     struct rq_replay_summary *s)
{
	if (!r || !s || i < -1 || i >= (int)r->nr_streams)
		return -EINVAL;
	*s = r->sum[i < 0 ? r->nr_streams : (unsigned)i];
	return 0;
}

uint64_t rq_replay_result_latency(const struct rq_replay_result *r, size_t i)
{
	return r && r->lat_by_io && i < r->nio ? r->lat_by_io[i] : 0;
}

uint64_t rq_replay_result_completion(const struct rq_replay_result *r, size_t i)
{
	return r && r->done_by_io && i < r->nio ? r->done_by_io[i] : 0;
}

const char *rq_replay_result_sched(const struct rq_replay_result *r)
{
	return r->sched;
}

/* -------------------------------------------------------------- output */

static double us(uint64_t ns)
{
	return (double)ns / 1000.0;
}

void rq_replay_result_print(const struct rq_replay_result *r, FILE *f)
{
	unsigned k, i;

	fprintf(f, "scheduler %s (%s) on %s, %s", r->sched, r->sq ? "sq" : "mq", r->model,
		r->closed_loop ? "closed loop" : "open loop");
	if (r->closed_loop)
		fprintf(f, ", depth %u per stream", r->depth);
	fprintf(f, "\n%-24s %8s %9s %10s %10s %10s %10s %10s %10s\n", "stream", "ios", "MB/s",
		"IOPS", "mean_us", "p50_us", "p90_us", "p99_us", "max_us");
	for (k = 0; k <= r->nr_streams; k++) {
		const struct rq_replay_summary *s = &r->sum[k];

		fprintf(f, "%-24.24s %8" PRIu64 " %9.2f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n",
			s->key, s->ios, s->mb_per_s, s->iops, us(s->lat_mean_ns), us(s->lat_p50_ns),
			us(s->lat_p90_ns), us(s->lat_p99_ns), us(s->lat_max_ns));
	}
	fprintf(f, "device:");
	for (i = 0; i < r->nr_counters; i++)
		fprintf(f, " %s=%" PRIu64, r->cname[i], r->cval[i]);
	fprintf(f, " errors=%" PRIu64 "\n", r->errors);
}

/* JSON string: keys are file names or numbers; escape what JSON needs. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void json_summary(FILE *f, const struct rq_replay_summary *s)
{
	fprintf(f, "{\"key\":");
	json_str(f, s->key);
	fprintf(f, ",\"ios\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"reads\":%" PRIu64
		",\"writes\":%" PRIu64 ",\"first_ns\":%" PRIu64 ",\"last_ns\":%" PRIu64
		",\"mb_per_s\":%.3f,\"iops\":%.3f,\"lat_ns\":{\"mean\":%" PRIu64 ",\"min\":%" PRIu64
		",\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64 ",\"p99.9\":%" PRIu64
		",\"max\":%" PRIu64 "}}", s->ios, s->bytes, s->reads, s->writes, s->first_ns,
		s->last_ns, s->mb_per_s, s->iops, s->lat_mean_ns, s->lat_min_ns, s->lat_p50_ns,
		s->lat_p90_ns, s->lat_p99_ns, s->lat_p999_ns, s->lat_max_ns);
}

/* The CDF: up to @points (latency, fraction) steps, evenly spaced in rank. */
static void cdf_points(const uint64_t *v, size_t n, unsigned points,
		       void (*emit)(void *, uint64_t, double), void *arg)
{
	size_t last = SIZE_MAX;
	unsigned p;

	for (p = 1; n && p <= points; p++) {
		size_t rank = (size_t)(((unsigned __int128)n * p + points - 1) / points);

		if (rank == last)
			continue;
		/* the step ends where the value changes */
		while (rank < n && v[rank] == v[rank - 1])
			rank++;
		if (rank == last)
			continue;
		last = rank;
		emit(arg, v[rank - 1], (double)rank / (double)n);
		if (rank == n)
			break;
	}
}

struct emit_json {
	FILE *f;
	bool first;
};

static void emit_json(void *arg, uint64_t ns, double frac)
{
	struct emit_json *e = arg;

	fprintf(e->f, "%s[%" PRIu64 ",%.6f]", e->first ? "" : ",", ns, frac);
	e->first = false;
}

void rq_replay_result_json(const struct rq_replay_result *r, FILE *f, unsigned cdf)
{
	unsigned k, i;

	fprintf(f, "{\"sched\":");
	json_str(f, r->sched);
	fprintf(f, ",\"front\":\"%s\",\"model\":", r->sq ? "sq" : "mq");
	json_str(f, r->model);
	fprintf(f, ",\"mode\":\"%s\",\"depth\":%u,\"errors\":%" PRIu64 ",\"device\":{",
		r->closed_loop ? "closed" : "open", r->closed_loop ? r->depth : 0, r->errors);
	for (i = 0; i < r->nr_counters; i++)
		fprintf(f, "%s\"%s\":%" PRIu64, i ? "," : "", r->cname[i], r->cval[i]);
	fprintf(f, "},\"streams\":[");
	for (k = 0; k < r->nr_streams; k++) {
		fprintf(f, "%s", k ? "," : "");
		json_summary(f, &r->sum[k]);
	}
	fprintf(f, "],\"total\":");
	json_summary(f, &r->sum[r->nr_streams]);
	if (cdf) {
		struct emit_json e = { f, true };

		fprintf(f, ",\"cdf_ns\":[");
		cdf_points(r->sorted[r->nr_streams], r->nsorted[r->nr_streams], cdf, emit_json, &e);
		fprintf(f, "]");
	}
	fprintf(f, "}");
}

static void emit_text(void *arg, uint64_t ns, double frac)
{
	fprintf(arg, "%.3f %.6f\n", us(ns), frac);
}

int rq_replay_result_cdf(const struct rq_replay_result *r, int i, FILE *f, unsigned points)
{
	unsigned k;

	if (!r || !f || i < -1 || i >= (int)r->nr_streams || !points)
		return -EINVAL;
	k = i < 0 ? r->nr_streams : (unsigned)i;
	cdf_points(r->sorted[k], r->nsorted[k], points, emit_text, f);
	return ferror(f) ? -EIO : 0;
}
