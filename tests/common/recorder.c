/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The test drivers' log (see recorder.h).
 */
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "recorder.h"

void recorder_init(struct recorder *r, pthread_mutex_t *lock)
{
	memset(r, 0, sizeof(*r));
	r->lock = lock;
}

void recorder_free(struct recorder *r)
{
	free(r->events);
	r->events = NULL;
	r->nr_events = r->max_events = 0;
}

struct mock_event *recorder_add_locked(struct recorder *r, enum mock_call call,
				       struct rq_request *rq)
{
	struct mock_event *ev;

	if (r->nr_events == r->max_events) {
		r->max_events = r->max_events ? 2 * r->max_events : 256;
		r->events = fixture_realloc(r->events, r->max_events * sizeof(*ev));
	}
	ev = &r->events[r->nr_events++];
	memset(ev, 0, sizeof(*ev));
	ev->call = call;
	ev->tag = -1;
	ev->when_ns = rq_clock_ns();
	if (rq) {
		ev->op = rq->op;
		ev->opf = rq->opf;
		ev->sector = rq->sector;
		ev->bytes = rq->bytes;
		ev->nr_segments = rq->nr_segments;
		ev->tag = rq->tag;
	}
	return ev;
}

void recorder_walk_locked(struct recorder *r, struct rq_request *rq)
{
	struct rq_req_iter ri;
	struct rq_segment seg;
	unsigned pieces = 0;
	uint64_t total = 0;

	if (!rq_op_has_data(rq->op))
		return;
	rq_req_iter_init(&ri, rq);
	while (rq_req_iter_next(&ri, &seg)) {
		pieces++;
		total += seg.len;
	}
	if (pieces > r->max_pieces)
		r->max_pieces = pieces;
	if (total != rq->bytes)
		r->bad_requests++;
}

static bool is_kind(const struct mock_event *ev, int call)
{
	return call == RECORDER_ALL || (int)ev->call == call;
}

unsigned recorder_count(struct recorder *r, int call)
{
	unsigned n = 0;

	pthread_mutex_lock(r->lock);
	for (unsigned i = 0; i < r->nr_events; i++)
		n += is_kind(&r->events[i], call);
	pthread_mutex_unlock(r->lock);
	return n;
}

bool recorder_find(struct recorder *r, int call, unsigned i, struct mock_event *out)
{
	bool found = false;

	pthread_mutex_lock(r->lock);
	for (unsigned k = 0; k < r->nr_events && !found; k++) {
		if (is_kind(&r->events[k], call) && i-- == 0) {
			*out = r->events[k];
			found = true;
		}
	}
	pthread_mutex_unlock(r->lock);
	return found;
}

unsigned recorder_copy(struct recorder *r, int call, struct mock_event **out)
{
	unsigned n = 0;

	pthread_mutex_lock(r->lock);
	*out = fixture_realloc(NULL, (r->nr_events ? r->nr_events : 1) * sizeof(**out));
	for (unsigned k = 0; k < r->nr_events; k++)
		if (is_kind(&r->events[k], call))
			(*out)[n++] = r->events[k];
	pthread_mutex_unlock(r->lock);
	return n;
}

void recorder_reset(struct recorder *r)
{
	pthread_mutex_lock(r->lock);
	r->nr_events = 0;
	pthread_mutex_unlock(r->lock);
}

void recorder_walk_stats(struct recorder *r, unsigned *max_pieces, unsigned long *bad_requests)
{
	pthread_mutex_lock(r->lock);
	if (max_pieces)
		*max_pieces = r->max_pieces;
	if (bad_requests)
		*bad_requests = r->bad_requests;
	pthread_mutex_unlock(r->lock);
}
