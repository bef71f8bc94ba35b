/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_parse: the parts of rqnbd that read what a client sends, as pure
 * functions over a buffer (no socket, no state), so that a fuzzer can call
 * them directly (tests/fuzz/fuzz_nbd_parse.c) and the server calls the very
 * same code.  Every function here is thread-safe and allocation-free.
 */
#ifndef NBD_PARSE_H
#define NBD_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/** struct nbd_req - a transmission request header, decoded. */
struct nbd_req {
	uint16_t flags;   /* NBD_CMD_FLAG_* */
	uint16_t type;    /* NBD_CMD_* */
	uint64_t cookie;
	uint64_t offset;
	uint32_t len;
};

/** struct nbd_req_limits - what a request is checked against. */
struct nbd_req_limits {
	uint64_t size;        /* export size in bytes */
	uint32_t min_block;   /* alignment of offsets and lengths (power of 2) */
	uint32_t max_block;   /* largest read or write payload */
	bool read_only;
	bool structured;      /* structured replies negotiated (DF allowed) */
	bool block_status;    /* base:allocation selected (BLOCK_STATUS allowed) */
};

/** struct nbd_info_req - the body of NBD_OPT_INFO / NBD_OPT_GO. */
struct nbd_info_req {
	const unsigned char *name; /* points into the option data */
	uint32_t namelen;
	bool want_name;            /* NBD_INFO_NAME requested */
	bool want_desc;            /* NBD_INFO_DESCRIPTION requested */
};

/**
 * struct nbd_meta_req - the body of NBD_OPT_LIST/SET_META_CONTEXT: an
 * export name and a list of queries (each a 32-bit length and the string).
 */
struct nbd_meta_req {
	const unsigned char *name;    /* points into the option data */
	uint32_t namelen;
	uint32_t nqueries;
	const unsigned char *next;    /* the next query (nbd_meta_next()) */
	const unsigned char *end;
};

/**
 * nbd_req_parse() - decode the NBD_REQUEST_SIZE bytes at @p.
 * Return: 0, or -1 when the magic is wrong (the stream is out of sync).
 */
int nbd_req_parse(const unsigned char *p, struct nbd_req *r);

/**
 * nbd_req_check() - check a decoded request against the protocol and export.
 * Return: 0, or the NBD error (NBD_EINVAL, NBD_EPERM, NBD_ENOSPC) to answer.
 */
uint32_t nbd_req_check(const struct nbd_req_limits *lim, const struct nbd_req *r);

/**
 * nbd_req_payload() - bytes of payload that follow this request header on
 * the wire (a write's data, whether or not the write is accepted).
 */
static inline uint32_t nbd_req_payload(const struct nbd_req *r)
{
	return r->type == 1 /* NBD_CMD_WRITE */ ? r->len : 0;
}

/**
 * nbd_opt_parse() - decode a 16-byte option header at @h.
 * Return: 0, or -1 when the magic is wrong.
 */
int nbd_opt_parse(const unsigned char *h, uint32_t *opt, uint32_t *len);

/**
 * nbd_info_parse() - decode NBD_OPT_INFO/GO data (@len bytes at @d).
 * Return: 0, or NBD_REP_ERR_INVALID for a malformed body.
 */
uint32_t nbd_info_parse(const unsigned char *d, uint32_t len, struct nbd_info_req *out);

/**
 * nbd_meta_parse() - decode NBD_OPT_LIST/SET_META_CONTEXT data (@len bytes
 * at @d), checking that the queries fill it exactly.
 * Return: 0, or NBD_REP_ERR_INVALID for a malformed body.
 */
uint32_t nbd_meta_parse(const unsigned char *d, uint32_t len, struct nbd_meta_req *out);

/**
 * nbd_meta_next() - the next query of @m (after nbd_meta_parse() accepted
 * it): *@q and *@qlen.  Return: false when there are no more.
 */
bool nbd_meta_next(struct nbd_meta_req *m, const unsigned char **q, uint32_t *qlen);

/**
 * nbd_meta_match() - does query @q (@qlen bytes) name base:allocation?
 * Exactly, or for a list (@list) also as "base:", the whole namespace.
 */
bool nbd_meta_match(const unsigned char *q, uint32_t qlen, bool list);

/** nbd_name_match() - does @name (@len bytes) name export @ours?  "" does. */
bool nbd_name_match(const char *ours, const unsigned char *name, uint32_t len);

#endif /* NBD_PARSE_H */
