#!/bin/sh
# tests/install/apt_wait.sh - tools/apt-wait.sh waits for a held apt or dpkg lock instead of
# failing, and every apt-get call of the Makefile, tests/ and tools/ goes through it.
#
# The locks are held on a private copy of apt's state (Dir::State::Lists, Dir::State::status and
# Dir::Cache point into a temporary directory), so the machine's own apt is never locked or
# changed: `update` with no sources and `remove` of nothing only take the locks and read. The
# lock holder is a small python3 process taking the same fcntl lock apt takes; without python3
# or apt-get the waiting checks are skipped (the grep check still runs). make test-install runs it.
# Usage: tests/install/apt_wait.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }

# 1. Every apt-get that runs goes through tools/apt-wait.sh: lines that call apt-get, apart
# from comments, messages and `command -v`, and apart from the script itself and this test
# (whose plain apt-get shows that the held lock makes apt-get fail).
# Text in double quotes is a message or a label, so it is dropped before looking.
call='(^|[^-./a-z])apt-get( |$)'
bad=$(grep -rnE "$call" Makefile tests tools --exclude-dir=node_modules |
	grep -vE '^[^:]+:[0-9]+:[[:space:]]*#' |
	grep -vE '^(tools/apt-wait\.sh|tests/install/apt_wait\.sh):' |
	grep -v 'command -v apt-get' |
	while IFS= read -r line; do
		printf '%s\n' "${line#*:*:}" | sed -E 's/"[^"]*"//g' | grep -qE "$call" && printf '%s\n' "$line"
	done)
if [ -z "$bad" ]; then ok "every apt-get call goes through tools/apt-wait.sh"; else
	not_ok "apt-get called directly (use tools/apt-wait.sh):"; printf '%s\n' "$bad" | sed 's/^/    /'; fi

if ! command -v apt-get >/dev/null || ! command -v python3 >/dev/null; then
	echo "apt_wait: waiting checks skipped (need apt-get and python3)"
	echo "apt_wait: $passed passed, $failed failed"
	[ "$failed" = 0 ]
	exit
fi

tmp=$(mktemp -d /tmp/moonbox-aptwait-XXXXXX)
holder=
cleanup() {
	[ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir -p "$tmp/lists/partial" "$tmp/dpkg" "$tmp/cache/archives/partial"
cp /var/lib/dpkg/status "$tmp/dpkg/status"
PRIV="-o Dir::State::Lists=$tmp/lists/ -o Dir::State::status=$tmp/dpkg/status -o Dir::Cache=$tmp/cache
 -o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts=$tmp/none"

# hold LOCKFILE SECONDS: takes apt's fcntl lock on LOCKFILE for SECONDS; returns once it is held.
hold() {
	rm -f "$tmp/held"
	python3 -c '
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX)
open(sys.argv[3], "w").close()
time.sleep(float(sys.argv[2]))' "$1" "$2" "$tmp/held" &
	holder=$!
	while [ ! -e "$tmp/held" ]; do kill -0 "$holder" 2>/dev/null || return 1; sleep 0.05; done
}
release() { [ -n "$holder" ] && wait "$holder" 2>/dev/null; holder=; }
stop_holder() { [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null; holder=; }

for what in "update:lists/lock" "remove -y:dpkg/lock-frontend"; do
	verb=${what%%:*}
	lock=$tmp/${what#*:}
	# The set-up really locks: plain apt-get fails at once (what `make` did before).
	hold "$lock" 60
	# shellcheck disable=SC2086
	if apt-get $PRIV $verb >"$tmp/out" 2>&1; then not_ok "plain apt-get $verb fails on the held lock"; else
		grep -q 'Could not get lock' "$tmp/out" && ok "plain apt-get $verb fails on the held lock (\"Could not get lock\")" ||
			{ not_ok "plain apt-get $verb fails on the held lock"; sed 's/^/    /' "$tmp/out"; }
	fi
	stop_holder
	# tools/apt-wait.sh waits until the holder lets go (after 3 s; it may wait up to 60 s).
	hold "$lock" 3
	# shellcheck disable=SC2086
	if MOONBOX_APT_LOCK_TIMEOUT=60 tools/apt-wait.sh $PRIV $verb >"$tmp/out" 2>&1; then
		ok "tools/apt-wait.sh $verb waits for the held lock and succeeds"
	else
		not_ok "tools/apt-wait.sh $verb waits for the held lock and succeeds"; sed 's/^/    /' "$tmp/out"
	fi
	release
	# A lock held past MOONBOX_APT_LOCK_TIMEOUT fails, naming the variable.
	hold "$lock" 60
	# shellcheck disable=SC2086
	if MOONBOX_APT_LOCK_TIMEOUT=1 tools/apt-wait.sh $PRIV $verb >"$tmp/out" 2>&1; then
		not_ok "tools/apt-wait.sh $verb gives up after MOONBOX_APT_LOCK_TIMEOUT"
	elif grep -q 'MOONBOX_APT_LOCK_TIMEOUT=1' "$tmp/out"; then
		ok "tools/apt-wait.sh $verb gives up after MOONBOX_APT_LOCK_TIMEOUT, naming it"
	else
		not_ok "tools/apt-wait.sh $verb gives up after MOONBOX_APT_LOCK_TIMEOUT, naming it"; sed 's/^/    /' "$tmp/out"
	fi
	stop_holder
done

echo "apt_wait: $passed passed, $failed failed"
[ "$failed" = 0 ]
