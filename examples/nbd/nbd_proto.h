/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The NBD wire protocol, as rqnbd speaks it: magic numbers, flags, option,
 * command, reply and error values.  Written from the protocol description
 * (doc/proto.md of the NBD project); every value is big-endian on the wire.
 */
#ifndef NBD_PROTO_H
#define NBD_PROTO_H

#include <stdint.h>

/* ---------------------------------------------------------------- handshake */

#define NBD_INIT_MAGIC 0x4e42444d41474943ull   /* "NBDMAGIC" */
#define NBD_OPTS_MAGIC 0x49484156454f5054ull   /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ull    /* option replies */

/* Handshake flags (server, 16 bits). */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)

/* Client flags (32 bits). */
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES (1u << 1)

/* Transmission flags (16 bits). */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_ROTATIONAL (1u << 4)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_RESIZE (1u << 9)
#define NBD_FLAG_SEND_CACHE (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO (1u << 11)

/* Options. */
#define NBD_OPT_EXPORT_NAME 1
#define NBD_OPT_ABORT 2
#define NBD_OPT_LIST 3
#define NBD_OPT_STARTTLS 5
#define NBD_OPT_INFO 6
#define NBD_OPT_GO 7
#define NBD_OPT_STRUCTURED_REPLY 8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT 10
#define NBD_OPT_EXTENDED_HEADERS 11

/* Option reply types; errors have bit 31 set. */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_ERR(n) ((1u << 31) | (n))
#define NBD_REP_ERR_UNSUP NBD_REP_ERR(1)
#define NBD_REP_ERR_POLICY NBD_REP_ERR(2)
#define NBD_REP_ERR_INVALID NBD_REP_ERR(3)
#define NBD_REP_ERR_PLATFORM NBD_REP_ERR(4)
#define NBD_REP_ERR_TLS_REQD NBD_REP_ERR(5)
#define NBD_REP_ERR_UNKNOWN NBD_REP_ERR(6)
#define NBD_REP_ERR_SHUTDOWN NBD_REP_ERR(7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD NBD_REP_ERR(8)
#define NBD_REP_ERR_TOO_BIG NBD_REP_ERR(9)

/* Information types of NBD_REP_INFO (NBD_OPT_INFO / NBD_OPT_GO). */
#define NBD_INFO_EXPORT 0
#define NBD_INFO_NAME 1
#define NBD_INFO_DESCRIPTION 2
#define NBD_INFO_BLOCK_SIZE 3

/* ------------------------------------------------------------- transmission */

#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

#define NBD_REQUEST_SIZE 28       /* magic, flags, type, cookie, offset, length */
#define NBD_SIMPLE_REPLY_SIZE 16  /* magic, error, cookie */
#define NBD_CHUNK_HEADER_SIZE 20  /* magic, flags, type, cookie, length */

/* Commands. */
#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2
#define NBD_CMD_FLUSH 3
#define NBD_CMD_TRIM 4
#define NBD_CMD_CACHE 5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7

/* Command flags. */
#define NBD_CMD_FLAG_FUA (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_DF (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)

/* Structured reply flags and chunk types. */
#define NBD_REPLY_FLAG_DONE (1u << 0)
#define NBD_REPLY_TYPE_NONE 0
#define NBD_REPLY_TYPE_OFFSET_DATA 1
#define NBD_REPLY_TYPE_OFFSET_HOLE 2
#define NBD_REPLY_TYPE_BLOCK_STATUS 5
#define NBD_REPLY_TYPE_ERROR ((1u << 15) | 1)
#define NBD_REPLY_TYPE_ERROR_OFFSET ((1u << 15) | 2)

/* Block status: the base:allocation context (its id in our replies) and
 * the flags of its descriptors. */
#define NBD_META_BASE_ALLOCATION "base:allocation"
#define NBD_META_ID_ALLOCATION 1u
#define NBD_STATE_HOLE (1u << 0)   /* not allocated */
#define NBD_STATE_ZERO (1u << 1)   /* reads as zeros */
#define NBD_BS_DESC_SIZE 8         /* length, flags */

/* Error values (not the host's errno values, though they match Linux). */
#define NBD_EPERM 1
#define NBD_EIO 5
#define NBD_ENOMEM 12
#define NBD_EINVAL 22
#define NBD_ENOSPC 28
#define NBD_EOVERFLOW 75
#define NBD_ENOTSUP 95
#define NBD_ESHUTDOWN 108

/* --------------------------------------------------------- byte order */

static inline void nbd_put16(unsigned char *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static inline void nbd_put32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static inline void nbd_put64(unsigned char *p, uint64_t v)
{
	nbd_put32(p, v >> 32);
	nbd_put32(p + 4, (uint32_t)v);
}

static inline uint16_t nbd_get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t nbd_get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t nbd_get64(const unsigned char *p)
{
	return (uint64_t)nbd_get32(p) << 32 | nbd_get32(p + 4);
}

#endif /* NBD_PROTO_H */
