#!/bin/sh
# tools/apt-wait.sh - apt-get that waits for apt's and dpkg's locks instead of failing at once.
#
# Usage: tools/apt-wait.sh APT-GET-ARGUMENTS...   (as root, or under sudo)
#
# A fresh cloud machine often runs unattended-upgrades or cloud-init's apt-get while `make`
# installs its packages, and apt-get then fails at once with "Could not get lock". Every apt
# call of the Makefile and the tests goes through this script (tests/install/apt_wait.sh checks
# that and the waiting itself). Two locks, two ways:
# - dpkg's (/var/lib/dpkg/lock-frontend, taken by install, remove, purge): apt's own
#   DPkg::Lock::Timeout makes apt-get wait for it;
# - the package lists' (/var/lib/apt/lists/lock, taken by update): apt 2.6 does not apply that
#   timeout to it, so a run that failed on a lock is run again every 2 s.
# Both wait at most MOONBOX_APT_LOCK_TIMEOUT seconds in all (default 300); after that the last
# error is printed with a line naming the variable. DEBIAN_FRONTEND is noninteractive.
set -u
limit=${MOONBOX_APT_LOCK_TIMEOUT:-300}
case $limit in '' | *[!0-9]*)
	echo "apt-wait: MOONBOX_APT_LOCK_TIMEOUT must be a number of seconds, not \"$limit\"" >&2
	exit 2 ;;
esac
deadline=$(($(date +%s) + limit))
err=$(mktemp "${TMPDIR:-/tmp}/apt-wait-XXXXXX") || exit 2
trap 'rm -f "$err"' EXIT
said=
while :; do
	left=$((deadline - $(date +%s)))
	[ "$left" -gt 0 ] || left=0
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$left" "$@" 2>"$err"
	rc=$?
	locked=
	grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' "$err" && locked=1
	if [ "$rc" = 0 ] || [ -z "$locked" ] || [ "$(date +%s)" -ge "$deadline" ]; then
		cat "$err" >&2
		if [ "$rc" != 0 ] && [ -n "$locked" ]; then
			echo "apt-wait: apt's lock was still held after $limit s (MOONBOX_APT_LOCK_TIMEOUT=$limit; set it higher to wait longer)" >&2
		fi
		exit "$rc"
	fi
	if [ -z "$said" ]; then
		echo "apt-wait: another apt-get or dpkg holds its lock; waiting for it, at most $limit s (MOONBOX_APT_LOCK_TIMEOUT)" >&2
		said=1
	fi
	sleep 2
done
