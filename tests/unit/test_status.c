/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Status values: errno mapping both ways and names.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <librequest/bio.h>

static const struct {
	rq_status_t status;
	int err;
	const char *name;
} expected[] = {
	{ RQ_STS_OK, 0, "OK" },
	{ RQ_STS_NOTSUPP, -EOPNOTSUPP, "NOTSUPP" },
	{ RQ_STS_TIMEOUT, -ETIMEDOUT, "TIMEOUT" },
	{ RQ_STS_NOSPC, -ENOSPC, "NOSPC" },
	{ RQ_STS_TRANSPORT, -ENOLINK, "TRANSPORT" },
	{ RQ_STS_TARGET, -EREMOTEIO, "TARGET" },
	{ RQ_STS_MEDIUM, -ENODATA, "MEDIUM" },
	{ RQ_STS_PROTECTION, -EILSEQ, "PROTECTION" },
	{ RQ_STS_RESOURCE, -ENOMEM, "RESOURCE" },
	{ RQ_STS_DEV_RESOURCE, -EBUSY, "DEV_RESOURCE" },
	{ RQ_STS_IOERR, -EIO, "IOERR" },
	{ RQ_STS_AGAIN, -EAGAIN, "AGAIN" },
	{ RQ_STS_OFFLINE, -ENODEV, "OFFLINE" },
	{ RQ_STS_INVAL, -EINVAL, "INVAL" },
};

/* Every status maps to its documented errno, and that errno maps back. */
static void test_round_trip(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
		assert_int_equal(rq_status_to_errno(expected[i].status), expected[i].err);
		assert_int_equal(rq_errno_to_status(expected[i].err), expected[i].status);
	}
}

/* rq_errno_to_status() ignores the sign of its argument. */
static void test_sign_insensitive(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
		assert_int_equal(rq_errno_to_status(-expected[i].err), expected[i].status);
}

/* Unknown values fall back: status -> -EIO, errno -> IOERR, name "UNKNOWN". */
static void test_unknown(void **state)
{
	(void)state;
	assert_int_equal(rq_status_to_errno(6), -EIO);
	assert_int_equal(rq_status_to_errno(200), -EIO);
	assert_int_equal(rq_errno_to_status(EPERM), RQ_STS_IOERR);
	assert_int_equal(rq_errno_to_status(-E2BIG), RQ_STS_IOERR);
	assert_string_equal(rq_status_name(200), "UNKNOWN");
}

/* Each status has its short constant name. */
static void test_names(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
		assert_string_equal(rq_status_name(expected[i].status), expected[i].name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_sign_insensitive),
		cmocka_unit_test(test_unknown),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
