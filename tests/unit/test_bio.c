/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Bios: the per-thread cache (local and remote puts, owner exit), vectors,
 * advance, clones, chaining and rq_bio_split().
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal/bio.h"

#define FAKE(addr) ((void *)(uintptr_t)(addr))

/* Counts end_io calls and remembers the status seen. */
struct end_record {
	int calls;
	rq_status_t status;
};

static void record_end_io(struct rq_bio *bio)
{
	struct end_record *r = bio->private_data;

	__atomic_add_fetch(&r->calls, 1, __ATOMIC_RELAXED);
	r->status = bio->status;
}

static int teardown_cache(void **state)
{
	(void)state;
	bio_cache_drain();
	return 0;
}

/* A fresh bio is initialised: inline vectors, remaining 1, cache flag. */
static void test_alloc_fields(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(2);

	(void)state;
	assert_non_null(bio);
	assert_ptr_equal(bio->vecs, bio->inline_vecs);
	assert_int_equal(bio->max_vecs, RQ_BIO_INLINE_VECS);
	assert_int_equal(bio->vcnt, 0);
	assert_int_equal(bio->iter.size, 0);
	assert_int_equal(bio->remaining, 1);
	assert_int_equal(bio->status, RQ_STS_OK);
	assert_true(bio->core_flags & RQ_BIOF_ALLOCATED);
	assert_false(bio->core_flags & RQ_BIOF_EXT_VECS);
	assert_null(bio->end_io);
	assert_null(bio->parent);
	rq_bio_put(bio);
}

/* Bios put back on the owner thread come back from the next allocations. */
static void test_alloc_put_reuse(void **state)
{
	struct rq_bio *a[16], *b[16];
	int found;

	(void)state;
	for (int i = 0; i < 16; i++) {
		a[i] = rq_bio_alloc(1);
		assert_non_null(a[i]);
		a[i]->private_data = FAKE(0x1234); /* dirty it: the next user must not see it */
	}
	for (int i = 0; i < 16; i++)
		rq_bio_put(a[i]);
	for (int i = 0; i < 16; i++) {
		b[i] = rq_bio_alloc(RQ_BIO_INLINE_VECS);
		assert_null(b[i]->private_data);
	}
	for (int i = 0; i < 16; i++) {
		found = 0;
		for (int j = 0; j < 16; j++)
			found += a[i] == b[j];
		assert_int_equal(found, 1);
	}
	for (int i = 0; i < 16; i++)
		rq_bio_put(b[i]);
}

/* More vectors than fit inline come from a separate array; 256 are refused. */
static void test_alloc_ext_vecs(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(RQ_BIO_INLINE_VECS + 1);

	(void)state;
	assert_non_null(bio);
	assert_true(bio->core_flags & RQ_BIOF_EXT_VECS);
	assert_ptr_not_equal(bio->vecs, bio->inline_vecs);
	assert_int_equal(bio->max_vecs, RQ_BIO_INLINE_VECS + 1);
	rq_bio_put(bio);

	bio = rq_bio_alloc(255);
	assert_non_null(bio);
	assert_int_equal(bio->max_vecs, 255);
	for (int i = 0; i < 255; i++)
		assert_int_equal(rq_bio_add_vec(bio, FAKE(0x100000 + i * 4096), 4096), 0);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x900000), 4096), -ENOSPC);
	rq_bio_put(bio);

	errno = 0;
	assert_null(rq_bio_alloc(256));
	assert_int_equal(errno, EINVAL);
}

/* add_vec: lengths must be non-zero multiples of 512; full is -ENOSPC; size grows. */
static void test_add_vec(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(2);

	(void)state;
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x1000), 0), -EINVAL);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x1000), 100), -EINVAL);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x1000), 4097), -EINVAL);
	assert_int_equal(bio->vcnt, 0);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x1000), 4096), 0);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x3000), 512), 0);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x5000), 512), 0); /* 4 inline */
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x7000), 512), 0);
	assert_int_equal(rq_bio_add_vec(bio, FAKE(0x9000), 512), -ENOSPC);
	assert_int_equal(bio->vcnt, 4);
	assert_int_equal(bio->iter.size, 4096 + 3 * 512);
	assert_ptr_equal(bio->vecs[1].base, FAKE(0x3000));
	rq_bio_put(bio);
}

/* Caller-memory bios: one inline vector without storage; put ignores them. */
static void test_init_caller_memory(void **state)
{
	struct rq_bvec vecs[8];
	struct rq_bio bio;

	(void)state;
	memset(&bio, 0xa5, sizeof(bio));
	rq_bio_init(&bio, NULL, 0);
	assert_ptr_equal(bio.vecs, bio.inline_vecs);
	assert_int_equal(bio.max_vecs, 1);
	assert_int_equal(bio.remaining, 1);
	assert_null(bio.cache);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x1000), 512), 0);
	assert_int_equal(rq_bio_add_vec(&bio, FAKE(0x2000), 512), -ENOSPC);

	rq_bio_init(&bio, vecs, 8);
	assert_ptr_equal(bio.vecs, vecs);
	assert_int_equal(bio.max_vecs, 8);
	rq_bio_put(&bio); /* ignored: nothing to check but that it survives */
	assert_int_equal(bio.max_vecs, 8);
}

struct put_arg {
	struct rq_bio **bios;
	int nr;
};

static void *put_thread(void *p)
{
	struct put_arg *a = p;

	for (int i = 0; i < a->nr; i++)
		rq_bio_put(a->bios[i]);
	return NULL;
}

/* A put on another thread goes to the owner, whose next allocation reuses it. */
static void test_remote_put_reused(void **state)
{
	struct rq_bio *bios[4], *again[4];
	struct put_arg arg = { bios, 4 };
	pthread_t t;

	(void)state;
	bio_cache_drain(); /* local list empty: the next allocs must take the remote stack */
	for (int i = 0; i < 4; i++)
		bios[i] = rq_bio_alloc(0);
	assert_int_equal(pthread_create(&t, NULL, put_thread, &arg), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int i = 0; i < 4; i++)
		again[i] = rq_bio_alloc(0);
	for (int i = 0; i < 4; i++) {
		int found = 0;

		for (int j = 0; j < 4; j++)
			found += bios[i] == again[j];
		assert_int_equal(found, 1);
	}
	for (int i = 0; i < 4; i++)
		rq_bio_put(again[i]);
}

struct owner_arg {
	struct rq_bio *out[8];
	pthread_barrier_t *bar;
};

/* Allocates bios, keeps some in its cache, hands 8 out and exits. */
static void *owner_thread(void *p)
{
	struct owner_arg *a = p;
	struct rq_bio *kept[4];

	for (int i = 0; i < 4; i++)
		kept[i] = rq_bio_alloc(1);
	for (int i = 0; i < 8; i++)
		a->out[i] = rq_bio_alloc(i < 4 ? 1 : 20);
	for (int i = 0; i < 4; i++)
		rq_bio_put(kept[i]);
	pthread_barrier_wait(a->bar); /* main puts some while we are alive */
	pthread_barrier_wait(a->bar);
	return NULL;
}

/*
 * Bios outlive the thread that allocated them: puts before and after its
 * exit are safe, and the memory (and the cache) is freed (checked by ASan).
 */
static void test_owner_exit(void **state)
{
	struct owner_arg arg;
	pthread_barrier_t bar;
	pthread_t t;

	(void)state;
	pthread_barrier_init(&bar, NULL, 2);
	arg.bar = &bar;
	assert_int_equal(pthread_create(&t, NULL, owner_thread, &arg), 0);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < 3; i++)
		rq_bio_put(arg.out[i]); /* remote stack of a live owner */
	pthread_barrier_wait(&bar);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int i = 3; i < 8; i++)
		rq_bio_put(arg.out[i]); /* owner gone: freed here, last frees the cache */
	pthread_barrier_destroy(&bar);
}

enum { HANDOFF_N = 20000 };

struct handoff {
	struct rq_bio *bios[HANDOFF_N];
	int published; /* atomic: bios[0..published) are ready */
};

/* Puts every bio as soon as it is published. */
static void *consumer_thread(void *p)
{
	struct handoff *h = p;

	for (int i = 0; i < HANDOFF_N; i++) {
		while (__atomic_load_n(&h->published, __ATOMIC_ACQUIRE) <= i)
			sched_yield();
		rq_bio_put(h->bios[i]);
	}
	return NULL;
}

/* Allocates and publishes bios, then exits at once (puts may race the exit). */
static void *producer_thread(void *p)
{
	struct handoff *h = p;

	for (int i = 0; i < HANDOFF_N; i++) {
		h->bios[i] = rq_bio_alloc(i % 8 ? 1 : 9);
		__atomic_store_n(&h->published, i + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/*
 * The owner allocates while another thread puts: remote frees flow back
 * into the owner's allocations, and nothing is lost (checked by ASan/TSan).
 */
static void test_remote_put_concurrent(void **state)
{
	struct handoff *h = calloc(1, sizeof(*h));
	pthread_t t;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, consumer_thread, h), 0);
	producer_thread(h);
	assert_int_equal(pthread_join(t, NULL), 0);
	free(h);
}

/* The allocating thread exits while another thread is still putting its bios. */
static void test_remote_put_racing_exit(void **state)
{
	struct handoff *h = calloc(1, sizeof(*h));
	pthread_t prod, cons;

	(void)state;
	assert_int_equal(pthread_create(&cons, NULL, consumer_thread, h), 0);
	assert_int_equal(pthread_create(&prod, NULL, producer_thread, h), 0);
	assert_int_equal(pthread_join(prod, NULL), 0);
	assert_int_equal(pthread_join(cons, NULL), 0);
	free(h);
}

static void put_in_end_io(struct rq_bio *bio)
{
	struct end_record *r = bio->private_data;

	r->calls++;
	rq_bio_put(bio);
}

/* end_io may put its own bio back. */
static void test_put_from_end_io(void **state)
{
	struct end_record rec = { 0 };
	struct rq_bio *bio = rq_bio_alloc(1), *again;

	(void)state;
	bio->end_io = put_in_end_io;
	bio->private_data = &rec;
	rq_bio_endio(bio);
	assert_int_equal(rec.calls, 1);
	again = rq_bio_alloc(1);
	assert_ptr_equal(again, bio);
	rq_bio_put(again);
}

/* bio_advance moves sector, size and the vector position across vectors. */
static void test_advance(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(3);

	(void)state;
	bio->iter.sector = 100;
	rq_bio_add_vec(bio, FAKE(0x10000), 4096);
	rq_bio_add_vec(bio, FAKE(0x20000), 1024);
	rq_bio_add_vec(bio, FAKE(0x30000), 8192);
	bio_advance(bio, 1024);
	assert_int_equal(bio->iter.sector, 102);
	assert_int_equal(bio->iter.size, 12288);
	assert_int_equal(bio->iter.idx, 0);
	assert_int_equal(bio->iter.done, 1024);
	bio_advance(bio, 3072 + 1024 + 512); /* to the end of vec 0, all of vec 1, into vec 2 */
	assert_int_equal(bio->iter.sector, 111);
	assert_int_equal(bio->iter.idx, 2);
	assert_int_equal(bio->iter.done, 512);
	assert_int_equal(bio->iter.size, 7680);
	bio_advance(bio, 7680);
	assert_int_equal(bio->iter.size, 0);
	assert_int_equal(bio->iter.idx, 3);
	assert_int_equal(bio->iter.done, 0);
	rq_bio_put(bio);
}

/* A clone shares vectors and position, copies op/flags/prio, and cannot grow. */
static void test_clone(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(2), *clone;

	(void)state;
	bio->op = RQ_OP_WRITE;
	bio->opf = RQ_BIO_SYNC | RQ_BIO_FUA;
	bio->ioprio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 1);
	bio->iter.sector = 64;
	bio->private_data = FAKE(0x77);
	rq_bio_add_vec(bio, FAKE(0x10000), 4096);
	rq_bio_add_vec(bio, FAKE(0x20000), 4096);
	bio_advance(bio, 512);

	clone = bio_alloc_clone(bio);
	assert_non_null(clone);
	assert_ptr_equal(clone->vecs, bio->vecs);
	assert_int_equal(clone->vcnt, 2);
	assert_int_equal(clone->op, RQ_OP_WRITE);
	assert_int_equal(clone->opf, RQ_BIO_SYNC | RQ_BIO_FUA);
	assert_int_equal(clone->ioprio, bio->ioprio);
	assert_memory_equal(&clone->iter, &bio->iter, sizeof(bio->iter));
	assert_true(clone->core_flags & RQ_BIOF_CLONED);
	assert_null(clone->private_data);
	assert_null(clone->end_io);
	assert_int_equal(rq_bio_add_vec(clone, FAKE(0x30000), 512), -EINVAL);
	rq_bio_put(clone);
	assert_ptr_equal(bio->vecs[0].base, FAKE(0x10000)); /* still the parent's */
	rq_bio_put(bio);
}

/* Out-of-range splits return NULL and change nothing. */
static void test_split_bounds(void **state)
{
	struct rq_bio *bio = rq_bio_alloc(1), before;

	(void)state;
	bio->iter.sector = 8;
	rq_bio_add_vec(bio, FAKE(0x10000), 4096);
	before = *bio;
	assert_null(rq_bio_split(bio, 0));
	assert_null(rq_bio_split(bio, 8));
	assert_null(rq_bio_split(bio, 9));
	assert_null(rq_bio_split(bio, UINT32_MAX));
	assert_memory_equal(bio, &before, sizeof(before));
	rq_bio_put(bio);
}

/* A split gives a front piece of the asked size; the bio keeps the rest. */
static void test_split_pieces(void **state)
{
	struct end_record rec = { 0 };
	struct rq_bio *bio = rq_bio_alloc(2), *front;

	(void)state;
	bio->op = RQ_OP_READ;
	bio->iter.sector = 1000;
	bio->end_io = record_end_io;
	bio->private_data = &rec;
	rq_bio_add_vec(bio, FAKE(0x10000), 4096);
	rq_bio_add_vec(bio, FAKE(0x40000), 4096);

	front = rq_bio_split(bio, 10);
	assert_non_null(front);
	assert_int_equal(front->iter.sector, 1000);
	assert_int_equal(front->iter.size, 10 * 512);
	assert_int_equal(front->op, RQ_OP_READ);
	assert_ptr_equal(front->parent, bio);
	assert_int_equal(bio->iter.sector, 1010);
	assert_int_equal(bio->iter.size, 6 * 512);
	assert_int_equal(bio->iter.idx, 1);
	assert_int_equal(bio->iter.done, 1024);
	assert_true(bio->core_flags & RQ_BIOF_CHAIN);
	assert_int_equal(bio->remaining, 2);

	rq_bio_endio(bio);      /* the rest first: the front is still out */
	assert_int_equal(rec.calls, 0);
	rq_bio_endio(front);
	assert_int_equal(rec.calls, 1);
	assert_int_equal(rec.status, RQ_STS_OK);
	assert_false(bio->core_flags & RQ_BIOF_CHAIN);
	rq_bio_put(bio);
}

/* Parent end_io runs once, after every piece, with the first error seen. */
static void test_chain_first_error(void **state)
{
	struct end_record rec = { 0 };
	struct rq_bio *bio = rq_bio_alloc(1), *p[3];

	(void)state;
	bio->end_io = record_end_io;
	bio->private_data = &rec;
	rq_bio_add_vec(bio, FAKE(0x10000), 8 * 512);
	for (int i = 0; i < 3; i++) {
		p[i] = rq_bio_split(bio, 2);
		assert_non_null(p[i]);
	}
	assert_int_equal(bio->remaining, 4);
	bio_end_with(p[1], RQ_STS_MEDIUM);
	bio_end_with(p[0], RQ_STS_IOERR);
	rq_bio_endio(p[2]);
	assert_int_equal(rec.calls, 0);
	bio_end_with(bio, RQ_STS_TIMEOUT);
	assert_int_equal(rec.calls, 1);
	assert_int_equal(rec.status, RQ_STS_MEDIUM);
	rq_bio_put(bio);
}

/* Pieces of pieces: the top end_io runs once when the whole tree has ended. */
static void test_chain_nested(void **state)
{
	struct end_record rec = { 0 };
	struct rq_bio *bio = rq_bio_alloc(1), *front, *inner;

	(void)state;
	bio->end_io = record_end_io;
	bio->private_data = &rec;
	rq_bio_add_vec(bio, FAKE(0x10000), 16 * 512);
	front = rq_bio_split(bio, 8);
	inner = rq_bio_split(front, 4); /* front keeps 4, inner takes 4 */
	assert_non_null(inner);
	assert_ptr_equal(inner->parent, front);
	rq_bio_endio(front);
	rq_bio_endio(bio);
	assert_int_equal(rec.calls, 0);
	bio_end_with(inner, RQ_STS_NOSPC);
	assert_int_equal(rec.calls, 1);
	assert_int_equal(rec.status, RQ_STS_NOSPC);
	rq_bio_put(bio);
}

struct end_arg {
	struct rq_bio **pieces;
	int from, to;
	pthread_barrier_t *bar;
};

static void *end_thread(void *p)
{
	struct end_arg *a = p;

	pthread_barrier_wait(a->bar);
	for (int i = a->from; i < a->to; i++)
		bio_end_with(a->pieces[i], i == 37 ? RQ_STS_IOERR : RQ_STS_OK);
	return NULL;
}

/* Pieces ended concurrently from two threads: end_io exactly once, error kept. */
static void test_chain_concurrent(void **state)
{
	enum { N = 128 };
	struct end_record rec = { 0 };
	struct rq_bio *bio = rq_bio_alloc(1), *pieces[N];
	pthread_barrier_t bar;
	struct end_arg a1, a2;
	pthread_t t;

	(void)state;
	bio->end_io = record_end_io;
	bio->private_data = &rec;
	rq_bio_add_vec(bio, FAKE(0x100000), (N + 1) * 512);
	for (int i = 0; i < N; i++)
		pieces[i] = rq_bio_split(bio, 1);
	pthread_barrier_init(&bar, NULL, 2);
	a1 = (struct end_arg){ pieces, 0, N / 2, &bar };
	a2 = (struct end_arg){ pieces, N / 2, N, &bar };
	assert_int_equal(pthread_create(&t, NULL, end_thread, &a1), 0);
	end_thread(&a2);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(rec.calls, 0);
	rq_bio_endio(bio);
	assert_int_equal(rec.calls, 1);
	assert_int_equal(rec.status, RQ_STS_IOERR);
	pthread_barrier_destroy(&bar);
	rq_bio_put(bio);
}

/* bio_end_with keeps an earlier error; OK does not clear it. */
static void test_end_with_first_error(void **state)
{
	struct end_record rec = { 0 };
	struct rq_bio bio;

	(void)state;
	rq_bio_init(&bio, NULL, 0);
	bio.end_io = record_end_io;
	bio.private_data = &rec;
	bio.status = RQ_STS_AGAIN;
	bio_end_with(&bio, RQ_STS_IOERR);
	assert_int_equal(rec.status, RQ_STS_AGAIN);
	bio.status = RQ_STS_OK;
	bio_end_with(&bio, RQ_STS_OK);
	assert_int_equal(rec.status, RQ_STS_OK);
	bio_end_with(&bio, RQ_STS_TARGET);
	assert_int_equal(rec.status, RQ_STS_TARGET);
	assert_int_equal(rec.calls, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_alloc_fields, teardown_cache),
		cmocka_unit_test_teardown(test_alloc_put_reuse, teardown_cache),
		cmocka_unit_test_teardown(test_alloc_ext_vecs, teardown_cache),
		cmocka_unit_test_teardown(test_add_vec, teardown_cache),
		cmocka_unit_test(test_init_caller_memory),
		cmocka_unit_test_teardown(test_remote_put_reused, teardown_cache),
		cmocka_unit_test_teardown(test_owner_exit, teardown_cache),
		cmocka_unit_test_teardown(test_remote_put_concurrent, teardown_cache),
		cmocka_unit_test_teardown(test_remote_put_racing_exit, teardown_cache),
		cmocka_unit_test_teardown(test_put_from_end_io, teardown_cache),
		cmocka_unit_test_teardown(test_advance, teardown_cache),
		cmocka_unit_test_teardown(test_clone, teardown_cache),
		cmocka_unit_test_teardown(test_split_bounds, teardown_cache),
		cmocka_unit_test_teardown(test_split_pieces, teardown_cache),
		cmocka_unit_test_teardown(test_chain_first_error, teardown_cache),
		cmocka_unit_test_teardown(test_chain_nested, teardown_cache),
		cmocka_unit_test_teardown(test_chain_concurrent, teardown_cache),
		cmocka_unit_test(test_end_with_first_error),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
