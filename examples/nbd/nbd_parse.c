/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_parse: decoding and checking what a client sends.  See nbd_parse.h.
 */
#include <string.h>

#include "nbd_parse.h"
#include "nbd_proto.h"

int nbd_req_parse(const unsigned char *p, struct nbd_req *r)
{
	if (nbd_get32(p) != NBD_REQUEST_MAGIC)
		return -1;
	r->flags = nbd_get16(p + 4);
	r->type = nbd_get16(p + 6);
	r->cookie = nbd_get64(p + 8);
	r->offset = nbd_get64(p + 16);
	r->len = nbd_get32(p + 24);
	return 0;
}

uint32_t nbd_req_check(const struct nbd_req_limits *lim, const struct nbd_req *r)
{
	uint32_t allowed = NBD_CMD_FLAG_FUA, flags = r->flags;
	uint64_t align = lim->min_block - 1;
	bool in_bounds = r->offset <= lim->size && r->len <= lim->size - r->offset;
	bool aligned = !(r->offset & align) && !(r->len & align);

	switch (r->type) {
	case NBD_CMD_READ:
		if (lim->structured)
			allowed |= NBD_CMD_FLAG_DF;
		if (flags & ~allowed || !aligned || r->len > lim->max_block || !in_bounds)
			return NBD_EINVAL;
		return 0;
	case NBD_CMD_WRITE:
		if (flags & ~allowed || !aligned || r->len > lim->max_block)
			return NBD_EINVAL;
		if (lim->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_ENOSPC;
	case NBD_CMD_FLUSH:
		return flags & ~allowed ? NBD_EINVAL : 0;
	case NBD_CMD_TRIM:
		if (flags & ~allowed)
			return NBD_EINVAL;
		if (lim->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_EINVAL;
	case NBD_CMD_WRITE_ZEROES:
		allowed |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
		if (flags & ~allowed || !aligned)
			return NBD_EINVAL;
		if (lim->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_ENOSPC;
	case NBD_CMD_CACHE:
		return flags & ~allowed || !in_bounds ? NBD_EINVAL : 0;
	case NBD_CMD_BLOCK_STATUS:
		/* only with a context selected; never empty, inside the export */
		if (!lim->block_status || flags & ~NBD_CMD_FLAG_REQ_ONE || !aligned ||
		    !r->len || !in_bounds)
			return NBD_EINVAL;
		return 0;
	default:
		return NBD_EINVAL;
	}
}

int nbd_opt_parse(const unsigned char *h, uint32_t *opt, uint32_t *len)
{
	if (nbd_get64(h) != NBD_OPTS_MAGIC)
		return -1;
	*opt = nbd_get32(h + 8);
	*len = nbd_get32(h + 12);
	return 0;
}

uint32_t nbd_info_parse(const unsigned char *d, uint32_t len, struct nbd_info_req *out)
{
	uint32_t namelen, i;
	uint16_t nreq;

	memset(out, 0, sizeof(*out));
	if (len < 6)
		return NBD_REP_ERR_INVALID;
	namelen = nbd_get32(d);
	if (namelen > len - 6)
		return NBD_REP_ERR_INVALID;
	nreq = nbd_get16(d + 4 + namelen);
	if ((uint64_t)4 + namelen + 2 + 2ull * nreq != len)
		return NBD_REP_ERR_INVALID;
	out->name = d + 4;
	out->namelen = namelen;
	for (i = 0; i < nreq; i++) {
		uint16_t what = nbd_get16(d + 4 + namelen + 2 + 2 * i);

		out->want_name |= what == NBD_INFO_NAME;
		out->want_desc |= what == NBD_INFO_DESCRIPTION;
	}
	return 0;
}

uint32_t nbd_meta_parse(const unsigned char *d, uint32_t len, struct nbd_meta_req *out)
{
	struct nbd_meta_req m;
	const unsigned char *q;
	uint32_t namelen, qlen, i;

	memset(out, 0, sizeof(*out));
	if (len < 8)
		return NBD_REP_ERR_INVALID;
	namelen = nbd_get32(d);
	if (namelen > len - 8)
		return NBD_REP_ERR_INVALID;
	m.name = d + 4;
	m.namelen = namelen;
	m.nqueries = nbd_get32(d + 4 + namelen);
	m.next = d + 8 + namelen;
	m.end = d + len;
	/* each query needs its 4-byte length at least */
	if (m.nqueries > (uint64_t)(m.end - m.next) / 4)
		return NBD_REP_ERR_INVALID;
	*out = m;
	for (i = 0; i < m.nqueries; i++)
		if (!nbd_meta_next(&m, &q, &qlen))
			return NBD_REP_ERR_INVALID;
	if (m.next != m.end)
		return NBD_REP_ERR_INVALID;
	return 0;
}

bool nbd_meta_next(struct nbd_meta_req *m, const unsigned char **q, uint32_t *qlen)
{
	uint32_t n;

	if (m->end - m->next < 4)
		return false;
	n = nbd_get32(m->next);
	if (n > (uint64_t)(m->end - m->next) - 4)
		return false;
	*q = m->next + 4;
	*qlen = n;
	m->next += 4 + (size_t)n;
	return true;
}

bool nbd_meta_match(const unsigned char *q, uint32_t qlen, bool list)
{
	static const char full[] = NBD_META_BASE_ALLOCATION;

	if (qlen == sizeof(full) - 1 && !memcmp(q, full, qlen))
		return true;
	return list && qlen == 5 && !memcmp(q, "base:", 5);
}

bool nbd_name_match(const char *ours, const unsigned char *name, uint32_t len)
{
	return !len || (len == strlen(ours) && !memcmp(name, ours, len));
}
