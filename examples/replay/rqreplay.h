/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay: deterministic replay of block I/O traces through
 * librequest's schedulers onto a modelled device (hddsim, flashsim), on
 * the library's virtual clock.
 *
 * A program loads a trace (rq_replay_trace_load: fio iolog v2/v3, blkparse
 * text, blktrace binary, CSV), makes a device model (rq_replay_model_new
 * from a preset, rq_replay_model_set / _load for parameters), fills a
 * struct rq_replay_config (scheduler, tunables, open or closed loop, how
 * streams map to io contexts) and calls rq_replay_run(), which returns a
 * result: per-stream and overall throughput and latency, printable as a
 * table or JSON.  The same trace, configuration and model give the same
 * result, byte for byte.
 *
 * Threads: not thread-safe.  rq_replay_run() takes over the process's
 * librequest service (rq_service_manual()), pins the calling thread to one
 * CPU and installs the library clock for the duration of the run; run one
 * replay at a time per process, before any other librequest queue exists.
 *
 * Every function returns 0 or a negative errno unless it says otherwise.
 */
#ifndef RQREPLAY_H
#define RQREPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- traces */

/** enum rq_replay_op - what one traced I/O does. */
enum rq_replay_op {
	RQ_REPLAY_READ = 0,
	RQ_REPLAY_WRITE = 1,
	RQ_REPLAY_FLUSH = 2,
	RQ_REPLAY_DISCARD = 3,
};

/**
 * struct rq_replay_io - one I/O of a trace.
 * @time_ns: arrival, nanoseconds from the start of the trace.
 * @offset: byte offset on the device (a multiple of 512).
 * @bytes: length (a multiple of 512; 0 for a flush).
 * @op: enum rq_replay_op.
 * @pid: the process that issued it (blktrace, CSV; fio: 0).
 * @file: index of the file it came from (fio iolog), else 0.
 */
struct rq_replay_io {
	uint64_t time_ns;
	uint64_t offset;
	uint32_t bytes;
	uint32_t op;
	uint32_t pid;
	uint32_t file;
};

/** enum rq_replay_format - trace formats. */
enum rq_replay_format {
	RQ_REPLAY_FMT_AUTO = 0,     /* guess from the first bytes / the name */
	RQ_REPLAY_FMT_FIO = 1,      /* fio iolog version 2 or 3 */
	RQ_REPLAY_FMT_BLKPARSE = 2, /* blkparse's default text output, Q events */
	RQ_REPLAY_FMT_BLKTRACE = 3, /* blktrace binary NAME.blktrace.N, Q events */
	RQ_REPLAY_FMT_CSV = 4,      /* time_ns,pid,op,offset,bytes */
};

/** struct rq_replay_trace - a parsed trace.  Opaque. */
struct rq_replay_trace;

/**
 * rq_replay_trace_load() - parse a whole trace file before anything runs.
 * @path: the file; for blktrace binary, NAME (reads NAME.blktrace.0, .1,
 *	...) or one NAME.blktrace.N file (reads all of NAME's).
 * @fmt: the format, or RQ_REPLAY_FMT_AUTO.
 * @out: receives the trace.
 * @err: receives a one-line reason on failure ("FILE:LINE: what"), may be
 *	NULL.
 * @errlen: size of @err.
 *
 * Return: 0; -EINVAL for a malformed trace (the first bad line named in
 * @err; nothing is returned half-parsed), -ENOENT, -ENOMEM.
 */
int rq_replay_trace_load(const char *path, enum rq_replay_format fmt,
			 struct rq_replay_trace **out, char *err, size_t errlen);

/** rq_replay_trace_new() - an empty trace to fill with rq_replay_trace_add(). */
struct rq_replay_trace *rq_replay_trace_new(void);

/**
 * rq_replay_trace_add() - append an I/O.
 * @t: the trace.
 * @io: the I/O (copied); times need not be sorted (the run sorts them,
 *	stably).
 * Return: 0, -EINVAL (offset or length not a multiple of 512, op unknown),
 * -ENOMEM.
 */
int rq_replay_trace_add(struct rq_replay_trace *t, const struct rq_replay_io *io);

/** rq_replay_trace_count() - number of I/Os. */
size_t rq_replay_trace_count(const struct rq_replay_trace *t);

/** rq_replay_trace_io() - the @i-th I/O, in file order (NULL past the end). */
const struct rq_replay_io *rq_replay_trace_io(const struct rq_replay_trace *t, size_t i);

/** rq_replay_trace_file_name() - name of file @idx (fio iolog), or NULL. */
const char *rq_replay_trace_file_name(const struct rq_replay_trace *t, unsigned idx);

/** rq_replay_trace_free() - free a trace (NULL is allowed). */
void rq_replay_trace_free(struct rq_replay_trace *t);

/**
 * rq_replay_trace_write_csv() - write @t in rqreplay's CSV format (which
 * rq_replay_trace_load() reads back to the same I/Os).
 */
int rq_replay_trace_write_csv(const struct rq_replay_trace *t, FILE *f);

/* ------------------------------------------------------------- models */

/** struct rq_replay_model - a device model with its parameters.  Opaque. */
struct rq_replay_model;

/**
 * rq_replay_model_new() - a model from a named preset: "hdd-7200",
 * "hdd-5400", "ssd-sata", "nvme" (rq_replay_model_presets()).
 * Return: 0, -ENOENT for an unknown name, -ENOMEM.
 */
int rq_replay_model_new(const char *preset, struct rq_replay_model **out);

/** rq_replay_model_presets() - the preset names, NULL-terminated. */
const char *const *rq_replay_model_presets(void);

/**
 * rq_replay_model_set() - set one parameter, as "key = value" in a model
 * file: for any model "preset" (starts again from that preset) and
 * "ncq_depth"/"queue_depth"; hdd: capacity_gib, rpm, settle_us,
 * full_stroke_ms, spt_outer, spt_inner, zones, overhead_us, readahead_kib;
 * flash: capacity_gib, channels, dies_per_channel, read_us, program_us,
 * erase_us, xfer_us, host_mbps, overhead_us, write_buffer_kib,
 * pages_per_block, free_blocks, gc_low_blocks, gc_valid_pct.
 * Times may be decimal (read_us = 62.5).
 * Return: 0, -ENOENT (unknown key), -EINVAL (bad value).
 */
int rq_replay_model_set(struct rq_replay_model *m, const char *key, const char *value);

/**
 * rq_replay_model_load() - read a model file: "key = value" lines, '#'
 * comments; a "preset" line first if any.
 * Return: 0; -EINVAL with "FILE:LINE: what" in @err; -ENOENT.
 */
int rq_replay_model_load(struct rq_replay_model *m, const char *path, char *err,
			 size_t errlen);

/** rq_replay_model_print() - every parameter as a model file would hold it. */
void rq_replay_model_print(const struct rq_replay_model *m, FILE *f);

/** rq_replay_model_name() - the preset it came from. */
const char *rq_replay_model_name(const struct rq_replay_model *m);

/** rq_replay_model_free() - free (NULL is allowed). */
void rq_replay_model_free(struct rq_replay_model *m);

/* -------------------------------------------------------------- runs */

/** enum rq_replay_front - request layer front end. */
enum rq_replay_front {
	RQ_REPLAY_FRONT_MQ = 0,
	RQ_REPLAY_FRONT_SQ = 1,
};

/** enum rq_replay_map - what makes a stream (one io context). */
enum rq_replay_map {
	RQ_REPLAY_BY_PID = 0,
	RQ_REPLAY_BY_FILE = 1,
};

/**
 * struct rq_replay_stream_opt - options for the stream with key @key (a
 * pid in decimal, or a file name).
 * @weight: the io context's weight (bfq), 0: default.
 * @group: io group number (1..), 0: the root group.
 * @ioprio: RQ_IOPRIO_VALUE, 0: BE/4.
 */
struct rq_replay_stream_opt {
	const char *key;
	unsigned weight;
	unsigned group;
	uint16_t ioprio;
};

/** struct rq_replay_group_opt - io group @id (1..) and its weight. */
struct rq_replay_group_opt {
	unsigned id;
	unsigned weight;
};

/**
 * struct rq_replay_config - one replay.  Zero fields take the defaults.
 * @size: sizeof(struct rq_replay_config) (RQ_REPLAY_CONFIG_INIT).
 * @sched: scheduler name ("none", "mq-deadline", ...; sq: "noop",
 *	"deadline", "cfq"); NULL: the library's default for the queue.
 * @front: mq or sq.
 * @attrs: NULL-terminated "name=value" strings given to
 *	rq_queue_attr_set() after the queue is made ("iosched/fifo_batch=4",
 *	"nr_requests=64").
 * @closed_loop: ignore timestamps; each stream keeps @depth I/Os in flight.
 * @depth: closed loop: per stream [1].
 * @speed: open loop: time scale (2.0 replays twice as fast) [1.0].
 * @map: streams by pid or by file.
 * @streams, @nr_streams: per-stream options.
 * @groups, @nr_groups: io groups.
 * @blktrace_out: if not NULL, write the simulated run as blktrace binary
 *	file @blktrace_out.blktrace.0 (the replay runs on one CPU; Q at arrival,
 *	D when the device accepts a request, C at completion) for blkparse
 *	and btt.
 * @keep_latencies: keep each I/O's latency for rq_replay_result_latency().
 */
struct rq_replay_config {
	size_t size;
	const char *sched;
	enum rq_replay_front front;
	const char *const *attrs;
	bool closed_loop;
	unsigned depth;
	double speed;
	enum rq_replay_map map;
	const struct rq_replay_stream_opt *streams;
	unsigned nr_streams;
	const struct rq_replay_group_opt *groups;
	unsigned nr_groups;
	const char *blktrace_out;
	bool keep_latencies;
};

#define RQ_REPLAY_CONFIG_INIT .size = sizeof(struct rq_replay_config)

/** struct rq_replay_result - what a run did.  Opaque. */
struct rq_replay_result;

/**
 * rq_replay_run() - replay @t through @cfg onto @m.
 * @err: one-line reason on failure; may be NULL.
 * Return: 0 with *@out set; -EINVAL (bad configuration, unknown scheduler
 * or attribute: @err says which), -EIO (the run could not finish: an I/O
 * failed or the queue stalled), -ENOMEM.
 */
int rq_replay_run(const struct rq_replay_trace *t, const struct rq_replay_model *m,
		  const struct rq_replay_config *cfg, struct rq_replay_result **out,
		  char *err, size_t errlen);

/**
 * struct rq_replay_summary - figures of one stream or of the whole run.
 * Latency is from arrival (Q) to completion (C), nanoseconds.
 */
struct rq_replay_summary {
	char key[64];           /* stream key; "all" for the total */
	uint64_t ios, bytes, reads, writes;
	uint64_t first_ns, last_ns; /* first arrival, last completion (virtual) */
	double mb_per_s;        /* bytes / (last - first), 10^6 B/s */
	double iops;
	uint64_t lat_mean_ns, lat_min_ns, lat_max_ns;
	uint64_t lat_p50_ns, lat_p90_ns, lat_p99_ns, lat_p999_ns;
};

/** rq_replay_result_nr_streams() - how many streams the run had. */
unsigned rq_replay_result_nr_streams(const struct rq_replay_result *r);

/**
 * rq_replay_result_summary() - figures of stream @i (0 ..
 * nr_streams - 1, sorted by key), or of the whole run with @i = -1.
 */
int rq_replay_result_summary(const struct rq_replay_result *r, int i,
			     struct rq_replay_summary *s);

/**
 * rq_replay_result_latency() - latency of the @i-th I/O of the trace (file
 * order), nanoseconds; needs cfg->keep_latencies.
 * Return: the latency; 0 if not kept or @i out of range.
 */
uint64_t rq_replay_result_latency(const struct rq_replay_result *r, size_t i);

/**
 * rq_replay_result_completion() - when the @i-th I/O of the trace (file
 * order) completed, nanoseconds from the start of the replay; needs
 * cfg->keep_latencies.
 * Return: the time; 0 if not kept or @i out of range.
 */
uint64_t rq_replay_result_completion(const struct rq_replay_result *r, size_t i);

/** rq_replay_result_sched() - the scheduler the run used (as the queue named it). */
const char *rq_replay_result_sched(const struct rq_replay_result *r);

/**
 * rq_replay_result_print() - a text table: one row per stream and the
 * total, then the device's counters.
 */
void rq_replay_result_print(const struct rq_replay_result *r, FILE *f);

/**
 * rq_replay_result_json() - the result as one JSON object (no newline at
 * the end): sched, device counters, streams, total, and the latency CDF
 * (@cdf_points points, 0 for none).
 */
void rq_replay_result_json(const struct rq_replay_result *r, FILE *f, unsigned cdf_points);

/**
 * rq_replay_result_cdf() - write the latency CDF of stream @i (-1: all) as
 * "latency_us fraction" lines, one per distinct latency step (at most
 * @points lines, evenly spaced in fraction).
 */
int rq_replay_result_cdf(const struct rq_replay_result *r, int i, FILE *f, unsigned points);

/** rq_replay_result_free() - free (NULL is allowed). */
void rq_replay_result_free(struct rq_replay_result *r);

/* ---------------------------------------------------------- blktrace */

/**
 * struct rq_replay_blk_event - one blktrace event, as struct blk_io_trace
 * (version 7) holds it, in host byte order.
 */
struct rq_replay_blk_event {
	uint32_t sequence;
	uint64_t time_ns;
	uint64_t sector;
	uint32_t bytes;
	uint32_t action;        /* category bits << 16 | RQ_REPLAY_TA_* */
	uint32_t pid;
	uint32_t device;        /* major << 20 | minor */
	uint32_t cpu;
	uint16_t error;
};

/* blktrace action codes (the low 16 bits of action) and categories. */
#define RQ_REPLAY_TA_QUEUE 1
#define RQ_REPLAY_TA_BACKMERGE 2
#define RQ_REPLAY_TA_FRONTMERGE 3
#define RQ_REPLAY_TA_GETRQ 4
#define RQ_REPLAY_TA_ISSUE 7
#define RQ_REPLAY_TA_COMPLETE 8
#define RQ_REPLAY_TA_INSERT 12
#define RQ_REPLAY_TC_READ (1u << 0)
#define RQ_REPLAY_TC_WRITE (1u << 1)
#define RQ_REPLAY_TC_FLUSH (1u << 2)
#define RQ_REPLAY_TC_SYNC (1u << 3)
#define RQ_REPLAY_TC_QUEUE (1u << 4)
#define RQ_REPLAY_TC_ISSUE (1u << 6)
#define RQ_REPLAY_TC_COMPLETE (1u << 7)
#define RQ_REPLAY_TC_DISCARD (1u << 13)

/** struct rq_replay_blk_writer - per-CPU blktrace output files.  Opaque. */
struct rq_replay_blk_writer;

/**
 * rq_replay_blk_open() - create @prefix.blktrace.0 .. .@nr_cpus-1.
 * Return: 0, -errno of the failed open.
 */
int rq_replay_blk_open(const char *prefix, unsigned nr_cpus, struct rq_replay_blk_writer **out);

/**
 * rq_replay_blk_write() - append @ev to the file of ev->cpu (its sequence
 * number is set by the writer, per CPU, from 1).
 */
int rq_replay_blk_write(struct rq_replay_blk_writer *w, const struct rq_replay_blk_event *ev);

/** rq_replay_blk_close() - flush and close; Return: 0 or the first write error. */
int rq_replay_blk_close(struct rq_replay_blk_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* RQREPLAY_H */
