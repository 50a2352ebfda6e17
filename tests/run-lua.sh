#!/bin/sh
# Runs the Lua module tests (tests/lua/test_*.lua; tests/lua/harness.lua is what the policy tests
# share, not a test) with the lua5.4 interpreter from the repo root.
# Each prints "N passed, N failed"; this prints the total.
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
for t in tests/lua/test_*.lua; do
  echo "== $t"
  out=$(lua5.4 "$t" 2>&1); rc=$?
  echo "$out" | grep -vE '^(ok|PASS)\b' | tail -20
  p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' | tail -1)
  f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' | tail -1)
  [ -z "$p" ] && { p=0; f=1; echo "  (no summary line, exit $rc)"; }
  [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
  pass=$((pass+p)); fail=$((fail+f))
done
echo "lua: $pass passed, $fail failed"
[ $fail -eq 0 ]
