/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the I/O scheduler framework, for scheduler authors.
 *
 * A scheduler is a struct rq_elevator_type: a name, versioned ops with the
 * kernel's elevator_mq_ops entry points, and an attribute table of tunables
 * (reachable as "iosched/<name>").  rq_sched_register() copies it; queues
 * then choose it by name at creation or switch to it at run time.
 *
 * Who calls what, with which lock held (none of the core's locks are held
 * unless said):
 *
 *   init_sched/init_hctx         "scheduler" writer (or queue creation), before
 *                                the queue is frozen for the switch: the old
 *                                scheduler still runs on other threads; on the
 *                                calling thread rq_sched_data(),
 *                                rq_sched_hctx_data() and rq_queue_nr_requests()
 *                                already answer for the new one
 *   exit_hctx/exit_sched         the same writer after the switch, the queue
 *                                running again with the new scheduler; on the
 *                                calling thread the accessors answer for the
 *                                old one (or queue teardown, queue empty)
 *   bio_merge                    submitter, before a request is made
 *   request_merge/merged/...     from bio_merge via rq_sched_try_merge()
 *   limit_depth, prepare_request submitter, making a request
 *   insert_requests              submitter or dispatcher
 *   dispatch_request, has_work   dispatcher of that hctx (one at a time)
 *   completed_request            any completing thread
 *   finish_request, requeue      any thread ending / requeueing the request
 *
 * Flushes and PREFLUSH writes never enter a scheduler (as in the kernel):
 * only requests with RQ_RQF_ELVPRIV in rq_flags are the scheduler's, and for
 * them prepare_request, insert, dispatch, completed_request and
 * finish_request are called.  A FUA write is the scheduler's like any write
 * (Linux 6.x); on a device with a write cache but no FUA it carries
 * RQ_RQF_FLUSH_SEQ (it must not be merged or hashed), its completed_request
 * and finish_request come when its data is done, before the post-flush,
 * and outside a plug it goes to the dispatch list without an insert.  rq->io_start_time_ns is set when such a
 * request goes to the driver, rq->start_time_ns when it is made.
 *
 * A scheduler protects its own data; the core never holds a lock across a
 * call into it except the hctx dispatch ownership for dispatch_request.
 */
#ifndef LIBREQUEST_ELEVATOR_H
#define LIBREQUEST_ELEVATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librequest/bio.h>
#include <librequest/queue.h>
#include <librequest/request.h>
#include <librequest/mq.h>

#ifdef __cplusplus
extern "C" {
#endif

/** enum rq_elv_merge - where a bio may join a request. */
enum rq_elv_merge {
	RQ_ELV_NO_MERGE = 0,
	RQ_ELV_FRONT_MERGE = 1,
	RQ_ELV_BACK_MERGE = 2,
	RQ_ELV_DISCARD_MERGE = 3,
};

/** Insert at the head of the scheduler's queue (requeues, flush data). */
#define RQ_INSERT_AT_HEAD (1u << 0)

/**
 * struct rq_alloc_data - what a request is being made for, for limit_depth.
 * @shallow_depth: 0, or how many bits of each word of the hctx's scheduler
 *	tag bitmap this request may use (the kernel's sbitmap shallow depth);
 *	rq_sched_shallow_depth() turns a number of tags into it.
 */
struct rq_alloc_data {
	struct rq_queue *q;
	struct rq_hw_ctx *hctx;
	unsigned op;
	unsigned opf;
	unsigned shallow_depth;
};

/** ABI version of struct rq_elevator_type / ops. */
#define RQ_ELV_ABI 1

/**
 * struct rq_elevator_ops - multi-queue scheduler hooks; all optional but
 * insert_requests, dispatch_request and has_work.
 */
struct rq_elevator_ops {
	/** @init_sched: allocate per-queue data into *@data. Return 0 or -errno. */
	int (*init_sched)(struct rq_queue *q, void **data);
	/** @exit_sched: free it; the queue is empty. */
	void (*exit_sched)(struct rq_queue *q, void *data);
	/** @init_hctx / @exit_hctx: per hw queue data (rq_sched_hctx_data). */
	int (*init_hctx)(struct rq_hw_ctx *hctx, unsigned idx);
	void (*exit_hctx)(struct rq_hw_ctx *hctx, unsigned idx);
	/** @depth_updated: nr_requests changed. */
	void (*depth_updated)(struct rq_hw_ctx *hctx);

	/** @allow_merge: veto a merge of @bio into @rq. */
	bool (*allow_merge)(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio);
	/** @bio_merge: try to merge @bio into a queued request; true if merged. */
	bool (*bio_merge)(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs);
	/**
	 * @request_merge: find a request @bio could front-merge into (the core
	 * already tried back merges by hash); store it in *@rq.
	 */
	int (*request_merge)(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio);
	/** @request_merged: @rq grew by a merge of @type (re-sort it). */
	void (*request_merged)(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type);
	/** @requests_merged: @next was merged into @rq and leaves the scheduler. */
	void (*requests_merged)(struct rq_queue *q, struct rq_request *rq, struct rq_request *next);
	/** @limit_depth: restrict tags for a request about to be made. */
	void (*limit_depth)(struct rq_alloc_data *data);
	/** @prepare_request: a new request will be inserted. */
	void (*prepare_request)(struct rq_request *rq);
	/** @finish_request: a request that passed prepare_request is freed. */
	void (*finish_request)(struct rq_request *rq);
	/** @insert_requests: take requests (linked by queuelist on @list). */
	void (*insert_requests)(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags);
	/** @dispatch_request: next request for @hctx, or NULL. */
	struct rq_request *(*dispatch_request)(struct rq_hw_ctx *hctx);
	/** @has_work: anything to dispatch on @hctx? */
	bool (*has_work)(struct rq_hw_ctx *hctx);
	/** @completed_request: the device finished @rq at @now_ns. */
	void (*completed_request)(struct rq_request *rq, uint64_t now_ns);
	/** @requeue_request: @rq goes back to be issued again. */
	void (*requeue_request)(struct rq_request *rq);
	/** @former_request / @next_request: neighbours in sector order. */
	struct rq_request *(*former_request)(struct rq_queue *q, struct rq_request *rq);
	struct rq_request *(*next_request)(struct rq_queue *q, struct rq_request *rq);
};

/**
 * struct rq_elv_attr - one tunable.
 * @show: print the value (with a newline) into @buf; return length or -errno.
 * @store: parse and apply @buf; return 0 or -EINVAL, changing nothing on error.
 * Both get the queue's scheduler data.  NULL @store: read-only.
 */
struct rq_elv_attr {
	const char *name;
	int (*show)(void *data, char *buf, size_t len);
	int (*store)(void *data, const char *buf);
};

struct rq_elevator_sq_ops; /* single-queue hooks, see sq.h */

/* Scheduler features. */
#define RQ_ELV_F_MQ (1u << 0) /* multi-queue ops present */
#define RQ_ELV_F_SQ (1u << 1) /* single-queue ops present */

/**
 * struct rq_elevator_type - a scheduler.  Filled by the scheduler; the core
 * keeps a copy.  Begin with RQ_ELV_TYPE_INIT.
 */
struct rq_elevator_type {
	uint32_t size;         /* sizeof(struct rq_elevator_type) as built */
	uint32_t abi_version;  /* RQ_ELV_ABI */
	const char *name;      /* unique, <= 31 characters */
	const char *alias;     /* optional second name */
	unsigned features;     /* RQ_ELV_F_*; 0 means RQ_ELV_F_MQ */
	struct rq_elevator_ops ops;             /* multi-queue */
	const struct rq_elv_attr *attrs;        /* NULL-name terminated, or NULL */
	const struct rq_elevator_sq_ops *sq_ops; /* single-queue, or NULL */

	/*
	 * Hooks added after the first release sit here, past the fields
	 * above, so a scheduler built against an older header (a smaller
	 * size) still registers and they read as NULL (core default).
	 */

	/**
	 * @dispatch_requests: optional batch form of ops.dispatch_request:
	 * move up to @max requests for @hctx, in dispatch order, to the tail
	 * of @list and return how many.  It must choose exactly what @max
	 * calls of dispatch_request would (stopping at the first NULL); it
	 * exists so a scheduler pays one lock round trip per batch.  The core
	 * passes as @max the driver tags it already holds, so nothing pulled
	 * waits for a tag.  Context: dispatcher of @hctx, as dispatch_request.
	 */
	unsigned (*dispatch_requests)(struct rq_hw_ctx *hctx, struct rq_list_node *list,
				      unsigned max);

	/**
	 * @completion_batch_begin / @completion_batch_end: optional, both or
	 * neither: a completion batch of @hctx opens / closes on the calling
	 * thread.  In between, completed_request, finish_request and
	 * requeue_request calls on that thread for requests of @hctx (only
	 * those: requests of other hw queues and other threads come as
	 * usual) may leave their effect on shared state to be applied, once
	 * and in the same order, by completion_batch_end, which must apply
	 * all of it (and wake what a per-request call would have woken, once
	 * is enough).  The core holds the queue from begin to end (no switch
	 * or teardown can free the scheduler's data), so the deferred work
	 * may keep pointers to it; it must keep none to the requests, which
	 * may be reused before the end.  A batch is one issue round's inline
	 * completions or one driver batch (rq_mq_end_request_batch()):
	 * microseconds.  Other hooks may run on the thread inside it (a bio's
	 * end_io submitting); a scheduler applies what it deferred first if
	 * they depend on it.  Begin comes with the first request the batch
	 * frees, after that request's hooks ran; batches never nest on a
	 * thread.
	 * Context: the completing thread, no core lock held; end may run
	 * @hctx (it is outside the batch by then).
	 */
	void (*completion_batch_begin)(struct rq_hw_ctx *hctx);
	void (*completion_batch_end)(struct rq_hw_ctx *hctx);
};

#define RQ_ELV_TYPE_INIT .size = sizeof(struct rq_elevator_type), .abi_version = RQ_ELV_ABI

/**
 * rq_sched_register() - add a scheduler to the registry.
 * @e: the type, begun with RQ_ELV_TYPE_INIT.  Copied, with its name and
 *	alias; the attrs table and sq_ops must stay valid while it is
 *	registered.
 *
 * Context: any thread, not from a scheduler hook; takes the registry mutex;
 * allocates.
 * Return: 0; -EEXIST when the name or alias is taken; -EINVAL for NULL, an
 * unknown ABI version or size, a bad name or alias (empty, over 31
 * characters, with whitespace or '/', "none"), unknown feature bits, or
 * missing required ops (insert_requests, dispatch_request, has_work for
 * RQ_ELV_F_MQ; sq_ops for RQ_ELV_F_SQ), or only one of
 * completion_batch_begin and completion_batch_end; -ENOMEM.
 */
int rq_sched_register(const struct rq_elevator_type *e);

/**
 * rq_sched_unregister() - remove a scheduler no queue uses.
 * @name: its name or alias.
 *
 * Context: any thread, not from a scheduler hook; takes the registry mutex.
 * Return: 0; -EINVAL for NULL; -ENOENT if not registered ("none" is not);
 * -EBUSY while a queue uses it.
 */
int rq_sched_unregister(const char *name);

/**
 * rq_sched_exists() - whether a queue can select @name.
 * @name: a scheduler name or alias.
 *
 * Context: any thread, not from a scheduler hook; takes the registry mutex.
 * Return: true for "none" and every registered name and alias.
 */
bool rq_sched_exists(const char *name);

/* ------------------------------------------------ helpers for schedulers */

/**
 * rq_sched_data() - the data the attached scheduler's init_sched
 * stored.
 * @q: the queue.
 *
 * Context: the attached scheduler's hooks (the queue cannot switch
 * scheduler while they run), and a scheduler's own init and exit hooks
 * during a switch, on the switching thread, where it answers for that
 * scheduler; never blocks.
 * Return: the data, NULL without a scheduler.
 */
void *rq_sched_data(struct rq_queue *q);
/**
 * rq_sched_hctx_data() / rq_sched_set_hctx_data() - per hw queue data of
 * the scheduler.
 * @hctx: the hardware queue.
 * @data: the pointer to keep.
 *
 * Context: the scheduler's hooks; set it in init_hctx.  A plain load /
 * store, never blocks.
 * Return: rq_sched_hctx_data(): what was stored, NULL before.
 */
void *rq_sched_hctx_data(const struct rq_hw_ctx *hctx);
void rq_sched_set_hctx_data(struct rq_hw_ctx *hctx, void *data);
/**
 * rq_hctx_nr_ctx() - software queues (CPUs) mapped to @hctx; a request's
 * rq_sched_ctx_index() is below it.  For schedulers that keep per-CPU
 * lists, as kyber does.
 * @hctx: the hardware queue.
 *
 * Context: any thread, any hook; constant for the queue's life; never
 * blocks.
 * Return: the number of software queues (0 for a hw queue no CPU maps to,
 * with more hw queues than CPUs).
 */
unsigned rq_hctx_nr_ctx(const struct rq_hw_ctx *hctx);
/**
 * rq_sched_ctx_index() - index of the software queue @rq was made on.
 * @rq: a request of a multi-queue queue.
 *
 * Context: any hook that holds @rq; never blocks.
 * Return: 0..rq_hctx_nr_ctx(rq->hctx) - 1.
 */
unsigned rq_sched_ctx_index(const struct rq_request *rq);
/**
 * rq_sched_bio_hctx() - the hw queue a bio submitted now from this CPU would
 * use, and (in *@ctx_index, may be NULL) the index of this CPU's software
 * queue on it.  For bio_merge hooks: inside a submission it names the hw
 * queue the bio's request would be made on (and whose merge hash
 * rq_sched_try_merge() searches), even if the thread has moved to another
 * CPU since the submission began.
 * @q: a multi-queue queue.
 * @bio: the bio (polled bios map to poll queues).
 * @ctx_index: receives the software queue's index, or NULL.
 *
 * Context: bio_merge (the submitter), or any thread; lock-free, never
 * blocks.
 * Return: the hardware queue.
 */
struct rq_hw_ctx *rq_sched_bio_hctx(struct rq_queue *q, const struct rq_bio *bio,
				  unsigned *ctx_index);

/**
 * rq_sched_word_bits() - bits per word of @hctx's scheduler tag bitmap;
 * rq_alloc_data.shallow_depth counts bits per word, so limit_depth scales
 * its share with this.
 * @hctx: the hardware queue.
 *
 * Context: the scheduler's hooks (init_hctx, depth_updated, limit_depth);
 * never blocks.
 * Return: a power of two; the driver tags' when there is no scheduler.
 */
unsigned rq_sched_word_bits(const struct rq_hw_ctx *hctx);

/**
 * rq_sched_shallow_depth() - the rq_alloc_data.shallow_depth that keeps a
 * request to @depth of the nr_requests scheduler tags of @hctx: the
 * smallest number of bits per word that adds up to @depth over the
 * bitmap's words (the last one may be shorter), at least 1.
 * @hctx: the hardware queue.
 * @depth: tags the request may use.
 *
 * Context: the scheduler's hooks (limit_depth, depth_updated); never
 * blocks.
 * Return: bits per word, at least 1; 0 (no limit) when @depth >=
 * nr_requests.
 */
unsigned rq_sched_shallow_depth(const struct rq_hw_ctx *hctx, unsigned depth);

/**
 * rq_queue_nr_requests() - scheduler tags per hw queue (nr_requests).
 * @q: the queue.
 *
 * Context: any thread, any hook; never blocks.  Changes only while the
 * queue is frozen (then depth_updated is called).
 * Return: the number of tags.
 */
unsigned rq_queue_nr_requests(const struct rq_queue *q);
/**
 * rq_queue_rotational() - whether the device is rotational (seeks cost).
 * @q: the queue.
 *
 * Context: any thread, any hook; never blocks.
 * Return: true when the limits carry RQ_FEAT_ROTATIONAL.
 */
bool rq_queue_rotational(const struct rq_queue *q);

/**
 * rq_sched_try_merge() - the generic bio merge: the one-hit cache, a back
 * merge through the core's hash, then ops->request_merge (front merges
 * through the scheduler's sorted tree); then calls request_merged, or merges
 * the grown request with its neighbour (requests_merged).
 * @merged: receives a request emptied by such a request-request merge (free
 *	it with rq_sched_free_request() after dropping the scheduler lock), or NULL.
 * Context: bio_merge, under the scheduler's own lock.
 * Return: true if @bio was merged (it is then the request's).
 */
bool rq_sched_try_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs,
			struct rq_request **merged);

/**
 * rq_sched_list_merge() - merge @bio into one of the newest requests (up to
 * eight, newest first) on @list, a scheduler's own per-CPU list of queued
 * requests linked by queuelist, as the core does with its software queues
 * (blk_bio_list_merge).
 * Context: bio_merge, under the lock that guards @list.
 * Return: true if @bio was merged (it is then the request's).
 */
bool rq_sched_list_merge(struct rq_queue *q, struct rq_list_node *list, struct rq_bio *bio,
			 unsigned nr_segs);

/**
 * rq_sched_try_insert_merge() - merge @rq into a queued request it is
 * contiguous with (one-hit cache or hash back merge); on success @rq is
 * emptied and added (by queuelist) to @free: free each with
 * rq_sched_free_request() after dropping the scheduler lock.
 * @q: the queue.
 * @rq: the request being inserted.
 * @free: list collecting the emptied requests.
 *
 * Context: insert_requests, under the scheduler's lock; never blocks.
 * Return: true if @rq was merged (the grown request may in turn have been
 * merged further: every emptied one is on @free).
 */
bool rq_sched_try_insert_merge(struct rq_queue *q, struct rq_request *rq,
			       struct rq_list_node *free);

/**
 * rq_sched_free_request() - free a request emptied by a merge (its bios now
 * belong to another request): calls finish_request, frees its tags and
 * drops its hold on the queue.
 * @rq: the emptied request.
 *
 * Context: a scheduler hook, after dropping the scheduler's lock (the
 * scheduler's finish_request may take it); never blocks.
 */
void rq_sched_free_request(struct rq_request *rq);

/**
 * rq_sched_hash_add() / rq_sched_hash_del() - add @rq to / remove it from
 * the core's back-merge hash (keyed by its end sector).
 * @q: the queue.
 * @rq: the request; adding a hashed one or removing an unhashed one does
 *	nothing.
 *
 * Context: under the scheduler's lock, the one its insert_requests and
 * dispatch_request hold; never blocks.
 */
void rq_sched_hash_add(struct rq_queue *q, struct rq_request *rq);
void rq_sched_hash_del(struct rq_queue *q, struct rq_request *rq);

/**
 * rq_sched_last_merge_fill() - make @rq the one-hit merge cache (the
 * kernel's q->last_merge) of its hardware queue if that cache is empty, as
 * the kernel's mq-deadline and bfq do when they insert a mergeable request
 * ("if (!q->last_merge) q->last_merge = rq").  The cache is tried before
 * the hash for bio merges and insert merges, and with nomerges 1 it is the
 * only one tried.  It forgets @rq by itself when @rq leaves the hash
 * (rq_sched_hash_del()).
 * @q: the queue.
 * @rq: a request just inserted and hashed (rq_sched_hash_add()).
 *
 * Context: insert_requests, under the scheduler's lock (the one its
 * rq_sched_hash_add() calls hold); never blocks.
 * Return: true if @rq is now the cache; false if the cache already held a
 * request, @rq may take no merges, or @q has no scheduler.
 */
bool rq_sched_last_merge_fill(struct rq_queue *q, struct rq_request *rq);

/**
 * rq_sched_parse_uint() - parse a tunable as sysfs would hand it over: a whole
 * decimal number within [@min, @max], optionally followed by one newline.
 * @buf: the text.
 * @min: smallest value accepted.
 * @max: largest value accepted.
 * @out: receives the value.
 *
 * Context: any thread (an attribute's store hook); a pure function.
 * Return: 0 and *@out, or -EINVAL (NULL, not a number, out of range) with
 * *@out untouched.
 */
int rq_sched_parse_uint(const char *buf, unsigned long min, unsigned long max,
		      unsigned long *out);

/*
 * Sector-sorted red-black trees of requests (via rq->rb_node).  Equal
 * sectors keep the order they were added in; rq_sched_rb_find() returns the
 * first of them.
 */

/**
 * rq_sched_rb_add() / rq_sched_rb_del() - insert @rq into @root sorted by
 * rq->sector / remove it and mark it in no tree.
 * @root: the tree.
 * @rq: a request in no tree (add; equal sectors go after the ones already
 *	there) / in @root (del).
 *
 * Context: under the lock that guards @root (the scheduler's); never
 * blocks.
 */
void rq_sched_rb_add(struct rq_rb_root *root, struct rq_request *rq);
void rq_sched_rb_del(struct rq_rb_root *root, struct rq_request *rq);
/**
 * rq_sched_rb_find() - the request of @root starting at @sector.
 * @root: the tree.
 * @sector: the start sector.
 *
 * Context: under the lock that guards @root; never blocks.
 * Return: the first one added of those starting at @sector, NULL if none.
 */
struct rq_request *rq_sched_rb_find(struct rq_rb_root *root, uint64_t sector);
/**
 * rq_sched_rb_first() - the request with the lowest sector.
 * @root: the tree.
 *
 * Context: under the lock that guards @root; never blocks.
 * Return: the request, NULL for an empty tree.
 */
struct rq_request *rq_sched_rb_first(struct rq_rb_root *root);
/**
 * rq_sched_rb_former() / rq_sched_rb_latter() - the request before / after @rq
 * in its tree.
 * @rq: a request in a tree.
 *
 * Context: under the lock that guards the tree; never blocks.
 * Return: the request, NULL if @rq is the first / last (or in no tree).
 */
struct rq_request *rq_sched_rb_former(struct rq_request *rq);
struct rq_request *rq_sched_rb_latter(struct rq_request *rq);

/**
 * rq_rb_insert_color() / rq_rb_erase() - rebalance after linking @node
 * with rq_rb_link_node() / remove @node from @root and rebalance.
 * @node: the node just linked (red) / a node in @root.
 * @root: the tree.
 *
 * An erased node's own fields are left stale; rq_rb_clear_node() marks it
 * unlinked.
 *
 * Context: the tree's owner, under whatever lock guards the tree; O(log n),
 * never blocks.
 */
void rq_rb_insert_color(struct rq_rb_node *node, struct rq_rb_root *root);
void rq_rb_erase(struct rq_rb_node *node, struct rq_rb_root *root);
/**
 * rq_rb_first() / rq_rb_last() - the leftmost (smallest) / rightmost
 * (largest) node.
 * @root: the tree.
 *
 * Context: the tree's owner; never blocks.
 * Return: the node, NULL for an empty tree.
 */
struct rq_rb_node *rq_rb_first(const struct rq_rb_root *root);
struct rq_rb_node *rq_rb_last(const struct rq_rb_root *root);
/**
 * rq_rb_next() / rq_rb_prev() - the in-order successor / predecessor.
 * @node: a node in a tree.
 *
 * Context: the tree's owner; never blocks.
 * Return: the node, NULL past the end or for an unlinked node.
 */
struct rq_rb_node *rq_rb_next(const struct rq_rb_node *node);
struct rq_rb_node *rq_rb_prev(const struct rq_rb_node *node);

/** rq_rb_link_node() - place @node at *@link under @parent before colouring. */
static inline void rq_rb_link_node(struct rq_rb_node *node, struct rq_rb_node *parent,
				   struct rq_rb_node **link)
{
	node->parent_color = (uintptr_t)parent;
	node->left = node->right = NULL;
	*link = node;
}

/** rq_rb_empty_node() / rq_rb_clear_node() - "not in a tree" marker. */
static inline bool rq_rb_empty_node(const struct rq_rb_node *node)
{
	return node->parent_color == (uintptr_t)node;
}

static inline void rq_rb_clear_node(struct rq_rb_node *node)
{
	node->parent_color = (uintptr_t)node;
}

/* ------------------------------------------------- intrusive list helpers */

#define RQ_CONTAINER_OF(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline void rq_list_init(struct rq_list_node *h)
{
	h->next = h->prev = h;
}

static inline bool rq_list_empty(const struct rq_list_node *h)
{
	return h->next == h;
}

static inline void rq_list_insert(struct rq_list_node *n, struct rq_list_node *prev,
				  struct rq_list_node *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

/** rq_list_add() - add at the head. */
static inline void rq_list_add(struct rq_list_node *n, struct rq_list_node *h)
{
	rq_list_insert(n, h, h->next);
}

/** rq_list_add_tail() - add at the tail. */
static inline void rq_list_add_tail(struct rq_list_node *n, struct rq_list_node *h)
{
	rq_list_insert(n, h->prev, h);
}

/** rq_list_del_init() - unlink and make @n an empty list. */
static inline void rq_list_del_init(struct rq_list_node *n)
{
	n->next->prev = n->prev;
	n->prev->next = n->next;
	rq_list_init(n);
}

/** rq_list_splice_tail_init() - move all of @from to the tail of @to. */
static inline void rq_list_splice_tail_init(struct rq_list_node *from, struct rq_list_node *to)
{
	if (rq_list_empty(from))
		return;
	from->next->prev = to->prev;
	to->prev->next = from->next;
	from->prev->next = to;
	to->prev = from->prev;
	rq_list_init(from);
}

/** rq_list_splice_init() - move all of @from to the head of @to. */
static inline void rq_list_splice_init(struct rq_list_node *from, struct rq_list_node *to)
{
	if (rq_list_empty(from))
		return;
	from->prev->next = to->next;
	to->next->prev = from->prev;
	to->next = from->next;
	from->next->prev = to;
	rq_list_init(from);
}

/** rq_list_first_rq() - first request on a queuelist list, or NULL. */
static inline struct rq_request *rq_list_first_rq(struct rq_list_node *h)
{
	return rq_list_empty(h) ? NULL : RQ_CONTAINER_OF(h->next, struct rq_request, queuelist);
}

/* ------------------------------------------------------------------ clock */

/**
 * rq_clock_ns() - the library's clock (CLOCK_MONOTONIC by default), used
 * for timestamps, deadlines and scheduler expiries.  A delayed run a
 * scheduler asks for falls due on rq_service_clock_ns() (queue.h): this
 * clock in application-driven service, CLOCK_MONOTONIC with the thread.
 *
 * Context: any thread, any hook; never blocks (an installed source must not
 * either).
 * Return: nanoseconds, never going backwards.
 */
uint64_t rq_clock_ns(void);

/**
 * rq_clock_set_source() - replace the clock (tests, simulations): @fn(@arg)
 * returns nanoseconds and must never go backwards.  NULL restores the default.
 * Context: before queues exist, or with all queues frozen.
 */
void rq_clock_set_source(uint64_t (*fn)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_ELEVATOR_H */
