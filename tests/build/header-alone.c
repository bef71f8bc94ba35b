/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Build check, compiled once per public header with
 * -DRQ_CHECK_HEADER="librequest/<name>.h": the header compiles on its own
 * (strict C11, -pedantic -Wall -Wextra -Werror) and a second inclusion is a
 * no-op.
 */
#ifndef RQ_CHECK_HEADER
#error "define RQ_CHECK_HEADER to the header to check"
#endif

#include RQ_CHECK_HEADER
#include RQ_CHECK_HEADER

int main(void)
{
	return 0;
}
