#!/bin/bash
# parallel_compare.sh - mcp.parallel's sandbox side, two builds compared in the same run:
# tests/bench/bench_parallel.c linked against the objects of BUILD (default build) and against
# those of a git revision (built once into build-bench-REV/ from `git archive REV`).
#
# Usage: tests/bench/parallel_compare.sh REV [ROUNDS] [RUNS]   (defaults 5 rounds of 400 runs)
# Each round runs both binaries, alternating which goes first, RUNS executions of every
# workload; the figure per workload is the median over the rounds of each round's median (us).
# Then callgrind counts the instructions inside mb_sandbox_run per execution of each workload
# (100 runs each; repeatable, unlike the times). Figures only: exits non-zero only when it
# cannot measure.
set -u
cd "$(dirname "$0")/../.." || exit 1
REV=${1:?usage: parallel_compare.sh REV [ROUNDS] [RUNS]}
ROUNDS=${2:-5}
RUNS=${3:-400}
BUILD=${BUILD:-build}
SHA=$(git rev-parse --short "$REV") || exit 1
BASE=build-bench-$SHA
OUT=$BUILD/bench
PKGS="lua5.4 libuv libpcre2-8 jansson sqlite3 libsodium yaml-0.1"
mkdir -p "$OUT"

link() { # objdir-root source-root output
	local lib="$1/obj/embedded_lua.o" c
	for c in "$2"/src/*.c; do
		[ "$(basename "$c")" = main.c ] || lib="$lib $1/obj/$(basename "$c" .c).o"
	done
	# shellcheck disable=SC2086,SC2046
	gcc -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fno-strict-aliasing \
	  $(pkg-config --cflags $PKGS) -iquote "$2/src" -iquote "$1/gen" tests/bench/bench_parallel.c \
	  $lib $(pkg-config --libs $PKGS) -lhttp_parser -ldl -lpthread -lm -lrt -o "$3"
}

if [ ! -x "$BASE/moonbox" ]; then
	rm -rf "$BASE" && mkdir -p "$BASE/src-tree" || exit 1
	git archive "$REV" | tar -x -C "$BASE/src-tree" || exit 1
	make -C "$BASE/src-tree" BUILD="$PWD/$BASE" -j2 "$PWD/$BASE/moonbox" >/dev/null || exit 1
fi
make BUILD="$BUILD" -j2 "$BUILD/moonbox" >/dev/null || exit 1
link "$BASE" "$BASE/src-tree" "$OUT/bench_parallel_$SHA" || exit 1
link "$BUILD" . "$OUT/bench_parallel_new" || exit 1

A=$OUT/bench_parallel_$SHA
B=$OUT/bench_parallel_new
rm -f "$OUT"/parallel_cmp.*.txt
for r in $(seq 1 "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		"$A" "$RUNS" >> "$OUT/parallel_cmp.old.txt" && "$B" "$RUNS" >> "$OUT/parallel_cmp.new.txt"
	else
		"$B" "$RUNS" >> "$OUT/parallel_cmp.new.txt" && "$A" "$RUNS" >> "$OUT/parallel_cmp.old.txt"
	fi || exit 1
done
med() { # workload file
	sed -n "s/^bench_parallel_$1_us=\([0-9.]*\) .*/\1/p" "$2" | sort -g |
	  awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
cg() { # binary workload -> instructions per execution
	local f
	f=$(mktemp)
	valgrind --tool=callgrind --toggle-collect=mb_sandbox_run --callgrind-out-file="$f" "$1" 100 "$2" \
	  >/dev/null 2>&1
	sed -n 's/^totals: *//p' "$f" | awk '{printf("%.0f", $1 / 100)}'
	rm -f "$f"
}
WORKLOADS=$(sed -n 's/^bench_parallel_\([a-z0-9]*\)_us=.*/\1/p' "$OUT/parallel_cmp.new.txt" | sort -u)
echo "mcp.parallel, sandbox side ($SHA = old, $BUILD = new): median of $ROUNDS rounds of $RUNS runs;"
echo "instructions per execution inside mb_sandbox_run (callgrind, 100 runs)"
printf '| %-10s | %9s | %9s | %6s | %11s | %11s | %6s |\n' workload "old us" "new us" ratio "old instr" "new instr" ratio
printf '|%s|%s|%s|%s|%s|%s|%s|\n' ------------ ----------- ----------- -------- ------------- ------------- --------
for w in base specs2 specs100 named100 tasks100x2 mixed1000; do
	echo "$WORKLOADS" | grep -qx "$w" || continue
	a=$(med "$w" "$OUT/parallel_cmp.old.txt"); b=$(med "$w" "$OUT/parallel_cmp.new.txt")
	ia=""; ib=""
	if command -v valgrind >/dev/null; then ia=$(cg "$A" "$w"); ib=$(cg "$B" "$w"); fi
	awk -v w="$w" -v a="$a" -v b="$b" -v ia="$ia" -v ib="$ib" 'BEGIN {
	  printf("| %-10s | %9.1f | %9.1f | %6.2f | %11s | %11s | %6s |\n", w, a, b, b / a, ia, ib,
	         (ia > 0 ? sprintf("%.2f", ib / ia) : "-")) }'
done
