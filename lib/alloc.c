/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The library's own heap: see lib/internal/alloc.h for the contract.
 *
 * jemalloc backend (RQ_ALLOC_JEMALLOC): every call passes
 * MALLOCX_TCACHE_NONE, because what the library allocates is shared
 * between threads and long-lived (a block freed into one thread's cache
 * would only sit there, out of reach of the thread that next needs it,
 * and hidden from the arena statistics rqbench counts).  Frees are sized
 * (sdallocx) where the caller knows the size, which spares jemalloc the
 * size lookup; debug builds check the size given against the block's.
 *
 * NUMA: mem_alloc_node() takes node memory from one manual arena per node
 * ("arenas.create"), made on first use.  The arena's extent hooks are
 * jemalloc's defaults but for the allocation hook, which after the default
 * one sets an MPOL_PREFERRED policy for the node on the new range (mbind),
 * so every page later faulted in under that range lands on the node when it
 * has room.  Without libnuma, where numa_available() < 0, or for a node the
 * machine does not have, node memory comes from the calling thread's arena.
 *
 * libc backend (no jemalloc, or a sanitizer build): malloc/calloc/free and
 * posix_memalign; node memory from numa_alloc_onnode() (page-granular, one
 * mapping a block: the few large blocks that ask for a node are tag maps,
 * request pools and contexts, made when a queue is set up).
 *
 * Every node block starts one cache line after a header recording how it
 * was allocated and its total size, so mem_free_node() needs no size from
 * the caller and catches a double free.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#if RQ_ALLOC_JEMALLOC
#include <assert.h>
#include <jemalloc/jemalloc.h>
#endif
#if HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

#include "internal/compiler.h"
#include "internal/alloc.h"

#define MEM_MAX_NODES 64 /* nodes with an arena; higher ones use any memory */

/* ------------------------------------------------------------------ NUMA */

#if HAVE_NUMA
static atomic_int numa_state = -2; /* -2 unknown, -1 unavailable, else max node */

/* numa_max_node() once, or -1 when the kernel has no NUMA support. */
static int numa_max_node_cached(void)
{
	int st = atomic_load_explicit(&numa_state, memory_order_relaxed);

	if (st == -2) {
		st = numa_available() < 0 ? -1 : numa_max_node();
		atomic_store_explicit(&numa_state, st, memory_order_relaxed);
	}
	return st;
}
#else
static int numa_max_node_cached(void)
{
	return -1;
}
#endif

/* ------------------------------------------------------- jemalloc arenas */

#if RQ_ALLOC_JEMALLOC
#define MEM_FLAGS MALLOCX_TCACHE_NONE

/* One node's extent hooks; jemalloc hands &hooks back to the hooks. */
struct node_hooks {
	extent_hooks_t hooks;
	int node;
};

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static extent_hooks_t *default_hooks;                 /* under arena_lock */
static struct node_hooks node_hooks[MEM_MAX_NODES];   /* under arena_lock */
static atomic_uint node_arena[MEM_MAX_NODES];         /* 0: none yet */
static atomic_bool node_arena_failed[MEM_MAX_NODES];  /* do not retry */

/*
 * node_extent_alloc() - jemalloc's extent allocation hook for a node arena:
 * the default hook's memory, with the node preferred for its pages.
 * Context: inside jemalloc, any thread; the range is not touched yet.
 * Return: the range, or NULL (the default hook failed).
 */
static void *node_extent_alloc(extent_hooks_t *hooks, void *new_addr, size_t size,
			       size_t alignment, bool *zero, bool *commit, unsigned arena_ind)
{
	struct node_hooks *nh = (struct node_hooks *)hooks; /* hooks is its first member */
	void *p = default_hooks->alloc(default_hooks, new_addr, size, alignment, zero,
				       commit, arena_ind);

#if HAVE_NUMA
	if (p) {
		unsigned long mask[MEM_MAX_NODES / (8 * sizeof(unsigned long))] = { 0 };
		unsigned bits = 8 * sizeof(unsigned long);

		mask[nh->node / bits] |= 1UL << (nh->node % bits);
		/* best effort: a kernel or container without mbind keeps the default */
		(void)mbind(p, size, MPOL_PREFERRED, mask, MEM_MAX_NODES + 1, 0);
	}
#else
	(void)nh;
#endif
	return p;
}

/*
 * arena_create_locked() - a manual arena for @node.
 * Context: arena_lock held.
 * Return: the arena's index, or 0 when jemalloc refused.
 */
static unsigned arena_create_locked(int node)
{
	struct node_hooks *nh = &node_hooks[node];
	extent_hooks_t *hooks = &nh->hooks;
	unsigned ind = 0;
	size_t sz;

	if (!default_hooks) {
		sz = sizeof(default_hooks);
		if (mallctl("arena.0.extent_hooks", &default_hooks, &sz, NULL, 0) ||
		    !default_hooks)
			return 0;
	}
	nh->hooks = *default_hooks;
	nh->hooks.alloc = node_extent_alloc;
	nh->node = node;
	sz = sizeof(ind);
	if (mallctl("arenas.create", &ind, &sz, &hooks, sizeof(hooks)))
		return 0;
	return ind;
}

/*
 * node_arena_get() - the arena of NUMA @node, made on first use.
 * Return: its index, or 0 for "no arena of its own" (no NUMA, a node this
 * machine does not have, or jemalloc could not make one).
 */
static unsigned node_arena_get(int node)
{
	unsigned ind;

	if (node < 0 || node >= MEM_MAX_NODES || node > numa_max_node_cached())
		return 0;
	ind = atomic_load_explicit(&node_arena[node], memory_order_acquire);
	if (likely(ind))
		return ind;
	if (atomic_load_explicit(&node_arena_failed[node], memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&arena_lock);
	ind = atomic_load_explicit(&node_arena[node], memory_order_relaxed);
	if (!ind) {
		ind = arena_create_locked(node);
		if (ind)
			atomic_store_explicit(&node_arena[node], ind, memory_order_release);
		else
			atomic_store_explicit(&node_arena_failed[node], true,
					      memory_order_relaxed);
	}
	pthread_mutex_unlock(&arena_lock);
	return ind;
}

/* Debug builds: @size must be a size the block could have been asked with. */
static inline void check_size(void *p, size_t size, int flags)
{
#ifndef NDEBUG
	assert(sallocx(p, flags) == nallocx(size, flags));
#else
	(void)p, (void)size, (void)flags;
#endif
}
#endif /* RQ_ALLOC_JEMALLOC */

/* ------------------------------------------------------------ plain heap */

/**
 * mem_alloc() - @size bytes (uninitialised) of the library's heap.
 * @size: bytes; 0 gives a valid, unique block.
 * Context: any thread; may block in the allocator.
 * Return: the block, or NULL when memory is exhausted.  Pairs with mem_free().
 */
void *mem_alloc(size_t size)
{
#if RQ_ALLOC_JEMALLOC
	return mallocx(size ? size : 1, MEM_FLAGS);
#else
	return malloc(size ? size : 1);
#endif
}

/**
 * mem_zalloc() - @size zeroed bytes of the library's heap.
 * @size: bytes; 0 gives a valid, unique block.
 * Context: any thread; may block in the allocator.
 * Return: the block, or NULL when memory is exhausted.  Pairs with mem_free().
 */
void *mem_zalloc(size_t size)
{
#if RQ_ALLOC_JEMALLOC
	return mallocx(size ? size : 1, MEM_FLAGS | MALLOCX_ZERO);
#else
	return calloc(1, size ? size : 1);
#endif
}

/**
 * mem_calloc() - a zeroed array of @n elements of @size bytes.
 * @n: elements.
 * @size: bytes each.
 * Context: any thread; may block in the allocator.
 * Return: the array, or NULL when memory is exhausted or n * size
 * overflows.  Pairs with mem_free(p, n * size).
 */
void *mem_calloc(size_t n, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(n, size, &total))
		return NULL;
	return mem_zalloc(total);
}

/**
 * mem_realloc() - resize a block from mem_alloc() (or make one).
 * @p: the block, or NULL for a new one.
 * @size: the new size in bytes (0 is taken as 1).
 * Context: any thread; may block in the allocator.
 * Return: the block, moved or not, or NULL when memory is exhausted (then
 * @p is left as it was).  Pairs with mem_free(p, size).
 */
void *mem_realloc(void *p, size_t size)
{
	if (!size)
		size = 1;
#if RQ_ALLOC_JEMALLOC
	return p ? rallocx(p, size, MEM_FLAGS) : mallocx(size, MEM_FLAGS);
#else
	return realloc(p, size);
#endif
}

/**
 * mem_free() - give back a block from mem_alloc(), mem_zalloc(),
 * mem_calloc() or mem_realloc().
 * @p: the block, or NULL.
 * @size: the size it was (last) asked with, or 0 if unknown.
 * Context: any thread.
 */
void mem_free(void *p, size_t size)
{
	if (!p)
		return;
#if RQ_ALLOC_JEMALLOC
	if (size) {
		check_size(p, size, MEM_FLAGS);
		sdallocx(p, size, MEM_FLAGS);
	} else {
		dallocx(p, MEM_FLAGS);
	}
#else
	(void)size;
	free(p);
#endif
}

/**
 * mem_alloc_aligned() - @size bytes (uninitialised) aligned to @align.
 * @align: a power of two.
 * @size: bytes; 0 gives a valid, unique block.
 * Context: any thread; may block in the allocator.
 * Return: the block, or NULL when memory is exhausted.  Pairs with
 * mem_free_aligned(p, size, align).
 */
void *mem_alloc_aligned(size_t align, size_t size)
{
	if (!size)
		size = 1;
#if RQ_ALLOC_JEMALLOC
	return mallocx(size, MEM_FLAGS | MALLOCX_ALIGN(align));
#else
	void *p;

	if (align < sizeof(void *))
		align = sizeof(void *);
	return posix_memalign(&p, align, size) ? NULL : p;
#endif
}

/**
 * mem_free_aligned() - give back a block from mem_alloc_aligned().
 * @p: the block, or NULL.
 * @size: the size it was asked with, or 0 if unknown.
 * @align: the alignment it was asked with.
 * Context: any thread.
 */
void mem_free_aligned(void *p, size_t size, size_t align)
{
	if (!p)
		return;
#if RQ_ALLOC_JEMALLOC
	if (size) {
		check_size(p, size, MEM_FLAGS | MALLOCX_ALIGN(align));
		sdallocx(p, size, MEM_FLAGS | MALLOCX_ALIGN(align));
	} else {
		dallocx(p, MEM_FLAGS);
	}
#else
	(void)size, (void)align;
	free(p);
#endif
}

/* ------------------------------------------------------------ node memory */

enum node_alloc_kind {
	NODE_ALLOC_HEAP = 1,    /* libc heap */
	NODE_ALLOC_NUMA = 2,    /* numa_alloc_onnode() */
	NODE_ALLOC_ARENA = 3,   /* jemalloc, the node's arena or the thread's */
};

#define NODE_ALLOC_MAGIC 0x72716d65u /* "rqme" */

/* One cache line before every node block. */
struct node_alloc_hdr {
	size_t total;   /* bytes allocated, header included */
	size_t size;    /* bytes asked for */
	uint32_t kind;  /* enum node_alloc_kind */
	uint32_t magic;
};

/**
 * mem_alloc_node() - zeroed memory, 64-byte aligned, on NUMA node @node.
 * @size: bytes wanted (0 gives a valid, unique block).
 * @node: the node, or MEM_NODE_ANY.
 *
 * Placement is best effort: without libnuma, when the kernel lacks NUMA, or
 * for a node that does not exist, the block comes from anywhere.
 * Context: any thread; may block in the allocator.  The first block for a
 * node makes the node's arena (jemalloc backend).
 * Return: the block, or NULL when memory is exhausted.  Pairs with
 * mem_free_node().
 */
void *mem_alloc_node(size_t size, int node)
{
	struct node_alloc_hdr *hdr;
	size_t total;

	if (size > SIZE_MAX - 2 * RQ_CACHELINE)
		return NULL;
	total = (size + RQ_CACHELINE + RQ_CACHELINE - 1) & ~(size_t)(RQ_CACHELINE - 1);

#if RQ_ALLOC_JEMALLOC
	unsigned arena = node_arena_get(node);
	int flags = MEM_FLAGS | MALLOCX_ZERO | MALLOCX_ALIGN(RQ_CACHELINE);

	if (arena)
		flags |= MALLOCX_ARENA(arena);
	hdr = mallocx(total, flags);
	if (!hdr)
		return NULL;
	hdr->kind = NODE_ALLOC_ARENA;
#else
	hdr = NULL;
#if HAVE_NUMA
	if (node >= 0 && node <= numa_max_node_cached()) {
		hdr = numa_alloc_onnode(total, node);
		if (hdr) {
			memset(hdr, 0, total);
			hdr->kind = NODE_ALLOC_NUMA;
		}
	}
#else
	(void)numa_max_node_cached;
#endif
	if (!hdr) {
		void *p;

		if (posix_memalign(&p, RQ_CACHELINE, total))
			return NULL;
		hdr = p;
		memset(hdr, 0, total);
		hdr->kind = NODE_ALLOC_HEAP;
	}
#endif
	hdr->total = total;
	hdr->size = size;
	hdr->magic = NODE_ALLOC_MAGIC;
	return (char *)hdr + RQ_CACHELINE;
}

/**
 * mem_free_node() - give back a block from mem_alloc_node().
 * @p: the block, or NULL.
 *
 * The block's header says how it was allocated and how big it is; a block
 * that is not one (or was freed already) aborts the process, as the heap
 * is corrupt.
 * Context: any thread.
 */
void mem_free_node(void *p)
{
	struct node_alloc_hdr *hdr;

	if (!p)
		return;
	hdr = (struct node_alloc_hdr *)((char *)p - RQ_CACHELINE);
	if (hdr->magic != NODE_ALLOC_MAGIC)
		abort(); /* not ours, or freed twice: memory is corrupt */
	hdr->magic = 0;
	switch (hdr->kind) {
#if RQ_ALLOC_JEMALLOC
	case NODE_ALLOC_ARENA:
		mem_free_aligned(hdr, hdr->total, RQ_CACHELINE);
		return;
#else
#if HAVE_NUMA
	case NODE_ALLOC_NUMA:
		numa_free(hdr, hdr->total);
		return;
#endif
	case NODE_ALLOC_HEAP:
		free(hdr);
		return;
#endif
	default:
		abort();
	}
}

/* ---------------------------------------------------------- introspection */

/**
 * mem_backend() - which allocator serves the library's heap.
 * Context: any thread.
 * Return: "jemalloc" or "libc".
 */
const char *mem_backend(void)
{
	return RQ_ALLOC_JEMALLOC ? "jemalloc" : "libc";
}

/**
 * mem_node_arena() - the jemalloc arena that serves NUMA @node.
 * @node: the node.
 * @arena: set to the arena's index.
 * Context: any thread; makes the arena if it does not exist yet.
 * Return: 0, -ENODEV when @node gets no arena of its own (no NUMA, no such
 * node), -ENOTSUP with the libc backend.
 */
int mem_node_arena(int node, unsigned *arena)
{
#if RQ_ALLOC_JEMALLOC
	unsigned ind = node_arena_get(node);

	if (!ind)
		return -ENODEV;
	*arena = ind;
	return 0;
#else
	(void)node, (void)arena;
	return -ENOTSUP;
#endif
}
