/* tokest.h - a cheap estimate of how many model tokens a text is, and the byte and token counts
 * of one execution (what sandbox code took in, per source, and what went back to the model).
 *
 * The estimate is one pass over the bytes with a class per run (ASCII words, digit groups,
 * punctuation, whitespace runs, non-ASCII characters by script); the weights were fitted against
 * @anthropic-ai/tokenizer on a mixed corpus. docs/sandbox.md ("Context saved") has the method and
 * the measured error; tests/integration/savings.test.mjs checks it against the real tokenizer.
 *
 * Thread rules: none; pure functions, no state.
 */
#ifndef MB_TOKEST_H
#define MB_TOKEST_H

#include <stddef.h>
#include <stdint.h>

/* Where bytes taken in by sandbox code came from. Keep in step with mb_io_source_name. */
typedef enum {
	MB_IO_UPSTREAM = 0, /* results of upstream MCP tools (servers.x.y, mcp.call, mcp.parallel) */
	MB_IO_WORKSPACE,    /* the files read_file and json.read_file read */
	MB_IO_CONTEXT,      /* the execution's context_vars */
	MB_IO_SKILLS,       /* skill sources (require, load_skill) and list_skills */
	MB_IO_CATALOG,      /* mcp.tools / pairs(servers): the upstreams' tool listings */
	MB_IO_CLIENT,       /* answers of the client (mcp.sample, mcp.elicit, mcp.ask) and the rest */
	MB_IO_NSOURCES
} mb_io_source;

/* The counts of one execution. Bytes are what crossed into the sandbox (the JSON text of a
 * reply, a file's bytes); out is the execution_code result's structuredContent text. */
typedef struct mb_exec_io {
	uint64_t in_bytes[MB_IO_NSOURCES];
	uint64_t in_tokens[MB_IO_NSOURCES];
	uint64_t out_bytes, out_tokens;
	/* the estimate of the result's own JSON text, made where the result was (a worker), so the
	 * thread that shapes it scans only the frame around it */
	uint64_t result_tokens;
} mb_exec_io;

/// The estimated number of tokens of s (any bytes; invalid UTF-8 counts as other characters).
/// @returns at most len, and at least 1 when len > 0
uint64_t mb_tokest(const char *s, size_t len);

/// Adds len bytes of s to io's source src (bytes and estimated tokens).
void mb_io_add(mb_exec_io *io, mb_io_source src, const char *s, size_t len);

/// The source a host call's reply counts under, from the call's name.
mb_io_source mb_io_source_of_call(const char *name);

/// "upstream", "workspace", "context_vars", "skills", "catalog", "client"
const char *mb_io_source_name(mb_io_source src);

#endif
