#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""No function of the library (the C files given) is longer than 80 lines,
counted from the line of its opening brace to its closing one.  A function
body starts with a '{' in column 0 and ends with the next '}' in column 0,
as the project's style writes them.

usage: function-length.py [--max N] FILE.c...
"""
import sys


def long_functions(path, limit):
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        if lines[i].startswith('{') and i > 0:
            j = i - 1
            while j > 0 and '(' not in lines[j]:
                j -= 1
            k = i + 1
            while k < len(lines) and not lines[k].startswith('}'):
                k += 1
            n = k - i + 1
            if n > limit:
                yield i + 1, n, lines[j].strip()
            i = k
        i += 1


def main(argv):
    limit = 80
    if argv[:1] == ['--max']:
        limit = int(argv[1])
        argv = argv[2:]
    bad = 0
    for path in argv:
        for line, n, head in long_functions(path, limit):
            print('FAIL: %s:%d: %d lines (at most %d): %s' % (path, line, n, limit, head))
            bad += 1
    if not bad:
        print('function-length: %d files, no function over %d lines' % (len(argv), limit))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
