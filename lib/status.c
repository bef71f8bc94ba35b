/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Completion status values (rq_status_t, as blk_status_t) and their errno
 * equivalents.
 */
#include <errno.h>

#include <librequest/bio.h>

#include "internal/compiler.h"

/* One row per status: the errno it stands for and its short name. */
struct status_row {
	rq_status_t status;
	int err;            /* positive errno */
	const char *name;
};

static const struct status_row status_table[] = {
	{ RQ_STS_OK, 0, "OK" },
	{ RQ_STS_NOTSUPP, EOPNOTSUPP, "NOTSUPP" },
	{ RQ_STS_TIMEOUT, ETIMEDOUT, "TIMEOUT" },
	{ RQ_STS_NOSPC, ENOSPC, "NOSPC" },
	{ RQ_STS_TRANSPORT, ENOLINK, "TRANSPORT" },
	{ RQ_STS_TARGET, EREMOTEIO, "TARGET" },
	{ RQ_STS_MEDIUM, ENODATA, "MEDIUM" },
	{ RQ_STS_PROTECTION, EILSEQ, "PROTECTION" },
	{ RQ_STS_RESOURCE, ENOMEM, "RESOURCE" },
	{ RQ_STS_DEV_RESOURCE, EBUSY, "DEV_RESOURCE" },
	{ RQ_STS_IOERR, EIO, "IOERR" },
	{ RQ_STS_AGAIN, EAGAIN, "AGAIN" },
	{ RQ_STS_OFFLINE, ENODEV, "OFFLINE" },
	{ RQ_STS_INVAL, EINVAL, "INVAL" },
};

static const struct status_row *status_lookup(rq_status_t status)
{
	for (size_t i = 0; i < ARRAY_SIZE(status_table); i++)
		if (status_table[i].status == status)
			return &status_table[i];
	return NULL;
}

/**
 * rq_status_to_errno() - the negative errno a status stands for.
 * @status: an RQ_STS_* value.
 *
 * Context: any; pure function.
 * Return: 0 for RQ_STS_OK, else a negative errno (-EIO for unknown values).
 */
RQ_EXPORT int rq_status_to_errno(rq_status_t status)
{
	const struct status_row *row = status_lookup(status);

	return row ? -row->err : -EIO;
}

/**
 * rq_errno_to_status() - the status that best stands for an errno.
 * @err: an errno, positive or negative; 0 means success.
 *
 * Context: any; pure function.
 * Return: the matching RQ_STS_* value, RQ_STS_IOERR for unknown errnos.
 */
RQ_EXPORT rq_status_t rq_errno_to_status(int err)
{
	if (err < 0)
		err = -err;
	/* EWOULDBLOCK may equal EAGAIN; ENOTSUP may equal EOPNOTSUPP. */
	if (err == EWOULDBLOCK)
		err = EAGAIN;
	if (err == ENOTSUP)
		err = EOPNOTSUPP;
	for (size_t i = 0; i < ARRAY_SIZE(status_table); i++)
		if (status_table[i].err == err)
			return status_table[i].status;
	return RQ_STS_IOERR;
}

/**
 * rq_status_name() - a short constant name for a status.
 * @status: an RQ_STS_* value.
 *
 * Context: any; pure function.
 * Return: "OK", "IOERR", ...; "UNKNOWN" for values with no name.
 */
RQ_EXPORT const char *rq_status_name(rq_status_t status)
{
	const struct status_row *row = status_lookup(status);

	return row ? row->name : "UNKNOWN";
}
