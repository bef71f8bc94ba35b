/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The pattern format kdiff-submit (kernel side) and kdiff-rq (librequest
 * side) share, and its parser.
 *
 * A pattern is a text file, one item per line; '#' starts a comment:
 *
 *   R|W|U OFFSET LENGTH [c|s|RUNS]   one I/O: read, write, FUA write
 *                                    (RWF_DSYNC); offset and length in
 *                                    bytes, suffix k or m for KiB / MiB;
 *                                    c: one contiguous buffer (default),
 *                                    s: scattered, every 4 KiB page its
 *                                    own buffer, none adjacent to another;
 *                                    RUNS: the resolved layout, lengths of
 *                                    physically contiguous pieces,
 *                                    comma-separated, LENxCOUNT repeats
 *   -                                end of a batch: submit what came
 *                                    before as one io_submit (one plug),
 *                                    wait for all of it
 *   F                                end of a batch, then a cache flush
 *                                    (fsync of the device), waited for
 *
 * The end of the file ends the last batch.  kdiff-submit prints the
 * pattern back with the runs it actually used (from /proc/self/pagemap),
 * which kdiff-rq reads, so both sides build bios of the same segments.
 */
#ifndef KDIFF_PATTERN_H
#define KDIFF_PATTERN_H

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_PAGE 4096u
#define KD_MAX_RUNS 1024u

enum kd_kind { KD_IO, KD_BATCH_END, KD_FLUSH };

struct kd_item {
	enum kd_kind kind;
	char op;              /* 'R', 'W', 'U' */
	uint64_t off, len;    /* bytes */
	char layout;          /* 'c', 's', or 'r' (runs given) */
	unsigned nr_runs;
	uint64_t *runs;       /* bytes per physically contiguous piece */
};

struct kd_pattern {
	struct kd_item *items;
	unsigned nr;
};

/* A size with an optional k/m suffix; -1 on error. */
static inline int64_t kd_size(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	return *end ? -1 : (int64_t)v;
}

/* Parse "4096x16,65536" into @it's runs; 0 or -1. */
static inline int kd_parse_runs(struct kd_item *it, char *s)
{
	uint64_t sum = 0;

	it->runs = calloc(KD_MAX_RUNS, sizeof(*it->runs));
	if (!it->runs)
		return -1;
	for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		char *x = strchr(tok, 'x');
		int64_t len, count = 1;

		if (x) {
			*x = 0;
			count = kd_size(x + 1);
		}
		len = kd_size(tok);
		if (len <= 0 || count <= 0 || it->nr_runs + count > KD_MAX_RUNS)
			return -1;
		while (count--) {
			it->runs[it->nr_runs++] = (uint64_t)len;
			sum += (uint64_t)len;
		}
	}
	return sum == it->len ? 0 : -1;
}

/* Fill the runs a layout letter stands for (before pagemap says better). */
static inline int kd_default_runs(struct kd_item *it)
{
	if (it->layout == 'r')
		return 0;
	it->runs = calloc(KD_MAX_RUNS, sizeof(*it->runs));
	if (!it->runs)
		return -1;
	if (it->layout == 'c') {
		it->runs[it->nr_runs++] = it->len;
		return 0;
	}
	if (it->len % KD_PAGE || it->len / KD_PAGE > KD_MAX_RUNS)
		return -1;
	for (uint64_t i = 0; i < it->len / KD_PAGE; i++)
		it->runs[it->nr_runs++] = KD_PAGE;
	return 0;
}

/* Parse @path; 0, or -1 with a message on stderr. */
static inline int kd_parse(const char *path, struct kd_pattern *p)
{
	FILE *f = fopen(path, "r");
	char line[16384];
	unsigned lineno = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	memset(p, 0, sizeof(*p));
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#'), *tok[4];
		struct kd_item it = { .kind = KD_IO, .layout = 'c' };
		unsigned n = 0;
		int64_t off, len;

		lineno++;
		if (hash)
			*hash = 0;
		for (char *t = strtok(line, " \t\n"); t && n < 4; t = strtok(NULL, " \t\n"))
			tok[n++] = t;
		if (!n)
			continue;
		if (n == 1 && (!strcmp(tok[0], "-") || !strcmp(tok[0], "F"))) {
			it.kind = tok[0][0] == 'F' ? KD_FLUSH : KD_BATCH_END;
		} else {
			if (n < 3 || strlen(tok[0]) != 1 || !strchr("RWU", tok[0][0]))
				goto bad;
			it.op = tok[0][0];
			off = kd_size(tok[1]);
			len = kd_size(tok[2]);
			if (off < 0 || len <= 0 || off % 512 || len % 512)
				goto bad;
			it.off = (uint64_t)off;
			it.len = (uint64_t)len;
			if (n == 4 && (!strcmp(tok[3], "c") || !strcmp(tok[3], "s")))
				it.layout = tok[3][0];
			else if (n == 4) {
				it.layout = 'r';
				char *runs = strdup(tok[3]);

				if (!runs || kd_parse_runs(&it, runs)) {
					free(runs);
					goto bad;
				}
				free(runs);
			}
			if (kd_default_runs(&it))
				goto bad;
		}
		if (p->nr == cap) {
			cap = cap ? 2 * cap : 64;
			p->items = realloc(p->items, cap * sizeof(*p->items));
			if (!p->items)
				goto bad;
		}
		p->items[p->nr++] = it;
		continue;
bad:
		fprintf(stderr, "%s:%u: bad line\n", path, lineno);
		fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

/* Free what kd_parse() allocated. */
static inline void kd_free(struct kd_pattern *p)
{
	for (unsigned i = 0; i < p->nr; i++)
		free(p->items[i].runs);
	free(p->items);
	p->items = NULL;
	p->nr = 0;
}

/* Print @it in the resolved form (runs). */
static inline void kd_print_item(FILE *f, const struct kd_item *it)
{
	if (it->kind != KD_IO) {
		fputs(it->kind == KD_FLUSH ? "F\n" : "-\n", f);
		return;
	}
	fprintf(f, "%c %llu %llu ", it->op, (unsigned long long)it->off,
		(unsigned long long)it->len);
	for (unsigned i = 0; i < it->nr_runs;) {
		unsigned j = i;

		while (j < it->nr_runs && it->runs[j] == it->runs[i])
			j++;
		fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)it->runs[i]);
		if (j - i > 1)
			fprintf(f, "x%u", j - i);
		i = j;
	}
	fputc('\n', f);
}

#endif /* KDIFF_PATTERN_H */
