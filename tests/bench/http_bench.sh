#!/bin/bash
# http_bench.sh - load on the Streamable HTTP endpoint with wrk (Debian): tools/call execute_code
# ("return 1+1") on one session, keep-alive, at 50 then twice 1000 connections (RSS must stay flat),
# 10 s each (HTTP_BENCH_S),
# with RSS before and after. Figures, not pass/fail. Usage: tests/bench/http_bench.sh [moonbox]
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
kill -TERM $pid; wait $pid 2>/dev/null
rm -rf "$d"
