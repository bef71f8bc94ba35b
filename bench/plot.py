#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Draw the bench scripts' JSON results with gnuplot (PNG or SVG).

usage: bench/plot.py KIND RESULTS.json OUT.png|OUT.svg [--title TEXT]

KIND (and the script that writes its RESULTS):
  sched-threads  M IOPS against submitting threads, a line per scheduler and
                 a panel per pattern (bench/sched-table.sh --threads "1 2 4")
  lat-cdf        latency CDFs, a line per scheduler, log-scale time axis
                 (bench/lat-cdf.sh)
  nbd-peers      IOPS of rqnbd, nbdkit and qemu-nbd side by side, a bar group
                 per pattern and job count (bench/nbd-peers.sh)

The gnuplot script and its data go beside OUT (OUT.gp, OUT.dat) so a plot can
be redrawn or restyled by hand.  Exit status: 0 drawn, 1 gnuplot failed or
the results hold nothing to draw, 2 bad usage.
"""
import json
import os
import shutil
import subprocess
import sys

KINDS = ("sched-threads", "lat-cdf", "nbd-peers")


def usage_error(msg):
    sys.stderr.write("plot.py: %s (see bench/plot.py --help)\n" % msg)
    sys.exit(2)


def quote(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def terminal(out):
    if out.endswith(".png"):
        return "pngcairo size 900,540 noenhanced font ',10'"
    if out.endswith(".svg"):
        return "svg size 900,540 noenhanced dynamic font ',10'"
    usage_error("%s: the output must end in .png or .svg" % out)
    return None


def rows_of(doc, need):
    rows = [r for r in doc.get("rows", []) if all(k in r for k in need)]
    if not rows:
        sys.stderr.write("plot.py: no rows with %s in the results\n" % ", ".join(need))
        sys.exit(1)
    return rows


def sched_threads(doc, title):
    """A panel per pattern: x threads, y median M IOPS, a line per scheduler."""
    rows = rows_of(doc, ("scheduler", "threads", "pattern", "miops"))
    patterns = list(dict.fromkeys(r["pattern"] for r in rows))
    scheds = list(dict.fromkeys(r["scheduler"] for r in rows))
    data, blocks = [], {}
    for p in patterns:
        for s in scheds:
            pts = sorted((r["threads"], r["miops"]) for r in rows
                         if r["pattern"] == p and r["scheduler"] == s)
            if not pts:
                continue
            blocks[(p, s)] = len(blocks)
            data.append("# %s %s" % (p, s))
            data += ["%d %g" % pt for pt in pts]
            data += ["", ""]
    threads = sorted({r["threads"] for r in rows})
    gp = ["set multiplot layout 1,%d title %s" % (len(patterns), quote(title)),
          "set xlabel 'submitting threads'", "set ylabel 'M IOPS (median)'",
          "set xtics (%s)" % ", ".join("'%d' %d" % (t, t) for t in threads),
          "set xrange [%g:%g]" % (threads[0] - 0.3, threads[-1] + 0.3),
          "set yrange [0:*]", "set key top left", "set grid"]
    for p in patterns:
        plots = ["DATA index %d with linespoints lw 2 title %s" % (blocks[(p, s)], quote(s))
                 for s in scheds if (p, s) in blocks]
        gp += ["set title %s" % quote(p), "plot " + ", ".join(plots)]
    gp.append("unset multiplot")
    return gp, data


def lat_cdf(doc, title):
    """x latency in µs (log), y fraction of bios completed within it."""
    rows = rows_of(doc, ("scheduler", "cdf"))
    data, plots = [], []
    for i, r in enumerate(rows):
        data.append("# %s" % r["scheduler"])
        data += ["%g %g" % (ns / 1000.0, frac) for ns, frac in r["cdf"]]
        data += ["", ""]
        label = r["scheduler"]
        if "p99_ns" in r:
            label += " (p99 %.1f us)" % (r["p99_ns"] / 1000.0)
        plots.append("DATA index %d with steps lw 2 title %s" % (i, quote(label)))
    gp = ["set title %s" % quote(title), "set logscale x 10",
          "set xlabel 'latency, submit to end_io (us, log scale)'",
          "set ylabel 'fraction of bios'", "set yrange [0:1.02]",
          "set key bottom right", "set grid", "plot " + ", ".join(plots)]
    return gp, data


def nbd_peers(doc, title):
    """A bar group per pattern and job count, a bar per server."""
    rows = rows_of(doc, ("server", "pattern", "jobs", "iops"))
    rows = [r for r in rows if isinstance(r["iops"], (int, float))]
    if not rows:
        sys.stderr.write("plot.py: no server has an IOPS result\n")
        sys.exit(1)
    servers = list(dict.fromkeys(r["server"] for r in rows))
    groups = list(dict.fromkeys((r["pattern"], r["jobs"]) for r in rows))
    iops = {(r["server"], r["pattern"], r["jobs"]): r["iops"] for r in rows}
    data = ["group " + " ".join(servers)]
    for p, j in groups:
        cells = ["%g" % (iops[(s, p, j)] / 1000.0) if (s, p, j) in iops else "NaN"
                 for s in servers]
        data.append("%s,%sjob%s %s" % (p, j, "" if j == 1 else "s", " ".join(cells)))
    data += ["", ""]
    plots = ["DATA using %d:xtic(1) title %s" % (i + 2, quote(s))
             for i, s in enumerate(servers)]
    gp = ["set title %s" % quote(title), "set style data histograms",
          "set style histogram clustered gap 1", "set style fill solid 0.8 border -1",
          "set boxwidth 0.9", "set ylabel 'k IOPS (median)'", "set yrange [0:*]",
          "set key top right", "set grid ytics", "set key autotitle columnhead",
          "plot " + ", ".join(plots)]
    return gp, data


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    title = None
    if "--title" in argv:
        i = argv.index("--title")
        if i + 1 >= len(argv):
            usage_error("--title needs a text")
        title = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) != 3:
        usage_error("expected KIND RESULTS.json OUT.png|OUT.svg")
    kind, results, out = argv
    if kind not in KINDS:
        usage_error("unknown KIND '%s' (allowed: %s)" % (kind, ", ".join(KINDS)))
    term = terminal(out)
    try:
        with open(results) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        usage_error("%s: %s" % (results, e))
    if not shutil.which("gnuplot"):
        sys.stderr.write("plot.py: gnuplot not found (Debian: gnuplot-nox)\n")
        return 1
    if title is None:
        title = "%s, %s" % (doc.get("bench", kind), doc.get("date", ""))
    draw = {"sched-threads": sched_threads, "lat-cdf": lat_cdf, "nbd-peers": nbd_peers}[kind]
    gp, data = draw(doc, title)
    dat = out + ".dat"
    with open(dat, "w") as f:
        f.write("\n".join(data) + "\n")
    script = ["set terminal " + term, "set output %s" % quote(os.path.basename(out)),
              "DATA = %s" % quote(os.path.basename(dat))] + gp
    text = "\n".join(script)
    with open(out + ".gp", "w") as f:
        f.write(text + "\n")
    res = subprocess.run(["gnuplot", os.path.basename(out + ".gp")],
                         cwd=os.path.dirname(os.path.abspath(out)),
                         stderr=subprocess.PIPE, text=True)
    if res.returncode != 0 or not os.path.getsize(out):
        sys.stderr.write("plot.py: gnuplot failed:\n" + res.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
