/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler registry.
 *
 * rq_sched_register() checks a scheduler's type and keeps a copy of it:
 * the caller's struct may be older (smaller) than the library's, so the
 * copy takes min(size, sizeof) bytes and zero-fills the rest, which leaves
 * hooks unknown to that scheduler NULL (the core's default behaviour).  The
 * name and alias strings are duplicated; the attribute table and sq_ops
 * are referenced and must outlive the registration (static data in
 * practice).
 *
 * Entries stay in registration order on one list.  Queues hold references
 * (elevator_get/put) so a scheduler in use cannot be unregistered.
 *
 * What may run at the same time: everything; every operation takes
 * registry_lock, which is never held across a call into a scheduler.
 *
 *   operation                               concurrent with
 *   rq_sched_register/unregister/exists  everything
 *   elevator_get/put, elevator_list_names   everything
 *   elevator_attr_*                         everything (no registry lock:
 *                                           the caller's reference keeps @e)
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/alloc.h"
#include "internal/elevator.h"

#define ELV_NAME_MAX 31 /* characters, as the kernel's ELV_NAME_MAX - 1 */
#define ELV_ATTR_PREFIX "iosched/"

/* The core-managed part of a registered scheduler. */
struct elv_entry {
	struct rq_list_node list;     /* on registry, in registration order */
	unsigned refs;                /* elevator_get() references; registry_lock */
	char name[ELV_NAME_MAX + 1];
	char alias[ELV_NAME_MAX + 1];
	struct rq_elevator_type type; /* the copy handed out */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rq_list_node registry = { &registry, &registry };
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

#define ELV_KNOWN_FEATURES (RQ_ELV_F_MQ | RQ_ELV_F_SQ)

static struct elv_entry *entry_of(const struct rq_elevator_type *e)
{
	return RQ_CONTAINER_OF(e, struct elv_entry, type);
}

static struct elv_entry *entry_next(struct rq_list_node *pos)
{
	return RQ_CONTAINER_OF(pos, struct elv_entry, list);
}

/* Does @ent answer to @name, by name or alias? */
static bool entry_matches(const struct elv_entry *ent, const char *name)
{
	return !strcmp(ent->name, name) || (ent->alias[0] && !strcmp(ent->alias, name));
}

/* The entry called @name; registry_lock held. */
static struct elv_entry *find_locked(const char *name)
{
	struct rq_list_node *pos;

	for (pos = registry.next; pos != &registry; pos = pos->next) {
		struct elv_entry *ent = entry_next(pos);

		if (entry_matches(ent, name))
			return ent;
	}
	return NULL;
}

/* A usable name: 1..31 printable ASCII characters, no space or '/', not "none". */
static bool valid_name(const char *name)
{
	size_t len, i;

	if (!name)
		return false;
	len = strlen(name);
	if (len == 0 || len > ELV_NAME_MAX || !strcmp(name, "none"))
		return false;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (isspace(c) || c == '/' || !isprint(c))
			return false;
	}
	return true;
}

/* The copy of @e as this library knows it, or -errno. */
static int copy_type(struct rq_elevator_type *copy, const struct rq_elevator_type *e)
{
	size_t n;

	if (!e || e->abi_version != RQ_ELV_ABI ||
	    e->size < offsetof(struct rq_elevator_type, attrs))
		return -EINVAL;
	n = min_t(size_t, e->size, sizeof(*copy));
	memset(copy, 0, sizeof(*copy));
	memcpy(copy, e, n);
	copy->size = sizeof(*copy);
	return 0;
}

/* Check the copy's names and hooks. */
static int check_type(struct rq_elevator_type *t)
{
	if (!valid_name(t->name))
		return -EINVAL;
	if (t->alias && (!valid_name(t->alias) || !strcmp(t->alias, t->name)))
		return -EINVAL;
	if (t->features == 0)
		t->features = RQ_ELV_F_MQ;
	if (t->features & ~ELV_KNOWN_FEATURES)
		return -EINVAL;
	if ((t->features & RQ_ELV_F_MQ) &&
	    (!t->ops.insert_requests || !t->ops.dispatch_request || !t->ops.has_work))
		return -EINVAL;
	if ((t->features & RQ_ELV_F_SQ) && !t->sq_ops)
		return -EINVAL;
	/* a batch that opens must close: the completion batch hooks come paired */
	if (!t->completion_batch_begin != !t->completion_batch_end)
		return -EINVAL;
	return 0;
}

/* Register @e; no once-check (the built-ins come through here). */
static int elv_register(const struct rq_elevator_type *e)
{
	struct elv_entry *ent;
	int ret;

	ent = mem_zalloc(sizeof(*ent));
	if (!ent)
		return -ENOMEM;
	ret = copy_type(&ent->type, e);
	if (!ret)
		ret = check_type(&ent->type);
	if (ret) {
		mem_free(ent, sizeof(*ent));
		return ret;
	}
	strcpy(ent->name, ent->type.name);
	ent->type.name = ent->name;
	if (ent->type.alias) {
		strcpy(ent->alias, ent->type.alias);
		ent->type.alias = ent->alias;
	}

	pthread_mutex_lock(&registry_lock);
	if (find_locked(ent->name) || (ent->alias[0] && find_locked(ent->alias))) {
		pthread_mutex_unlock(&registry_lock);
		mem_free(ent, sizeof(*ent));
		return -EEXIST;
	}
	rq_list_add_tail(&ent->list, &registry);
	pthread_mutex_unlock(&registry_lock);
	return 0;
}

static void register_builtins_once(void)
{
	unsigned i;

	/* A built-in that fails its own checks is left out, never fatal. */
	for (i = 0; rq_builtin_elevators[i]; i++)
		(void)elv_register(rq_builtin_elevators[i]);
}

/* Register rq_builtin_elevators[] once, before any application scheduler. */
void elevator_register_builtins(void)
{
	pthread_once(&builtins_once, register_builtins_once);
}

/**
 * rq_sched_register() - add a scheduler to the registry.
 * @e: the type, begun with RQ_ELV_TYPE_INIT.  Copied; the name and alias
 *	strings too.  The attrs table and sq_ops must stay valid while it is
 *	registered.
 *
 * Context: any thread; takes the registry mutex.
 * Return: 0; -EINVAL for NULL, an unknown ABI version, a size older than
 * the first ABI, a bad name or alias (empty, over 31 characters, with
 * whitespace or '/', "none"), unknown feature bits, or missing required
 * hooks (insert_requests, dispatch_request, has_work for RQ_ELV_F_MQ;
 * sq_ops for RQ_ELV_F_SQ), or only one of completion_batch_begin and
 * completion_batch_end; -EEXIST when the name or alias is taken by a
 * name or alias; -ENOMEM.
 */
RQ_EXPORT int rq_sched_register(const struct rq_elevator_type *e)
{
	elevator_register_builtins();
	return elv_register(e);
}

/**
 * rq_sched_unregister() - remove a scheduler no queue uses.
 * @name: its name or alias.
 * Context: any thread; takes the registry mutex.
 * Return: 0; -EINVAL for NULL; -ENOENT if not registered ("none" is not);
 * -EBUSY while a queue uses it.
 */
RQ_EXPORT int rq_sched_unregister(const char *name)
{
	struct elv_entry *ent;

	if (!name)
		return -EINVAL;
	elevator_register_builtins();
	pthread_mutex_lock(&registry_lock);
	ent = find_locked(name);
	if (!ent) {
		pthread_mutex_unlock(&registry_lock);
		return -ENOENT;
	}
	if (ent->refs) {
		pthread_mutex_unlock(&registry_lock);
		return -EBUSY;
	}
	rq_list_del_init(&ent->list);
	pthread_mutex_unlock(&registry_lock);
	mem_free(ent, sizeof(*ent));
	return 0;
}

/**
 * rq_sched_exists() - is @name a scheduler a queue can select?
 * @name: a name or alias.
 * Context: any thread; takes the registry mutex.
 * Return: true for "none" and every registered name and alias.
 */
RQ_EXPORT bool rq_sched_exists(const char *name)
{
	bool found;

	if (!name)
		return false;
	if (!strcmp(name, "none"))
		return true;
	elevator_register_builtins();
	pthread_mutex_lock(&registry_lock);
	found = find_locked(name) != NULL;
	pthread_mutex_unlock(&registry_lock);
	return found;
}

/* By name or alias, with a reference; pairs with elevator_put(). */
const struct rq_elevator_type *elevator_get(const char *name, unsigned need_features)
{
	struct elv_entry *ent;

	if (!name)
		return NULL;
	elevator_register_builtins();
	pthread_mutex_lock(&registry_lock);
	ent = find_locked(name);
	if (ent && (ent->type.features & need_features) == need_features)
		ent->refs++;
	else
		ent = NULL;
	pthread_mutex_unlock(&registry_lock);
	return ent ? &ent->type : NULL;
}

/* Drop an elevator_get() reference. */
void elevator_put(const struct rq_elevator_type *e)
{
	struct elv_entry *ent;

	if (!e)
		return;
	ent = entry_of(e);
	pthread_mutex_lock(&registry_lock);
	if (ent->refs)
		ent->refs--;
	pthread_mutex_unlock(&registry_lock);
}

/* Append @name (bracketed if @active) to @buf at *@pos; false if no room. */
static bool list_append(char *buf, size_t len, size_t *pos, const char *name, bool active)
{
	int n = snprintf(buf + *pos, len - *pos, "%s%s%s%s", *pos ? " " : "",
			 active ? "[" : "", name, active ? "]" : "");

	if (n < 0 || (size_t)n >= len - *pos)
		return false;
	*pos += (size_t)n;
	return true;
}

/* The "scheduler" attribute's text; see lib/internal/elevator.h. */
int elevator_list_names(char *buf, size_t len, const char *active, unsigned need_features)
{
	struct rq_list_node *pos;
	size_t used = 0;
	bool ok = true;

	if (!buf || !len)
		return -ENOSPC;
	buf[0] = '\0';
	elevator_register_builtins();

	if (need_features & RQ_ELV_F_MQ)
		ok = list_append(buf, len, &used, "none", active && !strcmp(active, "none"));

	pthread_mutex_lock(&registry_lock);
	for (pos = registry.next; ok && pos != &registry; pos = pos->next) {
		struct elv_entry *ent = entry_next(pos);

		if ((ent->type.features & need_features) != need_features)
			continue;
		ok = list_append(buf, len, &used, ent->name,
				 active && entry_matches(ent, active));
	}
	pthread_mutex_unlock(&registry_lock);

	if (!ok || len - used < 2) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	buf[used++] = '\n';
	buf[used] = '\0';
	return (int)used;
}

/* The tunable @name of @e ("iosched/" prefix optional), or NULL. */
static const struct rq_elv_attr *find_attr(const struct rq_elevator_type *e, const char *name)
{
	const struct rq_elv_attr *a;

	if (!e || !name || !e->attrs)
		return NULL;
	if (!strncmp(name, ELV_ATTR_PREFIX, strlen(ELV_ATTR_PREFIX)))
		name += strlen(ELV_ATTR_PREFIX);
	for (a = e->attrs; a->name; a++) {
		if (!strcmp(a->name, name))
			return a;
	}
	return NULL;
}

/* Print one tunable through its show hook. */
int elevator_attr_show(const struct rq_elevator_type *e, void *data, const char *attr,
		       char *buf, size_t len)
{
	const struct rq_elv_attr *a = find_attr(e, attr);

	if (!a)
		return -ENOENT;
	if (!a->show)
		return -EINVAL;
	return a->show(data, buf, len);
}

/* Parse one tunable through its store hook; read-only ones refuse. */
int elevator_attr_store(const struct rq_elevator_type *e, void *data, const char *attr,
			const char *buf)
{
	const struct rq_elv_attr *a = find_attr(e, attr);

	if (!a)
		return -ENOENT;
	if (!a->store || !buf)
		return -EINVAL;
	return a->store(data, buf);
}

/* "iosched/<name>\n" for each tunable. */
int elevator_attr_list(const struct rq_elevator_type *e, char *buf, size_t len)
{
	const struct rq_elv_attr *a;
	size_t used = 0;

	if (!buf || !len)
		return -ENOSPC;
	buf[0] = '\0';
	if (!e || !e->attrs)
		return 0;
	for (a = e->attrs; a->name; a++) {
		int n = snprintf(buf + used, len - used, ELV_ATTR_PREFIX "%s\n", a->name);

		if (n < 0 || (size_t)n >= len - used) {
			buf[0] = '\0';
			return -ENOSPC;
		}
		used += (size_t)n;
	}
	return (int)used;
}
