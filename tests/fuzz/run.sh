#!/bin/sh
# Builds every libFuzzer target tests/fuzz/fuzz_*.c (clang, ASan+UBSan) against all of src/
# except main.c, then runs each for FUZZ_SECONDS (default 30). Crashes are written to
# build-fuzz/<target>/ and fail the run. Usage: tests/fuzz/run.sh [target...]
set -eu
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-30}
out=build-fuzz
mkdir -p "$out/obj"
make --no-print-directory build/gen/embedded_lua.c >/dev/null
flags="-g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -std=c11 -D_GNU_SOURCE -iquote src -iquote build/gen $(pkg-config --cflags lua5.4 libuv libpcre2-8 jansson sqlite3 libsodium libcurl)"
libs="$(pkg-config --libs lua5.4 libuv libpcre2-8 jansson sqlite3 libsodium libcurl) -lhttp_parser -lpthread -lm"
objs=""
for f in src/*.c build/gen/embedded_lua.c; do
  [ "$(basename "$f")" = main.c ] && continue
  o="$out/obj/$(basename "$f" .c).o"
  clang $flags -fsanitize=fuzzer-no-link -c "$f" -o "$o"
  objs="$objs $o"
done
targets=${*:-$(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//')}
fail=0
for t in $targets; do
  clang $flags -fsanitize=fuzzer "tests/fuzz/$t.c" $objs $libs -o "$out/$t"
  mkdir -p "$out/$t.corpus" "$out/$t.crashes"
  [ -d "tests/fuzz/seeds/$t" ] && cp -n tests/fuzz/seeds/"$t"/* "$out/$t.corpus/" 2>/dev/null || true
  echo "== $t ($secs s)"
  if ! "$out/$t" -max_total_time="$secs" -max_len=4096 -artifact_prefix="$out/$t.crashes/" \
       "$out/$t.corpus" 2>"$out/$t.log"; then
    echo "  FAILED: see $out/$t.log and $out/$t.crashes/"; tail -30 "$out/$t.log"; fail=1
  else
    grep -E '^(Done|#[0-9]+.*(DONE|pulse))' "$out/$t.log" | tail -1
  fi
done
exit $fail
