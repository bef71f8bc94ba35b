/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Bios: initialisation, vectors, the per-thread bio cache, chaining and
 * completion.
 *
 * The per-thread cache
 * --------------------
 * Every thread that allocates a bio owns one struct bio_cache.  A bio from
 * rq_bio_alloc() is one fixed-size object (struct rq_bio followed by
 * RQ_BIO_INLINE_VECS - 1 more vectors) and remembers its cache in bio->cache.
 * Putting a bio back:
 *
 *  - on the owner thread pushes it on the owner's local free list (capped at
 *    BIO_CACHE_MAX; beyond that the memory is freed);
 *  - on any other thread pushes it on the owner's remote-free stack with one
 *    compare-and-swap.  The owner takes the whole stack with one exchange
 *    when its local list runs dry.  Pushers never pop, so no ABA is possible.
 *
 * The owner counts the bios it handed out and has not had back
 * (outstanding).  When the owner thread exits, the pthread key destructor
 * frees the local list, adds outstanding to the cache's reference count,
 * replaces the remote stack with REMOTE_DEAD and frees what it took.  A put
 * that then finds REMOTE_DEAD frees the bio itself and drops one reference;
 * whoever drops the last frees the cache.  No pointer to a cache ever
 * dangles.
 *
 * What may run at the same time:
 *
 *   operation                          concurrent with
 *   rq_bio_alloc, put on the owner     anything on other threads; the cache's
 *                                      local list is touched by its owner only
 *   put from another thread            everything (lock-free push)
 *   owner exit (key destructor)        remote puts
 *   rq_bio_endio on pieces of a chain  each other, from any thread
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal/alloc.h"
#include "internal/bio.h"

/* Bios a thread keeps for reuse; beyond that puts free memory. */
#define BIO_CACHE_MAX 512

/* One cache object: the bio and its inline vectors. */
#define BIO_OBJ_SIZE \
	(sizeof(struct rq_bio) + (RQ_BIO_INLINE_VECS - 1) * sizeof(struct rq_bvec))

/* Bios have at most this many vectors (vcnt and max_vecs are 8 bits). */
#define BIO_MAX_VECS 255

/* Remote stack value once the owner thread has gone. */
#define REMOTE_DEAD ((struct rq_bio *)(uintptr_t)1)

struct bio_cache {
	/* owner thread only */
	struct rq_bio *free;        /* free bios, linked through ->next */
	unsigned nr_free;
	unsigned long outstanding;  /* handed out and not back on ->free */

	/* shared with other threads, on a line of its own */
	_Atomic(struct rq_bio *) remote rq_cacheline_aligned; /* remote-free stack */
	atomic_ulong refs;          /* owner: 1; after its exit: + outstanding */
};

static __thread struct bio_cache *tl_bio_cache __attribute__((tls_model("initial-exec")));

static pthread_key_t bio_cache_key;
static pthread_once_t bio_cache_key_once = PTHREAD_ONCE_INIT;
static bool bio_cache_key_ok;

/* ------------------------------------------------------------ chaining */

/*
 * Hand a finished chained piece's status to its parent and give the piece
 * back to its cache.  Returns the parent, which the caller must end.
 */
static struct rq_bio *bio_chain_pass(struct rq_bio *child)
{
	struct rq_bio *parent = child->parent;

	bio_set_status_once(parent, child->status);
	rq_bio_put(child);
	return parent;
}

/* end_io of a chained piece: pass the status on, free it, end the parent. */
void bio_chain_endio(struct rq_bio *bio)
{
	rq_bio_endio(bio_chain_pass(bio));
}

/**
 * rq_bio_endio() - end a bio with its current status.
 * @bio: the bio.
 *
 * A bio with pieces in flight (RQ_BIOF_CHAIN) only counts down; the last
 * piece to end runs end_io.  A chained piece passes its status to its parent
 * (first error wins), is put back and its parent is ended in turn; this
 * walks up the chain iteratively, so deep chains use no stack.
 *
 * Context: any thread; whatever end_io allows.
 */
RQ_EXPORT void rq_bio_endio(struct rq_bio *bio)
{
	for (;;) {
		if (__atomic_load_n(&bio->core_flags, __ATOMIC_ACQUIRE) & RQ_BIOF_CHAIN) {
			/* Release our status, acquire the other pieces'. */
			if (__atomic_sub_fetch(&bio->remaining, 1, __ATOMIC_ACQ_REL) != 0)
				return;
			/* Last piece: the bio is ours alone again. */
			__atomic_fetch_and(&bio->core_flags, (uint16_t)~RQ_BIOF_CHAIN, __ATOMIC_RELAXED);
			bio->remaining = 1;
		}
		if (bio->end_io != bio_chain_endio) {
			if (bio->end_io)
				bio->end_io(bio);
			return;
		}
		bio = bio_chain_pass(bio);
	}
}

/**
 * bio_chain() - make @child a piece of @parent.
 * @child: the piece; its end_io is replaced by the chain's.
 * @parent: the bio whose end_io waits for @child.
 *
 * Context: the submitter, before @child is submitted and while it still
 * holds @parent (which is not yet ended).
 */
void bio_chain(struct rq_bio *child, struct rq_bio *parent)
{
	child->parent = parent;
	child->end_io = bio_chain_endio;
	if (!(__atomic_load_n(&parent->core_flags, __ATOMIC_RELAXED) & RQ_BIOF_CHAIN)) {
		/* No piece in flight yet: the parent itself plus @child. */
		__atomic_fetch_or(&parent->core_flags, (uint16_t)RQ_BIOF_CHAIN, __ATOMIC_RELEASE);
		__atomic_store_n(&parent->remaining, 2, __ATOMIC_RELAXED);
	} else {
		__atomic_add_fetch(&parent->remaining, 1, __ATOMIC_RELAXED);
	}
}

/**
 * bio_end_with() - set a status (first error wins) and end a bio.
 * @bio: the bio.
 * @status: RQ_STS_*; RQ_STS_OK leaves the status as it is.
 *
 * Context: any thread.
 */

/* -------------------------------------------------------- the bio cache */

static void bio_cache_destroy(void *arg);

static void bio_cache_key_create(void)
{
	bio_cache_key_ok = pthread_key_create(&bio_cache_key, bio_cache_destroy) == 0;
}

/* The calling thread's cache, made on first use; NULL on exhaustion. */
static struct bio_cache *bio_cache_create(void)
{
	struct bio_cache *c;

	pthread_once(&bio_cache_key_once, bio_cache_key_create);
	if (!bio_cache_key_ok)
		return NULL;
	c = mem_alloc_aligned(RQ_CACHELINE, sizeof(*c));
	if (!c)
		return NULL;
	c->free = NULL;
	c->nr_free = 0;
	c->outstanding = 0;
	atomic_init(&c->remote, NULL);
	atomic_init(&c->refs, 1);
	if (pthread_setspecific(bio_cache_key, c)) {
		mem_free_aligned(c, sizeof(*c), RQ_CACHELINE);
		return NULL;
	}
	tl_bio_cache = c;
	return c;
}

/* Move the remote-free stack to the local list (owner only). */
static void bio_cache_take_remote(struct bio_cache *c)
{
	struct rq_bio *list, *last;
	unsigned n = 1;

	if (!atomic_load_explicit(&c->remote, memory_order_relaxed))
		return;
	list = atomic_exchange_explicit(&c->remote, NULL, memory_order_acquire);
	if (!list)
		return;
	for (last = list; last->next; last = last->next)
		n++;
	last->next = c->free;
	c->free = list;
	c->nr_free += n;
	c->outstanding -= n;
}

/* Free a list of bio objects linked by ->next; returns how many. */
static unsigned long bio_free_list(struct rq_bio *list)
{
	unsigned long n = 0;

	while (list) {
		struct rq_bio *next = list->next;

		mem_free(list, BIO_OBJ_SIZE);
		list = next;
		n++;
	}
	return n;
}

/*
 * pthread key destructor: the owner thread exits.  Bios still out are
 * freed by whoever puts them; the last one frees the cache.
 */
static void bio_cache_destroy(void *arg)
{
	struct bio_cache *c = arg;
	struct rq_bio *list;
	unsigned long n;

	if (tl_bio_cache == c)
		tl_bio_cache = NULL;
	bio_free_list(c->free);
	c->free = NULL;
	c->nr_free = 0;
	atomic_fetch_add_explicit(&c->refs, c->outstanding, memory_order_relaxed);
	list = atomic_exchange_explicit(&c->remote, REMOTE_DEAD, memory_order_acq_rel);
	n = bio_free_list(list) + 1;
	if (atomic_fetch_sub_explicit(&c->refs, n, memory_order_acq_rel) == n)
		mem_free_aligned(c, sizeof(*c), RQ_CACHELINE);
}

/* Give @bio back to cache @c from a thread that does not own it. */
static __attribute__((noinline)) void bio_put_remote(struct bio_cache *c, struct rq_bio *bio)
{
	struct rq_bio *head = atomic_load_explicit(&c->remote, memory_order_acquire);

	do {
		if (head == REMOTE_DEAD) {
			mem_free(bio, BIO_OBJ_SIZE);
			if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
				mem_free_aligned(c, sizeof(*c), RQ_CACHELINE);
			return;
		}
		bio->next = head;
	} while (!atomic_compare_exchange_weak_explicit(&c->remote, &head, bio,
							memory_order_release,
							memory_order_acquire));
}

/* Fill a cache bio's fields for a new user. */
static inline void bio_setup(struct rq_bio *bio, struct bio_cache *c, struct rq_bvec *vecs,
			     unsigned max_vecs, uint16_t flags)
{
	/*
	 * Field by field rather than memset: a handful of plain stores, where
	 * a block clear of the whole header costs a rep-stos start-up.
	 */
	bio->iter = (struct rq_bvec_iter){ 0 };
	bio->op = 0;
	bio->vcnt = 0;
	bio->max_vecs = (uint8_t)max_vecs;
	bio->status = RQ_STS_OK;
	bio->ioprio = 0;
	bio->core_flags = flags;
	bio->opf = 0;
	bio->vecs = vecs;
	bio->end_io = NULL;
	bio->private_data = NULL;
	bio->ioc = NULL;
	bio->next = NULL;
	bio->parent = NULL;
	bio->remaining = 1;
	bio->cache = c;
}

/* Allocation with an empty local list, a cold cache or external vectors. */
static __attribute__((noinline)) struct rq_bio *bio_alloc_slow(unsigned nr_vecs)
{
	struct bio_cache *c = tl_bio_cache;
	struct rq_bvec *vecs = NULL;
	struct rq_bio *bio;

	if (nr_vecs > BIO_MAX_VECS) {
		errno = EINVAL;
		return NULL;
	}
	if (!c) {
		c = bio_cache_create();
		if (!c)
			return NULL;
	}
	if (nr_vecs > RQ_BIO_INLINE_VECS) {
		vecs = mem_alloc(nr_vecs * sizeof(*vecs));
		if (!vecs)
			return NULL;
	}
	if (!c->free)
		bio_cache_take_remote(c);
	if (c->free) {
		bio = c->free;
		c->free = bio->next;
		c->nr_free--;
	} else {
		bio = mem_alloc(BIO_OBJ_SIZE);
		if (!bio) {
			mem_free(vecs, nr_vecs * sizeof(*vecs));
			return NULL;
		}
	}
	c->outstanding++;
	if (vecs)
		bio_setup(bio, c, vecs, nr_vecs, RQ_BIOF_ALLOCATED | RQ_BIOF_EXT_VECS);
	else
		bio_setup(bio, c, bio->inline_vecs, RQ_BIO_INLINE_VECS, RQ_BIOF_ALLOCATED);
	return bio;
}

/**
 * rq_bio_alloc() - take a bio from the calling thread's cache.
 * @nr_vecs: vectors needed, 0..255.  Up to RQ_BIO_INLINE_VECS live inside
 *	the bio; more are allocated separately.
 *
 * Context: any thread; no heap allocation once the cache is warm (for bios
 * with up to RQ_BIO_INLINE_VECS vectors).
 * Return: an initialised bio with remaining 1, NULL if memory is exhausted
 * or @nr_vecs > 255 (errno EINVAL).
 */
RQ_EXPORT struct rq_bio *rq_bio_alloc(unsigned nr_vecs)
{
	struct bio_cache *c = tl_bio_cache;
	struct rq_bio *bio;

	if (likely(c && c->free && nr_vecs <= RQ_BIO_INLINE_VECS)) {
		bio = c->free;
		c->free = bio->next;
		c->nr_free--;
		c->outstanding++;
		bio_setup(bio, c, bio->inline_vecs, RQ_BIO_INLINE_VECS, RQ_BIOF_ALLOCATED);
		return bio;
	}
	return bio_alloc_slow(nr_vecs);
}

/**
 * rq_bio_put() - give a bio from rq_bio_alloc() back.
 * @bio: the bio (after its end_io ran, possibly from inside end_io); NULL
 *	and bios in caller memory are ignored.
 *
 * Context: any thread.  On the allocating thread this is a push on its
 * local list; elsewhere a lock-free push on the allocator's remote stack,
 * or a mem_free() once the allocating thread has exited.
 */
RQ_EXPORT void rq_bio_put(struct rq_bio *bio)
{
	struct bio_cache *c;

	if (unlikely(!bio || !(bio->core_flags & RQ_BIOF_ALLOCATED)))
		return;
	if (unlikely(bio->core_flags & RQ_BIOF_EXT_VECS))
		mem_free(bio->vecs, 0);
	bio->core_flags = 0; /* a second put is ignored */
	c = bio->cache;
	if (likely(c == tl_bio_cache)) {
		c->outstanding--;
		if (likely(c->nr_free < BIO_CACHE_MAX)) {
			bio->next = c->free;
			c->free = bio;
			c->nr_free++;
		} else {
			mem_free(bio, BIO_OBJ_SIZE);
		}
		return;
	}
	bio_put_remote(c, bio);
}

/**
 * bio_cache_drain() - free every bio cached by the calling thread,
 * including those other threads gave back.  The cache itself stays.
 *
 * Context: any thread; affects only its own cache.
 */
void bio_cache_drain(void)
{
	struct bio_cache *c = tl_bio_cache;

	if (!c)
		return;
	bio_cache_take_remote(c);
	bio_free_list(c->free);
	c->free = NULL;
	c->nr_free = 0;
}

/* ------------------------------------------------------------- the bio */

/**
 * rq_bio_init() - make caller memory a bio.
 * @bio: memory to initialise.
 * @vecs: vector storage, or NULL to use the single inline vector.
 * @max_vecs: entries of @vecs (at most 255 are used); ignored (1) when
 *	@vecs is NULL.
 *
 * Context: any; never allocates.  rq_bio_put() ignores such bios.
 */
RQ_EXPORT void rq_bio_init(struct rq_bio *bio, struct rq_bvec *vecs, unsigned max_vecs)
{
	if (!vecs) {
		vecs = bio->inline_vecs;
		max_vecs = 1;
	} else if (max_vecs > BIO_MAX_VECS) {
		max_vecs = BIO_MAX_VECS;
	}
	bio_setup(bio, NULL, vecs, max_vecs, 0);
	bio->inline_vecs[0] = (struct rq_bvec){ NULL, 0 };
}

/**
 * rq_bio_add_vec() - append a buffer to a bio and grow its size.
 * @bio: the bio, not yet submitted.
 * @base: start of the buffer.
 * @len: bytes; every vector length must be a non-zero multiple of 512
 *	(RQ_SECTOR_SIZE).
 *
 * Context: the bio's owner, before submission.
 * Return: 0; -ENOSPC when the vector is full; -EINVAL for a zero length, a
 * length that is not a multiple of 512, a size that would pass 4 GiB, or a
 * clone (which shares another bio's vectors).
 */
RQ_EXPORT int rq_bio_add_vec(struct rq_bio *bio, void *base, uint32_t len)
{
	struct rq_bvec *v;

	if (unlikely(!len || (len & (RQ_SECTOR_SIZE - 1)) ||
		     (bio->core_flags & RQ_BIOF_CLONED)))
		return -EINVAL;
	if (unlikely(bio->vcnt >= bio->max_vecs))
		return -ENOSPC;
	if (unlikely(bio->iter.size + len < bio->iter.size))
		return -EINVAL;
	v = &bio->vecs[bio->vcnt++];
	v->base = base;
	v->len = len;
	bio->iter.size += len;
	return 0;
}

/**
 * bio_alloc_clone() - a bio sharing another's vectors and position.
 * @src: the bio to clone.
 *
 * The clone copies op, opf, ioprio, ioc, the iterator and the vector
 * pointer (flagged RQ_BIOF_CLONED: it never frees or extends them); end_io,
 * private_data and the chain are left empty.
 *
 * Context: any thread; from the calling thread's cache.
 * Return: the clone, NULL on memory exhaustion.
 */
struct rq_bio *bio_alloc_clone(const struct rq_bio *src)
{
	struct rq_bio *bio = rq_bio_alloc(0);

	if (!bio)
		return NULL;
	bio->iter = src->iter;
	bio->op = src->op;
	bio->opf = src->opf;
	bio->ioprio = src->ioprio;
	bio->ioc = src->ioc;
	bio->vecs = src->vecs;
	bio->vcnt = src->vcnt;
	bio->max_vecs = src->vcnt;
	bio->core_flags |= RQ_BIOF_CLONED;
	return bio;
}

/**
 * bio_advance() - drop bytes from the front of a bio.
 * @bio: the bio.
 * @bytes: how many (clamped to the size); the start sector moves by
 *	@bytes / 512 and the vector position follows.
 *
 * Context: the bio's owner.
 */
void bio_advance(struct rq_bio *bio, unsigned bytes)
{
	uint32_t idx, done;

	if (bytes > bio->iter.size)
		bytes = bio->iter.size;
	bio->iter.sector += bytes >> RQ_SECTOR_SHIFT;
	bio->iter.size -= bytes;
	if (!bio->vcnt)
		return;
	idx = bio->iter.idx;
	done = bio->iter.done + bytes;
	while (idx < bio->vcnt && done >= bio->vecs[idx].len) {
		done -= bio->vecs[idx].len;
		idx++;
	}
	bio->iter.idx = idx;
	bio->iter.done = done;
}

/**
 * rq_bio_split() - split off the first sectors of a bio.
 * @bio: the bio to split; afterwards it covers the rest.
 * @sectors: sectors of the front piece, > 0 and < the bio's size.
 *
 * The front piece is a clone chained to @bio: @bio's end_io runs once, after
 * both pieces ended, with the first error either saw.
 *
 * Context: the bio's owner, before submission.
 * Return: the front piece, or NULL with nothing changed if @sectors is out
 * of range or memory is exhausted.
 */
RQ_EXPORT struct rq_bio *rq_bio_split(struct rq_bio *bio, unsigned sectors)
{
	struct rq_bio *split;

	if (!sectors || sectors >= rq_bio_sectors(bio))
		return NULL;
	split = bio_alloc_clone(bio);
	if (!split)
		return NULL;
	split->iter.size = sectors << RQ_SECTOR_SHIFT;
	bio_chain(split, bio);
	bio_advance(bio, sectors << RQ_SECTOR_SHIFT);
	return split;
}
