/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_config: rqnbd's configuration file (rqnbd --config FILE), parsed and
 * checked into plain structs.  The format (doc/nbd.md "Configuration file",
 * rqnbd(1)):
 *
 *   # comment (also ';'), blank lines ignored, "key = value" per line
 *   [server]            listening, limits, the policy for unnamed clients
 *   [export NAME]       one export: backend, queue, scheduler, tunables
 *   [group NAME]        an io group and its weight
 *   [client NAME]       a client, matched by export-name alias or TLS
 *                       identity, put in a group with a priority class
 *
 * Everything a section refers to must exist somewhere in the file (order
 * does not matter).  A bad file gives one error "FILE:LINE: reason" and no
 * configuration; nothing is half applied.
 *
 * What may run at the same time: everything (no global state); a struct
 * nbd_config is not shared until it is complete.
 */
#ifndef NBD_CONFIG_H
#define NBD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_CONF_MAX_EXPORTS 64
#define NBD_CONF_MAX_GROUPS 64
#define NBD_CONF_MAX_CLIENTS 256
#define NBD_CONF_MAX_TUNABLES 16
#define NBD_CONF_NAME_MAX 255     /* export, group and client names */
#define NBD_CONF_ERR_MAX 512

/** enum nbd_conf_backend - where an export's data lives. */
enum nbd_conf_backend {
	NBD_BACKEND_NONE = 0,
	NBD_BACKEND_MEMORY,     /* "memory SIZE" */
	NBD_BACKEND_FILE,       /* "file PATH": a regular file or a block device */
	NBD_BACKEND_PACED,      /* "paced IOPS SIZE": memory, one request at a
				   time, each taking 1/IOPS s: a slow disk */
};

/** struct nbd_conf_tunable - "attr.NAME = VALUE": a queue attribute write. */
struct nbd_conf_tunable {
	char name[64];          /* "nr_requests", "iosched/slice_idle" ... */
	char value[64];
	unsigned line;
};

/** struct nbd_conf_export - one [export NAME] section. */
struct nbd_conf_export {
	char name[NBD_CONF_NAME_MAX + 1];
	char description[256];  /* "" : none given */
	enum nbd_conf_backend backend;
	char path[4096];        /* file */
	uint64_t size;          /* memory, paced: bytes */
	unsigned iops;          /* paced */
	bool read_only;
	bool is_default;        /* "default = yes": the export for "" */
	bool sq;                /* front = sq */
	char sched[64];         /* "" : the library's choice */
	unsigned queues;        /* 0: rqnbd's default */
	unsigned depth;         /* 0: rqnbd's default */
	unsigned max_conns;     /* 0: no limit of its own */
	unsigned ntunables;
	struct nbd_conf_tunable tunables[NBD_CONF_MAX_TUNABLES];
	unsigned line;          /* of its section header */
};

/** struct nbd_conf_group - one [group NAME] section. */
struct nbd_conf_group {
	char name[NBD_CONF_NAME_MAX + 1];
	unsigned weight;        /* 1..1000 */
	unsigned line;
};

/* Priority classes, the values of RQ_IOPRIO_CLASS_*. */
#define NBD_CONF_CLASS_NONE 0
#define NBD_CONF_CLASS_RT 1
#define NBD_CONF_CLASS_BE 2
#define NBD_CONF_CLASS_IDLE 3

/** struct nbd_conf_client - one [client NAME] section. */
struct nbd_conf_client {
	char name[NBD_CONF_NAME_MAX + 1];
	char alias[NBD_CONF_NAME_MAX + 1];  /* export name it connects with;
					       default: NAME */
	char export[NBD_CONF_NAME_MAX + 1]; /* the export it is served */
	char tls_identity[256];  /* "" : not matched by TLS identity */
	int group;               /* index in groups[], -1: the root group */
	unsigned ioclass;        /* NBD_CONF_CLASS_*, 0: BE */
	unsigned level;          /* 0..7 */
	unsigned weight;         /* its context's weight in the group, 0: derived */
	unsigned line;
	char group_name[NBD_CONF_NAME_MAX + 1]; /* as written, resolved to group */
};

/** enum nbd_conf_unnamed - what a client no [client] names gets. */
enum nbd_conf_unnamed {
	NBD_UNNAMED_OWN = 0,    /* its own io context, root group (default) */
	NBD_UNNAMED_GROUP,      /* its own io context in group unnamed_group */
	NBD_UNNAMED_REFUSE,     /* NBD_REP_ERR_POLICY */
};

/** struct nbd_config - a whole file. */
struct nbd_config {
	size_t size;            /* sizeof(struct nbd_config) */
	/* [server] */
	char unix_path[108];    /* "" : none */
	char port[8];           /* "" : none */
	char bind_addr[64];     /* "" : 127.0.0.1 */
	enum nbd_conf_unnamed unnamed;
	int unnamed_group;      /* index, for NBD_UNNAMED_GROUP */
	unsigned unnamed_line;
	char unnamed_group_name[NBD_CONF_NAME_MAX + 1];
	unsigned max_conns;     /* 0: rqnbd's default */
	unsigned max_per_client;
	unsigned conn_requests;
	unsigned nexports, ngroups, nclients;
	struct nbd_conf_export exports[NBD_CONF_MAX_EXPORTS];
	struct nbd_conf_group groups[NBD_CONF_MAX_GROUPS];
	struct nbd_conf_client clients[NBD_CONF_MAX_CLIENTS];
};

/**
 * nbd_config_parse() - parse the text @text (@len bytes) of file @file.
 * @cfg: receives the configuration (allocated by the caller; zeroed here).
 * @err: receives "FILE:LINE: reason" on failure (NBD_CONF_ERR_MAX bytes).
 * Return: 0, or -EINVAL with @err set.
 */
int nbd_config_parse(const char *file, const char *text, size_t len, struct nbd_config *cfg,
		     char *err);

/**
 * nbd_config_load() - read and parse the file at @path.
 * Return: 0; -EINVAL with @err "FILE:LINE: reason"; another -errno with @err
 * "FILE: cannot read: reason".
 */
int nbd_config_load(const char *path, struct nbd_config *cfg, char *err);

/** nbd_config_find_export() - index of export @name, or -1. */
int nbd_config_find_export(const struct nbd_config *cfg, const char *name);

/** nbd_config_default_export() - index of the export "" selects (0 if none says). */
int nbd_config_default_export(const struct nbd_config *cfg);

/**
 * nbd_config_match_client() - the [client] a connection is, or -1.
 * @name: the export name the client asked for.
 * @tls_identity: its TLS identity (certificate DN or PSK username), NULL
 *	without TLS.
 * A client whose tls-identity is set matches by identity (and its alias
 * then only names the export); otherwise by alias.
 */
int nbd_config_match_client(const struct nbd_config *cfg, const char *name,
			    const char *tls_identity);

/**
 * nbd_config_resolve_alias() - the export a client's alias @name stands for.
 * Return: the export's index, or -1 when no client has that alias.
 */
int nbd_config_resolve_alias(const struct nbd_config *cfg, const char *name);

/**
 * nbd_config_default_first() - move the default export to index 0 (the one
 * the empty name selects), keeping the others' order.
 */
void nbd_config_default_first(struct nbd_config *cfg);

/** nbd_config_class_name() - "rt", "be", "idle" for NBD_CONF_CLASS_*. */
const char *nbd_config_class_name(unsigned ioclass);

#endif /* NBD_CONFIG_H */
