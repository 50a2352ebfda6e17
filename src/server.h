/* server.h - the server: one struct that owns the libuv loop, the transport, the host Lua state
 * and the execution pool, and wires their callbacks together. */
#ifndef MB_LOOP_H
#define MB_LOOP_H

#include "config.h"

/// Runs the server (stdio, or HTTP when http_listen is set) until stdin ends (or a signal) and
/// in-flight work is answered. before_pool(ud), when given, runs once just before the execution
/// pool is made, after the store, the host and the PII detector: main.c settles isolation = auto
/// there, so that its probe overlaps the rest of start-up (cfg->isolation is read from then on).
/// @returns the process exit code (0 on a clean end)
int mb_server_run_stdio(const mb_config *cfg, void (*before_pool)(void *ud), void *ud);

#endif
