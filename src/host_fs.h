/* host_fs.h - file operations for the trusted host Lua on operator-configured directories
 * (skills, catalog): list, stat, capped read, atomic write, remove, mkdir -p. Loop thread only;
 * never exposed to sandbox code. */
#ifndef MB_HOST_FS_H
#define MB_HOST_FS_H

#include <lua.h>

/// Sets field `fs` of the table at the top of the stack to the file-operation table.
void mb_host_fs_open(lua_State *L);

#endif
