/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The library's own heap (lib/alloc.c), the lowest layer: every block the
 * library or a built-in scheduler allocates for itself comes from here and
 * goes back here.  Never installed, never exported.
 *
 * Backed by jemalloc's non-standard API (mallocx, rallocx, sdallocx,
 * dallocx) when the build has jemalloc and no sanitizer (config.h
 * RQ_ALLOC_JEMALLOC), so a program gets jemalloc for the library's memory
 * without linking or preloading it; by libc malloc/free otherwise, which
 * keeps every block visible to ASan and TSan.
 *
 * Memory the library allocates is shared between threads (tag maps,
 * request pools, contexts, scheduler data, bios put back from any thread),
 * so no allocation here goes through jemalloc's per-thread cache.
 * Node memory (mem_alloc_node) comes from one jemalloc arena per NUMA node,
 * created on first use, whose pages are bound (preferred) to that node.
 *
 * Pairing: a block from mem_alloc/mem_zalloc/mem_calloc/mem_realloc goes
 * back with mem_free; one from mem_alloc_aligned with mem_free_aligned; one
 * from mem_alloc_node with mem_free_node.  Never free() a block from here,
 * never mem_free() a block from malloc().  The sizes given to the free
 * functions are the sizes asked for (0 when the caller does not know it).
 *
 * Every function may run on any thread at the same time as any other.
 */
#ifndef RQ_INTERNAL_ALLOC_H
#define RQ_INTERNAL_ALLOC_H

#include <stddef.h>

/* mem_alloc_node(): anywhere (the calling thread's arena). */
#define MEM_NODE_ANY (-1)

void *mem_alloc(size_t size);
void *mem_zalloc(size_t size);
void *mem_calloc(size_t n, size_t size);
void *mem_realloc(void *p, size_t size);
void mem_free(void *p, size_t size);

void *mem_alloc_aligned(size_t align, size_t size);
void mem_free_aligned(void *p, size_t size, size_t align);

void *mem_alloc_node(size_t size, int node);
void mem_free_node(void *p);

/* Introspection for the tests and rqbench's notes (lib/alloc.c). */
const char *mem_backend(void);
int mem_node_arena(int node, unsigned *arena);

#endif /* RQ_INTERNAL_ALLOC_H */
