#!/bin/sh
# ThreadSanitizer on one real server session (make test-tsan, after the pool and wake-up unit
# tests): the binary built with -fsanitize=thread serves tests/valgrind/session.jsonl over stdio
# (executions on worker threads that succeed, fail and time out, skills, a published skill, the
# workspace, stats, resources, EOF). Any ThreadSanitizer report, a non-zero exit or a missing
# answer fails. Usage: tests/run-tsan-session.sh BUILD/moonbox
bin=${1:?usage: run-tsan-session.sh path/to/moonbox}
cd "$(dirname "$0")/.." || exit 1
d=$(mktemp -d)
out=$(mktemp)
err=$(mktemp)
# (threads: the session is about the server's own threads; worker processes are tested elsewhere)
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$bin" --data-dir "$d" --log-level error --isolation thread \
  < tests/valgrind/session.jsonl > "$out" 2> "$err"
rc=$?
n=$(grep -c '"jsonrpc"' "$out")
fail=0
if [ $rc -ne 0 ]; then fail=1; echo "FAIL the server exited $rc"; fi
if grep -q "ThreadSanitizer" "$err"; then fail=1; grep -A30 "WARNING: ThreadSanitizer" "$err" | head -60; fi
# 63 answers + 3 list_changed notifications, as in tests/run-valgrind.sh
if [ "$n" -ne 66 ]; then fail=1; echo "FAIL the session answered $n of 66 messages"; fi
rm -rf "$d" "$out" "$err"
if [ $fail -eq 0 ]; then echo "tsan session: 1 passed, 0 failed"; else echo "tsan session: 0 passed, 1 failed"; fi
exit $fail
