#!/usr/bin/env bash
# tests/fresh/run.sh - runs `make test` as a fresh Debian 12 machine would (make test-fresh).
#
# Builds (once, cached in build/fresh/base) a minimal bookworm root with debootstrap, copies it,
# installs only what README assumes a user has - Debian's own nodejs and npm (Node 18), make,
# gcc, pkg-config, git - clones the committed HEAD of this repository into it, and runs
# `make test` there inside a chroot with /proc, /sys, /dev and a fresh /tmp. Everything else
# (the build and test packages, npm ci, the pinned Node) must come from `make test` itself.
#
# Needs root and the Debian mirror. Env: FRESH_RUNS (default 1) runs make test that many times
# in a row in the same root; FRESH_MIRROR (default http://deb.debian.org/debian); KEEP=1 keeps
# the root afterwards. Exit status: make test's (the first failing run's).
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT_DIR/build/fresh"
BASE="$OUT/base"
MIRROR=${FRESH_MIRROR:-http://deb.debian.org/debian}
RUNS=${FRESH_RUNS:-1}
[ "$(id -u)" = 0 ] || { echo "test-fresh: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || { "$ROOT_DIR/tools/apt-wait.sh" update -qq && "$ROOT_DIR/tools/apt-wait.sh" install -y -qq debootstrap >/dev/null; }

mkdir -p "$OUT"
if [ ! -f "$BASE/.complete" ]; then
  rm -rf "$BASE"
  echo "test-fresh: debootstrap bookworm (minbase) into $BASE"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$BASE" "$MIRROR" >"$OUT/debootstrap.log" 2>&1 ||
    { tail -20 "$OUT/debootstrap.log"; exit 1; }
  touch "$BASE/.complete"
fi

ROOT="$OUT/root"
MOUNTS=()
cleanup() {
  # kill anything still running inside the root, then unmount in reverse order
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$ROOT"
}
trap cleanup EXIT INT TERM
rm -rf "$ROOT"
cp -a "$BASE" "$ROOT"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# the same apt settings as this machine (e.g. a snapshot mirror that needs Check-Valid-Until off)
cp /etc/apt/apt.conf.d/* "$ROOT/etc/apt/apt.conf.d/" 2>/dev/null || true
# and the same trust: a machine of this kind reaches the registries through a proxy whose CA is
# installed locally and named in npm's config; copy that setup, not anything the project installs
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
fi
for f in /etc/npmrc /usr/etc/npmrc "$HOME/.npmrc"; do
  [ -f "$f" ] && mkdir -p "$ROOT$(dirname "$f")" && cp -a "$f" "$ROOT$f"
done
mnt() { mount "$@"; MOUNTS+=("${@: -1}"); }
mnt -t proc proc "$ROOT/proc"
mnt -t sysfs sys "$ROOT/sys"
mnt --rbind /dev "$ROOT/dev"
mnt -t tmpfs -o size=8g tmpfs "$ROOT/tmp"

echo "test-fresh: installing what a user has: nodejs npm make gcc pkg-config git"
# (apt-get through tools/apt-wait.sh, as everywhere: it waits for a lock instead of failing)
cp "$ROOT_DIR/tools/apt-wait.sh" "$ROOT/tmp/apt-wait.sh"
chroot "$ROOT" /bin/sh -c '/tmp/apt-wait.sh update -qq && /tmp/apt-wait.sh install -y -qq nodejs npm make gcc pkg-config git >/dev/null && update-ca-certificates >/dev/null'
echo "test-fresh: $(chroot "$ROOT" node --version) on PATH"
git clone -q --no-local "$ROOT_DIR" "$ROOT/work/moonbox"
echo "test-fresh: commit $(git -C "$ROOT/work/moonbox" log --oneline -1)"

rc=0
for n in $(seq "$RUNS"); do
  t0=$(date +%s)
  echo "test-fresh: run $n of $RUNS: make test"
  # (chroot keeps this environment, e.g. NODE_EXTRA_CA_CERTS naming the CA bundle copied above)
  if chroot "$ROOT" /bin/bash -c 'cd /work/moonbox && make test' >"$OUT/run-$n.log" 2>&1; then
    echo "test-fresh: run $n passed in $(( $(date +%s) - t0 )) s (log: build/fresh/run-$n.log)"
  else
    rc=$?
    echo "test-fresh: run $n FAILED (exit $rc) after $(( $(date +%s) - t0 )) s; the end of build/fresh/run-$n.log:"
    tail -40 "$OUT/run-$n.log"
    break
  fi
done
exit $rc
