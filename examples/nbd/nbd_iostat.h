/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rqnbd's view of its queue while it runs: an iostat -x style line every
 * --iostat seconds, and the queue's diskstats ("stat", "inflight") and
 * latency histograms ("latency_hist") on SIGUSR1, from the library's
 * diskstats and histogram API (include/librequest/stats.h).  One per
 * export; served from a --config file, each line names its export.
 */
#ifndef RQNBD_IOSTAT_H
#define RQNBD_IOSTAT_H

#include <stdint.h>
#include <stdio.h>

#include <librequest/librequest.h>

#define NBD_IOSTAT_PREFIX_MAX 280  /* "rqnbd: " NAME ": " */

struct nbd_iostat {
	struct rq_queue *q;
	char prefix[NBD_IOSTAT_PREFIX_MAX];  /* "rqnbd: " or "rqnbd: NAME: " */
	unsigned interval_ms;        /* 0: no periodic line */
	uint64_t last_ms;            /* when prev was taken */
	unsigned lines;              /* printed so far (a header every 20) */
	struct rq_diskstats prev;
	struct rq_latency_hist prev_h;
};

/*
 * nbd_iostat_start() - turn @q's "iostats" on and take the first sample;
 * a line every @interval_ms from @now_ms on (0: none, SIGUSR1 only).
 * @name: the export's name put in every line, or NULL (rqnbd without --config).
 * Return: 0 or -errno from the attribute.
 */
int nbd_iostat_start(struct nbd_iostat *s, struct rq_queue *q, const char *name,
		     unsigned interval_ms, uint64_t now_ms);

/* nbd_iostat_timeout() - ms until the next line is due (0: now); -1: none. */
int nbd_iostat_timeout(const struct nbd_iostat *s, uint64_t now_ms);

/* nbd_iostat_tick() - print the line to @f if it is due at @now_ms. */
void nbd_iostat_tick(struct nbd_iostat *s, uint64_t now_ms, FILE *f);

/* nbd_iostat_dump() - the attributes stat, inflight and latency_hist to @f. */
void nbd_iostat_dump(struct nbd_iostat *s, FILE *f);

#endif /* RQNBD_IOSTAT_H */
