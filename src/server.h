/* server.h - the server: one struct that owns the libuv loop, the transport, the host Lua state
 * and the execution pool, and wires their callbacks together. */
#ifndef MB_LOOP_H
#define MB_LOOP_H

#include "config.h"

/// Runs the stdio server until stdin ends and in-flight work is answered.
/// @returns the process exit code (0 on a clean end)
int mb_server_run_stdio(const mb_config *cfg);

#endif
