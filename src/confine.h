/* confine.h - a worker process confines itself before it runs untrusted code (isolation mode
 * `process`, tracker issue 15).
 *
 * After mb_confine returns 0 the process has no descriptor but 0, 1, 2 and the channel, cannot
 * gain privileges, open a file, make a socket, start a process or signal another one, and any
 * system call outside a short allow-list kills it with SIGSYS. The layers, what each stops and
 * the allow-list with the reason for every entry are in docs/security.md ("Process confinement")
 * and in the table at the top of confine.c.
 *
 * Thread rules: call it once, on the only thread of the process (it refuses more), after
 * everything that needs files, sockets or new descriptors is done (Lua, the PII detector, signal
 * handlers). It cannot be undone. The caller must exit when it fails: never run code half
 * confined.
 *
 * Side effects besides the confinement: TZ is set to ":/etc/localtime" when it was unset and the
 * zone is loaded (glibc would otherwise look at the file again on every mktime, which the filter
 * kills); SIGXFSZ is ignored (a write to stderr redirected to a regular file then fails with EFBIG
 * under RLIMIT_FSIZE 0 instead of killing the process).
 */
#ifndef MB_CONFINE_H
#define MB_CONFINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	int channel_fd;         /* kept open besides 0, 1, 2; the only descriptor read from */
	uint64_t address_space; /* RLIMIT_AS in bytes; 0 = leave it */
} mb_confine_opts;

/* What took effect. */
typedef struct {
	int seccomp;      /* 1: the syscall filter is loaded */
	int landlock;     /* the Landlock ABI version the ruleset was made for; 0: none (kernel lacks it) */
	int no_new_privs; /* 1: PR_SET_NO_NEW_PRIVS is set */
} mb_confine_report;

/// Drops everything the worker does not need; call once, single-threaded, after init.
/// @param o      the channel descriptor and the address-space limit
/// @param rep    filled with what took effect (may be NULL)
/// @param err    receives the reason on failure
/// @returns 0, or -1 with err set (the caller then exits: never run code unconfined). Only a
///          kernel without Landlock is tolerated; a kernel without seccomp is a failure.
int mb_confine(const mb_confine_opts *o, mb_confine_report *rep, char *err, size_t errlen);

#endif
