/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scheduler switching through the "scheduler" attribute
 * (doc/semantics-draft.md, "Scheduler switch"): the listing, unknown names,
 * a scheduler whose init_sched fails, and switching back and forth while
 * two threads submit, with nothing lost or completed twice.  Then the
 * staged switch (lib/mq-sched.c): the scheduler hooks run unfrozen and,
 * through the switching thread's pending view, see their own data and
 * nr_requests while everyone else sees the installed scheduler.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

/* ------------------------------------------- a counting FIFO scheduler */

#define TOY_NAME "switch-toy"
#define FAIL_NAME "switch-enomem"

struct toy_data {
	pthread_mutex_t lock;
	struct rq_list_node list;
};

static atomic_uint toy_inits, toy_exits, toy_exit_nonempty, toy_inserted, toy_dispatched;
static atomic_uint fail_inits;

static int toy_init_sched(struct rq_queue *q, void **data)
{
	struct toy_data *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	rq_list_init(&d->list);
	*data = d;
	atomic_fetch_add(&toy_inits, 1);
	return 0;
}

static void toy_exit_sched(struct rq_queue *q, void *data)
{
	struct toy_data *d = data;

	if (!rq_list_empty(&d->list))
		atomic_fetch_add(&toy_exit_nonempty, 1);
	pthread_mutex_destroy(&d->lock);
	free(d);
	atomic_fetch_add(&toy_exits, 1);
}

/* FIFO helpers shared by the test schedulers: @list under @lock. */
static void fifo_add(pthread_mutex_t *lock, struct rq_list_node *fifo, struct rq_list_node *list,
		     unsigned flags)
{
	pthread_mutex_lock(lock);
	if (flags & RQ_INSERT_AT_HEAD)
		rq_list_splice_init(list, fifo);
	else
		rq_list_splice_tail_init(list, fifo);
	pthread_mutex_unlock(lock);
}

static struct rq_request *fifo_pop(pthread_mutex_t *lock, struct rq_list_node *fifo)
{
	struct rq_request *rq;

	pthread_mutex_lock(lock);
	rq = rq_list_first_rq(fifo);
	if (rq)
		rq_list_del_init(&rq->queuelist);
	pthread_mutex_unlock(lock);
	return rq;
}

static bool fifo_busy(pthread_mutex_t *lock, struct rq_list_node *fifo)
{
	bool work;

	pthread_mutex_lock(lock);
	work = !rq_list_empty(fifo);
	pthread_mutex_unlock(lock);
	return work;
}

static void toy_insert(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	unsigned n = 0;

	for (struct rq_list_node *p = list->next; p != list; p = p->next)
		n++;
	fifo_add(&d->lock, &d->list, list, flags);
	atomic_fetch_add(&toy_inserted, n);
}

static struct rq_request *toy_dispatch(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	struct rq_request *rq = fifo_pop(&d->lock, &d->list);

	if (rq)
		atomic_fetch_add(&toy_dispatched, 1);
	return rq;
}

static bool toy_has_work(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));

	return fifo_busy(&d->lock, &d->list);
}

/*
 * A scheduler whose hw queue hooks check that rq_sched_data()
 * is its own data while they run (a switch builds the new scheduler while
 * the old one is still installed, and retires the old one after).
 */
#define HCTX_CHECK_NAME "switch-hctx-check"

static atomic_uint hctx_hook_calls, hctx_hook_wrong_data;

static void hctx_check(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));

	atomic_fetch_add(&hctx_hook_calls, 1);
	if (!d || rq_sched_hctx_data(hctx) != d)
		atomic_fetch_add(&hctx_hook_wrong_data, 1);
}

static int check_init_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	rq_sched_set_hctx_data(hctx, rq_sched_data(rq_hctx_queue(hctx)));
	hctx_check(hctx);
	return 0;
}

static void check_exit_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	hctx_check(hctx);
}

/*
 * Recording schedulers for the staged switch (lib/mq-sched.c): three types
 * with the same hooks, told apart by a type number baked into each hook.
 * Every hook checks that rq_sched_data() and rq_sched_hctx_data() are its
 * own type's live data (rec_bad counts the hooks that found otherwise);
 * the init and exit hooks also log whether the queue was frozen and what
 * they saw.  Retired data goes to a graveyard, freed at the end of a test,
 * so a hook reaching data already exited finds it marked dead.
 */
enum { REC_A, REC_B, REC_FAIL, REC_NR };
enum { H_INIT_SCHED, H_INIT_HCTX, H_EXIT_HCTX, H_EXIT_SCHED, H_NR };

static const char *const rec_names[REC_NR] = { "switch-rec-a", "switch-rec-b",
					       "switch-rec-fail" };

struct rec_data {
	unsigned type;
	atomic_bool dead;              /* exit_sched ran */
	struct rec_data *grave_next;
};

struct rec_hctx {
	struct rec_data *parent;
	atomic_bool dead;              /* exit_hctx ran */
	pthread_mutex_t lock;
	struct rq_list_node list;
	struct rec_hctx *grave_next;
};

/* One init or exit hook call. */
struct rec_event {
	unsigned type, hook;
	bool frozen;                   /* rq_queue_frozen() */
	bool own;                      /* saw its own data (see rec_log_hook) */
	unsigned nr_requests;          /* rq_queue_nr_requests() */
	unsigned shallow;              /* rq_sched_shallow_depth(hctx, REC_SHALLOW_PROBE) */
};

#define REC_SHALLOW_PROBE 100      /* below the default 128 nr_requests, above 16 */

/*
 * Set by a load test: called by the recorders' init_hctx and exit_hctx
 * (on the switching thread) to wait until other threads made progress
 * through the installed scheduler meanwhile, so a pending view leaking to
 * them would be seen.
 */
static void (*rec_hold)(void);

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rec_event rec_log[64];
static unsigned rec_nlog;
static struct rec_data *rec_grave_data;
static struct rec_hctx *rec_grave_hctx;
static atomic_uint rec_bad, rec_calls[REC_NR][H_NR], rec_dispatched[REC_NR];

static void rec_log_hook(unsigned type, unsigned hook, struct rq_queue *q,
			 struct rq_hw_ctx *hctx, bool own)
{
	struct rec_event ev = {
		.type = type, .hook = hook, .frozen = rq_queue_frozen(q), .own = own,
		.nr_requests = rq_queue_nr_requests(q),
		.shallow = hctx ? rq_sched_shallow_depth(hctx, REC_SHALLOW_PROBE) : 0,
	};

	atomic_fetch_add(&rec_calls[type][hook], 1);
	if (!own)
		atomic_fetch_add(&rec_bad, 1);
	pthread_mutex_lock(&rec_lock);
	if (rec_nlog < sizeof(rec_log) / sizeof(rec_log[0]))
		rec_log[rec_nlog++] = ev;
	pthread_mutex_unlock(&rec_lock);
}

/* Is @d live data of @type? */
static bool rec_is_own(const struct rec_data *d, unsigned type)
{
	return d && d->type == type && !atomic_load(&d->dead);
}

/* The hw queue data of @hctx if it and the queue's data are @type's own, else NULL. */
static struct rec_hctx *rec_own_hctx(unsigned type, struct rq_hw_ctx *hctx)
{
	struct rec_data *d = rq_sched_data(rq_hctx_queue(hctx));
	struct rec_hctx *h = rq_sched_hctx_data(hctx);

	if (!rec_is_own(d, type) || !h || h->parent != d || atomic_load(&h->dead))
		return NULL;
	return h;
}

static int rec_init_sched(unsigned type, struct rq_queue *q, void **data)
{
	struct rec_data *d = calloc(1, sizeof(*d));

	/* nothing of the pending scheduler exists yet: no data of anyone's */
	rec_log_hook(type, H_INIT_SCHED, q, NULL, rq_sched_data(q) == NULL);
	if (!d)
		return -ENOMEM;
	d->type = type;
	*data = d;
	return 0;
}

static void rec_exit_sched(unsigned type, struct rq_queue *q, void *data)
{
	struct rec_data *d = data;

	rec_log_hook(type, H_EXIT_SCHED, q, NULL, rq_sched_data(q) == d && rec_is_own(d, type));
	atomic_store(&d->dead, true);
	pthread_mutex_lock(&rec_lock);
	d->grave_next = rec_grave_data;
	rec_grave_data = d;
	pthread_mutex_unlock(&rec_lock);
}

static int rec_init_hctx(unsigned type, struct rq_hw_ctx *hctx, unsigned idx)
{
	struct rec_data *d = rq_sched_data(rq_hctx_queue(hctx));
	struct rec_hctx *h;
	bool own = rec_is_own(d, type) && rq_sched_hctx_data(hctx) == NULL;

	if (type == REC_FAIL && idx == 1) {
		rec_log_hook(type, H_INIT_HCTX, rq_hctx_queue(hctx), hctx, own);
		return -EIO;
	}
	if (rec_hold)
		rec_hold();
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->parent = d;
	pthread_mutex_init(&h->lock, NULL);
	rq_list_init(&h->list);
	rq_sched_set_hctx_data(hctx, h);
	own = own && rq_sched_hctx_data(hctx) == h;
	rec_log_hook(type, H_INIT_HCTX, rq_hctx_queue(hctx), hctx, own);
	return 0;
}

static void rec_exit_hctx(unsigned type, struct rq_hw_ctx *hctx, unsigned idx)
{
	struct rec_hctx *h = rec_own_hctx(type, hctx);

	rec_log_hook(type, H_EXIT_HCTX, rq_hctx_queue(hctx), hctx, h && rq_list_empty(&h->list));
	if (rec_hold)
		rec_hold();
	if (!h)
		return;
	/* as kyber does: clear the pointer (a write to the retired scheduler's) */
	rq_sched_set_hctx_data(hctx, NULL);
	atomic_store(&h->dead, true);
	pthread_mutex_lock(&rec_lock);
	h->grave_next = rec_grave_hctx;
	rec_grave_hctx = h;
	pthread_mutex_unlock(&rec_lock);
}

/*
 * The hot hooks' hw queue data: on a hw queue whose data is not @type's
 * own, count it and go on with what is there (a broken switch shows up in
 * rec_bad), or abort when there is nothing.
 */
static struct rec_hctx *rec_hot_hctx(unsigned type, struct rq_hw_ctx *hctx)
{
	struct rec_hctx *h = rec_own_hctx(type, hctx);

	if (h)
		return h;
	atomic_fetch_add(&rec_bad, 1);
	h = rq_sched_hctx_data(hctx);
	if (!h) { /* nowhere to keep requests: stop here, saying why */
		fprintf(stderr, "%s: a hot hook on hw queue %u found no hw queue data\n",
			rec_names[type], rq_hctx_index(hctx));
		abort();
	}
	return h;
}

static void rec_insert(unsigned type, struct rq_hw_ctx *hctx, struct rq_list_node *list,
		       unsigned flags)
{
	struct rec_hctx *h = rec_hot_hctx(type, hctx);

	fifo_add(&h->lock, &h->list, list, flags);
}

static struct rq_request *rec_dispatch(unsigned type, struct rq_hw_ctx *hctx)
{
	struct rec_hctx *h = rec_hot_hctx(type, hctx);
	struct rq_request *rq = fifo_pop(&h->lock, &h->list);

	if (rq)
		atomic_fetch_add(&rec_dispatched[type], 1);
	return rq;
}

static bool rec_has_work(unsigned type, struct rq_hw_ctx *hctx)
{
	struct rec_hctx *h = rec_hot_hctx(type, hctx);

	return fifo_busy(&h->lock, &h->list);
}

/* The hooks of type T, each passing T on. */
#define REC_TYPE_HOOKS(T)                                                                     	static int rec_init_sched_##T(struct rq_queue *q, void **data)                        	{ return rec_init_sched(T, q, data); }                                                	static void rec_exit_sched_##T(struct rq_queue *q, void *data)                        	{ rec_exit_sched(T, q, data); }                                                       	static int rec_init_hctx_##T(struct rq_hw_ctx *hctx, unsigned idx)                    	{ return rec_init_hctx(T, hctx, idx); }                                               	static void rec_exit_hctx_##T(struct rq_hw_ctx *hctx, unsigned idx)                   	{ rec_exit_hctx(T, hctx, idx); }                                                      	static void rec_insert_##T(struct rq_hw_ctx *hctx, struct rq_list_node *l, unsigned f) 	{ rec_insert(T, hctx, l, f); }                                                        	static struct rq_request *rec_dispatch_##T(struct rq_hw_ctx *hctx)                    	{ return rec_dispatch(T, hctx); }                                                     	static bool rec_has_work_##T(struct rq_hw_ctx *hctx)                                  	{ return rec_has_work(T, hctx); }
#define REC_TYPE(T)                                                                           	{                                                                                     		RQ_ELV_TYPE_INIT, .name = rec_names[T], .features = RQ_ELV_F_MQ,              		.ops = { .init_sched = rec_init_sched_##T, .exit_sched = rec_exit_sched_##T,  			 .init_hctx = rec_init_hctx_##T, .exit_hctx = rec_exit_hctx_##T,      			 .insert_requests = rec_insert_##T,                                   			 .dispatch_request = rec_dispatch_##T, .has_work = rec_has_work_##T },	}

REC_TYPE_HOOKS(REC_A)
REC_TYPE_HOOKS(REC_B)
REC_TYPE_HOOKS(REC_FAIL)

static void rec_register(void)
{
	const struct rq_elevator_type types[REC_NR] = { REC_TYPE(REC_A), REC_TYPE(REC_B),
							REC_TYPE(REC_FAIL) };

	for (unsigned t = 0; t < REC_NR; t++) {
		int ret = rq_sched_register(&types[t]);

		assert_true(ret == 0 || ret == -EEXIST);
	}
}

/* Forget the log and the counts; free the graveyard. */
static void rec_reset(void)
{
	pthread_mutex_lock(&rec_lock);
	while (rec_grave_data) {
		struct rec_data *d = rec_grave_data;

		rec_grave_data = d->grave_next;
		free(d);
	}
	while (rec_grave_hctx) {
		struct rec_hctx *h = rec_grave_hctx;

		rec_grave_hctx = h->grave_next;
		pthread_mutex_destroy(&h->lock);
		free(h);
	}
	rec_nlog = 0;
	pthread_mutex_unlock(&rec_lock);
	atomic_store(&rec_bad, 0);
	for (unsigned t = 0; t < REC_NR; t++) {
		atomic_store(&rec_dispatched[t], 0);
		for (unsigned k = 0; k < H_NR; k++)
			atomic_store(&rec_calls[t][k], 0);
	}
}

/* Check log entry @i: @type's @hook, unfrozen, own data, @nr_requests in force. */
static void expect_event(unsigned i, unsigned type, unsigned hook, unsigned nr_requests)
{
	const struct rec_event *ev = &rec_log[i];

	assert_true(i < rec_nlog);
	if (ev->type != type || ev->hook != hook)
		fail_msg("event %u: type %u hook %u, expected type %u hook %u", i, ev->type,
			 ev->hook, type, hook);
	if (ev->frozen)
		fail_msg("event %u (type %u hook %u) ran with the queue frozen", i, type, hook);
	if (!ev->own)
		fail_msg("event %u (type %u hook %u) saw data not its own", i, type, hook);
	assert_int_equal(ev->nr_requests, nr_requests);
	/* the probe depth fits in 128 tags (a limit), not in 16 (none needed) */
	if (hook == H_INIT_HCTX || hook == H_EXIT_HCTX)
		assert_int_equal(ev->shallow != 0, nr_requests > REC_SHALLOW_PROBE);
}

static int fail_init_sched(struct rq_queue *q, void **data)
{
	atomic_fetch_add(&fail_inits, 1);
	return -ENOMEM;
}

static void register_scheds(void)
{
	static const struct rq_elevator_type toy = {
		RQ_ELV_TYPE_INIT,
		.name = TOY_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = toy_init_sched,
			.exit_sched = toy_exit_sched,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
	};
	static const struct rq_elevator_type failing = {
		RQ_ELV_TYPE_INIT,
		.name = FAIL_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = fail_init_sched,
			.exit_sched = toy_exit_sched,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
	};
	static const struct rq_elevator_type hctx_checker = {
		RQ_ELV_TYPE_INIT,
		.name = HCTX_CHECK_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = toy_init_sched,
			.exit_sched = toy_exit_sched,
			.init_hctx = check_init_hctx,
			.exit_hctx = check_exit_hctx,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
	};
	int ret;

	rec_register();
	ret = rq_sched_register(&hctx_checker);
	assert_true(ret == 0 || ret == -EEXIST);
	assert_int_equal(fixture_register_fifo(), 0);
	ret = rq_sched_register(&toy);
	assert_true(ret == 0 || ret == -EEXIST);
	ret = rq_sched_register(&failing);
	assert_true(ret == 0 || ret == -EEXIST);
}

static int setup(void **state)
{
	register_scheds();
	return 0;
}

/* --------------------------------------------------------------- helpers */

static struct mock_dev *dev(enum mock_completion c)
{
	struct mock_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = c;
	return mock_create(&cfg, NULL);
}

static void read_sched(struct mock_dev *m, char *buf, size_t len)
{
	int n = rq_queue_attr_get(m->q, "scheduler", buf, len);

	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	assert_int_equal(buf[n - 1], '\n');
}

/* True if @list names @name as a whole word (optionally bracketed). */
static bool has_word(const char *list, const char *word)
{
	size_t wl = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p++) {
		bool start = p == list || p[-1] == ' ' || p[-1] == '[';
		char e = p[wl];

		if (start && (e == ' ' || e == ']' || e == '\n' || e == '\0'))
			return true;
	}
	return false;
}

/* The listing has exactly one bracketed name, @active, and lists @also unbracketed. */
static void expect_active(struct mock_dev *m, const char *active, const char *also)
{
	char buf[512], want[64];
	const char *open;

	read_sched(m, buf, sizeof(buf));
	snprintf(want, sizeof(want), "[%s]", active);
	open = strchr(buf, '[');
	assert_non_null(open);
	assert_null(strchr(open + 1, '['));
	assert_non_null(strstr(buf, want));
	assert_true(has_word(buf, also));
	assert_true(has_word(buf, TOY_NAME));
	assert_true(has_word(buf, FAIL_NAME));
}

static int io_done(struct mock_io *io)
{
	int d;

	pthread_mutex_lock(&io->lock);
	d = io->done;
	pthread_mutex_unlock(&io->lock);
	return d;
}

static char buf4k[4096];

/* ------------------------------------------------------------------ tests */

/*
 * The default queue reads "[none]" with every registered scheduler listed;
 * switching to test-fifo and back moves the brackets; each switch returns 0.
 */
static void test_listing_and_switch(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);

	expect_active(m, "none", FIXTURE_FIFO_NAME);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	expect_active(m, FIXTURE_FIFO_NAME, "none");
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	expect_active(m, "none", FIXTURE_FIFO_NAME);
	mock_destroy(m);
}

/* An unknown (or empty) scheduler name gives -EINVAL and leaves the active one. */
static void test_unknown_name(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "no-such-sched"), -EINVAL);
	expect_active(m, "none", FIXTURE_FIFO_NAME);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "no-such-sched"), -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", ""), -EINVAL);
	expect_active(m, FIXTURE_FIFO_NAME, "none");
	/* and it still schedules I/O */
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	mock_destroy(m);
}

/*
 * After switching to test-fifo the driver still receives requests, and they
 * go through the scheduler; after switching back to none too.
 */
static void test_io_after_switch(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	struct fixture_fifo_stats before, after;

	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	fixture_fifo_stats(&before);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 1000, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(mock_rw(m, RQ_OP_READ, 2000, buf4k, 4096), RQ_STS_OK);
	fixture_fifo_stats(&after);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	assert_true(after.inserted >= before.inserted + 2);
	assert_true(after.dispatched >= before.dispatched + 2);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 3000, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	mock_destroy(m);
}

/*
 * A switch builds the new scheduler before dropping the old: init_sched
 * runs once per switch to the toy, exit_sched once per switch away (on an
 * empty scheduler), and switching none -> toy -> test-fifo -> toy -> none
 * leaves inits == exits.
 */
static void test_init_exit_pairing(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	unsigned i0 = atomic_load(&toy_inits), e0 = atomic_load(&toy_exits);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	assert_int_equal(atomic_load(&toy_inits), i0 + 1);
	assert_int_equal(atomic_load(&toy_exits), e0);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	assert_int_equal(atomic_load(&toy_exits), e0 + 1);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	assert_int_equal(atomic_load(&toy_inits), i0 + 2);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	assert_int_equal(atomic_load(&toy_exits), e0 + 2);
	assert_int_equal(atomic_load(&toy_exit_nonempty), 0);
	mock_destroy(m);
	assert_int_equal(atomic_load(&toy_inits), atomic_load(&toy_exits));
}

/*
 * Switching to a scheduler whose init_sched fails returns that error
 * (-ENOMEM) and leaves the old scheduler active and working: from none, and
 * from the toy (whose instance is not torn down and keeps dispatching).
 */
static void test_failed_init_keeps_old(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	unsigned f0 = atomic_load(&fail_inits), e0, d0;

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FAIL_NAME), -ENOMEM);
	assert_int_equal(atomic_load(&fail_inits), f0 + 1);
	expect_active(m, "none", FIXTURE_FIFO_NAME);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	e0 = atomic_load(&toy_exits);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FAIL_NAME), -ENOMEM);
	expect_active(m, TOY_NAME, "none");
	assert_int_equal(atomic_load(&toy_exits), e0);
	d0 = atomic_load(&toy_dispatched);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 64, buf4k, 4096), RQ_STS_OK);
	assert_true(atomic_load(&toy_dispatched) >= d0 + 1);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	mock_destroy(m); /* with the toy active: destroy exits it */
	assert_int_equal(atomic_load(&toy_inits), atomic_load(&toy_exits));
}

/*
 * A switch waits for requests the driver holds (it freezes): with one held
 * by a DEFER driver, the switch in another thread completes only after the
 * request is ended, and the request ends once with OK.
 */
static void test_switch_waits_for_held(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	struct fx_switch s;
	struct mock_io io;

	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 0, buf4k, 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	fx_switch_start(&s, m->q, FIXTURE_FIFO_NAME);
	/* blocked inside the switch (asleep, not returned) while the request is held */
	assert_true(fx_switch_blocked(&s));
	assert_false(fx_switch_done(&s));
	mock_complete_all(m, RQ_STS_OK);
	assert_true(FX_WAIT_FOR(fx_switch_done(&s), 10000));
	assert_int_equal(fx_switch_join(&s), 0);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	expect_active(m, FIXTURE_FIFO_NAME, "none");

	/* new I/O goes through test-fifo to the (deferring) driver */
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 64, buf4k, 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(io_done(&io), 0);
	mock_complete_all(m, RQ_STS_OK);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	mock_destroy(m);
}

/* -------------------------------------------------- switching under load */

#define LOAD_THREADS 2
#define LOAD_BIOS 20000

struct load {
	struct mock_dev *m;
	atomic_uchar ends[LOAD_THREADS * LOAD_BIOS];
	atomic_uint finished;
	atomic_uint bad;
	atomic_uint alloc_fail;
	atomic_uint submitters_done;
	char buf[LOAD_THREADS][4096];
};

static struct load *load_state;

static void load_end_io(struct rq_bio *bio)
{
	struct load *l = load_state;

	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&l->bad, 1);
	atomic_fetch_add(&l->ends[(uintptr_t)bio->private_data], 1);
	atomic_fetch_add(&l->finished, 1);
	rq_bio_put(bio);
}

static void *load_thread(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;
	struct load *l = load_state;
	unsigned rng = 12345 + t;

	for (unsigned i = 0; i < LOAD_BIOS; i++) {
		struct rq_bio *bio = rq_bio_alloc(1);

		if (!bio || rq_bio_add_vec(bio, l->buf[t], 4096)) {
			atomic_fetch_add(&l->alloc_fail, 1);
			break;
		}
		rng = rng * 1103515245u + 12345u;
		bio->op = (rng >> 16) % 4 ? RQ_OP_WRITE : RQ_OP_READ;
		/* mostly sequential per thread (merges), sometimes a jump */
		bio->iter.sector = ((uint64_t)t << 20) + (uint64_t)i * 8 + /* within 1 GiB */
				   (((rng >> 8) % 16 == 0) ? 4096 : 0);
		bio->iter.size = 4096;
		bio->end_io = load_end_io;
		bio->private_data = (void *)(uintptr_t)(t * LOAD_BIOS + i);
		rq_submit_bio(l->m->q, bio);
	}
	atomic_fetch_add(&l->submitters_done, 1);
	return NULL;
}

/*
 * Run LOAD_THREADS submitters of LOAD_BIOS bios each on @cfg's device
 * (completion on the mock's thread) while this thread switches through
 * @names in turn each time 1..4 x 16 more bios ended: every switch
 * succeeds, every bio ends exactly once with OK (checked once the queue
 * is destroyed, so no late second end_io can hide).  Return: the number
 * of switches made.
 */
static unsigned switch_under_load(const struct mock_config *cfg, const char *const *names,
				  unsigned nr_names)
{
	struct load *l = calloc(1, sizeof(*l));
	pthread_t th[LOAD_THREADS];
	unsigned switches = 0, failures = 0, seen;

	assert_non_null(l);
	l->m = mock_create(cfg, NULL);
	load_state = l;
	for (unsigned t = 0; t < LOAD_THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, load_thread, (void *)(uintptr_t)t), 0);
	while ((atomic_load(&l->submitters_done) < LOAD_THREADS || switches < 2 * nr_names) &&
	       switches < 20000) {
		if (rq_queue_attr_set(l->m->q, "scheduler", names[switches % nr_names]))
			failures++;
		switches++;
		/* the next switch once some I/O went through this scheduler */
		seen = atomic_load(&l->finished);
		assert_true(FX_WAIT_FOR(atomic_load(&l->finished) >= seen + 16 * (1 + switches % 4) ||
				     atomic_load(&l->submitters_done) == LOAD_THREADS, 10000));
	}
	for (unsigned t = 0; t < LOAD_THREADS; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(failures, 0);
	assert_int_equal(atomic_load(&l->alloc_fail), 0);
	assert_true(FX_WAIT_FOR(atomic_load(&l->finished) >= LOAD_THREADS * LOAD_BIOS, 10000));
	print_message("switches: %u\n", switches);
	mock_destroy(l->m);
	for (unsigned i = 0; i < LOAD_THREADS * LOAD_BIOS; i++)
		if (atomic_load(&l->ends[i]) != 1)
			fail_msg("bio %u ended %u times", i, (unsigned)atomic_load(&l->ends[i]));
	assert_int_equal(atomic_load(&l->bad), 0);
	load_state = NULL;
	free(l);
	return switches;
}

/* Switching none <-> test-fifo under load: nothing lost or doubled, test-fifo saw I/O. */
static void test_switch_under_load(void **state)
{
	static const char *const names[] = { FIXTURE_FIFO_NAME, "none" };
	struct mock_config cfg = { .completion = MOCK_COMPLETE_THREAD };
	struct fixture_fifo_stats f0, f1;

	fixture_fifo_stats(&f0);
	assert_true(switch_under_load(&cfg, names, 2) >= 4);
	fixture_fifo_stats(&f1);
	assert_true(f1.inserted > f0.inserted);
}

/*
 * Switching into and out of a scheduler with hw queue hooks, from and to
 * schedulers with data of their own: each init_hctx/exit_hctx call sees
 * its own scheduler's data through rq_sched_data().
 */
static void test_hctx_hooks_see_own_data(void **state)
{
	struct mock_config cfg = { .nr_hw_queues = 2, .completion = MOCK_COMPLETE_INLINE };
	struct mock_dev *m = mock_create(&cfg, NULL);
	static const char *const order[] = { "mq-deadline", HCTX_CHECK_NAME, "kyber",
					     HCTX_CHECK_NAME, "none", HCTX_CHECK_NAME };

	atomic_store(&hctx_hook_calls, 0);
	atomic_store(&hctx_hook_wrong_data, 0);
	for (unsigned i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		assert_int_equal(rq_queue_attr_set(m->q, "scheduler", order[i]), 0);
	mock_destroy(m);
	/* three installs and three retirements (the last at destroy), 2 hw queues each */
	assert_int_equal(atomic_load(&hctx_hook_calls), 12);
	assert_int_equal(atomic_load(&hctx_hook_wrong_data), 0);
}

/* ----------------------------------------------- the staged switch */

#define REC_HW_QUEUES 2

/*
 * rec-a (nr_requests set to 16) -> rec-b: rec-b's init_sched and both
 * init_hctx run before anything of rec-a's exits, with the queue not
 * frozen, seeing no data of anyone's (init_sched), then their own, and
 * the new nr_requests (128, also in rq_sched_shallow_depth()); rec-a's
 * exit_hctx and exit_sched then run unfrozen seeing their own data and
 * rec-a's 16.  Meanwhile (and after) this thread sees the installed one.
 */
static void test_stages_hooks_unfrozen(void **state)
{
	struct mock_config cfg = { .nr_hw_queues = REC_HW_QUEUES, .completion = MOCK_COMPLETE_INLINE };
	struct mock_dev *m = mock_create(&cfg, NULL);
	unsigned i = 0;

	rec_reset();
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", rec_names[REC_A]), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "nr_requests", "16"), 0);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", rec_names[REC_B]), 0);
	assert_int_equal(rq_queue_nr_requests(m->q), 128);
	assert_int_equal(((struct rec_data *)rq_sched_data(m->q))->type, REC_B);

	/* rec-a's own set-up, at 128 */
	expect_event(i++, REC_A, H_INIT_SCHED, 128);
	for (unsigned h = 0; h < REC_HW_QUEUES; h++)
		expect_event(i++, REC_A, H_INIT_HCTX, 128);
	/* the switch: rec-b built first, then rec-a retired */
	expect_event(i++, REC_B, H_INIT_SCHED, 128);
	for (unsigned h = 0; h < REC_HW_QUEUES; h++)
		expect_event(i++, REC_B, H_INIT_HCTX, 128);
	for (unsigned h = 0; h < REC_HW_QUEUES; h++)
		expect_event(i++, REC_A, H_EXIT_HCTX, 16);
	expect_event(i++, REC_A, H_EXIT_SCHED, 16);
	assert_int_equal(rec_nlog, i);

	/* rec-a's exit_hctx cleared its own pointers, not rec-b's: I/O still flows */
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 64, buf4k, 4096), RQ_STS_OK);
	assert_true(atomic_load(&rec_dispatched[REC_B]) >= 1);
	mock_destroy(m);
	assert_int_equal(atomic_load(&rec_bad), 0);
	rec_reset();
}

/* rec_hold for a load: wait (bounded) until 4 more bios ended or no more will come. */
static void rec_hold_for_load(void)
{
	struct load *l = load_state;
	unsigned seen;

	if (!l)
		return;
	seen = atomic_load(&l->finished);
	assert_true(FX_WAIT_FOR(atomic_load(&l->finished) >= seen + 4 ||
				atomic_load(&l->submitters_done) == LOAD_THREADS, 10000));
}

/*
 * Switching rec-a -> rec-b -> none -> rec-b -> rec-a -> test-fifo ... on 2
 * hw queues while 2 threads submit: nothing lost or doubled, and no hook
 * of either recorder, on any thread, ever saw data not its own (the
 * submitters keep seeing the installed scheduler while the switching
 * thread sets up or retires the other: each init_hctx and exit_hctx waits
 * for bios to end through the installed scheduler meanwhile).
 */
static void test_stages_under_load(void **state)
{
	static const char *const names[] = { "switch-rec-a", "switch-rec-b", "none",
					     "switch-rec-b", "switch-rec-a", FIXTURE_FIFO_NAME };
	struct mock_config cfg = { .nr_hw_queues = REC_HW_QUEUES,
				   .completion = MOCK_COMPLETE_THREAD };
	unsigned switches;

	rec_reset();
	rec_hold = rec_hold_for_load;
	switches = switch_under_load(&cfg, names, sizeof(names) / sizeof(names[0]));
	rec_hold = NULL;
	assert_true(switches >= 12);
	assert_int_equal(atomic_load(&rec_bad), 0);
	assert_true(atomic_load(&rec_dispatched[REC_A]) > 0);
	assert_true(atomic_load(&rec_dispatched[REC_B]) > 0);
	for (unsigned t = REC_A; t <= REC_B; t++) {
		assert_int_equal(atomic_load(&rec_calls[t][H_INIT_SCHED]),
				 atomic_load(&rec_calls[t][H_EXIT_SCHED]));
		assert_int_equal(atomic_load(&rec_calls[t][H_INIT_HCTX]),
				 atomic_load(&rec_calls[t][H_EXIT_HCTX]));
	}
	rec_reset();
}

/*
 * rec-a -> rec-fail, whose init_hctx fails on hw queue 1: the switch
 * returns -EIO, rec-fail's exit_hctx ran for hw queue 0 only and its
 * exit_sched once, all unfrozen with its own data; rec-a stays installed
 * with its data untouched (nothing of it exited) and keeps dispatching.
 */
static void test_stages_failed_init_hctx(void **state)
{
	struct mock_config cfg = { .nr_hw_queues = REC_HW_QUEUES, .completion = MOCK_COMPLETE_INLINE };
	struct mock_dev *m = mock_create(&cfg, NULL);
	unsigned d0;

	rec_reset();
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", rec_names[REC_A]), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", rec_names[REC_FAIL]), -EIO);
	expect_active(m, rec_names[REC_A], "none");
	assert_int_equal(atomic_load(&rec_calls[REC_FAIL][H_INIT_SCHED]), 1);
	assert_int_equal(atomic_load(&rec_calls[REC_FAIL][H_INIT_HCTX]), 2);
	assert_int_equal(atomic_load(&rec_calls[REC_FAIL][H_EXIT_HCTX]), 1);
	assert_int_equal(atomic_load(&rec_calls[REC_FAIL][H_EXIT_SCHED]), 1);
	assert_int_equal(atomic_load(&rec_calls[REC_A][H_EXIT_HCTX]), 0);
	assert_int_equal(atomic_load(&rec_calls[REC_A][H_EXIT_SCHED]), 0);
	for (unsigned i = 0; i < rec_nlog; i++)
		if (rec_log[i].frozen || !rec_log[i].own)
			fail_msg("event %u: frozen %d own %d", i, rec_log[i].frozen, rec_log[i].own);
	assert_true(rec_is_own(rq_sched_data(m->q), REC_A));

	/* rec-a still schedules, on both hw queues, with its own hw queue data */
	d0 = atomic_load(&rec_dispatched[REC_A]);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(mock_rw(m, RQ_OP_WRITE, 64 * i, buf4k, 4096), RQ_STS_OK);
	assert_true(atomic_load(&rec_dispatched[REC_A]) >= d0 + 8);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	assert_int_equal(atomic_load(&rec_calls[REC_A][H_EXIT_HCTX]), REC_HW_QUEUES);
	assert_int_equal(atomic_load(&rec_bad), 0);
	mock_destroy(m);
	rec_reset();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listing_and_switch),
		cmocka_unit_test(test_unknown_name),
		cmocka_unit_test(test_io_after_switch),
		cmocka_unit_test(test_init_exit_pairing),
		cmocka_unit_test(test_failed_init_keeps_old),
		cmocka_unit_test(test_switch_waits_for_held),
		cmocka_unit_test(test_switch_under_load),
		cmocka_unit_test(test_hctx_hooks_see_own_data),
		cmocka_unit_test(test_stages_hooks_unfrozen),
		cmocka_unit_test(test_stages_under_load),
		cmocka_unit_test(test_stages_failed_init_hctx),
	};

	/* one test alone (a pattern), e.g. to see each fail with the switch broken */
	cmocka_set_test_filter(getenv("TEST_SWITCH_FILTER"));
	return cmocka_run_group_tests(tests, setup, NULL);
}
