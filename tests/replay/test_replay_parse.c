/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay's trace readers: each format parses what its producer writes
 * (fio iolog v2 and v3, blkparse's default text, blktrace binary, rqreplay
 * CSV), and a malformed input fails the whole load with the file and line
 * (record) of the first bad line, returning no trace.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rqreplay.h"

static char dir[] = "/tmp/rqreplay-parse.XXXXXX";

/* Write @text to DIR/@name; return the path (static buffer). */
static const char *put(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* Load @text as @fmt; expect failure whose message contains @want. */
static void expect_error(const char *text, enum rq_replay_format fmt, const char *want)
{
	struct rq_replay_trace *t = (void *)0x1;
	char err[512] = "";
	int ret = rq_replay_trace_load(put("bad", text), fmt, &t, err, sizeof(err));

	assert_int_equal(ret, -EINVAL);
	assert_ptr_equal(t, (void *)0x1); /* nothing handed back */
	if (!strstr(err, want))
		fail_msg("error \"%s\" does not contain \"%s\"", err, want);
}

static struct rq_replay_trace *load_ok(const char *text, enum rq_replay_format fmt)
{
	struct rq_replay_trace *t = NULL;
	char err[512] = "";

	if (rq_replay_trace_load(put("ok", text), fmt, &t, err, sizeof(err)))
		fail_msg("load failed: %s", err);
	return t;
}

/* fio v3: timestamps in microseconds; files laid out one after another. */
static void fio_v3(void **state)
{
	struct rq_replay_trace *t = load_ok(
		"fio version 3 iolog\n"
		"26 /tmp/a add\n"
		"27 /tmp/b add\n"
		"155 /tmp/a open\n"
		"156 /tmp/b open\n"
		"160 /tmp/a read 61440 4096\n"
		"453 /tmp/b write 8192 8192\n"
		"500 /tmp/a sync\n"
		"544 /tmp/a trim 0 4096\n"
		"717 /tmp/a close\n", RQ_REPLAY_FMT_AUTO);
	const struct rq_replay_io *io;

	(void)state;
	assert_int_equal(rq_replay_trace_count(t), 4);
	io = rq_replay_trace_io(t, 0);
	assert_int_equal(io->time_ns, 160000);
	assert_int_equal(io->op, RQ_REPLAY_READ);
	assert_int_equal(io->offset, 61440);
	assert_int_equal(io->bytes, 4096);
	assert_int_equal(io->file, 0);
	/* /tmp/a reaches 65536 bytes: one MiB; /tmp/b starts after it */
	io = rq_replay_trace_io(t, 1);
	assert_int_equal(io->time_ns, 453000);
	assert_int_equal(io->op, RQ_REPLAY_WRITE);
	assert_int_equal(io->offset, (1 << 20) + 8192);
	assert_int_equal(io->file, 1);
	assert_string_equal(rq_replay_trace_file_name(t, 1), "/tmp/b");
	assert_int_equal(rq_replay_trace_io(t, 2)->op, RQ_REPLAY_FLUSH);
	assert_int_equal(rq_replay_trace_io(t, 3)->op, RQ_REPLAY_DISCARD);
	rq_replay_trace_free(t);
}

/* fio v2: no timestamps; "wait" moves time on (below 100 us ignored, as fio). */
static void fio_v2(void **state)
{
	struct rq_replay_trace *t = load_ok(
		"fio version 2 iolog\n"
		"/dev/x add\n"
		"/dev/x open\n"
		"/dev/x read 0 4096\n"
		"/dev/x wait 50 0\n"
		"/dev/x read 4096 4096\n"
		"/dev/x wait 1500 0\n"
		"/dev/x write 8192 4096\n"
		"/dev/x close\n", RQ_REPLAY_FMT_FIO);

	(void)state;
	assert_int_equal(rq_replay_trace_count(t), 3);
	assert_int_equal(rq_replay_trace_io(t, 0)->time_ns, 0);
	assert_int_equal(rq_replay_trace_io(t, 1)->time_ns, 0);
	assert_int_equal(rq_replay_trace_io(t, 2)->time_ns, 1500000);
	rq_replay_trace_free(t);
}

static void fio_malformed(void **state)
{
	(void)state;
	expect_error("fio version 4 iolog\n", RQ_REPLAY_FMT_FIO, "bad:1: not a fio iolog");
	expect_error("fio version 2 iolog\n/a add\n/a open\n/a read 0\n", RQ_REPLAY_FMT_FIO,
		     "bad:4: expected \"FILENAME read OFFSET LENGTH\"");
	expect_error("fio version 2 iolog\n/a read 0 4096\n", RQ_REPLAY_FMT_FIO,
		     "bad:2: file /a used before it was added");
	expect_error("fio version 3 iolog\n1 /a add\nx /a open\n", RQ_REPLAY_FMT_FIO,
		     "bad:3: expected a timestamp");
	expect_error("fio version 3 iolog\n1 /a add\n2 /a wait 100 0\n", RQ_REPLAY_FMT_FIO,
		     "bad:3: \"wait\" is not allowed");
	expect_error("fio version 2 iolog\n/a add\n/a read 1 4096\n", RQ_REPLAY_FMT_FIO,
		     "bad:3: offset 1 or length 4096 is not a multiple of 512");
	expect_error("fio version 2 iolog\n/a add\n/a frobnicate 0 4096\n", RQ_REPLAY_FMT_FIO,
		     "bad:3: unknown action \"frobnicate\"");
}

/* blkparse: Q events only; the summary after the events is ignored. */
static void blkparse_text(void **state)
{
	struct rq_replay_trace *t = load_ok(
		"  7,0    1        1     0.000000000  4242  Q  WS 2048 + 8 [fio]\n"
		"  7,0    1        2     0.000001000  4242  G  WS 2048 + 8 [fio]\n"
		"  7,0    0        3     0.000250000  4243  Q   R 4096 + 16 [fio]\n"
		"  7,0    0        4     0.000300000  4243  Q  FWS [kworker]\n"
		"  7,0    0        5     0.000400000  4243  C   R 4096 + 16 [0]\n"
		"\n"
		"CPU0 (7,0):\n"
		" Reads Queued:           1,        8KiB\n", RQ_REPLAY_FMT_AUTO);
	const struct rq_replay_io *io;

	(void)state;
	assert_int_equal(rq_replay_trace_count(t), 3);
	io = rq_replay_trace_io(t, 0);
	assert_int_equal(io->op, RQ_REPLAY_WRITE);
	assert_int_equal(io->offset, 2048 * 512);
	assert_int_equal(io->bytes, 8 * 512);
	assert_int_equal(io->pid, 4242);
	io = rq_replay_trace_io(t, 1);
	assert_int_equal(io->time_ns, 250000);
	assert_int_equal(io->op, RQ_REPLAY_READ);
	assert_int_equal(io->pid, 4243);
	assert_int_equal(rq_replay_trace_io(t, 2)->op, RQ_REPLAY_FLUSH);
	rq_replay_trace_free(t);
}

static void blkparse_malformed(void **state)
{
	(void)state;
	expect_error("  7,0    1        1     0.000000000  4242  Q  WS 2048 + 8 [fio]\n"
		     "  7,0    1        2     0.00000100  4242  Q  WS 2048 + 8 [fio]\n",
		     RQ_REPLAY_FMT_BLKPARSE, "bad:2: not a blkparse event line");
	expect_error("  7,0    1        1     0.000000000  4242  Q  WS 2048 - 8 [fio]\n",
		     RQ_REPLAY_FMT_BLKPARSE, "bad:1: Q event: expected \"SECTOR + BLOCKS\"");
	expect_error("  7,0    1        1     0.000000000  4242  G  WS 2048 + 8 [fio]\n",
		     RQ_REPLAY_FMT_BLKPARSE, "no Q events");
}

static void csv(void **state)
{
	struct rq_replay_trace *t = load_ok(
		"time_ns,pid,op,offset,bytes\n"
		"# a comment\n"
		"0,1,R,0,4096\n"
		"1000,2,write,8192,512\n"
		"2000,2,F,0,0\n", RQ_REPLAY_FMT_CSV);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	assert_int_equal(rq_replay_trace_count(t), 3);
	assert_int_equal(rq_replay_trace_io(t, 1)->op, RQ_REPLAY_WRITE);
	assert_int_equal(rq_replay_trace_io(t, 1)->pid, 2);
	assert_int_equal(rq_replay_trace_io(t, 2)->op, RQ_REPLAY_FLUSH);
	/* what the writer writes, the reader reads back */
	assert_int_equal(rq_replay_trace_write_csv(t, f), 0);
	fclose(f);
	assert_string_equal(buf, "time_ns,pid,op,offset,bytes\n0,1,R,0,4096\n"
			    "1000,2,W,8192,512\n2000,2,F,0,0\n");
	free(buf);
	rq_replay_trace_free(t);
}

static void csv_malformed(void **state)
{
	(void)state;
	expect_error("0,1,R,0,4096\n0,1,R,0\n", RQ_REPLAY_FMT_CSV,
		     "bad:2: expected 5 fields");
	expect_error("0,1,R,0,4096\n\n0,1,X,0,4096\n", RQ_REPLAY_FMT_CSV,
		     "bad:3: unknown op \"X\"");
	expect_error("0,1,R,0,4096\n-5,1,R,0,4096\n", RQ_REPLAY_FMT_CSV,
		     "bad:2: a field is not a whole number");
	expect_error("0,1,R,0,0\n", RQ_REPLAY_FMT_CSV, "bad:1: a read or write of 0 bytes");
}

/* blktrace binary: written with the library's writer on two CPUs, read back merged. */
static void blktrace_roundtrip(void **state)
{
	struct rq_replay_blk_writer *w;
	struct rq_replay_trace *t = NULL;
	char prefix[300], err[512] = "";
	struct rq_replay_blk_event ev = { 0 };

	(void)state;
	snprintf(prefix, sizeof(prefix), "%s/rt", dir);
	assert_int_equal(rq_replay_blk_open(prefix, 2, &w), 0);
	ev.action = ((RQ_REPLAY_TC_WRITE | RQ_REPLAY_TC_QUEUE) << 16) | RQ_REPLAY_TA_QUEUE;
	ev.time_ns = 5000000;
	ev.sector = 100;
	ev.bytes = 4096;
	ev.pid = 7;
	ev.cpu = 1;
	assert_int_equal(rq_replay_blk_write(w, &ev), 0);
	ev.action = ((RQ_REPLAY_TC_READ | RQ_REPLAY_TC_QUEUE) << 16) | RQ_REPLAY_TA_QUEUE;
	ev.time_ns = 3000000;
	ev.sector = 200;
	ev.pid = 8;
	ev.cpu = 0;
	assert_int_equal(rq_replay_blk_write(w, &ev), 0);
	ev.action = ((RQ_REPLAY_TC_READ | RQ_REPLAY_TC_ISSUE) << 16) | RQ_REPLAY_TA_ISSUE;
	ev.time_ns = 3500000;
	assert_int_equal(rq_replay_blk_write(w, &ev), 0); /* a D: not workload */
	assert_int_equal(rq_replay_blk_close(w), 0);
	strcat(prefix, ".blktrace.1"); /* naming one per-CPU file reads them all */
	if (rq_replay_trace_load(prefix, RQ_REPLAY_FMT_AUTO, &t, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_equal(rq_replay_trace_count(t), 2);
	/* ordered by time, relative to the first event */
	assert_int_equal(rq_replay_trace_io(t, 0)->time_ns, 0);
	assert_int_equal(rq_replay_trace_io(t, 0)->offset, 200 * 512);
	assert_int_equal(rq_replay_trace_io(t, 0)->op, RQ_REPLAY_READ);
	assert_int_equal(rq_replay_trace_io(t, 1)->time_ns, 2000000);
	assert_int_equal(rq_replay_trace_io(t, 1)->op, RQ_REPLAY_WRITE);
	assert_int_equal(rq_replay_trace_io(t, 1)->pid, 7);
	rq_replay_trace_free(t);
}

static void blktrace_malformed(void **state)
{
	char path[300], err[512] = "";
	struct rq_replay_trace *t = NULL;
	uint32_t rec[12] = { 0x65617407 };
	FILE *f;

	(void)state;
	/* a record cut short */
	snprintf(path, sizeof(path), "%s/cut.blktrace.0", dir);
	f = fopen(path, "wb");
	assert_non_null(f);
	fwrite(rec, 1, 30, f);
	fclose(f);
	assert_int_equal(rq_replay_trace_load(path, RQ_REPLAY_FMT_BLKTRACE, &t, err,
					      sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "cut.blktrace.0:1: record at byte 0 is truncated"));
	/* a wrong version */
	snprintf(path, sizeof(path), "%s/ver.blktrace.0", dir);
	f = fopen(path, "wb");
	assert_non_null(f);
	rec[0] = 0x65617406;
	fwrite(rec, 1, sizeof(rec), f);
	fclose(f);
	assert_int_equal(rq_replay_trace_load(path, RQ_REPLAY_FMT_BLKTRACE, &t, err,
					      sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "ver.blktrace.0:1: record at byte 0: bad magic"));
	assert_null(t);
	snprintf(path, sizeof(path), "%s/none", dir);
	assert_int_equal(rq_replay_trace_load(path, RQ_REPLAY_FMT_BLKTRACE, &t, err,
					      sizeof(err)), -ENOENT);
}

static void model_files(void **state)
{
	struct rq_replay_model *m;
	char err[512] = "";

	(void)state;
	assert_int_equal(rq_replay_model_new("nope", &m), -ENOENT);
	assert_int_equal(rq_replay_model_new("ssd-sata", &m), 0);
	assert_int_equal(rq_replay_model_load(m, put("m.conf", "# flash\nread_us = 62.5\n"
						 "channels=4\n"), err, sizeof(err)), 0);
	assert_int_equal(rq_replay_model_load(m, put("m.conf", "read_us = 62.5\nrpm = 7200\n"),
					      err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "m.conf:2: unknown key \"rpm\""));
	assert_int_equal(rq_replay_model_load(m, put("m.conf", "read_us 62\n"), err,
					      sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "m.conf:1: expected \"key = value\""));
	assert_int_equal(rq_replay_model_set(m, "channels", "-1"), -EINVAL);
	assert_int_equal(rq_replay_model_set(m, "preset", "hdd-7200"), 0);
	assert_int_equal(rq_replay_model_set(m, "rpm", "5400"), 0);
	rq_replay_model_free(m);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) ? -1 : 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fio_v3),
		cmocka_unit_test(fio_v2),
		cmocka_unit_test(fio_malformed),
		cmocka_unit_test(blkparse_text),
		cmocka_unit_test(blkparse_malformed),
		cmocka_unit_test(csv),
		cmocka_unit_test(csv_malformed),
		cmocka_unit_test(blktrace_roundtrip),
		cmocka_unit_test(blktrace_malformed),
		cmocka_unit_test(model_files),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
