/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Compiler helpers shared by the library's files.  Never installed.
 */
#ifndef RQ_INTERNAL_COMPILER_H
#define RQ_INTERNAL_COMPILER_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

/* Mark a function part of the public ABI (the rest is hidden). */
#define RQ_EXPORT __attribute__((visibility("default")))

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define RQ_CACHELINE 64
#define rq_cacheline_aligned __attribute__((aligned(RQ_CACHELINE)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) RQ_CONTAINER_OF(ptr, type, member)
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define max_t(t, a, b) ((t)(a) > (t)(b) ? (t)(a) : (t)(b))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))

/*
 * A caller's sized struct (its size field first, a uint32_t) into the
 * library's own @dst of @dst_size bytes: the bytes its size covers, zero
 * for the rest; dst's size field then says @dst_size.  Return: 0, or -1
 * when @src's size is below @min_size (this release's first layout).
 */
static inline int rq_copy_sized_in(void *dst, size_t dst_size, const void *src, size_t min_size)
{
	uint32_t src_size = *(const uint32_t *)src;
	size_t n = src_size < dst_size ? src_size : dst_size;
	uint32_t own = (uint32_t)dst_size;

	if (src_size < min_size)
		return -1;
	__builtin_memset(dst, 0, dst_size);
	__builtin_memcpy(dst, src, n);
	__builtin_memcpy(dst, &own, sizeof(own));
	return 0;
}

/* The library's @src of @src_size bytes out to a caller's @dst of @size bytes. */
static inline int rq_copy_sized_out(void *dst, size_t size, const void *src, size_t src_size)
{
	uint32_t n = (uint32_t)(size < src_size ? size : src_size);

	if (size < sizeof(uint32_t))
		return -1;
	__builtin_memcpy(dst, src, n);
	__builtin_memcpy(dst, &n, sizeof(n));
	return 0;
}

/*
 * Set bits of a word.  __builtin_popcountl() becomes a libgcc call unless
 * the target has a popcount instruction (x86-64 before -mpopcnt): count
 * in registers instead.
 */
static inline unsigned rq_popcountl(unsigned long x)
{
#if defined(__POPCNT__) || !defined(__x86_64__) || ULONG_MAX != 0xffffffffffffffffUL
	return (unsigned)__builtin_popcountl(x);
#else
	x = x - ((x >> 1) & 0x5555555555555555UL);
	x = (x & 0x3333333333333333UL) + ((x >> 2) & 0x3333333333333333UL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fUL;
	return (unsigned)((x * 0x0101010101010101UL) >> 56);
#endif
}

/* Relaxed and ordered accesses to plain fields shared between threads. */
#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define LOAD_ACQUIRE(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE_RELEASE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

/*
 * CPUs online, read once per object file: polling for a peer is only worth
 * it with two (a peer on the same CPU needs the CPU the poller would spin on).
 */
static inline unsigned cpus_online(void)
{
	static _Atomic unsigned nr;
	unsigned n = atomic_load_explicit(&nr, memory_order_relaxed);

	if (!n) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		n = c > 0 ? (unsigned)c : 1u;
		atomic_store_explicit(&nr, n, memory_order_relaxed);
	}
	return n;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/*
 * A tiny test-and-test-and-set spinlock for short, mostly uncontended
 * sections (per-CPU software queues, hctx dispatch lists).
 */
typedef struct {
	atomic_int v;
} rq_spinlock_t;

static inline void rq_spin_init(rq_spinlock_t *l)
{
	atomic_init(&l->v, 0);
}

static inline void rq_spin_lock(rq_spinlock_t *l)
{
	for (;;) {
		if (!atomic_exchange_explicit(&l->v, 1, memory_order_acquire))
			return;
		while (atomic_load_explicit(&l->v, memory_order_relaxed))
			cpu_relax();
	}
}

static inline bool rq_spin_trylock(rq_spinlock_t *l)
{
	return !atomic_load_explicit(&l->v, memory_order_relaxed) &&
	       !atomic_exchange_explicit(&l->v, 1, memory_order_acquire);
}

static inline void rq_spin_unlock(rq_spinlock_t *l)
{
	atomic_store_explicit(&l->v, 0, memory_order_release);
}

#endif /* RQ_INTERNAL_COMPILER_H */
