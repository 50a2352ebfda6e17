/* protocol.h - the MCP protocol revisions moonbox speaks, in one place.
 *
 * Read by the HTTP transport (the MCP-Protocol-Version header, src/http.c) and, through
 * mb.protocol (src/host.c), by the JSON-RPC layer (initialize's negotiation, lua/mcp/server.lua)
 * and the upstream client (lua/mcp/upstream.lua). A new revision is added here and nowhere else.
 */
#ifndef MB_PROTOCOL_H
#define MB_PROTOCOL_H

/// Revisions served without a handshake or session (every request carries its version in
/// _meta; lua/mcp/modern.lua), newest first, NULL-terminated.
static const char *const mb_protocol_modern[] = { "2026-07-28", NULL };

/// Revisions moonbox serves with initialize and sessions, newest first (the first is what initialize offers by default),
/// NULL-terminated.
static const char *const mb_protocol_served[] = { "2025-11-25", "2025-06-18", "2025-03-26", NULL };

/// Revisions accepted from an upstream server in its initialize answer, newest first: the
/// served ones and older ones whose messages moonbox's client still reads. NULL-terminated.
static const char *const mb_protocol_upstream[] = { "2025-11-25", "2025-06-18", "2025-03-26",
						    "2024-11-05", NULL };

#endif
