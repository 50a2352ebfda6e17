/* TEMPORARY STUB (replaced by the confine branch) */
#ifndef MB_CONFINE_H
#define MB_CONFINE_H
#include <stddef.h>
#include <stdint.h>
typedef struct {
	int channel_fd;
	uint64_t address_space;
} mb_confine_opts;
typedef struct { int seccomp, landlock, no_new_privs; } mb_confine_report;
int mb_confine(const mb_confine_opts *o, mb_confine_report *rep, char *err, size_t errlen);
#endif
