/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_pool: bounded, class-based buffers for request data.  See nbd_pool.h.
 *
 * A cached buffer keeps its free-list link in its own first bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "nbd_pool.h"

#define POOL_MIN_SHIFT 12  /* 4 KiB */
#define POOL_CLASSES 20    /* 4 KiB .. 2 GiB */

struct pool_free {
	struct pool_free *next;
};

struct nbd_pool {
	pthread_mutex_t lock;
	uint64_t limit;
	uint64_t mapped;                  /* under lock */
	uint64_t cached;                  /* under lock */
	struct pool_free *free[POOL_CLASSES]; /* under lock */
};

static unsigned pool_class(uint32_t len)
{
	unsigned c = 0;

	while (c < POOL_CLASSES - 1 && ((uint64_t)1 << (POOL_MIN_SHIFT + c)) < len)
		c++;
	return c;
}

uint64_t nbd_pool_class_size(uint32_t len)
{
	return (uint64_t)1 << (POOL_MIN_SHIFT + pool_class(len));
}

int nbd_pool_create(uint64_t limit, struct nbd_pool **out)
{
	struct nbd_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	p->limit = limit;
	*out = p;
	return 0;
}

/* Is there still something to take off the lists? */
static bool pool_over(const struct nbd_pool *p, uint64_t need, uint64_t keep)
{
	return need ? p->mapped + need > p->limit : p->cached > keep;
}

/*
 * Take cached buffers off the lists, largest class first and never of
 * class @spare, while pool_over(@need, @keep): with @need, until @need more
 * bytes fit under the limit; without, until at most @keep bytes are cached.
 * The caller unmaps the returned chain (each buffer's size is in its second
 * word).  Context: under lock.
 */
static struct pool_free *pool_take_cached(struct nbd_pool *p, uint64_t need, uint64_t keep,
					  int spare)
{
	struct pool_free *chain = NULL;
	int c;

	for (c = POOL_CLASSES - 1; c >= 0 && pool_over(p, need, keep); c--) {
		uint64_t sz = (uint64_t)1 << (POOL_MIN_SHIFT + c);

		while (c != spare && p->free[c] && pool_over(p, need, keep)) {
			struct pool_free *f = p->free[c];

			p->free[c] = f->next;
			p->mapped -= sz;
			p->cached -= sz;
			((uint64_t *)f)[1] = sz;
			f->next = chain;
			chain = f;
		}
	}
	return chain;
}

static void pool_unmap_chain(struct pool_free *chain)
{
	while (chain) {
		struct pool_free *next = chain->next;

		munmap(chain, ((uint64_t *)chain)[1]);
		chain = next;
	}
}

void *nbd_pool_get(struct nbd_pool *p, uint32_t len)
{
	unsigned c = pool_class(len);
	uint64_t sz = (uint64_t)1 << (POOL_MIN_SHIFT + c);
	struct pool_free *f, *chain = NULL;
	void *buf;

	pthread_mutex_lock(&p->lock);
	f = p->free[c];
	if (f) {
		p->free[c] = f->next;
		p->cached -= sz;
		pthread_mutex_unlock(&p->lock);
		return f;
	}
	if (p->mapped + sz > p->limit)
		chain = pool_take_cached(p, sz, 0, (int)c);
	if (p->mapped + sz > p->limit) {
		pthread_mutex_unlock(&p->lock);
		pool_unmap_chain(chain);
		return NULL;
	}
	p->mapped += sz;
	pthread_mutex_unlock(&p->lock);
	pool_unmap_chain(chain);

	buf = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		pthread_mutex_lock(&p->lock);
		p->mapped -= sz;
		pthread_mutex_unlock(&p->lock);
		return NULL;
	}
	return buf;
}

void nbd_pool_put(struct nbd_pool *p, void *buf, uint32_t len)
{
	unsigned c = pool_class(len);
	struct pool_free *f = buf;

	pthread_mutex_lock(&p->lock);
	f->next = p->free[c];
	p->free[c] = f;
	p->cached += (uint64_t)1 << (POOL_MIN_SHIFT + c);
	pthread_mutex_unlock(&p->lock);
}

void nbd_pool_trim(struct nbd_pool *p, uint64_t keep)
{
	struct pool_free *chain;

	pthread_mutex_lock(&p->lock);
	chain = pool_take_cached(p, 0, keep, -1);
	pthread_mutex_unlock(&p->lock);
	pool_unmap_chain(chain);
}


void nbd_pool_destroy(struct nbd_pool *p)
{
	if (!p)
		return;
	nbd_pool_trim(p, 0);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
