#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The version script lists exactly the library's public functions.

Checks, each failing the test with one line per problem:

  map       lib/librequest.map lists names explicitly (no pattern in a
            global: section), sorted, each once, one node per release, with
            "local: *;" so nothing else leaks out
  map->so   every listed name is exported by the built library, in the
            node it is listed in (ld ignores names that do not exist, so a
            typo or a removed function would pass the link silently)
  so->map   every exported name is listed
  source    every RQ_EXPORT definition in lib/ and sched/ is listed (one
            missing from the map is silently made local by "local: *")
  header    every exported name is declared by an installed public header
            (checked by compiling a reference to each, with the compiler
            the project uses)

Usage:
  symbols.py --map MAP --lib LIB --scan DIR... [--header H...]
             [--include DIR...] -- CC [CC-ARGS...]
  symbols.py --update-map --map MAP --scan DIR...

--update-map rewrites MAP: RQ_EXPORT names not listed yet go to the newest
node, names no longer defined leave it (only right before the release that
node stands for: a released node never changes).  Exit 77 (skip) without nm.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

IDENT = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')


def strip_comments(text):
    """Drop /* */ and // comments, keeping line count."""
    def repl(m):
        s = m.group(0)
        if s.startswith('/'):
            return '\n' * s.count('\n') + ' '
        return s
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  repl, text, flags=re.S)


def parse_map(path):
    """Return (nodes, problems): nodes as [(name, [symbols], has_local_star)]."""
    with open(path) as f:
        text = strip_comments(f.read())
    text = re.sub(r'#[^\n]*', '', text)
    nodes = []
    problems = []
    for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_.]*)\s*\{(.*?)\}\s*([A-Za-z0-9_.]*)\s*;',
                         text, flags=re.S):
        name, body = m.group(1), m.group(2)
        section = 'global'
        syms = []
        local_star = False
        for tok in re.finditer(r'(global|local)\s*:|([^\s;:]+)\s*;', body):
            if tok.group(1):
                section = tok.group(1)
                continue
            sym = tok.group(2)
            if section == 'local':
                if sym == '*':
                    local_star = True
                continue
            if re.search(r'[*?\[]', sym):
                problems.append('%s: pattern "%s" in node %s: list every name' %
                                (path, sym, name))
                continue
            syms.append(sym)
        nodes.append((name, syms, local_star))
    if not nodes:
        problems.append('%s: no version node' % path)
    return nodes, problems


def rq_exports(dirs):
    """Names defined with RQ_EXPORT in the C files and headers under dirs."""
    names = {}
    for top in dirs:
        for root, _, files in os.walk(top):
            for fn in sorted(files):
                if not fn.endswith(('.c', '.h')):
                    continue
                path = os.path.join(root, fn)
                with open(path, errors='replace') as f:
                    text = strip_comments(f.read())
                for m in re.finditer(r'^[^\n#]*\bRQ_EXPORT\b([^(;={]*)', text, flags=re.M):
                    idents = IDENT.findall(m.group(1))
                    if idents:
                        names.setdefault(idents[-1], path)
    return names


def nm_exports(lib):
    """{name: version or None} of the defined dynamic symbols of lib."""
    nm = shutil.which('nm')
    if not nm:
        return None
    help_text = subprocess.run([nm, '--help'], capture_output=True, text=True).stdout
    args = [nm, '-D', '--defined-only']
    if '--with-symbol-versions' in help_text:
        args.append('--with-symbol-versions')
    out = subprocess.run(args + [lib], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] == 'A':
            continue
        name, _, ver = parts[2].partition('@')
        syms[name] = ver.lstrip('@') or None
    return syms


def check_headers(names, headers, includes, cc):
    """Compile a reference to every name with only the public headers."""
    if not cc:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, 'symbols-declared.c')
        with open(src, 'w') as f:
            for h in headers:
                f.write('#include <librequest/%s>\n' % h)
            f.write('const void *const rq_symbols_declared[] = {\n')
            for n in sorted(names):
                f.write('\t(const void *)&%s,\n' % n)
            f.write('};\n')
        cmd = cc + ['-std=gnu11', '-c', '-Werror=implicit-function-declaration'] + \
            ['-I' + i for i in includes] + [src, '-o', os.path.join(tmp, 'o.o')]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0:
            return []
        missing = sorted(set(re.findall(r"['‘`]([A-Za-z_][A-Za-z0-9_]*)['’`] undeclared",
                                        r.stderr)))
        if missing:
            return ['%s is exported but no installed public header declares it' % n
                    for n in missing]
        return ['compiling the declaration check failed:\n' + r.stderr]


def update_map(path, nodes, defined):
    listed = {s for _, syms, _ in nodes for s in syms}
    newest = nodes[-1]
    add = sorted(set(defined) - listed)
    gone = sorted(listed - set(defined))
    with open(path) as f:
        text = f.read()
    lines = text.split('\n')
    for g in gone:
        lines = [l for l in lines if l.strip() != g + ';']
    text = '\n'.join(lines)
    if add:
        # insert into the newest node's global: list, then re-sort it
        m = re.search(r'(%s\s*\{\s*global:\s*\n)(.*?)(\n\s*(local:|\}))' % re.escape(newest[0]),
                      text, flags=re.S)
        if not m:
            sys.exit('%s: cannot find the global: list of %s' % (path, newest[0]))
        body = [l for l in m.group(2).split('\n') if l.strip()]
        body += ['\t\t%s;' % a for a in add]
        body.sort(key=lambda l: l.strip())
        text = text[:m.start(2)] + '\n'.join(body) + text[m.end(2):]
    with open(path, 'w') as f:
        f.write(text)
    for a in add:
        print('added %s to %s' % (a, newest[0]))
    for g in gone:
        print('removed %s (no longer defined)' % g)
    if not add and not gone:
        print('%s: up to date' % path)


def main():
    argv = sys.argv[1:]
    cc = []
    if '--' in argv:
        i = argv.index('--')
        argv, cc = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser()
    ap.add_argument('--map', required=True)
    ap.add_argument('--lib')
    ap.add_argument('--scan', nargs='+', default=[])
    ap.add_argument('--header', action='append', default=[])
    ap.add_argument('--include', nargs='*', default=[])
    ap.add_argument('--update-map', action='store_true')
    a = ap.parse_args(argv)

    nodes, problems = parse_map(a.map)
    defined = rq_exports(a.scan)
    if a.update_map:
        update_map(a.map, nodes, defined)
        return 0

    if not a.lib:
        ap.error('--lib is required')
    exported = nm_exports(a.lib)
    if exported is None:
        print('nm not found: skipped')
        return 77

    where = {}
    for node, syms, _ in nodes:
        if syms != sorted(syms):
            problems.append('node %s is not sorted' % node)
        for s in syms:
            if s in where:
                problems.append('%s is listed in %s and %s' % (s, where[s], node))
            where.setdefault(s, node)
    if nodes and not any(star for _, _, star in nodes):
        problems.append('no "local: *;": unlisted names would be exported')

    for s, node in sorted(where.items()):
        if s not in exported:
            problems.append('%s is in the map (%s) but the library does not export it' %
                            (s, node))
        elif exported[s] and exported[s] != node:
            problems.append('%s is exported as %s but listed in %s' % (s, exported[s], node))
    for s in sorted(exported):
        if s not in where:
            problems.append('%s is exported but not in the map' % s)
    for s, path in sorted(defined.items()):
        if s not in where:
            problems.append('%s (RQ_EXPORT in %s) is not in the map: it is hidden' %
                            (s, path))
    if not a.scan:
        problems.append('no source directory scanned (--scan)')
    elif not defined:
        problems.append('no RQ_EXPORT definition found under %s' % ' '.join(a.scan))

    problems += check_headers([s for s in exported if s in where], a.header, a.include, cc)

    for p in problems:
        print('FAIL: ' + p, file=sys.stderr)
    if problems:
        return 1
    print('ok: %d symbols in %d node(s), %d RQ_EXPORT definitions, all declared in %d headers'
          % (len(where), len(nodes), len(defined), len(a.header)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
