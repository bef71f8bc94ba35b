#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Section 3 manual pages from the kernel-doc comments of the public headers.

A doc comment is /** ... */ right before one or more declarations (no blank
line between them):

    /**
     * rq_name() - what it does, in one line.          (the title)
     * rq_a() / rq_b() - ...                           (a family: one page)
     * @param: what it is (continued on indented lines).
     *
     * Free text: the description, in paragraphs.
     *
     * Context: locks held or taken, may it block, who calls it.
     * Return: the values and -errno codes.
     */

"Context:" and "Return:" may also start mid-line after a sentence.  A
declaration is documented by the comment before it only if the comment's
title names it.  Every function in the version script gets a page: a family
one page under its first exported name, the others ".so" links to it;
librequest(3) is the overview.

Usage:
  gen-man3.py --map MAP --outdir DIR [--version V] HEADER...   write pages
  gen-man3.py --map MAP --check HEADER...                       check docs
--check fails (exit 1) for each function in the map that no doc comment
names, whose comment has no Context: statement, or, returning anything but
void, no Return: statement.
"""

import argparse
import os
import re
import sys

IDENT = r'[A-Za-z_][A-Za-z0-9_]*'
LABELS = {'context': 'Context', 'locking': 'Context', 'return': 'Return',
          'returns': 'Return'}
LABEL_RE = re.compile(r'(^\s*|(?<=[.;)])\s+)(Context|Locking|Returns?):\s*')


# --------------------------------------------------------------- parsing

class Doc:
    """One /** */ comment."""

    def __init__(self, header, line, text):
        self.header = header
        self.line = line
        self.names = []        # functions named in the title
        self.summary = ''
        self.params = []       # [(name, text)]
        self.body = []         # paragraphs, each a list of lines
        self.sections = {}     # 'Context' / 'Return' -> text
        self.decls = []        # declarations that follow
        self._parse(text)

    def _parse(self, text):
        lines = []
        for raw in text.split('\n'):
            s = re.sub(r'^\s*\*(?!/) ?', '', raw.rstrip())
            lines.append(s)
        # a one-line comment "/** x() - y. */" leaves one line
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        # title: up to a blank line, a @param: line or a section label
        title = []
        i = 0
        while i < len(lines):
            s = lines[i]
            if not s.strip() or re.match(r'\s*@%s\s*:' % IDENT, s) or \
                    LABEL_RE.match(s):
                break
            title.append(s.strip())
            i += 1
        head = ' '.join(title)
        m = re.match(r'(.*?)\s+-\s+(.*)$', head)
        if m and re.search(r'%s\s*\(\)' % IDENT, m.group(1)):
            self.names = re.findall(r'(%s)\s*\(\)' % IDENT, m.group(1))
            rest = m.group(2)
        else:
            rest = head
        # a section label may end the title; the summary is its first sentence
        m = LABEL_RE.search(rest)
        pre, post = (rest[:m.start()], rest[m.start():]) if m else (rest, '')
        parts = re.split(r'(?<=[.;])\s+(?=[A-Z0-9(])', pre.strip(), maxsplit=1)
        self.summary = parts[0].strip().rstrip('.;:').strip()
        first = parts[1] if len(parts) > 1 else ''
        self._parse_body(first, post, lines[i:])

    def _parse_body(self, first, post, lines):
        cur = None           # ('param', idx) / ('section', name) / None
        para = []
        paragraphs = []

        def flush_para():
            if para:
                paragraphs.append(list(para))
                para.clear()

        def add_text(s):
            nonlocal cur
            # labels start a line, or a sentence inside one
            pos = 0
            for m in LABEL_RE.finditer(s):
                self._append(cur, s[pos:m.start()], para)
                flush_para()
                cur = ('section', LABELS[m.group(2).lower()])
                self.sections.setdefault(cur[1], '')
                pos = m.end()
            self._append(cur, s[pos:], para)

        if first:
            para.append(first)
        if post:
            add_text(post)
        for s in lines:
            m = re.match(r'\s*@(%s)\s*:\s*(.*)$' % IDENT, s)
            if not s.strip():
                flush_para()
                if cur and cur[0] == 'param':
                    cur = None
                elif cur and cur[0] == 'section':
                    cur = None
                continue
            if m:
                flush_para()
                self.params.append([m.group(1), ''])
                cur = ('param', len(self.params) - 1)
                add_text(m.group(2))
                continue
            if cur and cur[0] == 'param' and not re.match(r'\s', s) and \
                    not LABEL_RE.match(s):
                # an unindented line after the params starts the description
                cur = None
            add_text(s.strip() if cur else s)
        flush_para()
        self.body = paragraphs
        for k in self.sections:
            self.sections[k] = self.sections[k].strip()

    def _append(self, cur, text, para):
        if cur is None:
            if text.strip():
                para.append(text)
        elif cur[0] == 'param':
            p = self.params[cur[1]]
            p[1] = (p[1] + ' ' + text.strip()).strip()
        else:
            self.sections[cur[1]] = (self.sections[cur[1]] + ' ' + text.strip()).strip()


class Decl:
    def __init__(self, header, line, name, rettype, proto, inline):
        self.header = header
        self.line = line
        self.name = name
        self.rettype = rettype
        self.proto = proto
        self.inline = inline
        self.doc = None

    def returns_void(self):
        return re.sub(r'\b(static|inline|extern)\b', '', self.rettype).strip() == 'void'


def parse_header(path):
    """Return (file comment, docs, decls) of one header."""
    with open(path) as f:
        text = f.read()
    name = os.path.basename(path)
    docs, decls = [], []
    file_comment = None
    i, n = 0, len(text)
    pending = None

    def lineno(pos):
        return text.count('\n', 0, pos) + 1

    while i < n:
        # whitespace; a blank line ends a doc comment's group
        m = re.match(r'\s+', text[i:])
        if m:
            if m.group(0).count('\n') >= 2:
                pending = None
            i += m.end()
            continue
        if text.startswith('/**', i) and not text.startswith('/**/', i):
            end = text.index('*/', i) + 2
            pending = Doc(name, lineno(i), text[i + 3:end - 2])
            docs.append(pending)
            i = end
            continue
        if text.startswith('/*', i):
            end = text.index('*/', i) + 2
            if file_comment is None and 'SPDX' not in text[i:end]:
                file_comment = text[i + 2:end - 2]
            pending = None
            i = end
            continue
        if text.startswith('//', i):
            i = text.find('\n', i)
            i = n if i < 0 else i
            continue
        if text[i] == '#':
            while True:
                e = text.find('\n', i)
                if e < 0:
                    i = n
                    break
                if text[e - 1] == '\\':
                    i = e + 1
                    continue
                i = e
                break
            pending = None
            continue
        m = re.match(r'extern\s+"C"\s*\{|\}', text[i:])
        if m:
            i += m.end()
            pending = None
            continue
        # a declaration or definition at file scope
        start = i
        depth = 0
        body = []
        while i < n:
            if text.startswith('/*', i):
                i = text.index('*/', i) + 2
                body.append(' ')
                continue
            c = text[i]
            if c == '{':
                depth += 1
            elif c == '}':
                depth -= 1
                if depth == 0:
                    body.append(c)
                    i += 1
                    m = re.match(r'[ \t]*', text[i:])
                    j = i + m.end()
                    if j >= n or text[j] != ';' and not re.match(IDENT, text[j:]):
                        break
                    continue
            elif c == ';' and depth == 0:
                body.append(c)
                i += 1
                break
            body.append(c)
            i += 1
        decl = ' '.join(''.join(body).split())
        d = parse_decl(name, lineno(start), decl)
        if d:
            decls.append(d)
            if pending is not None:
                pending.decls.append(d)
                if d.name in pending.names:
                    d.doc = pending
    return file_comment, docs, decls


def parse_decl(header, line, decl):
    if re.match(r'(typedef|struct|union|enum)\b[^(]*(\{|;$)', decl):
        return None
    head = decl.split('{', 1)[0].strip()
    m = re.match(r'(.*?)\b(%s)\s*\((.*)\)\s*;?$' % IDENT, head, flags=re.S)
    if not m or '(*' in m.group(1):
        return None
    inline = bool(re.search(r'\binline\b', m.group(1))) or '{' in decl
    rettype = m.group(1).strip()
    proto = re.sub(r'\b(static|inline)\s+', '', head).rstrip(';').strip() + ';'
    proto = re.sub(r'\(\s+', '(', re.sub(r'\s+\)', ')', proto))
    return Decl(header, line, m.group(2), rettype, proto, inline)


def read_map(path):
    with open(path) as f:
        text = re.sub(r'/\*.*?\*/', '', f.read(), flags=re.S)
    names = []
    for body in re.findall(r'\{(.*?)\}', text, flags=re.S):
        glob = re.split(r'\blocal\s*:', body)[0]
        names += re.findall(r'^\s*(rq_%s)\s*;' % r'[A-Za-z0-9_]*', glob, flags=re.M)
    return names


# ----------------------------------------------------------------- roff

def sentence(s):
    """Capitalised, ending with a full stop."""
    s = s.strip()
    if not s:
        return s
    if s[0].islower() and not re.match(r'%s\(' % IDENT, s) and not s.startswith('rq'):
        s = s[0].upper() + s[1:]
    return s if s[-1] in '.!?' or s.endswith('.)') else s + '.'


def esc(s):
    s = s.replace('\\', '\\e')
    return s


def line_safe(s):
    return '\\&' + s if s[:1] in ('.', "'") else s


def inline_markup(s, known):
    s = esc(s)
    s = re.sub(r'(?<![\w@])@(%s)' % IDENT, r'\\fI\1\\fP', s)
    s = re.sub(r'\b(%s)\(\)' % IDENT,
               lambda m: '\\fB%s\\fP()' % m.group(1), s)
    return s


def paragraphs_roff(paras, known):
    out = []
    for p in paras:
        # indented lines (tables, lists, code) are kept as they are
        if any(re.match(r'\s{2,}\S', l) or '\t' in l for l in p[1:]) or \
                any(re.match(r'\s+\S', l) for l in p) and len(p) > 1 and \
                all(re.match(r'\s', l) for l in p):
            out += ['.PP', '.nf', '.RS 4'] + [line_safe(esc(l.rstrip())) for l in p] + \
                ['.RE', '.fi']
        else:
            out += ['.PP', line_safe(inline_markup(' '.join(l.strip() for l in p), known))]
    return out


def page(doc, decls, version, known, header_names):
    name = decls[0].name
    title = name.upper()
    out = ['.\\" SPDX-License-Identifier: LGPL-2.1-or-later',
           '.\\" Generated by doc/man/gen-man3.py from include/librequest/%s; do not edit.'
           % doc.header if doc else
           '.\\" Generated by doc/man/gen-man3.py; do not edit.',
           '.TH %s 3 "" "librequest %s" "librequest Manual"' % (title, version),
           '.SH NAME']
    names = [d.name for d in decls]
    summary = doc.summary if doc and doc.summary else 'undocumented'
    summary = re.sub(r'(?<![\w@])@(%s)' % IDENT, r'\1', summary)
    out.append(line_safe('%s \\- %s' % (', '.join(names), esc(summary))))
    out += ['.SH SYNOPSIS', '.nf', '.B #include <librequest/librequest.h>', '.PP']
    for d in decls:
        proto = esc(d.proto)
        proto = proto.replace(d.name + '(', '\\fB%s\\fP(' % d.name, 1)
        out.append(line_safe(proto))
    out.append('.fi')
    if doc and any(d.inline for d in decls):
        out += ['.PP', 'Functions shown without an exported symbol are '
                '\\fBstatic inline\\fP in the header.'] \
            if any(not d.inline for d in decls) else \
            ['.PP', '\\fBstatic inline\\fP in the header: nothing to link.']
    out.append('.SH DESCRIPTION')
    if doc and doc.body:
        out += paragraphs_roff(doc.body, known)
    elif doc:
        out += ['.PP', line_safe(inline_markup(sentence(doc.summary), known))]
    else:
        out += ['.PP', 'Not documented in the header yet.']
    if doc and doc.params:
        out.append('.SH PARAMETERS')
        for pname, ptext in doc.params:
            out += ['.TP', '.I %s' % pname, line_safe(inline_markup(sentence(ptext), known))]
    if doc and doc.sections.get('Context'):
        out += ['.SH CONTEXT',
                line_safe(inline_markup(sentence(doc.sections['Context']), known))]
    if doc and doc.sections.get('Return'):
        out += ['.SH RETURN VALUE',
                line_safe(inline_markup(sentence(doc.sections['Return']), known))]
    elif decls and all(d.returns_void() for d in decls):
        out += ['.SH RETURN VALUE', 'None.']
    see = []
    if doc:
        text = ' '.join(' '.join(p) for p in doc.body) + ' ' + \
            ' '.join(doc.sections.values()) + ' ' + ' '.join(t for _, t in doc.params)
        for ref in re.findall(r'\b(%s)\(\)' % IDENT, text):
            if ref in known and ref not in names and ref not in see:
                see.append(ref)
    out.append('.SH SEE ALSO')
    refs = ['.BR %s (3),' % r for r in see] + ['.BR librequest (3)']
    out += refs
    return '\n'.join(out) + '\n'


def overview(headers, version, families, known):
    out = ['.\\" SPDX-License-Identifier: LGPL-2.1-or-later',
           '.\\" Generated by doc/man/gen-man3.py from include/librequest/*.h; do not edit.',
           '.TH LIBREQUEST 3 "" "librequest %s" "librequest Manual"' % version,
           '.SH NAME',
           'librequest \\- the Linux block layer\'s request layer as a userspace library',
           '.SH SYNOPSIS', '.nf', '.B #include <librequest/librequest.h>', '.PP',
           'cc ... $(pkg-config --cflags --libs librequest)', '.fi',
           '.SH DESCRIPTION', '.PP',
           'An application submits bios (\\fBrq_submit_bio\\fP(3)) to a queue; the library',
           'checks, splits, merges and plugs them into requests, runs them through an I/O',
           'scheduler and hands them to a driver: a multi-queue one (a tag set and',
           '\\fBqueue_rq\\fP) or a single-queue one (\\fBrequest_fn\\fP under the queue lock).',
           'Every function states in its page the context it may be called from (locks',
           'held or taken, whether it may block) and what it returns; errors are negative',
           'errno values.  The headers below are all included by',
           '.IR <librequest/librequest.h> .']
    for path, fcomment, fams in headers:
        hname = os.path.basename(path)
        out.append('.SS <librequest/%s>' % hname)
        if fcomment:
            lines = [re.sub(r'^\s*\* ?', '', l).rstrip() for l in fcomment.split('\n')]
            while lines and not lines[0].strip():
                lines.pop(0)
            if lines and lines[0].startswith('librequest: '):
                lines[0] = lines[0][len('librequest: '):]
                lines[0] = lines[0][:1].upper() + lines[0][1:]
            paras, cur = [], []
            for l in lines:
                if not l.strip():
                    if cur:
                        paras.append(cur)
                    cur = []
                else:
                    cur.append(l)
            if cur:
                paras.append(cur)
            out += paragraphs_roff(paras, known)
        if fams:
            out += ['.PP', 'Functions:']
            for first, names, summary, exported in fams:
                tag = ('.BR %s (3)' % first) if exported else ('.BR %s ()' % first)
                if len(names) > 1:
                    tag += ' ' + ' '.join('", %s()"' % n for n in names[1:])
                out += ['.TP', tag, line_safe(inline_markup(sentence(summary), known))]
    out += ['.SH SEE ALSO',
            'The documents in the source tree:',
            '.IR doc/architecture.md ,',
            '.IR doc/behaviour.md ,',
            '.IR doc/drivers.md ,',
            'and one per scheduler',
            '.RI ( doc/sched-*.md ).']
    return '\n'.join(out) + '\n'


# ----------------------------------------------------------------- main

def collect(headers):
    parsed = []
    decls = {}
    for h in headers:
        fc, docs, ds = parse_header(h)
        parsed.append((h, fc, docs, ds))
        for d in ds:
            decls.setdefault(d.name, d)
    return parsed, decls


def check(mapped, decls):
    problems = []
    for name in mapped:
        d = decls.get(name)
        if d is None:
            problems.append('%s: not declared in a public header' % name)
            continue
        where = '%s (%s:%d)' % (name, d.header, d.line)
        if d.doc is None:
            problems.append('%s: no doc comment names it ("/** %s() - ... */" right '
                            'before the declaration, or in a family title)' % (where, name))
            continue
        if not d.doc.sections.get('Context'):
            problems.append('%s: no "Context:" statement (locks held or taken, may it '
                            'block, who calls it)' % where)
        if not d.returns_void() and not d.doc.sections.get('Return'):
            problems.append('%s: returns %s but has no "Return:" statement' %
                            (where, d.rettype))
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--map', required=True)
    ap.add_argument('--outdir')
    ap.add_argument('--version', default='')
    ap.add_argument('--check', action='store_true')
    ap.add_argument('headers', nargs='+')
    a = ap.parse_args()

    mapped = read_map(a.map)
    order = ['librequest.h', 'bio.h', 'request.h', 'queue.h', 'mq.h', 'sq.h', 'elevator.h']
    parsed, decls = collect(sorted(a.headers, key=lambda h: (
        order.index(os.path.basename(h)) if os.path.basename(h) in order else len(order),
        os.path.basename(h))))
    if a.check:
        problems = check(mapped, decls)
        for p in problems:
            print('FAIL: ' + p, file=sys.stderr)
        if problems:
            print('%d of %d exported functions lack documentation' %
                  (len({p.split(':')[0].split(' ')[0] for p in problems}), len(mapped)),
                  file=sys.stderr)
            return 1
        print('ok: %d exported functions documented with context and return' % len(mapped))
        return 0

    if not a.outdir:
        ap.error('--outdir or --check is required')
    os.makedirs(a.outdir, exist_ok=True)
    known = set(mapped) | set(decls)
    exported = set(mapped)
    written = set()
    overview_headers = []
    for path, fc, docs, ds in parsed:
        fams = []
        for doc in docs:
            members = [d for d in doc.decls if d.doc is doc]
            if not members:
                continue
            pages = [d for d in members if d.name in exported]
            fams.append(((pages or members)[0].name, [d.name for d in members], doc.summary,
                         bool(pages)))
            if not pages:
                continue
            first = pages[0].name
            with open(os.path.join(a.outdir, first + '.3'), 'w') as f:
                f.write(page(doc, members, a.version, known, None))
            written.add(first)
            for d in pages[1:]:
                with open(os.path.join(a.outdir, d.name + '.3'), 'w') as f:
                    f.write('.\\" SPDX-License-Identifier: LGPL-2.1-or-later\n'
                            '.so man3/%s.3\n' % first)
                written.add(d.name)
        overview_headers.append((path, fc, fams))
    for name in mapped:
        if name in written:
            continue
        d = decls.get(name)
        with open(os.path.join(a.outdir, name + '.3'), 'w') as f:
            if d is None:
                f.write('.\\" SPDX-License-Identifier: LGPL-2.1-or-later\n'
                        '.TH %s 3 "" "librequest %s" "librequest Manual"\n'
                        '.SH NAME\n%s \\- undocumented\n.SH SEE ALSO\n.BR librequest (3)\n'
                        % (name.upper(), a.version, name))
            else:
                f.write(page(None, [d], a.version, known, None))
    with open(os.path.join(a.outdir, 'librequest.3'), 'w') as f:
        f.write(overview(overview_headers, a.version, None, known))
    return 0


if __name__ == '__main__':
    sys.exit(main())
