/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay: building a result from a finished run (result.c); never
 * installed.
 */
#ifndef RQREPLAY_RESULT_H
#define RQREPLAY_RESULT_H

#include <librequest/queue.h>

#include "replay-internal.h"

/*
 * result_build() - summaries from per-I/O latencies (@lat, ns) and
 * completion times (@done_at, ns from trace start), @stream_of mapping
 * I/Os to the streams named @keys.  Return: the result or NULL (ENOMEM).
 */
struct rq_replay_result *result_build(const struct rq_replay_trace *t,
				      const struct rq_replay_model *m,
				      const struct rq_replay_config *cfg, struct rq_queue *q,
				      const uint64_t *lat, const uint64_t *done_at,
				      const uint32_t *stream_of, const char **keys,
				      unsigned nr_streams, uint64_t errors);

/* result_counter() - add a device counter by name. */
void result_counter(struct rq_replay_result *r, const char *name, uint64_t v);

#endif /* RQREPLAY_RESULT_H */
