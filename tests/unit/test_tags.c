/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scalable bitmap tags: uniqueness under two threads, exhaustion, reserved
 * numbering, shallow and batch allocation, resize, sleeping for a tag, and
 * the preallocated request memory.  Nothing here measures time: waits are
 * bounded only as a backstop against a hang.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <librequest/librequest.h>

#include "internal/request.h"
#include "internal/tags.h"

static const unsigned depths[] = { 1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 63, 64, 65,
				   100, 128, 255, 1000, 4096, 65536 };

/* Take every bit of a bitmap, check each once and in range, then -1. */
static void drain_and_check(struct sbitmap_queue *sbq, unsigned depth, unsigned char *seen)
{
	unsigned i;

	memset(seen, 0, depth);
	for (i = 0; i < depth; i++) {
		int bit = sbq_get(sbq, i % 7);

		assert_true(bit >= 0);
		assert_true((unsigned)bit < depth);
		assert_int_equal(seen[bit], 0);
		seen[bit] = 1;
	}
	assert_int_equal(sbq_get(sbq, 0), -1);
	assert_int_equal(sbq_get(sbq, 3), -1);
	assert_int_equal(sbq_weight(sbq), depth);
}

static void test_all_bits(void **state)
{
	unsigned char *seen = malloc(65536);
	unsigned d, rr;

	assert_non_null(seen);
	for (rr = 0; rr < 2; rr++) {
		for (d = 0; d < sizeof(depths) / sizeof(depths[0]); d++) {
			struct sbitmap_queue sbq;
			unsigned i, depth = depths[d];

			assert_int_equal(sbq_init(&sbq, depth, rr, -1), 0);
			if (depth >= 4)
				assert_true(sbq.sb.map_nr >= 4);
			assert_true(sbq.wake_batch >= 1 && sbq.wake_batch <= 8);
			drain_and_check(&sbq, depth, seen);
			for (i = 0; i < depth; i++)
				sbq_put(&sbq, i, i % 5);
			assert_int_equal(sbq_weight(&sbq), 0);
			/* And again after puts moved the hints around. */
			drain_and_check(&sbq, depth, seen);
			sbq_destroy(&sbq);
		}
	}
	free(seen);
}

static void test_init_errors(void **state)
{
	struct sbitmap_queue sbq;

	assert_int_equal(sbq_init(&sbq, 0, false, -1), -EINVAL);
	assert_int_equal(sbq_init(&sbq, 65537, false, -1), -EINVAL);
	sbq_destroy(&sbq); /* zeroed by the failed init: a no-op */
}

static void test_round_robin_order(void **state)
{
	struct sbitmap_queue sbq;
	int i;

	assert_int_equal(sbq_init(&sbq, 16, true, -1), 0);
	for (i = 0; i < 10; i++)
		assert_int_equal(sbq_get(&sbq, 0), i);
	sbq_put(&sbq, 2, 0);
	sbq_put(&sbq, 3, 0);
	/* The hint moved on: 10..15 first, then the freed ones in order. */
	for (i = 10; i < 16; i++)
		assert_int_equal(sbq_get(&sbq, 0), i);
	assert_int_equal(sbq_get(&sbq, 0), 2);
	assert_int_equal(sbq_get(&sbq, 0), 3);
	assert_int_equal(sbq_get(&sbq, 0), -1);
	sbq_destroy(&sbq);
}

static void test_shallow(void **state)
{
	static const unsigned sdepths[] = { 64, 100, 256, 1024 };
	unsigned d, shallow;

	for (d = 0; d < 4; d++) {
		for (shallow = 1; shallow <= 5; shallow++) {
			struct sbitmap_queue sbq;
			unsigned bpw, got = 0, expect = 0, w;
			int bit;

			assert_int_equal(sbq_init(&sbq, sdepths[d], false, -1), 0);
			bpw = 1u << sbq.sb.shift;
			while ((bit = sbq_get_shallow(&sbq, got, shallow)) >= 0) {
				assert_true(((unsigned)bit & (bpw - 1)) < shallow);
				assert_true((unsigned)bit < sdepths[d]);
				got++;
			}
			for (w = 0; w < sbq.sb.map_nr; w++) {
				unsigned wd = min_t(unsigned, bpw, sdepths[d] - w * bpw);

				expect += min_t(unsigned, wd, shallow);
			}
			assert_int_equal(got, expect);
			assert_int_equal(sbq_weight(&sbq), got);
			/* A shallow user lowers the wake batch to what can free for it. */
			w = min_t(unsigned, sdepths[d], shallow * sbq.sb.map_nr) / SBQ_WAIT_QUEUES;
			w = w < 1 ? 1 : (w > 8 ? 8 : w);
			assert_int_equal(sbq.wake_batch, w);
			/* The rest is still there for full-depth users. */
			while (sbq_get(&sbq, 1) >= 0)
				got++;
			assert_int_equal(got, sdepths[d]);
			sbq_destroy(&sbq);
		}
	}
}

/* Free @n bits of @bits (any words) with one sbq_put_mask() per word; @bits is consumed. */
static void put_by_word(struct sbitmap_queue *sbq, int *bits, unsigned n, unsigned cpu)
{
	unsigned bpw = 1u << sbq->sb.shift;

	for (unsigned j = 0; j < n; j++) {
		unsigned word = (unsigned)bits[j] / bpw;
		unsigned long mask = 0;

		if (bits[j] < 0)
			continue;
		for (unsigned k = j; k < n; k++) {
			if (bits[k] >= 0 && (unsigned)bits[k] / bpw == word) {
				mask |= 1UL << ((unsigned)bits[k] % bpw);
				bits[k] = -1;
			}
		}
		sbq_put_mask(sbq, mask, word * bpw, cpu);
	}
}

static void test_batch(void **state)
{
	static const unsigned bdepths[] = { 1, 7, 64, 100, 1000 };
	unsigned d;

	for (d = 0; d < 5; d++) {
		unsigned depth = bdepths[d];
		struct sbitmap_queue sbq;
		unsigned char *seen = calloc(depth, 1);
		int *bits = malloc(depth * sizeof(int));
		unsigned total = 0, nr = 1, i;
		unsigned long mask;
		unsigned offset;

		assert_int_equal(sbq_init(&sbq, depth, false, -1), 0);
		assert_int_equal(sbq_get_batch(&sbq, 0, 0, &offset), 0);
		while ((mask = sbq_get_batch(&sbq, total, nr, &offset)) != 0) {
			assert_true(__builtin_popcountl(mask) <= (int)nr);
			assert_int_equal(offset & ((1u << sbq.sb.shift) - 1), 0);
			while (mask) {
				unsigned b = offset + __builtin_ctzl(mask);

				assert_true(b < depth);
				assert_int_equal(seen[b], 0);
				seen[b] = 1;
				bits[total++] = (int)b;
				mask &= mask - 1;
			}
			nr = nr % 9 + 1;
		}
		assert_int_equal(total, depth);
		assert_int_equal(sbq_get(&sbq, 0), -1);
		/* Free them in a few batches: nothing may stay set. */
		for (i = 0; i < total; i += 13)
			put_by_word(&sbq, bits + i, min_t(unsigned, 13, total - i), 0);
		assert_int_equal(sbq_weight(&sbq), 0);
		sbq_destroy(&sbq);
		free(seen);
		free(bits);
	}
}

static bool count_bit(unsigned bit, void *arg)
{
	unsigned *n = arg;

	n[0]++;
	n[1] = bit;
	return true;
}

static bool stop_at_first(unsigned bit, void *arg)
{
	*(unsigned *)arg = bit;
	return false;
}

static void test_resize_and_walk(void **state)
{
	struct sbitmap_queue sbq;
	unsigned n[2] = { 0, 0 }, first = ~0u, i;
	int bit;

	assert_int_equal(sbq_init(&sbq, 100, false, -1), 0);
	for (i = 0; i < 100; i++)
		assert_true(sbq_get(&sbq, 0) >= 0);
	sbq_for_each_set(&sbq, count_bit, n);
	assert_int_equal(n[0], 100);
	assert_int_equal(n[1], 99);
	sbq_for_each_set(&sbq, stop_at_first, &first);
	assert_int_equal(first, 0);

	/* Shrink while everything is held: bits above drain out on put. */
	sbq_resize(&sbq, 10);
	assert_int_equal(sbq.sb.depth, 10);
	for (i = 0; i < 100; i++)
		sbq_put(&sbq, i, i);
	assert_int_equal(sbq_weight(&sbq), 0);
	for (i = 0; i < 10; i++) {
		bit = sbq_get(&sbq, i);
		assert_true(bit >= 0 && bit < 10);
	}
	assert_int_equal(sbq_get(&sbq, 0), -1);

	/* Grow past the initial depth: clamped to it. */
	sbq_resize(&sbq, 1000);
	assert_int_equal(sbq.sb.depth, 100);
	for (i = 0; i < 90; i++) {
		bit = sbq_get(&sbq, i);
		assert_true(bit >= 10 && bit < 100);
	}
	assert_int_equal(sbq_get(&sbq, 0), -1);
	sbq_resize(&sbq, 0);
	assert_int_equal(sbq.sb.depth, 1);
	sbq_destroy(&sbq);
}

/* ------------------------------------------------- two threads at once */

#define HAMMER_DEPTH 24
#define HAMMER_ITERS 100000

struct hammer {
	struct sbitmap_queue sbq;
	_Atomic int owner[HAMMER_DEPTH];
	_Atomic unsigned errors;
	_Atomic unsigned gets;
};

struct hammer_arg {
	struct hammer *h;
	int id;
};

static void own(struct hammer *h, unsigned b, int id)
{
	if (b >= HAMMER_DEPTH || atomic_exchange(&h->owner[b], id) != 0)
		atomic_fetch_add(&h->errors, 1);
}

static void disown(struct hammer *h, unsigned b, int id)
{
	if (atomic_exchange(&h->owner[b], 0) != id)
		atomic_fetch_add(&h->errors, 1);
}

static void *hammer_thread(void *p)
{
	struct hammer_arg *a = p;
	struct hammer *h = a->h;
	int held[HAMMER_DEPTH];
	unsigned nheld = 0, i, gets = 0;

	for (i = 0; i < HAMMER_ITERS; i++) {
		unsigned cpu = (unsigned)a->id + (i & 3);
		int bit;

		switch (i % 4) {
		case 0:
		case 1:
			bit = sbq_get(&h->sbq, cpu);
			break;
		case 2:
			bit = sbq_get_shallow(&h->sbq, cpu, 3);
			break;
		default: {
			unsigned off;
			unsigned long m = sbq_get_batch(&h->sbq, cpu, 3, &off);

			bit = -1;
			while (m) {
				unsigned b = off + __builtin_ctzl(m);

				own(h, b, a->id);
				held[nheld++] = (int)b;
				gets++;
				m &= m - 1;
			}
			break;
		}
		}
		if (bit >= 0) {
			own(h, (unsigned)bit, a->id);
			held[nheld++] = bit;
			gets++;
		}
		/* Hold up to a few, then give them back (one batch, or one by one). */
		if (nheld >= 4 || (nheld && (i & 7) == 7)) {
			unsigned j;

			for (j = 0; j < nheld; j++)
				disown(h, (unsigned)held[j], a->id);
			if (i & 8) {
				put_by_word(&h->sbq, held, nheld, cpu);
			} else {
				for (j = 0; j < nheld; j++)
					sbq_put(&h->sbq, (unsigned)held[j], cpu);
			}
			nheld = 0;
		}
	}
	for (i = 0; i < nheld; i++) {
		disown(h, (unsigned)held[i], a->id);
		sbq_put(&h->sbq, (unsigned)held[i], 0);
	}
	atomic_fetch_add(&h->gets, gets);
	return NULL;
}

static void test_two_threads_unique(void **state)
{
	struct hammer *h = calloc(1, sizeof(*h));
	struct hammer_arg args[2];
	pthread_t th[2];
	unsigned rr;

	assert_non_null(h);
	for (rr = 0; rr < 2; rr++) {
		assert_int_equal(sbq_init(&h->sbq, HAMMER_DEPTH, rr, -1), 0);
		for (int i = 0; i < 2; i++) {
			args[i].h = h;
			args[i].id = i + 1;
			assert_int_equal(pthread_create(&th[i], NULL, hammer_thread, &args[i]), 0);
		}
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		assert_int_equal(atomic_load(&h->errors), 0);
		assert_true(atomic_load(&h->gets) > 0);
		assert_int_equal(sbq_weight(&h->sbq), 0);
		sbq_destroy(&h->sbq);
	}
	free(h);
}

/* ------------------------------------------------------ sleeping for a bit */

struct sleeper {
	struct sbitmap_queue *sbq;
	_Atomic bool abort;
	_Atomic int before_sleep_calls;
	int result;
	time_t give_up; /* backstop against a hang, not a timing check */
};

static void sleeper_before(void *arg)
{
	struct sleeper *s = arg;

	atomic_fetch_add(&s->before_sleep_calls, 1);
}

static bool sleeper_abort(void *arg)
{
	struct sleeper *s = arg;

	return atomic_load(&s->abort) || time(NULL) > s->give_up;
}

static void *sleeper_thread(void *p)
{
	struct sleeper *s = p;

	s->result = sbq_wait_get(s->sbq, 0, 0, sleeper_before, sleeper_abort, s);
	return NULL;
}

/* Wait (without a clock) until the sleeper has registered. */
static void wait_for_sleeper(struct sbitmap_queue *sbq)
{
	while (atomic_load(&sbq->ws_active) == 0)
		sched_yield();
}

static void test_wait_wakes_on_put(void **state)
{
	struct sbitmap_queue sbq;
	struct sleeper s = { .sbq = &sbq };
	pthread_t th;
	int i;

	assert_int_equal(sbq_init(&sbq, 4, false, -1), 0);
	/* Free bits: no sleep, no before_sleep. */
	s.give_up = time(NULL) + 30;
	i = sbq_wait_get(&sbq, 0, 0, sleeper_before, sleeper_abort, &s);
	assert_true(i >= 0);
	assert_int_equal(atomic_load(&s.before_sleep_calls), 0);
	sbq_put(&sbq, (unsigned)i, 0);

	for (i = 0; i < 4; i++)
		assert_int_equal(sbq_get(&sbq, 0) >= 0, 1);
	assert_int_equal(pthread_create(&th, NULL, sleeper_thread, &s), 0);
	wait_for_sleeper(&sbq);
	sbq_put(&sbq, 2, 1);
	pthread_join(th, NULL);
	assert_int_equal(s.result, 2);
	assert_int_equal(atomic_load(&s.before_sleep_calls), 1);
	assert_int_equal(atomic_load(&sbq.ws_active), 0);
	sbq_destroy(&sbq);
}

static void test_wait_abort(void **state)
{
	struct sbitmap_queue sbq;
	struct sleeper s = { .sbq = &sbq };
	pthread_t th;
	int i;

	assert_int_equal(sbq_init(&sbq, 2, false, -1), 0);
	for (i = 0; i < 2; i++)
		assert_true(sbq_get(&sbq, 0) >= 0);
	s.give_up = time(NULL) + 30;
	assert_int_equal(pthread_create(&th, NULL, sleeper_thread, &s), 0);
	wait_for_sleeper(&sbq);
	atomic_store(&s.abort, true);
	sbq_wake_all(&sbq);
	pthread_join(th, NULL);
	assert_int_equal(s.result, -1);
	assert_int_equal(sbq_weight(&sbq), 2);
	sbq_destroy(&sbq);
}

/* Several sleepers cycling over few bits: all finish, nothing leaks. */
#define CYCLERS 3
#define CYCLES 3000

struct cycler {
	struct sbitmap_queue *sbq;
	_Atomic int *owner;
	_Atomic unsigned *errors;
	int id;
	time_t give_up;
};

static bool cycler_abort(void *arg)
{
	struct cycler *c = arg;

	return time(NULL) > c->give_up;
}

static void *cycler_thread(void *p)
{
	struct cycler *c = p;
	int i;

	for (i = 0; i < CYCLES; i++) {
		int bit = sbq_wait_get(c->sbq, (unsigned)c->id, 0, NULL, cycler_abort, c);

		if (bit < 0) {
			atomic_fetch_add(c->errors, 1);
			return NULL;
		}
		if (atomic_exchange(&c->owner[bit], c->id) != 0)
			atomic_fetch_add(c->errors, 1);
		if (i & 1)
			sched_yield();
		if (atomic_exchange(&c->owner[bit], 0) != c->id)
			atomic_fetch_add(c->errors, 1);
		sbq_put(c->sbq, (unsigned)bit, (unsigned)c->id);
	}
	return NULL;
}

static void test_wait_cycling(void **state)
{
	struct sbitmap_queue sbq;
	_Atomic int owner[2] = { 0, 0 };
	_Atomic unsigned errors = 0;
	struct cycler c[CYCLERS];
	pthread_t th[CYCLERS];
	int i;

	assert_int_equal(sbq_init(&sbq, 2, false, -1), 0);
	for (i = 0; i < CYCLERS; i++) {
		c[i] = (struct cycler){ &sbq, owner, &errors, i + 1, time(NULL) + 60 };
		assert_int_equal(pthread_create(&th[i], NULL, cycler_thread, &c[i]), 0);
	}
	for (i = 0; i < CYCLERS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&errors), 0);
	assert_int_equal(sbq_weight(&sbq), 0);
	assert_int_equal(atomic_load(&sbq.ws_active), 0);
	sbq_destroy(&sbq);
}

/* ------------------------------------------------------------- rq_tags */

static void test_rq_tags(void **state)
{
	static const int nodes[] = { -1, 0 };
	unsigned n;

	for (n = 0; n < 2; n++) {
		struct rq_tags *tags = rq_tags_alloc(64, 4, request_size(24), false, nodes[n]);
		unsigned char seen[64] = { 0 };
		unsigned i, j;
		int tag;

		assert_non_null(tags);
		assert_int_equal(tags->nr_tags, 64);
		assert_int_equal(tags->nr_reserved, 4);
		assert_int_equal(tags->rq_size % 64, 0);
		assert_true(tags->rq_size >= request_size(24));
		for (i = 0; i < 64; i++) {
			struct rq_request *rq = tags->static_rqs[i];
			unsigned char *p = (unsigned char *)rq;
			unsigned char *pdu;

			assert_non_null(p);
			assert_int_equal((uintptr_t)p % 64, 0);
			assert_null(tags->rqs[i]);
			/* laid out: the payload inside the slot, naming its request */
			pdu = rq_request_pdu(rq);
			assert_true(pdu > p && pdu + 24 <= p + tags->rq_size);
			assert_int_equal((uintptr_t)pdu % 8, 0);
			assert_ptr_equal(rq_request_from_pdu(pdu), rq);
			/* and zeroed but for those two words */
			rq->pdu = NULL;
			rq_priv(rq)->owner = NULL;
			for (j = 0; j < tags->rq_size; j++)
				assert_int_equal(p[j], 0);
			request_layout_init(rq);
			if (i)
				assert_true((unsigned char *)tags->static_rqs[i - 1] + tags->rq_size <= p);
		}

		for (i = 0; i < 4; i++) {
			tag = rq_tags_get_reserved(tags, i);
			assert_true(tag >= 0 && tag < 4);
			assert_int_equal(seen[tag], 0);
			seen[tag] = 1;
		}
		assert_int_equal(rq_tags_get_reserved(tags, 0), -1);
		for (i = 4; i < 64; i++) {
			tag = rq_tags_get(tags, i, 0);
			assert_true(tag >= 4 && tag < 64);
			assert_int_equal(seen[tag], 0);
			seen[tag] = 1;
		}
		assert_int_equal(rq_tags_get(tags, 0, 0), -1);
		rq_tags_put(tags, 1, 0);
		rq_tags_put(tags, 40, 0);
		assert_int_equal(rq_tags_get(tags, 0, 0), 40);
		assert_int_equal(rq_tags_get_reserved(tags, 0), 1);
		for (i = 0; i < 64; i++)
			rq_tags_put(tags, i, i);
		assert_int_equal(sbq_weight(&tags->bitmap), 0);
		assert_int_equal(sbq_weight(&tags->breserved), 0);
		rq_tags_free(tags);
	}
}

static void test_rq_tags_edges(void **state)
{
	struct rq_tags *tags;

	assert_null(rq_tags_alloc(0, 0, 64, false, -1));
	assert_null(rq_tags_alloc(4, 4, 64, false, -1));
	assert_null(rq_tags_alloc(70000, 0, 64, false, -1));

	/* No reserved tags, no requests. */
	tags = rq_tags_alloc(8, 0, 0, true, -1);
	assert_non_null(tags);
	assert_null(tags->rq_mem);
	assert_null(tags->static_rqs[0]);
	assert_int_equal(rq_tags_get_reserved(tags, 0), -1);
	assert_int_equal(rq_tags_get(tags, 0, 0), 0);
	assert_int_equal(rq_tags_get(tags, 0, 0), 1);
	rq_tags_put(tags, 0, 0);
	rq_tags_put(tags, 1, 0);
	rq_tags_free(tags);
	rq_tags_free(NULL);
}

static void test_alloc_node(void **state)
{
	static const size_t sizes[] = { 0, 1, 63, 64, 65, 4096, 1 << 20 };
	static const int nodes[] = { -1, 0, 1000 };
	unsigned s, n;

	for (n = 0; n < 3; n++) {
		for (s = 0; s < 7; s++) {
			unsigned char *p = rq_alloc_node(sizes[s], nodes[n]);
			size_t i;

			assert_non_null(p);
			assert_int_equal((uintptr_t)p % 64, 0);
			for (i = 0; i < sizes[s]; i++)
				assert_int_equal(p[i], 0);
			memset(p, 0xff, sizes[s]);
			rq_free_node(p, sizes[s]);
		}
	}
	rq_free_node(NULL, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_bits),
		cmocka_unit_test(test_init_errors),
		cmocka_unit_test(test_round_robin_order),
		cmocka_unit_test(test_shallow),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_resize_and_walk),
		cmocka_unit_test(test_two_threads_unique),
		cmocka_unit_test(test_wait_wakes_on_put),
		cmocka_unit_test(test_wait_abort),
		cmocka_unit_test(test_wait_cycling),
		cmocka_unit_test(test_rq_tags),
		cmocka_unit_test(test_rq_tags_edges),
		cmocka_unit_test(test_alloc_node),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
