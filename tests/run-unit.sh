#!/bin/sh
# Runs every C unit-test binary given on the command line and prints one total line.
pass=0; fail=0
for t in "$@"; do
  echo "== $t"
  out=$("$t" 2>&1); rc=$?
  echo "$out" | grep -v '^ok ' 
  p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' | tail -1)
  f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' | tail -1)
  [ -z "$p" ] && { p=0; f=1; echo "  (no summary line: crashed? exit $rc)"; }
  [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
  pass=$((pass+p)); fail=$((fail+f))
done
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ]
