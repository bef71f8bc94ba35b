/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_pool: the bounded pool rqnbd takes request data buffers from (read
 * results waiting to be sent, write payloads being received).
 *
 * Buffers come in power-of-two classes from 4 KiB to 2^31 bytes, each one
 * its own anonymous mapping (mmap), so that giving one back to the system
 * (munmap) returns its memory at once, whatever the malloc arenas do.  The
 * pool never holds more than its limit in buffers, in use or cached: when
 * a class is empty and the limit is reached, cached buffers of other
 * classes are unmapped to make room, and when that is not enough
 * nbd_pool_get() fails and the caller waits (back-pressure).  Cached
 * buffers are kept for reuse, so the steady state maps nothing, until
 * nbd_pool_trim() unmaps them.
 *
 * Every function may be called from any thread at once (one mutex).
 */
#ifndef NBD_POOL_H
#define NBD_POOL_H

#include <stdint.h>

struct nbd_pool;

/** nbd_pool_create() - a pool of at most @limit bytes.  Return: 0, -ENOMEM. */
int nbd_pool_create(uint64_t limit, struct nbd_pool **out);

/** nbd_pool_class_size() - the bytes a buffer for @len bytes occupies. */
uint64_t nbd_pool_class_size(uint32_t len);

/**
 * nbd_pool_get() - a buffer of at least @len (> 0) bytes, page-aligned.
 * Return: the buffer, or NULL when the pool is at its limit (or mmap failed).
 */
void *nbd_pool_get(struct nbd_pool *p, uint32_t len);

/** nbd_pool_put() - give back a buffer that nbd_pool_get() returned for @len. */
void nbd_pool_put(struct nbd_pool *p, void *buf, uint32_t len);

/** nbd_pool_trim() - unmap cached buffers until at most @keep bytes are cached. */
void nbd_pool_trim(struct nbd_pool *p, uint64_t keep);

/** nbd_pool_destroy() - unmap everything (every buffer must be back). */
void nbd_pool_destroy(struct nbd_pool *p);

#endif /* NBD_POOL_H */
