/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A log-linear latency histogram: values below 2^HIST_SUB_BITS are exact,
 * above that every power of two is split into 2^HIST_SUB_BITS buckets, so a
 * bucket is at most 1/32 (about 3%) of its value wide.  Fixed size, no
 * allocation; one per thread, merged at the end.
 */
#ifndef RQ_BENCH_HIST_H
#define RQ_BENCH_HIST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HIST_SUB_BITS 5
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t max;
	uint64_t bucket[HIST_BUCKETS];
};

/** hist_index() - the bucket of @v. */
static inline unsigned hist_index(uint64_t v)
{
	unsigned msb, shift;

	if (v < HIST_SUB)
		return (unsigned)v;
	msb = 63 - (unsigned)__builtin_clzll(v);
	shift = msb - HIST_SUB_BITS;
	return (shift + 1) * HIST_SUB + (unsigned)((v >> shift) - HIST_SUB);
}

/** hist_value() - a representative value (the middle) of bucket @idx. */
static inline uint64_t hist_value(unsigned idx)
{
	unsigned shift;
	uint64_t low;

	if (idx < HIST_SUB)
		return idx;
	shift = idx / HIST_SUB - 1;
	low = (uint64_t)(idx % HIST_SUB + HIST_SUB) << shift;
	return low + ((1ull << shift) >> 1);
}

/** hist_add() - record one value. */
static inline void hist_add(struct hist *h, uint64_t v)
{
	h->bucket[hist_index(v)]++;
	h->count++;
	if (v > h->max)
		h->max = v;
}

/** hist_merge() - add @src into @dst. */
static inline void hist_merge(struct hist *dst, const struct hist *src)
{
	unsigned i;

	for (i = 0; i < HIST_BUCKETS; i++)
		dst->bucket[i] += src->bucket[i];
	dst->count += src->count;
	if (src->max > dst->max)
		dst->max = src->max;
}

/**
 * hist_percentile() - the value below which @pct percent of the samples
 * fall (bucket middle, clamped to the exact maximum); 0 when empty.
 */
static inline uint64_t hist_percentile(const struct hist *h, double pct)
{
	uint64_t want, seen = 0;
	unsigned i;

	if (!h->count)
		return 0;
	want = (uint64_t)(pct / 100.0 * (double)h->count + 0.5);
	if (want < 1)
		want = 1;
	if (want > h->count)
		want = h->count;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= want) {
			uint64_t v = hist_value(i);

			return v > h->max ? h->max : v;
		}
	}
	return h->max;
}

/**
 * hist_cdf_json() - print @h's cumulative distribution to @f as a JSON list
 * of [value_ns, fraction] pairs, one per non-empty bucket, in increasing
 * order (the last fraction is 1); "[]" when empty.
 */
static inline void hist_cdf_json(FILE *f, const struct hist *h)
{
	uint64_t seen = 0;
	const char *sep = "";
	unsigned i;

	fputc('[', f);
	for (i = 0; h->count && i < HIST_BUCKETS; i++) {
		uint64_t v;

		if (!h->bucket[i])
			continue;
		seen += h->bucket[i];
		v = hist_value(i);
		fprintf(f, "%s[%" PRIu64 ",%.6g]", sep, v > h->max ? h->max : v,
			(double)seen / (double)h->count);
		sep = ",";
	}
	fputc(']', f);
}

#endif /* RQ_BENCH_HIST_H */
