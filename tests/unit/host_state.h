/* host_state.h - helpers for the unit tests that build a real trusted host with mb_host_new
 * (test_host_api, test_pii_vault, test_skill_save): the host's send callback that drops what
 * the host writes, and a runner for Lua code in the host state. */
#ifndef MB_UNIT_HOST_STATE_H
#define MB_UNIT_HOST_STATE_H

#include <lauxlib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "host.h"

/* mb_host_io.send for tests that do not read the host's messages: frees them. */
static inline int unit_host_discard(void *ud, uint64_t session, uint64_t exchange, int final,
				    int status, char *data, size_t len, char *err, size_t errlen)
{
	(void)ud;
	(void)err;
	(void)errlen;
	(void)status;
	(void)session;
	(void)exchange;
	(void)final;
	(void)len;
	free(data);
	return 0;
}

/* Runs prelude and code as one chunk in the host state of h (prelude brings modules into scope,
 * e.g. "local pii = require('mcp.pii')"); the first result as a string (a static buffer), or
 * "ERR: <message>". */
static inline const char *unit_host_run(mb_host *h, const char *prelude, const char *code)
{
	static char out[4096];
	lua_State *L = mb_host_state(h);
	char chunk[8192];
	snprintf(chunk, sizeof chunk, "%s %s", prelude, code);
	if (luaL_dostring(L, chunk) != LUA_OK) {
		snprintf(out, sizeof out, "ERR: %s", lua_tostring(L, -1));
		lua_settop(L, 0);
		return out;
	}
	snprintf(out, sizeof out, "%s", luaL_tolstring(L, -1, NULL));
	lua_settop(L, 0);
	return out;
}

#endif
