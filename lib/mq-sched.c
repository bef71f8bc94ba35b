/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Multi-queue schedulers on a queue (the kernel's blk-mq-sched.c and the
 * switch in elevator.c): scheduler tags, attaching, switching and
 * detaching a struct rq_elevator_type, and nr_requests.
 *
 * A switch goes in stages, so a failure at any point leaves the old
 * scheduler running and the queue frozen for as short a time as can be:
 *   prepare   unfrozen: the instance, its scheduler tags, the arrays the
 *             install needs, all allocated (switch_prepare()); then the
 *             new type's init_sched and init_hctx hooks, which allocate
 *             (switch_init_new());
 *   install   frozen and quiesced: pointer swaps only, q->elevator, each
 *             hctx's sched_data and sched_tags, q->nr_requests
 *             (switch_install());
 *   retire    unfrozen again: the old type's exit_hctx and exit_sched
 *             hooks, then the old instance and its tags are freed
 *             (switch_retire()).
 * Nothing is allocated, and no scheduler hook runs, while the queue is
 * frozen.  The hooks that run outside the freeze do so on the switching
 * thread through a pending view (struct sched_view, internal/mq.h): there
 * rq_sched_data(), rq_sched_hctx_data(), rq_sched_set_hctx_data(),
 * rq_queue_nr_requests() and rq_sched_shallow_depth() answer for the
 * scheduler being set up (or retired) while other threads keep running,
 * and seeing, the installed one.  So a scheduler written for the frozen
 * install (as elevator.h describes its hooks) works unchanged.  What the
 * view costs everyone else: one relaxed load of a global and a branch not
 * taken per accessor call.
 *
 * Context: every function here runs under q->sysfs_lock (attribute
 * writes, queue creation and teardown).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/mq.h"

/* ------------------------------------------------------- scheduler tags */

/* Scheduler tags allocated per hw queue: what nr_requests may grow to. */
static unsigned sched_depth_max(const struct rq_tag_set *set)
{
	unsigned d = 2 * set->queue_depth;

	if (d < 2 * RQ_DEFAULT_NR_REQUESTS)
		d = 2 * RQ_DEFAULT_NR_REQUESTS;
	return d > 2048 ? 2048 : d;
}

static void sched_tags_free(struct rq_queue *q, struct rq_tags **tags)
{
	struct rq_tag_set *set = q->set;

	if (!tags)
		return;
	/*
	 * Driver tags may still name requests of these scheduler tags: forget
	 * them, then let a running timeout scan finish before the memory goes.
	 */
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_tags *dt = q->hctxs[i]->tags;

		if (!tags[i])
			continue;
		for (unsigned t = 0; t < dt->nr_tags; t++) {
			struct rq_request *rq = __atomic_load_n(&dt->rqs[t], __ATOMIC_RELAXED);

			if (rq && (char *)rq >= (char *)tags[i]->rq_mem &&
			    (char *)rq < (char *)tags[i]->rq_mem + tags[i]->rq_mem_size)
				__atomic_store_n(&dt->rqs[t], NULL, __ATOMIC_RELEASE);
		}
	}
	service_barrier();
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		if (!tags[i])
			continue;
		if (set->ops.exit_request)
			for (unsigned t = 0; t < tags[i]->nr_tags; t++)
				set->ops.exit_request(set, tags[i]->static_rqs[t], i);
		rq_tags_free(tags[i]);
	}
	mem_free(tags, 0);
}

static struct rq_tags **sched_tags_alloc(struct rq_queue *q, unsigned depth, unsigned active)
{
	struct rq_tag_set *set = q->set;
	struct rq_tags **tags = mem_calloc(q->nr_hw_queues, sizeof(*tags));

	if (!tags)
		return NULL;
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		int node = q->hctxs[i]->numa_node;

		tags[i] = rq_tags_alloc(depth, 0, set->rq_size, false, node);
		if (!tags[i])
			goto fail;
		if (active < depth)
			sbq_resize(&tags[i]->bitmap, active);
		if (set->ops.init_request)
			for (unsigned t = 0; t < depth; t++)
				if (set->ops.init_request(set, tags[i]->static_rqs[t], i, node))
					goto fail;
	}
	return tags;
fail:
	sched_tags_free(q, tags);
	return NULL;
}

/* Undo a (possibly partial) set-up of @e on @q's hctxs [0, upto). */
static void sched_exit_hctxs(struct rq_queue *q, const struct rq_elevator_type *e, unsigned upto)
{
	if (!e->ops.exit_hctx)
		return;
	for (unsigned i = 0; i < upto; i++)
		e->ops.exit_hctx(q->hctxs[i], i);
}

/* ------------------------------------------------------------ switching */

/* The merge decisions of multi-queue scheduler @e, for lib/merge.c. */
static void sched_merge_hooks(struct elv_merge_hooks *h, const struct rq_elevator_type *e)
{
	h->latter = e->ops.next_request;
	h->former = e->ops.former_request;
	h->allow_bio = e->ops.allow_merge;
	h->allow_rq = NULL; /* allow_merge of the next request's first bio */
	h->front_lookup = e->ops.request_merge;
	h->requests_merged = e->ops.requests_merged;
	h->request_grew = e->ops.request_merged;
}

/* The per-request hooks of @e (NULL: none) as the queue keeps them. */
static void sched_request_hooks(struct mq_elv_hooks *h, const struct rq_elevator_type *e)
{
	*h = (struct mq_elv_hooks){ 0 };
	if (!e)
		return;
	h->bio_merge = e->ops.bio_merge;
	h->limit_depth = e->ops.limit_depth;
	h->prepare_request = e->ops.prepare_request;
	h->completed_request = e->ops.completed_request;
	h->finish_request = e->ops.finish_request;
}

/* Everything one switch needs, made before the queue is frozen. */
struct sched_switch {
	const struct rq_elevator_type *e;   /* the new type; NULL: to none */
	struct rq_elevator_queue *eq;       /* its instance */
	struct rq_tags **new_tags;          /* its scheduler tags, per hw queue */
	struct rq_tags **old_tags;          /* filled at install: the old ones */
	void **new_data;                    /* per hw queue: filled by its init_hctx */
	void **old_data;                    /* filled at install: the old one's */
	unsigned nr_requests;               /* in force once installed */
	unsigned old_nr_requests;           /* in force before */
	void *data;                         /* from the new type's init_sched */
};

/*
 * Show this thread @v instead of the installed scheduler (struct
 * sched_view); pairs with sched_view_end().  The count goes up first, so
 * the thread's own accessors, which test it first, find the view.
 */
static void sched_view_begin(const struct sched_view *v)
{
	atomic_fetch_add_explicit(&sched_views_active, 1, memory_order_relaxed);
	sched_view_tls = v;
}

/* Back to the installed scheduler; pairs with sched_view_begin(). */
static void sched_view_end(void)
{
	sched_view_tls = NULL;
	atomic_fetch_sub_explicit(&sched_views_active, 1, memory_order_relaxed);
}

/* Free what switch_prepare() made and the install did not take. */
static void switch_release(struct rq_queue *q, struct sched_switch *sw)
{
	sched_tags_free(q, sw->new_tags);
	mem_free(sw->old_tags, 0);
	mem_free(sw->old_data, 0);
	mem_free(sw->new_data, 0);
	mem_free(sw->eq, 0);
	if (sw->e)
		elevator_put(sw->e);
}

/*
 * Stage 1, unfrozen: look @name up and allocate everything.  Return: 0,
 * 1 when @name is already attached (nothing to do), -EINVAL (unknown, or
 * the tag set takes no scheduler), -ENOMEM.
 */
static int switch_prepare(struct rq_queue *q, const char *name, struct sched_switch *sw)
{
	unsigned n = q->nr_hw_queues;

	memset(sw, 0, sizeof(*sw));
	sw->nr_requests = q->set->queue_depth;
	sw->old_nr_requests = q->nr_requests;
	if (strcmp(name, "none")) {
		sw->e = elevator_get(name, RQ_ELV_F_MQ);
		if (!sw->e)
			return -EINVAL;
		if (q->set->flags & RQ_TAG_SET_NO_SCHED) {
			switch_release(q, sw);
			return -EINVAL;
		}
	}
	if (sw->e == (q->elevator ? q->elevator->type : NULL)) {
		switch_release(q, sw);
		return 1;
	}
	sw->old_data = mem_calloc(n, sizeof(*sw->old_data));
	sw->new_data = mem_calloc(n, sizeof(*sw->new_data));
	sw->old_tags = mem_calloc(n, sizeof(*sw->old_tags));
	if (sw->e) {
		sw->nr_requests = 2 * min_t(unsigned, q->set->queue_depth, RQ_DEFAULT_NR_REQUESTS);
		sw->eq = elv_queue_alloc(n);
		sw->new_tags = sched_tags_alloc(q, sched_depth_max(q->set), sw->nr_requests);
	}
	if (!sw->old_data || !sw->new_data || !sw->old_tags ||
	    (sw->e && (!sw->eq || !sw->new_tags))) {
		switch_release(q, sw);
		return -ENOMEM;
	}
	if (sw->eq) {
		sw->eq->type = sw->e;
		sched_merge_hooks(&sw->eq->hooks, sw->e);
	}
	return 0;
}

/*
 * Stage 1, still unfrozen: the new type's init_sched and init_hctx hooks,
 * through a pending view of the new scheduler, so they see their own data
 * and the new nr_requests while every other thread keeps running the old
 * one.  On failure what was inited is exited again; the old scheduler
 * was never touched.
 */
static int switch_init_new(struct rq_queue *q, struct sched_switch *sw)
{
	const struct rq_elevator_type *e = sw->e;
	struct sched_view v = {
		.q = q, .hctx_data = sw->new_data, .tags = sw->new_tags,
		.nr_requests = sw->nr_requests,
	};
	unsigned i = 0;
	int ret = 0;

	if (!e)
		return 0;
	sched_view_begin(&v);
	if (e->ops.init_sched && (ret = e->ops.init_sched(q, &sw->data)))
		goto out;
	v.data = sw->data;
	for (i = 0; i < q->nr_hw_queues && e->ops.init_hctx; i++)
		if ((ret = e->ops.init_hctx(q->hctxs[i], i)))
			break;
	if (ret) {
		sched_exit_hctxs(q, e, i);
		if (e->ops.exit_sched)
			e->ops.exit_sched(q, sw->data);
	}
out:
	sched_view_end();
	if (!ret)
		sw->eq->data = sw->data;
	return ret;
}

/*
 * Stage 2, frozen and quiesced: pointer swaps only, nothing allocated and
 * no scheduler hook run.  The new scheduler's hctx data and tags go in,
 * the old ones are kept in @sw for switch_retire().  Nothing else needs
 * doing: the new type's init hooks already sized themselves from the new
 * nr_requests (through the view), so no depth_updated follows, as none
 * did when they ran here.
 */
static void switch_install(struct rq_queue *q, struct sched_switch *sw)
{
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_hw_ctx *hctx = q->hctxs[i];

		sw->old_data[i] = hctx->sched_data;
		sw->old_tags[i] = hctx->sched_tags;
		hctx->sched_data = sw->new_data[i];
		hctx->sched_tags = sw->new_tags ? sw->new_tags[i] : NULL;
	}
	sw->old_nr_requests = q->nr_requests;
	q->elevator = sw->eq;
	sched_request_hooks(&q->elv, sw->e);
	q->nr_requests = sw->nr_requests;
}

/*
 * Stage 3, unfrozen again: the old type's exit_hctx and exit_sched hooks,
 * through a pending view of the old scheduler (its data, hctx data and
 * nr_requests), then the old instance and its scheduler tags are freed.
 *
 * Nothing but this thread can reach @old any more.  The freeze drained
 * every request: none holds an old scheduler tag or passed the old
 * prepare_request (a plug's cached tags hold a usage reference too, so
 * they were returned).  The quiesce waited for every dispatcher and kept
 * new ones out until the install, so none runs old hooks.  After the
 * unfreeze, submitters and dispatchers load q->elevator, hctx->sched_data
 * and hctx->sched_tags anew (queue entry and the run ownership order them
 * after the install) and find the new ones.  What still names old tags is
 * the driver tags' rqs[] table, read by the timeout scan: sched_tags_free()
 * clears those entries and waits the scan out with service_barrier().
 */
static void switch_retire(struct rq_queue *q, struct sched_switch *sw,
			  struct rq_elevator_queue *old)
{
	if (old) {
		struct sched_view v = {
			.q = q, .data = old->data, .hctx_data = sw->old_data,
			.tags = sw->old_tags, .nr_requests = sw->old_nr_requests,
		};

		sched_view_begin(&v);
		sched_exit_hctxs(q, old->type, q->nr_hw_queues);
		if (old->type->ops.exit_sched)
			old->type->ops.exit_sched(q, old->data);
		sched_view_end();
		sched_tags_free(q, sw->old_tags);
		elevator_put(old->type);
		mem_free(old, 0);
	} else {
		mem_free(sw->old_tags, 0);
	}
	/* the new instance owns its tags and instance now */
	mem_free(sw->new_tags, 0);
	mem_free(sw->old_data, 0);
	mem_free(sw->new_data, 0);
}

/*
 * mq_elevator_switch() - switch @q to scheduler @name ("none" for none).
 * The new one is built first; if that fails the old one keeps running.
 * Context: q->sysfs_lock held; freezes and quiesces @q for the install
 * only; the scheduler hooks run unfrozen, before and after.
 * Return: 0, -EINVAL (unknown name, the tag set takes no scheduler),
 * -ENOMEM, or the new scheduler's init error.
 */
int mq_elevator_switch(struct rq_queue *q, const char *name)
{
	struct rq_elevator_queue *old = q->elevator;
	struct sched_switch sw;
	int ret = switch_prepare(q, name, &sw);

	if (ret)
		return ret > 0 ? 0 : ret;
	ret = switch_init_new(q, &sw);
	if (ret) {
		switch_release(q, &sw);
		return ret;
	}
	queue_freeze_and_quiesce(q);
	switch_install(q, &sw);
	queue_unquiesce_and_unfreeze(q);
	switch_retire(q, &sw, old);
	return 0;
}

/*
 * mq_elevator_detach() - teardown: the scheduler goes with its tags.
 * Context: the queue is empty and quiesced, nothing else runs on it.
 */
void mq_elevator_detach(struct rq_queue *q)
{
	struct rq_elevator_queue *eq = q->elevator;
	struct rq_tags **tags;

	if (!eq)
		return;
	sched_exit_hctxs(q, eq->type, q->nr_hw_queues);
	if (eq->type->ops.exit_sched)
		eq->type->ops.exit_sched(q, eq->data);
	tags = mem_calloc(q->nr_hw_queues, sizeof(*tags));
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		if (tags)
			tags[i] = q->hctxs[i]->sched_tags;
		else
			rq_tags_free(q->hctxs[i]->sched_tags);
		q->hctxs[i]->sched_tags = NULL;
		q->hctxs[i]->sched_data = NULL;
	}
	sched_tags_free(q, tags);
	q->elevator = NULL;
	sched_request_hooks(&q->elv, NULL);
	elevator_put(eq->type);
	mem_free(eq, 0);
}

/*
 * mq_set_nr_requests() - the "nr_requests" attribute: the scheduler tags
 * in use with a scheduler (at most as many as were allocated), else the
 * driver tags (at most the tag set's depth less the reserved ones).
 * Context: q->sysfs_lock held; freezes @q.
 * Return: 0, or -EINVAL for a value out of range.
 */
int mq_set_nr_requests(struct rq_queue *q, const char *val)
{
	struct rq_tag_set *set = q->set;
	unsigned max = q->elevator ? q->hctxs[0]->sched_tags->nr_tags :
				     set->queue_depth - set->reserved_tags;
	unsigned long v;

	if (rq_sched_parse_uint(val, 4 < max ? 4 : 1, max, &v))
		return -EINVAL;
	rq_queue_freeze(q);
	q->nr_requests = (unsigned)v;
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_hw_ctx *hctx = q->hctxs[i];

		if (q->elevator) {
			sbq_resize(&hctx->sched_tags->bitmap, (unsigned)v);
			if (q->elevator->type->ops.depth_updated)
				q->elevator->type->ops.depth_updated(hctx);
		} else {
			sbq_resize(&hctx->tags->bitmap, (unsigned)v - set->reserved_tags);
		}
	}
	rq_queue_unfreeze(q);
	return 0;
}
