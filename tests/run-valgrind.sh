#!/bin/sh
# valgrind memcheck on a subset (DESIGN.md): unit-test binaries of the normal build (config,
# sandbox, store, timers/watchers: libuv handles are invisible to ASan) and a short real server
# session over stdio (initialize, executions that succeed, fail, time out, use re/json/the
# prelude, a parse error, stats, skills, workspace, resources, EOF). Any memory error or definite leak fails.
# Prints "valgrind: N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}
pass=0; fail=0
run() { # name command...
  name=$1; shift
  if valgrind -q --child-silent-after-fork=yes --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$@" \
       >/tmp/moonbox-vg.out 2>/tmp/moonbox-vg.err; then
    pass=$((pass+1)); echo "ok   $name"
  else
    fail=$((fail+1)); echo "FAIL $name"; tail -30 /tmp/moonbox-vg.err
  fi
}
run test_config "$B/tests/test_config"
run test_lua_sandbox "$B/tests/test_lua_sandbox"
run test_store "$B/tests/test_store"
run test_host_uv "$B/tests/test_host_uv"
run test_host_http_client "$B/tests/test_host_http_client"
run test_host_proc "$B/tests/test_host_proc"
d=$(mktemp -d)
run "server session" sh -c "exec $B/moonbox --data-dir $d --log-level error --isolation thread < tests/valgrind/session.jsonl"
n=$(grep -c '"jsonrpc"' /tmp/moonbox-vg.out)
# 63 answers + 3 list_changed notifications (tools, prompts, resources) after the skill is
# published as a tool
if [ "$n" -ne 66 ]; then fail=$((fail+1)); echo "FAIL server session answered $n of 66 messages"; fi
rm -rf "$d"
echo "valgrind: $pass passed, $fail failed"
[ $fail -eq 0 ]
