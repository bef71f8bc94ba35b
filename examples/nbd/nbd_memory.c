/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_memory: backend queries of the memory device.  See nbd_memory.h.
 */
#include "nbd_memory.h"
#include "nbd_proto.h"
#include "null_blk.h"

int nbd_memory_block_status(void *backend, uint64_t offset, uint64_t length,
			    struct nbd_extent *ext, unsigned max)
{
	unsigned n = 0;

	while (length && n < max) {
		uint64_t run;
		int data = null_map(backend, offset, length, &run);

		if (data < 0)
			return n ? (int)n : data;
		ext[n++] = (struct nbd_extent){ run, data ? 0 : NBD_STATE_HOLE | NBD_STATE_ZERO };
		offset += run;
		length -= run;
	}
	return (int)n;
}
