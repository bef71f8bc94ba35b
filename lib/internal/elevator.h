/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler registry inside the library: lookups by name with a
 * reference, the "scheduler" attribute's listing, and tunables by name.
 *
 * The registry keeps its own copy of every struct rq_elevator_type (see
 * rq_sched_register()); the pointers handed out here point at those
 * copies and stay valid while a reference is held.  The built-in schedulers
 * (rq_builtin_elevators[], sched/builtin.c) are registered on first use of
 * the registry, before anything an application registers.
 *
 * What may run at the same time:
 *
 *   operation                               concurrent with
 *   rq_sched_register/unregister/exists  everything (registry mutex)
 *   elevator_get/put, elevator_list_names   everything (registry mutex)
 *   elevator_attr_show/store/list           everything; the attr callbacks
 *                                           serialise on the scheduler data
 */
#ifndef RQ_INTERNAL_ELEVATOR_H
#define RQ_INTERNAL_ELEVATOR_H

#include <stdbool.h>
#include <stddef.h>

#include <librequest/elevator.h>

#include "compiler.h"

/* Built-in schedulers, NULL-terminated (sched/builtin.c). */
extern const struct rq_elevator_type *const rq_builtin_elevators[];

/**
 * elevator_get() - the registered scheduler called @name, with a reference.
 * @name: its name or alias.
 * @need_features: RQ_ELV_F_* bits it must all have.
 *
 * "none" is not a scheduler type: it gives NULL like an unknown name.
 * Context: any thread; takes the registry mutex.
 * Return: the registry's copy (pair with elevator_put()), or NULL.
 */
const struct rq_elevator_type *elevator_get(const char *name, unsigned need_features);

/**
 * elevator_put() - drop a reference from elevator_get().
 * @e: the copy, or NULL.
 * Context: any thread; takes the registry mutex.
 */
void elevator_put(const struct rq_elevator_type *e);

/**
 * elevator_list_names() - the "scheduler" attribute's text.
 * @buf: output, NUL-terminated.
 * @len: its size.
 * @active: the queue's scheduler (name or alias; "none"; NULL for none
 *	bracketed).
 * @need_features: list only schedulers having all these RQ_ELV_F_* bits;
 *	with RQ_ELV_F_MQ, "none" comes first.
 *
 * Names in registration order, space separated, the active one in
 * brackets, a trailing newline: "[none] mq-deadline kyber bfq\n".
 * Context: any thread; takes the registry mutex.
 * Return: bytes written (without the NUL), or -ENOSPC.
 */
int elevator_list_names(char *buf, size_t len, const char *active, unsigned need_features);

/**
 * elevator_attr_show() - print tunable @attr of scheduler @e.
 * @e: a scheduler the caller holds a reference to.
 * @data: the queue's scheduler data (from init_sched).
 * @attr: the tunable's name ("iosched/" prefix optional).
 * @buf: output.
 * @len: its size.
 * Context: the caller keeps @data alive (queue's sysfs lock).
 * Return: the attr's show result (length or -errno), -ENOENT for an
 * unknown tunable, -EINVAL for a write-only one.
 */
int elevator_attr_show(const struct rq_elevator_type *e, void *data, const char *attr,
		       char *buf, size_t len);

/**
 * elevator_attr_store() - parse and apply tunable @attr of scheduler @e.
 * @e: a scheduler the caller holds a reference to.
 * @data: the queue's scheduler data.
 * @attr: the tunable's name ("iosched/" prefix optional).
 * @buf: the new value, NUL-terminated.
 * Context: as elevator_attr_show().
 * Return: 0 or the store's -errno, -ENOENT for an unknown tunable,
 * -EINVAL for a read-only one.
 */
int elevator_attr_store(const struct rq_elevator_type *e, void *data, const char *attr,
			const char *buf);

/**
 * elevator_attr_list() - one "iosched/<name>\n" line per tunable of @e.
 * @e: the scheduler.
 * @buf: output, NUL-terminated.
 * @len: its size.
 * Context: any thread.
 * Return: bytes written (without the NUL; 0 without tunables), or -ENOSPC.
 */
int elevator_attr_list(const struct rq_elevator_type *e, char *buf, size_t len);

/**
 * elevator_register_builtins() - register rq_builtin_elevators[].
 * Runs once, from the registry's first use; calling it again does nothing.
 * Context: any thread.
 */
void elevator_register_builtins(void);

#endif /* RQ_INTERNAL_ELEVATOR_H */
