/* host_seal.h - mb.seal / mb.unseal: tokens a client must hand back unchanged (host_seal.c). */
#ifndef MB_HOST_SEAL_H
#define MB_HOST_SEAL_H
#include <lua.h>

/// Sets seal and unseal in the table on top of the stack (the mb table), with a fresh random key.
void mb_host_seal_open(lua_State *L);

#endif
