/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: queue attributes, read and written by name as
 * /sys/block/X/queue/<name> (doc/attributes.md lists them).
 */
#ifndef LIBREQUEST_ATTR_H
#define LIBREQUEST_ATTR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rq_queue;

/**
 * rq_queue_attr_get() - read an attribute, as /sys/block/X/queue/<name>.
 * @q: queue.
 * @name: "scheduler", "nr_requests", ..., or "iosched/<tunable>" (the names
 *	rq_queue_attr_list() gives; doc/attributes.md).
 * @buf: receives the value as text, newline-terminated as sysfs prints it.
 * @len: size of @buf.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex, so it waits while a write (a scheduler switch)
 * is in progress.
 * Return: bytes written (without the NUL), -EINVAL for an unknown name or
 * a NULL argument, -ENOSPC if @buf is too small.
 */
int rq_queue_attr_get(struct rq_queue *q, const char *name, char *buf, size_t len);

/**
 * rq_queue_attr_set() - write an attribute.
 * @q: queue.
 * @name: as for rq_queue_attr_get().
 * @value: the text, as written to sysfs (one trailing newline allowed).
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex and may sleep (a scheduler switch or an
 * nr_requests change freezes the queue, as rq_queue_freeze() does).
 * Return: 0, or -EINVAL for an unknown name, a bad value or a read-only
 * attribute; on error nothing changes.
 */
int rq_queue_attr_set(struct rq_queue *q, const char *name, const char *value);

/**
 * rq_queue_attr_list() - names of all attributes, one per line, in @buf.
 * @q: queue.
 * @buf: receives the names, the current scheduler's tunables as
 *	"iosched/<name>".
 * @len: size of @buf.
 *
 * The output is NUL-terminated text: one name per line, each line ended by
 * a newline, no other whitespace; first the queue's own attributes in a fixed
 * order (doc/attributes.md lists them), then, when a scheduler is attached,
 * its tunables as "iosched/<tunable>" in the scheduler's order.  Every name
 * listed can be read with rq_queue_attr_get(); some are read-only (a write
 * gives -EINVAL).  The scheduler part reflects the moment of the call: a
 * later switch changes it.
 *
 * Context: any thread, not from a driver or scheduler hook; takes the
 * queue's attribute mutex.
 * Return: bytes written (without the NUL), -ENOSPC if @buf is too small,
 * -EINVAL for a NULL argument.
 */
int rq_queue_attr_list(struct rq_queue *q, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_ATTR_H */
