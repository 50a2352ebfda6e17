#!/bin/bash
# http_bench.sh - load on the Streamable HTTP endpoint with wrk (Debian): tools/call execute_code
# ("return 1+1") on one session, keep-alive, at 50 then twice 1000 connections (RSS must stay flat),
# 10 s each (HTTP_BENCH_S), with RSS before and after; then sessionless 2026-07-28 requests beside
# session ones, alternating (3 rounds of HTTP_BENCH_S/2 s each at 50 connections), with the median
# of each; then the loop thread's share of a core under a paced load of about 20,000 req/s.
# Figures, not pass/fail. Usage: tests/bench/http_bench.sh [moonbox]
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=${1:-build/moonbox}
DUR=${HTTP_BENCH_S:-10}
command -v wrk >/dev/null || { echo "http bench: wrk is not installed (make test-deps)"; exit 0; }
d=$(mktemp -d)
"$BIN" --data-dir "$d" --http 127.0.0.1:0 --max-queue 100000 2>"$d/err" &
pid=$!
for _ in $(seq 50); do grep -q "serving MCP over HTTP" "$d/err" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/.*serving MCP over HTTP on \(http:[^ ]*\).*/\1/p' "$d/err")
SID=$(curl -s -D - -o /dev/null -X POST "$url" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}' |
  sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: *\([0-9a-f]*\).*/\1/p')
export SID
rss() { awk '/VmRSS/ {printf "%.1f MiB", $2 / 1024}' "/proc/$pid/status"; }
echo "http bench: $url, session ${SID:0:8}..., RSS at start $(rss)"
for c in 50 1000 1000; do
  wrk -t2 -c"$c" -d"${DUR}s" --timeout 10s -s tests/bench/http_wrk.lua "$url" | grep -E "^wrk:|Socket errors" | sed "s/^/  $c connections: /"
  echo "  RSS after $c connections: $(rss)"
done
echo "  2026-07-28 sessionless vs 2025-11-25 session, 50 connections, alternating:"
half=$(( DUR / 2 > 1 ? DUR / 2 : 2 ))
for r in 1 2 3; do
  for m in session stateless; do
    MODE=$m wrk -t2 -c50 -d"${half}s" --timeout 10s -s tests/bench/http_wrk.lua "$url" |
      sed -n "s/^wrk: [0-9]* requests, \([0-9]*\)\/s.*p50 \([0-9.]*\) ms.*that were not a successful execution \([0-9]*\)/$m \1 \2 \3/p"
  done
done | awk '{ n[$1]++; rps[$1, n[$1]] = $2; p50[$1, n[$1]] = $3; bad[$1] += $4 }
  function med(a, k, c,   i, j, t, v) { for (i = 1; i <= c; i++) v[i] = a[k, i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((c + 1) / 2)] }
  END { for (m in n) printf "    %-9s median %s req/s, p50 %s ms (%d rounds; failed answers %d)\n", m,
          med(rps, m, n[m]), med(p50, m, n[m]), n[m], bad[m]
        if (n["session"] && n["stateless"]) printf "    stateless / session: %.2f\n",
          med(rps, "stateless", n["stateless"]) / med(rps, "session", n["session"]) }'
# The loop thread's share of a core at about 20,000 req/s (issue 22's target: below 60%): 200
# connections that each wait PACE_MS before every request, so the server is not saturated; the
# main thread's CPU time (/proc/PID/task/PID/stat: the loop runs on it) over the run, against the
# rate wrk reached. Three rounds; wrk's timer is coarse, so the rate is what it is, reported.
ticks() { awk '{print $14 + $15}' "/proc/$pid/task/$pid/stat"; }
hz=$(getconf CLK_TCK)
echo "  the loop thread under a paced load (200 connections, ${PACE_MS:-9} ms between requests each):"
for r in 1 2 3; do
  t0=$(ticks); s0=$(date +%s%N)
  out=$(PACE_MS=${PACE_MS:-9} wrk -t2 -c200 -d"${half}s" --timeout 10s -s tests/bench/http_wrk.lua "$url")
  t1=$(ticks); s1=$(date +%s%N)
  rate=$(echo "$out" | sed -n 's/^wrk: [0-9]* requests, \([0-9]*\)\/s.*/\1/p')
  awk -v t="$((t1 - t0))" -v hz="$hz" -v ns="$((s1 - s0))" -v rate="$rate" 'BEGIN {
    share = t / hz / (ns / 1e9)
    printf "    %s req/s: loop thread %.0f%% of a core (%.1f us of CPU per request)\n", rate, share * 100,
      (rate > 0 ? share / rate * 1e6 : 0) }'
done
kill -TERM $pid; wait $pid 2>/dev/null
rm -rf "$d"
