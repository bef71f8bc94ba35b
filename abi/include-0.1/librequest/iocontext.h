/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: io contexts and io groups, who I/O is submitted for: the
 * units the fair schedulers (cfq, bfq) divide the device between.
 */
#ifndef LIBREQUEST_IOCONTEXT_H
#define LIBREQUEST_IOCONTEXT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct rq_io_context - who a bio is submitted for: the unit schedulers
 * are fair between (cfq, bfq).  Opaque.
 */
struct rq_io_context;

/**
 * rq_ioc_create() - a new io context (for example one per client connection).
 * @ioprio: default priority of its bios (RQ_IOPRIO_VALUE), 0 for BE/4.
 *
 * Context: any thread; allocates, takes no lock.
 * Return: the context with one reference; NULL with errno ENOMEM, or EINVAL
 * for a malformed @ioprio.
 */
struct rq_io_context *rq_ioc_create(uint16_t ioprio);

/**
 * rq_ioc_get() / rq_ioc_put() - take / drop a reference to an io context.
 * @ioc: the context (NULL is ignored).
 *
 * The last put frees the context; schedulers hold their own references
 * while they use it.
 *
 * Context: any thread; atomic, never blocks.  rq_ioc_get() needs a
 * reference the caller already holds.
 */
void rq_ioc_get(struct rq_io_context *ioc);
void rq_ioc_put(struct rq_io_context *ioc);

/**
 * rq_ioc_set_prio() - change a context's default priority.
 * @ioc: the context.
 * @ioprio: RQ_IOPRIO_VALUE(class 0..3, level 0..7); 0 means BE/4.
 *
 * Context: any thread; never blocks.  Bios already queued keep the priority
 * they had.
 * Return: 0, or -EINVAL for a malformed value.
 */
int rq_ioc_set_prio(struct rq_io_context *ioc, uint16_t ioprio);

/**
 * rq_ioc_prio() - a context's default priority.
 * @ioc: the context.
 *
 * Context: any thread, any hook; never blocks.
 * Return: an RQ_IOPRIO_VALUE(), never 0.
 */
uint16_t rq_ioc_prio(const struct rq_io_context *ioc);

/**
 * rq_ioc_id() - a number unique to the context, for tracing.
 * @ioc: the context.
 *
 * Context: any thread, any hook; never blocks.
 * Return: the id: ids start at 1 and are never reused in a process.
 */
uint64_t rq_ioc_id(const struct rq_io_context *ioc);

/**
 * rq_ioc_current() - the calling thread's io context.
 *
 * The one set with rq_ioc_set_current(), else a context of the thread's
 * own (BE/4) made on first use and dropped when the thread exits.  No
 * reference is taken for the caller: take one to keep it past the thread or
 * past the next rq_ioc_set_current().
 *
 * Context: any thread; allocates on first use, never blocks.
 * Return: the context; NULL only on memory exhaustion.
 */
struct rq_io_context *rq_ioc_current(void);

/**
 * rq_ioc_set_current() - make @ioc the context of the calling thread's bios
 * that do not name one.
 * @ioc: the context (a reference is taken), or NULL for the thread's own.
 *
 * Context: any thread; affects only the calling thread; never blocks.  The
 * reference to the previously set context is dropped.
 */
void rq_ioc_set_current(struct rq_io_context *ioc);

/**
 * rq_ioc_set_weight() - a context's weight inside its io group, for the
 * proportional schedulers (bfq).
 * @ioc: the context.
 * @weight: 1..1000, or 0 to derive it from the priority again ((8 - level)
 *	* 10, as the kernel's bfq: BE/0 -> 80, BE/4 -> 40, BE/7 -> 10).
 *
 * Context: any thread; never blocks.  Schedulers apply it the next time
 * the context becomes busy.
 * Return: 0, or -EINVAL for a NULL context or a weight above 1000.
 */
int rq_ioc_set_weight(struct rq_io_context *ioc, unsigned weight);

/**
 * rq_ioc_weight() - the weight set with rq_ioc_set_weight().
 * @ioc: the context.
 *
 * Context: any thread, any hook; never blocks.
 * Return: 1..1000, or 0 when it is derived from the priority.
 */
unsigned rq_ioc_weight(const struct rq_io_context *ioc);

/**
 * struct rq_io_group - a set of io contexts sharing one weight, standing in
 * for a cgroup with io.weight: bfq divides the device between groups by
 * their weights, then inside each group between its contexts.  Opaque.
 */
struct rq_io_group;

/**
 * rq_iog_create() - a new io group.
 * @weight: 1..1000; 0 means 100.
 *
 * Context: any thread; allocates, takes no lock.
 * Return: the group with one reference; NULL with errno EINVAL (weight above
 * 1000) or ENOMEM.
 */
struct rq_io_group *rq_iog_create(unsigned weight);

/**
 * rq_iog_get() / rq_iog_put() - take / drop a reference to an io group.
 * @iog: the group (NULL is ignored).
 *
 * The last put frees the group.  Contexts and schedulers using it hold
 * their own references, so the application may drop its one at any time.
 *
 * Context: any thread; atomic, never blocks.  rq_iog_get() needs a
 * reference the caller already holds.
 */
void rq_iog_get(struct rq_io_group *iog);
void rq_iog_put(struct rq_io_group *iog);

/**
 * rq_iog_set_weight() - change a group's weight.
 * @iog: the group.
 * @weight: 1..1000.
 *
 * Context: any thread; never blocks.  Schedulers apply it the next time
 * the group is scheduled anew.
 * Return: 0, or -EINVAL for a NULL group or a weight outside 1..1000.
 */
int rq_iog_set_weight(struct rq_io_group *iog, unsigned weight);

/**
 * rq_iog_weight() - a group's weight.
 * @iog: the group, or NULL for the root group.
 *
 * Context: any thread, any hook; never blocks.
 * Return: 1..1000 (the root group weighs 100).
 */
unsigned rq_iog_weight(const struct rq_io_group *iog);

/**
 * rq_ioc_set_group() - move a context into an io group.
 * @ioc: the context.
 * @iog: the group (a reference is taken), or NULL for the root group.
 *
 * Queued requests keep their group; schedulers move the context's queues
 * once those are idle.
 *
 * Context: any thread; never blocks.
 * Return: 0, or -EINVAL for a NULL context.
 */
int rq_ioc_set_group(struct rq_io_context *ioc, struct rq_io_group *iog);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_IOCONTEXT_H */
