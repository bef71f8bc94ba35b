/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer harness of rqnbd's parser (examples/nbd/nbd_parse.c): the
 * option headers and NBD_OPT_INFO/GO bodies of the handshake, and the
 * request headers of transmission, exactly as the server calls them.
 *
 * Input: one byte of settings (bit 0: structured replies, bit 1:
 * read-only, bits 2-7: the export size in 512-byte blocks, as a power of
 * two), then records: a selector byte (even: an option header and its
 * data, odd: a request header) followed by the bytes of the record.
 * Besides the sanitizers, it checks what the server relies on: a name
 * found by nbd_info_parse lies inside the option data, and a read or write
 * nbd_req_check accepts is aligned, within max_block and (reads) within
 * the export.  NBD_OPT_LIST/SET_META_CONTEXT bodies: every query
 * nbd_meta_next returns lies inside the option data and there are exactly
 * as many as announced; a BLOCK_STATUS accepted (a context is selected
 * when structured replies are) is aligned, not empty, within the export.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nbd_parse.h"
#include "nbd_proto.h"

#define MAX_OPT 65536u

static void check(int cond)
{
	if (!cond)
		abort();
}

static void meta_option(const uint8_t *p, uint32_t len)
{
	struct nbd_meta_req m;
	const unsigned char *q;
	uint32_t qlen, count = 0;

	if (nbd_meta_parse(p, len, &m))
		return;
	check(m.name == p + 4 && (uint64_t)8 + m.namelen <= len);
	while (nbd_meta_next(&m, &q, &qlen)) {
		check(q >= p && q + qlen <= p + len);
		(void)nbd_meta_match(q, qlen, count & 1);
		count++;
	}
	check(count == m.nqueries);
}

static size_t one_option(const uint8_t *p, size_t n)
{
	struct nbd_info_req ir;
	uint32_t opt, len;

	if (n < 16)
		return n;
	if (nbd_opt_parse(p, &opt, &len))
		return 16;
	p += 16;
	n -= 16;
	if (len > MAX_OPT || len > n)
		len = (uint32_t)n; /* the server skips or refuses these */
	if (opt == NBD_OPT_INFO || opt == NBD_OPT_GO) {
		if (!nbd_info_parse(p, len, &ir)) {
			check(ir.name == p + 4);
			check((uint64_t)4 + ir.namelen <= len);
			(void)nbd_name_match("export", ir.name, ir.namelen);
		}
	}
	if (opt == NBD_OPT_LIST_META_CONTEXT || opt == NBD_OPT_SET_META_CONTEXT)
		meta_option(p, len);
	return 16 + (size_t)len;
}

static size_t one_request(const struct nbd_req_limits *lim, const uint8_t *p, size_t n)
{
	struct nbd_req r;
	uint32_t err;

	if (n < NBD_REQUEST_SIZE)
		return n;
	if (nbd_req_parse(p, &r))
		return NBD_REQUEST_SIZE;
	err = nbd_req_check(lim, &r);
	if (!err && (r.type == NBD_CMD_READ || r.type == NBD_CMD_WRITE)) {
		check(r.len <= lim->max_block);
		check(!(r.offset % lim->min_block) && !(r.len % lim->min_block));
		check(r.offset <= lim->size && r.len <= lim->size - r.offset);
		check(!lim->read_only || r.type == NBD_CMD_READ);
	}
	if (!err && r.type == NBD_CMD_BLOCK_STATUS) {
		check(lim->block_status && r.len);
		check(!(r.offset % lim->min_block) && !(r.len % lim->min_block));
		check(r.offset <= lim->size && r.len <= lim->size - r.offset);
	}
	if (err)
		check(err == NBD_EINVAL || err == NBD_EPERM || err == NBD_ENOSPC);
	return NBD_REQUEST_SIZE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nbd_req_limits lim = {
		.min_block = 512,
		.max_block = 8u << 20,
	};

	if (!size)
		return 0;
	lim.structured = data[0] & 1;
	lim.read_only = data[0] & 2;
	lim.block_status = lim.structured; /* a context needs structured replies */
	lim.size = (uint64_t)512 << ((data[0] >> 2) & 63) % 54;
	data++;
	size--;
	while (size > 1) {
		size_t used = *data & 1 ? one_request(&lim, data + 1, size - 1)
					: one_option(data + 1, size - 1);

		data += 1 + used;
		size -= 1 + used;
	}
	return 0;
}
