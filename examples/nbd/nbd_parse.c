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
		allowed |= NBD_CMD_FLAG_NO_HOLE;
		if (flags & ~allowed || !aligned)
			return NBD_EINVAL;
		if (lim->read_only)
			return NBD_EPERM;
		return in_bounds ? 0 : NBD_ENOSPC;
	case NBD_CMD_CACHE:
		/* not advertised, but some clients send it: a no-op */
		return flags & ~allowed || !in_bounds ? NBD_EINVAL : 0;
	default: /* BLOCK_STATUS without a context, and unknown commands */
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

bool nbd_name_match(const char *ours, const unsigned char *name, uint32_t len)
{
	return !len || (len == strlen(ours) && !memcmp(name, ours, len));
}
