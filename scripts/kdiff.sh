#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# kdiff.sh: librequest against the running kernel, pattern by pattern
# (doc/fidelity.md).  Each pattern of tests/kdiff/patterns goes to a loop
# device over a tmpfs file (kdiff-submit: one io_submit per batch, O_DIRECT)
# under each multi-queue scheduler and nomerges value; the requests the
# loop driver receives come from the block_rq_issue tracepoint, in a tracefs
# instance of this script's own.  The same pattern, with the physical
# layout the kernel run had, goes through librequest with the loop device's
# limits (kdiff-rq).  Both lists are compared: the same requests (op,
# sector, length, FUA/PREFLUSH; as a multiset) and the same dispatch order.
#
# Run with --help for the options.  Needs root, loop devices and tracefs.
set -u
LC_ALL=C
export LC_ALL

usage() {
	cat <<'EOF'
usage: kdiff.sh [options]
Compare the requests the kernel's loop device receives with librequest's,
for every pattern x scheduler x nomerges; print a table and scores.

  --build DIR       build directory with tests/kdiff/kdiff-{submit,rq} (default: build)
  --patterns DIR    pattern files *.pat (default: tests/kdiff/patterns)
  --pattern NAME    only this pattern (repeatable; NAME without .pat)
  --sched LIST      comma-separated schedulers (default: those of none,mq-deadline,
                    kyber,bfq the kernel offers)
  --nomerges LIST   comma-separated values (default: 0,1,2)
  --runs N          kernel runs per case; a case is kept only if all agree (default 3)
  --json FILE       write the results as JSON to FILE ("-": stdout, no table)
  --known FILE      known differences: "PATTERN SCHED NOMERGES requests|order REASON";
                    PATTERN, SCHED and NOMERGES may be * (default: tests/kdiff/known-differences)
  --check           exit 1 if a kept case differs and is not in the known file
  --keep DIR        keep every kernel and librequest list under DIR
  --diff            print the differing lists (kernel | librequest) of each difference
  -h, --help        this text
  --version         the version
Exit: 0; 1 on unknown differences with --check, or on an error; 2 on bad
usage; 77 when root, loop devices or tracefs are missing.
EOF
}

here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
patdir=$here/tests/kdiff/patterns
known=$here/tests/kdiff/known-differences
scheds=none,mq-deadline,kyber,bfq
sched_given=0
nomerges=0,1,2
runs=3
json=
check=0
keep=
showdiff=0
only=()

die2() { echo "kdiff.sh: $*" >&2; exit 2; }
skip() { echo "SKIP: $*"; exit 77; }
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=${2:?}; shift ;;
	--patterns) patdir=${2:?}; shift ;;
	--pattern) only+=("${2:?}"); shift ;;
	--sched) scheds=${2:?}; sched_given=1; shift ;;
	--nomerges) nomerges=${2:?}; shift ;;
	--runs) runs=${2:?}; shift ;;
	--json) json=${2:?}; shift ;;
	--known) known=${2:?}; shift ;;
	--check) check=1 ;;
	--keep) keep=${2:?}; shift ;;
	--diff) showdiff=1 ;;
	-h|--help) usage; exit 0 ;;
	--version) echo "kdiff.sh 1"; exit 0 ;;
	*) usage >&2; die2 "unknown option $1" ;;
	esac
	shift
done
case $runs in ''|*[!0-9]*|0) die2 "--runs wants a positive number" ;; esac
submit=$build/tests/kdiff/kdiff-submit
rqside=$build/tests/kdiff/kdiff-rq
[ -x "$submit" ] && [ -x "$rqside" ] || die2 "no kdiff-submit/kdiff-rq under $build (build first)"
[ -d "$patdir" ] || die2 "no pattern directory $patdir"
if [ ${#only[@]} -gt 0 ]; then
	pats=()
	for p in "${only[@]}"; do
		[ -f "$patdir/$p.pat" ] || die2 "no pattern $p"
		pats+=("$patdir/$p.pat")
	done
else
	pats=("$patdir"/*.pat)
fi
IFS=, read -r -a sched_list <<<"$scheds"
IFS=, read -r -a nm_list <<<"$nomerges"
for v in "${nm_list[@]}"; do
	case $v in 0|1|2) ;; *) die2 "nomerges $v: 0, 1 or 2" ;; esac
done

[ "$(id -u)" = 0 ] || skip "needs root (loop devices, tracefs)"
command -v losetup >/dev/null || skip "no losetup"
TR=/sys/kernel/tracing
[ -d $TR/instances ] || TR=/sys/kernel/debug/tracing
[ -d $TR/instances ] || skip "no tracefs with instances (mount -t tracefs nodev /sys/kernel/tracing)"
[ -d $TR/events/block/block_rq_issue ] || skip "no block tracepoints"

work=$(mktemp -d /tmp/kdiff.XXXXXX)
inst=$TR/instances/kdiff-$$
dev=
img=
shm=
qdir=
orig_sched= orig_nomerges= orig_wbt=
cleanup() {
	[ -d "$inst" ] && { echo 0 > "$inst/tracing_on"; rmdir "$inst"; }
	# a loop device keeps its queue settings after losetup -d: leave them
	# as found, for whoever attaches it next
	if [ -n "$qdir" ] && [ -d "$qdir" ]; then
		[ -n "$orig_sched" ] && echo "$orig_sched" > $qdir/scheduler 2>/dev/null
		[ -n "$orig_nomerges" ] && echo "$orig_nomerges" > $qdir/nomerges 2>/dev/null
		[ -n "$orig_wbt" ] && echo "$orig_wbt" > $qdir/wbt_lat_usec 2>/dev/null
	fi
	[ -n "$dev" ] && losetup -d "$dev"
	[ -n "$img" ] && rm -f "$img"
	[ -n "$shm" ] && { umount "$shm"; rmdir "$shm"; }
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# the backing file on tmpfs: /dev/shm where it is one, else a tmpfs of our own
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
	img=$(mktemp /dev/shm/kdiff.XXXXXX)
else
	shm=$(mktemp -d /tmp/kdiff-shm.XXXXXX)
	mount -t tmpfs -o size=128m nodev "$shm" || { rmdir "$shm"; shm=; skip "cannot mount a tmpfs"; }
	img=$shm/img
fi
truncate -s 64M "$img"
dio=on
dev=$(losetup -f --show --direct-io=on "$img" 2>/dev/null)
if [ -z "$dev" ]; then
	dio=off
	dev=$(losetup -f --show "$img" 2>/dev/null) || skip "cannot set up a loop device"
fi
[ -n "$dev" ] || skip "cannot set up a loop device"
command -v udevadm >/dev/null && udevadm settle 2>/dev/null
name=$(basename "$dev")
qdir=/sys/block/$name/queue
IFS=: read -r major minor < /sys/block/$name/dev
orig_sched=$(sed -n 's/.*\[\(.*\)\].*/\1/p' $qdir/scheduler 2>/dev/null)
orig_nomerges=$(cat $qdir/nomerges 2>/dev/null)
orig_wbt=$(cat $qdir/wbt_lat_usec 2>/dev/null)
# the default list keeps what this kernel offers (bfq and kyber are modules
# a kernel may lack); a scheduler asked for by --sched must be there
if [ "$sched_given" = 0 ]; then
	offered=" $(tr -d '[]' < $qdir/scheduler) "
	kept=
	for s in "${sched_list[@]}"; do
		case $offered in
		*" $s "*) kept=${kept:+$kept,}$s ;;
		*) echo "kdiff.sh: this kernel offers no $s: its cases skipped" >&2 ;;
		esac
	done
	[ -n "$kept" ] || skip "this kernel offers none of $scheds"
	scheds=$kept
	IFS=, read -r -a sched_list <<<"$scheds"
fi
# writeback throttling never holds O_DIRECT writes (REQ_SYNC|REQ_IDLE), but off is certain
[ -w $qdir/wbt_lat_usec ] && echo 0 > $qdir/wbt_lat_usec 2>/dev/null

lim() { cat $qdir/$1 2>/dev/null || echo 0; }
max_sectors_kb=$(lim max_sectors_kb)
max_hw_sectors_kb=$(lim max_hw_sectors_kb)
max_segments=$(lim max_segments)
max_segment_size=$(lim max_segment_size)
lbs=$(lim logical_block_size)
wc=0; [ "$(lim write_cache)" = "write back" ] && wc=1
fua=$(lim fua)
depth=$(cat /sys/block/$name/mq/0/nr_tags 2>/dev/null || lim nr_requests)
cpu=$(cat /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null | cut -d- -f1 | cut -d, -f1)
case $cpu in ''|*[!0-9]*) cpu=0 ;; esac

mkdir "$inst" || skip "cannot make a tracefs instance"
echo 0 > "$inst/tracing_on"
echo 4096 > "$inst/buffer_size_kb"
echo "dev == $(( (major << 20) | minor ))" > "$inst/events/block/block_rq_issue/filter"
echo 1 > "$inst/events/block/block_rq_issue/enable"

set_sched() {  # SCHED NOMERGES: a scheduler, then nomerges
	echo none > $qdir/scheduler
	[ "$1" = none ] || echo "$1" > $qdir/scheduler || return 1
	echo "$2" > $qdir/nomerges
}

# One awk for a pattern's cases: decode each run's trace (kernel lists as
# kdiff-rq prints them, kept as BASE.SCHED.NM.kernel.RUN), check the runs
# agree, compare with librequest's list, look the difference up in the known
# file; one result line per case:
#   pattern sched nomerges stable kernel_n lib_n same_requests same_order reason
compare() {  # PATTERN BASE
	awk -v p="$1" -v base="$2" -v scheds="$scheds" -v nms="$nomerges" -v runs="$runs" \
		-v known="$known" '
	function decode(line,    f, n, i, j, rw, pre, op, rest) {
		n = split(line, f, " ")
		for (i = 1; i <= n; i++) if (f[i] == "block_rq_issue:") break
		if (i > n) return ""
		rw = f[i + 2]; pre = 0; op = substr(rw, 1, 1); rest = substr(rw, 2)
		if (op == "F" && length(rw) > 1 && index("WRDEFN", substr(rw, 2, 1))) {
			pre = 1; op = substr(rw, 2, 1); rest = substr(rw, 3)
		}
		if (op == "F") return "F 0 0"
		for (j = i; j <= n; j++) if (f[j] == "+") break
		return op " " f[j - 1] " " f[j + 1] (substr(rest, 1, 1) == "F" ? " fua" : "") (pre ? " preflush" : "")
	}
	function readlist(path, arr,    line, n) {
		n = 0
		while ((getline line < path) > 0) arr[++n] = line
		close(path)
		return n
	}
	function reason(s, nm, kind,    line, f, r) {
		for (r = 1; r <= nk; r++) {
			split(kl[r], f, " ")
			if ((f[1] == p || f[1] == "*") && (f[2] == s || f[2] == "*") &&
			    (f[3] == nm || f[3] == "*") && (f[4] == kind || f[4] == "*")) {
				line = kl[r]
				sub(/^[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +/, "", line)
				return line
			}
		}
		return ""
	}
	BEGIN {
		while ((getline line < known) > 0)
			if (line !~ /^[ \t]*(#|$)/) kl[++nk] = line
		ns = split(scheds, S, ","); nn = split(nms, N, ",")
		for (a = 1; a <= ns; a++) for (b = 1; b <= nn; b++) {
			c = base "." S[a] "." N[b]
			stable = 1; delete first; nf = 0
			for (r = 1; r <= runs; r++) {
				out = c ".kernel." r; n = 0
				while ((getline line < (c ".trace." r)) > 0) {
					d = decode(line)
					if (d == "") continue
					print d > out; n++
					if (r == 1) first[++nf] = d
					else if (n > nf || first[n] != d) stable = 0
				}
				close(c ".trace." r); close(out)
				printf "" >> out
				if (r > 1 && n != nf) stable = 0
			}
			delete lib; nl = readlist(c ".lib", lib)
			same_ord = (nl == nf)
			for (i = 1; i <= nf && same_ord; i++) if (first[i] != lib[i]) same_ord = 0
			delete cnt
			for (i = 1; i <= nf; i++) cnt[first[i]]++
			for (i = 1; i <= nl; i++) cnt[lib[i]]--
			same_req = (nl == nf)
			for (k in cnt) if (cnt[k]) same_req = 0
			kind = !same_req ? "requests" : (!same_ord ? "order" : "")
			printf "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p, S[a], N[b], stable, nf, nl,
				same_req, same_ord, kind != "" ? reason(S[a], N[b], kind) : ""
		}
	}'
}

# nr_requests of each scheduler, as the kernel sets it when attaching it
declare -A nr_req
for sched in "${sched_list[@]}"; do
	set_sched "$sched" 0 || { echo "kdiff.sh: cannot set scheduler $sched" >&2; exit 1; }
	nr_req[$sched]=$(lim nr_requests)
done
nr_list=$(for s in "${sched_list[@]}"; do printf '%s,' "${nr_req[$s]}"; done)
nr_list=${nr_list%,}

results=$work/results
: > "$results"
err=0
for pat in "${pats[@]}"; do
	pname=$(basename "$pat" .pat)
	base=$work/$pname
	# the kernel side of the whole matrix of this pattern, in one process
	if ! "$submit" --cpu "$cpu" --queue "$qdir" --trace "$inst" --out "$base" \
		--sched "$scheds" --nomerges "$nomerges" --runs "$runs" \
		"$dev" "$pat" > "$base.res"; then
		echo "kdiff.sh: kdiff-submit failed on $pname" >&2
		exit 1
	fi
	# the librequest side of the matrix, in one process (a new queue per case)
	if ! "$rqside" --sched "$scheds" --nomerges "$nomerges" --nr-requests "$nr_list" \
		--max-sectors-kb "$max_sectors_kb" --max-hw-sectors-kb "$max_hw_sectors_kb" \
		--max-segments "$max_segments" --max-segment-size "$max_segment_size" \
		--logical-block-size "$lbs" --write-cache $wc --fua "$fua" --depth "$depth" \
		--capacity 64m --out "$base" "$base.res" 2> "$base.lib.err"; then
		echo "kdiff-rq failed on $pname: $(head -1 "$base.lib.err")" >&2
		err=1
	fi
	compare "$pname" "$base" >> "$results"
	if [ $showdiff = 1 ]; then
		awk -F'\t' -v p="$pname" '$1 == p && $4 == 1 && !($7 && $8) { print $2, $3, ($7 ? "order" : "requests") }' \
			"$results" | while read -r sched nm kind; do
			echo "== $pname $sched nomerges=$nm: $kind differ (kernel | librequest)"
			diff -y -W 60 "$base.$sched.$nm.kernel.1" "$base.$sched.$nm.lib" | head -60
		done
	fi
	if [ -n "$keep" ]; then
		mkdir -p "$keep"
		cp "$base".* "$keep/"
	fi
done

# ---------------------------------------------------------------- report
table() {
	local cols=() s n
	for s in "${sched_list[@]}"; do for n in "${nm_list[@]}"; do cols+=("$s/$n"); done; done
	echo "kernel $(uname -r), $dev over tmpfs (direct-io $dio): max_sectors_kb $max_sectors_kb," \
		"max_segments $max_segments, max_segment_size $max_segment_size, lbs $lbs," \
		"write_cache $wc, fua $fua, depth $depth, nr_requests$(for s in "${sched_list[@]}"; do printf ' %s' "$s=${nr_req[$s]}"; done);" \
		"$runs kernel runs per case"
	echo "cell: = same requests and order, o same requests in another order," \
		"X other requests, ~ kernel not repeatable (dropped); k: a known difference"
	echo
	awk -F'\t' -v cols="${cols[*]}" '
		BEGIN { nc = split(cols, col, " ") }
		{
			key = $2 "/" $3
			cell = $4 == 0 ? "~" : ($7 == 0 ? "X" : ($8 == 0 ? "o" : "="))
			if ($4 == 1 && cell != "=" && $9 != "") cell = cell "k"
			c[$1, key] = cell
			if (!($1 in seen)) { seen[$1] = 1; order[++np] = $1 }
		}
		END {
			printf "%-22s", "pattern"
			for (i = 1; i <= nc; i++) {
				split(col[i], a, "/")
				s = a[1] == "mq-deadline" ? "mq-dl" : a[1]
				printf " %8s", s "/" a[2]
			}
			printf "\n"
			for (p = 1; p <= np; p++) {
				printf "%-22s", order[p]
				for (i = 1; i <= nc; i++) printf " %8s", c[order[p], col[i]]
				printf "\n"
			}
		}' "$results"
	echo
	printf '%-12s %8s %14s %12s %8s\n' scheduler kept "same requests" "same order" dropped
	awk -F'\t' '
		{ if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
		$4 == 0 { drop[$2]++; next }
		{ kept[$2]++; req[$2] += $7; ord[$2] += $8 }
		END {
			for (i = 1; i <= n; i++) { s = order[i]
				printf "%-12s %8d %8d (%3d%%) %6d (%3d%%) %8d\n", s, kept[s], req[s],
					kept[s] ? 100 * req[s] / kept[s] : 0, ord[s],
					kept[s] ? 100 * ord[s] / kept[s] : 0, drop[s] }
		}' "$results"
	if awk -F'\t' '$4 == 0 { f = 1 } END { exit !f }' "$results"; then
		echo
		echo "dropped (the kernel answered differently from run to run):"
		awk -F'\t' '$4 == 0 { printf "  %s %s nomerges=%s\n", $1, $2, $3 }' "$results"
	fi
	if awk -F'\t' '$4 == 1 && !($7 && $8) { f = 1 } END { exit !f }' "$results"; then
		echo
		echo "differences (kept cases):"
		awk -F'\t' '$4 == 1 && !($7 && $8) {
			printf "  %s %s nomerges=%s: %s differ (kernel %d, librequest %d requests)%s\n",
				$1, $2, $3, $7 ? "order" : "requests", $5, $6,
				$9 != "" ? " [known: " $9 "]" : " [UNKNOWN]" }' "$results"
	fi
}

to_json() {
	awk -F'\t' -v kernel="$(uname -r)" -v dio="$dio" -v msk="$max_sectors_kb" \
		-v mseg="$max_segments" -v mss="$max_segment_size" -v lbs="$lbs" -v wc="$wc" \
		-v fua="$fua" -v depth="$depth" -v runs="$runs" '
		function js(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
		BEGIN {
			printf "{\"kernel\":%s,\"direct_io\":%s,\"limits\":{\"max_sectors_kb\":%d,", js(kernel), js(dio), msk
			printf "\"max_segments\":%d,\"max_segment_size\":%d,\"logical_block_size\":%d,", mseg, mss, lbs
			printf "\"write_cache\":%d,\"fua\":%d,\"queue_depth\":%d},\"runs\":%d,\"cases\":[", wc, fua, depth, runs
		}
		{
			if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 }
			if ($4 == 0) drop[$2]++; else { kept[$2]++; req[$2] += $7; ord[$2] += $8 }
			printf "%s{\"pattern\":%s,\"scheduler\":%s,\"nomerges\":%d,\"stable\":%s,", (NR > 1 ? "," : ""), js($1), js($2), $3, $4 ? "true" : "false"
			printf "\"kernel_requests\":%d,\"librequest_requests\":%d,\"same_requests\":%s,\"same_order\":%s,", $5, $6, $7 ? "true" : "false", $8 ? "true" : "false"
			printf "\"known\":%s}", $9 == "" ? "null" : js($9)
		}
		END {
			printf "],\"scores\":{"
			for (i = 1; i <= n; i++) { s = order[i]
				printf "%s%s:{\"kept\":%d,\"same_requests\":%d,\"same_order\":%d,\"dropped\":%d}", (i > 1 ? "," : ""), js(s), kept[s], req[s], ord[s], drop[s]
			}
			printf "}}\n"
		}' "$results"
}

# entries of the known file that no kept difference matched (fixed since?)
stale() {
	[ -f "$known" ] || return 0
	awk -F'\t' 'NR == FNR {
			ran[$1] = 1; ran[$2] = 1
			if ($4 == 1 && !($7 && $8)) { n++; p[n] = $1; s[n] = $2; m[n] = $3; k[n] = $7 ? "order" : "requests" }
			next
		}
		/^[ \t]*(#|$)/ { next }
		{
			split($0, f, " ")
			if (f[5] == "timing:")
				next
			if ((f[1] != "*" && !(f[1] in ran)) || (f[2] != "*" && !(f[2] in ran)))
				next
			for (i = 1; i <= n; i++)
				if ((f[1] == p[i] || f[1] == "*") && (f[2] == s[i] || f[2] == "*") &&
				    (f[3] == m[i] || f[3] == "*") && (f[4] == k[i] || f[4] == "*"))
					next
			printf "  %s %s %s %s\n", f[1], f[2], f[3], f[4]
		}' "$results" "$known"
}

if [ "$json" = - ]; then
	to_json
else
	table
	st=$(stale)
	if [ -n "$st" ]; then
		echo
		echo "known differences that did not occur (fixed? remove them from $(basename "$known")):"
		echo "$st"
	fi
	[ -n "$json" ] && to_json > "$json"
fi
unknown=$(awk -F'\t' '$4 == 1 && !($7 && $8) && $9 == "" { n++ } END { print n + 0 }' "$results")
if [ $check = 1 ] && [ "$unknown" -gt 0 ]; then
	echo "FAIL: $unknown difference(s) not in $known"
	exit 1
fi
exit $err
