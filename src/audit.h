/* audit.h - the audit trail's hash chain (docs/audit.md).
 *
 * Every audit record carries `prev` (the hash of the record before it) and `hash`, a keyed
 * BLAKE2b-256 over prev and the record's own fields. The key is derived from the PII token key
 * (pii.key), so whoever can edit the store but not read the key file cannot make a changed or
 * shortened chain verify again. host.c hashes for the writer (lua/mcp/audit.lua, mb.audit_hash);
 * `moonbox --verify-audit` walks the chain in the store with the same function.
 */
#ifndef MB_AUDIT_H
#define MB_AUDIT_H

#include <stddef.h>

#define MB_AUDIT_KEY_BYTES 32
#define MB_AUDIT_HEX 65 /* 64 hex digits and a NUL */

/* The fields of a record in the order they are hashed (after prev): at (decimal ms), tenant,
 * principal, client, kind, subject, detail. */
#define MB_AUDIT_NFIELDS 7

/// Derives the chain key from the PII token key (32 bytes each).
void mb_audit_key(const unsigned char pii_key[32], unsigned char key[MB_AUDIT_KEY_BYTES]);

/// hex = keyed BLAKE2b-256(prev, fields...) in lowercase hex. A NULL field (SQL NULL) hashes
/// differently from an empty one; every part is length-prefixed, so no two records share an
/// input. prev may be NULL (the first record).
void mb_audit_hash(const unsigned char key[MB_AUDIT_KEY_BYTES], const char *prev, size_t prev_len,
		   const char *const fields[MB_AUDIT_NFIELDS], const size_t lens[MB_AUDIT_NFIELDS],
		   char hex[MB_AUDIT_HEX]);

/// `moonbox --verify-audit [server options]`: 0 the chain holds, 1 a record does not verify
/// (named on stderr), 2 bad options or the store cannot be read.
int mb_audit_verify_main(int argc, char **argv);

#endif
