/* embedded.h - the trusted Lua modules compiled into the binary (generated from lua/ by
 * tools/embed.c). Module names use dots: lua/mcp/server.lua is "mcp.server". The data is Lua
 * bytecode made at build time by the same Lua library (load it with mode "b"); the chunk name
 * is inside it. */
#ifndef MB_EMBEDDED_H
#define MB_EMBEDDED_H
#include <stddef.h>

typedef struct {
	const char *name;
	const char *data;
	size_t len;
} mb_embedded_file;

/* Terminated by an entry whose name is NULL. */
extern const mb_embedded_file mb_embedded_lua[];

/* Finds a module by name; returns NULL when absent. */
const mb_embedded_file *mb_embedded_find(const char *name);

/* A package.searchers entry (lua_CFunction) that loads the embedded modules: the host state's,
 * and the plain state of `moonbox types` / `moonbox check` (types_cli.c). */
struct lua_State;
int mb_embedded_searcher(struct lua_State *L);

/* Puts mb_embedded_searcher into package.searchers of a state with the standard libraries,
 * before the file searchers (the embedded modules win over files of the same name). */
void mb_embedded_install(struct lua_State *L);

#endif
