# moonbox - build, dependencies, tests, run, bench, fuzz.
#
#   make          build build/moonbox
#   make run      install missing Debian packages, build, serve MCP on stdio with ./data
#   make test     install what tests need, build, run every test (unit, Lua, integration, security)
#   make bench    benchmarks (figures, not pass/fail)
#   make fuzz     build and briefly run the libFuzzer targets
#
# Dependencies come from Debian packages found with pkg-config (see vendor/manifest.txt).
# LUA_PKG selects the Lua 5.4 to link, e.g. `make LUA_PKG=lua54-custom`.

LUA_PKG   ?= lua5.4
PKGS      := $(LUA_PKG) libuv libpcre2-8 jansson sqlite3 libsodium
# libcurl: headers only; src/curl_load.c opens libcurl.so.4 at the first HTTP upstream request
CURL_PKG  := libcurl
DEB_PKGS  := liblua5.4-dev libuv1-dev libpcre2-dev libjansson-dev libsqlite3-dev libsodium-dev lua-cjson-dev \
             libhttp-parser-dev libcurl4-openssl-dev pkg-config gcc make
TEST_DEB_PKGS := valgrind clang libclang-rt-14-dev lua5.4 sqlite3 wrk openssl

CC        ?= gcc
BUILD     ?= build
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

.PHONY: all deps test-deps run test test-unit test-lua test-valgrind test-integration test-security \
        test-asan bench fuzz clean conformance

all: $(BUILD)/moonbox

# ---- dependencies -------------------------------------------------------------------------
# Installs any missing Debian package; silent and idempotent when all are present.
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

test-deps: deps
	@missing=$$(for p in $(TEST_DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
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
	$(CC) $(CFLAGS) -Itests/unit $< $(LIB_OBJ) $(LDLIBS) -o $@

# ---- run -----------------------------------------------------------------------------------
# stdout carries MCP messages only: build output goes to stderr.
run:
	@$(MAKE) --no-print-directory deps all >&2
	@mkdir -p data
	@exec ./$(BUILD)/moonbox --data-dir ./data --skills-dir ./skills --catalog-dir ./catalog

# ---- tests ---------------------------------------------------------------------------------
# `make test` runs the C unit tests and Lua tests under ASan+UBSan, then the integration and
# security tests against the normal build, then the official MCP conformance suite over HTTP. Each suite prints "N passed, N failed".
test: test-deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory test-lua test-valgrind test-integration test-security conformance

test-unit: $(UNIT_BIN)
	@tests/run-unit.sh $(UNIT_BIN)

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan CC=clang \
	  OPTFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  test-unit

test-lua:
	@tests/run-lua.sh

test-valgrind: $(BUILD)/moonbox $(BUILD)/tests/test_config $(BUILD)/tests/test_lua_sandbox \
               $(BUILD)/tests/test_store $(BUILD)/tests/test_host_uv $(BUILD)/tests/test_host_http \
               $(BUILD)/tests/test_host_proc
	@BUILD=$(BUILD) tests/run-valgrind.sh

test-integration: $(BUILD)/moonbox
	@cd tests && MOONBOX=../$(BUILD)/moonbox node --test --test-reporter=spec integration/

test-security: $(BUILD)/moonbox
	@cd tests && MOONBOX=../$(BUILD)/moonbox node --test --test-reporter=spec security/

# The official MCP conformance suite over Streamable HTTP with the fixture skill pack
# (tests/conformance/skills); REQUIREMENTS=2025-11-25 by default.
conformance: test-deps all
	@MOONBOX=$(BUILD)/moonbox tests/conformance/run.sh

# ---- bench and fuzz ------------------------------------------------------------------------
bench: test-deps all
	@tests/bench/run.sh

fuzz: deps
	@tests/fuzz/run.sh

clean:
	rm -rf build build-asan build-fuzz
