#!/bin/sh
# Builds the libFuzzer targets tests/fuzz/fuzz_*.c (clang, ASan+UBSan) against all of src/ except
# main.c and runs each one. Every boundary that takes hostile bytes has a target; the top of each
# file says what it feeds and which invariant it checks (a violation aborts).
#
#   tests/fuzz/run.sh [target...]       targets: arguments, else $FUZZ_TARGETS, else all
#   FUZZ_SECONDS=N   run each target N seconds (default 30)
#   FUZZ_RUNS=N      ... or N inputs (-runs=N) instead of a time
#   FUZZ_SMOKE=1     start from the seeds only (a fresh corpus in build-fuzz/<t>.smoke/), not from
#                    the corpus build-fuzz/<t>.corpus/ that normal runs grow and keep
#   FUZZ_JOBS=N      parallel compiler jobs (default: number of CPUs)
#   FUZZ_BUILD=dir   where objects, binaries, corpora and logs go (default build-fuzz)
#
# Objects are built once into build-fuzz/obj/ and rebuilt only when a source, a header or the
# flags change, so every target (and the next run) reuses them; the pkg-config packages come from
# the Makefile (make print-pkgs). Seeds: tests/fuzz/seeds/<t>/; a dictionary tests/fuzz/<t>.dict
# is used when present; a line "FUZZ_OPTIONS: ..." in the first 60 lines of a target adds
# libFuzzer options (its words that start with "-"). Crashes go to build-fuzz/<t>.crashes/ and
# fail the run; the log is build-fuzz/<t>.log. Prints one line per target (executions, seconds,
# coverage as cov: edges and ft: features, corpus size), then "N passed, N failed".
set -eu
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-30}
runs=${FUZZ_RUNS:-}
smoke=${FUZZ_SMOKE:-0}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
out=${FUZZ_BUILD:-build-fuzz}
mkdir -p "$out/obj"

# The embedded Lua modules, generated into build-fuzz/gen (never into another build's tree).
make --no-print-directory BUILD=$out $out/gen/embedded_lua.c >/dev/null

pkgs=$(make --no-print-directory -s print-pkgs)   # the Makefile's list
flags="-g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -iquote src -iquote $out/gen $(pkg-config --cflags $pkgs)"
libs="$(pkg-config --libs $pkgs) -lhttp_parser -ldl -lpthread -lm -lrt"

# Rebuild everything when the flags change; otherwise only what is older than its source or
# than the newest header.
stamp="$out/obj/.flags"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$flags" ]; then
  rm -f "$out"/obj/*.o
  printf '%s' "$flags" > "$stamp"
fi
newest_h=$(ls -t src/*.h | head -1)
objs=""
todo=""
for f in src/*.c $out/gen/embedded_lua.c; do
  [ "$(basename "$f")" = main.c ] && continue
  o="$out/obj/$(basename "$f" .c).o"
  objs="$objs $o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ "$newest_h" -nt "$o" ]; then
    todo="$todo $f"
  fi
done
if [ -n "$todo" ]; then
  echo "compiling$(echo $todo | wc -w | sed 's/^/ /') sources into $out/obj ($jobs jobs)"
  # shellcheck disable=SC2086
  printf '%s\n' $todo | xargs -P "$jobs" -I{} sh -c \
    'f={}; clang '"$flags"' -fsanitize=fuzzer-no-link -c "$f" -o "'"$out"'/obj/$(basename "$f" .c).o"'
fi
newest_o=$(ls -t $objs | head -1)

all=$(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//')
targets=${*:-${FUZZ_TARGETS:-$all}}
for t in $targets; do
  [ -f "tests/fuzz/$t.c" ] || { echo "no target tests/fuzz/$t.c (have: $(echo $all))"; exit 2; }
done
# Link the targets (in parallel) before running any.
tolink=""
for t in $targets; do
  b="$out/$t"
  if [ ! -f "$b" ] || [ "tests/fuzz/$t.c" -nt "$b" ] || [ "$newest_o" -nt "$b" ] ||
     [ -n "$(find tests/fuzz tests/unit -name '*.h' -newer "$b" 2>/dev/null | head -1)" ]; then
    tolink="$tolink $t"
  fi
done
if [ -n "$tolink" ]; then
  # shellcheck disable=SC2086
  printf '%s\n' $tolink | xargs -P "$jobs" -I{} sh -c \
    'clang '"$flags"' -fsanitize=fuzzer tests/fuzz/{}.c '"$objs $libs"' -o '"$out"'/{}'
fi

# Data directories of targets that crashed (a clean exit removes its own): /dev/shm/moonbox-fuzz-*-PID
for d in /dev/shm/moonbox-fuzz-*; do
  [ -d "$d" ] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
done

fail=0
passed=0
failed=0
for t in $targets; do
  opts="-max_len=4096 -print_final_stats=1"
  extra=$(head -60 "tests/fuzz/$t.c" | sed -n 's/.*FUZZ_OPTIONS://p' | head -1 | tr ' ' '\n' | grep -- '^-' | tr '\n' ' ' || true)
  [ -n "$extra" ] && opts="$opts $extra"
  [ -f "tests/fuzz/$t.dict" ] && opts="$opts -dict=tests/fuzz/$t.dict"
  if [ -n "$runs" ]; then opts="$opts -runs=$runs"; what="$runs runs"; else opts="$opts -max_total_time=$secs"; what="$secs s"; fi
  mkdir -p "$out/$t.crashes"
  seeds=""
  [ -d "tests/fuzz/seeds/$t" ] && seeds="tests/fuzz/seeds/$t"
  if [ "$smoke" = 1 ]; then
    corpus="$out/$t.smoke"
    rm -rf "$corpus"
    mkdir -p "$corpus"
  else
    corpus="$out/$t.corpus"
    mkdir -p "$corpus"
    [ -n "$seeds" ] && cp -n "$seeds"/* "$corpus/" 2>/dev/null || true
    seeds=""
  fi
  echo "== $t ($what)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  if ! "$out/$t" $opts -artifact_prefix="$out/$t.crashes/" "$corpus" $seeds >"$out/$t.log" 2>&1; then
    echo "  FAILED: see $out/$t.log and $out/$t.crashes/"; tail -40 "$out/$t.log"; fail=1
    failed=$((failed + 1))
  else
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$out/$t.log" | tail -1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
    echo "  $t: ${execs:-?} execs in $(( $(date +%s) - start )) s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, no findings"
    passed=$((passed + 1))
  fi
done
echo "$passed passed, $failed failed"
exit $fail
