/* pg_cluster.h - a throwaway PostgreSQL cluster for C unit tests: initdb into a temporary
 * directory, the postmaster on a Unix socket in that directory only (listen_addresses=''),
 * trust authentication, fsync off. As root the programs run as the user "postgres" (postgres
 * refuses root). The postmaster is this process's child with PR_SET_PDEATHSIG=SIGKILL, so it
 * dies with the test even when the test is killed; pg_cluster_stop kills it (immediate
 * shutdown) and reaps it. The binaries come from $PG_BIN, else the newest
 * /usr/lib/postgresql/<v>/bin; without them pg_cluster_init returns 1 and the test skips. */
#ifndef MB_PG_CLUSTER_H
#define MB_PG_CLUSTER_H

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	char bin[256];       /* directory of initdb and postgres */
	char dir[128];       /* the temporary directory: data/, the socket, logs */
	char conninfo[320];  /* "host=<dir> dbname=postgres user=postgres" */
	uid_t uid;           /* who runs the programs (as root: postgres) */
	gid_t gid;
	int drop;            /* 1 when running as root: change to uid/gid in the children */
	pid_t pid;           /* the postmaster, 0 when stopped */
	int durable;         /* set before pg_cluster_start: fsync and full-page writes on (benches) */
} pg_cluster;

/* The child side of running a program as the cluster's user, output to log. */
static inline void pg_cluster_child(const pg_cluster *c, const char *log, int deathsig)
{
	pid_t parent = getppid();
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	if (c->drop && (setgroups(0, NULL) != 0 || setgid(c->gid) != 0 || setuid(c->uid) != 0))
		_exit(126);
	if (deathsig && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent))
		_exit(126); /* set after setuid, which clears it; the parent may be gone already */
}

/* 0: made; 1: no PostgreSQL binaries (reason printed); -1: failure (printed). */
static inline int pg_cluster_init(pg_cluster *c)
{
	memset(c, 0, sizeof *c);
	const char *env = getenv("PG_BIN");
	if (env && *env) {
		snprintf(c->bin, sizeof c->bin, "%s", env);
	} else {
		glob_t g;
		if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) != 0 || !g.gl_pathc) {
			printf("skipped: no PostgreSQL binaries (/usr/lib/postgresql/*/bin; set PG_BIN; "
			       "Debian package postgresql)\n");
			return 1;
		}
		/* the newest version: compare numerically, "15" > "9.6" */
		size_t best = 0;
		for (size_t i = 1; i < g.gl_pathc; i++)
			if (atof(g.gl_pathv[i] + 20) > atof(g.gl_pathv[best] + 20))
				best = i;
		snprintf(c->bin, sizeof c->bin, "%s", g.gl_pathv[best]);
		*strrchr(c->bin, '/') = 0;
		globfree(&g);
	}
	char prog[320];
	snprintf(prog, sizeof prog, "%s/initdb", c->bin);
	if (access(prog, X_OK) != 0) {
		printf("skipped: %s is not there\n", prog);
		return 1;
	}
	c->uid = getuid();
	c->gid = getgid();
	if (geteuid() == 0) {
		struct passwd *pw = getpwnam("postgres");
		if (!pw) {
			printf("skipped: running as root and there is no user postgres to run PostgreSQL\n");
			return 1;
		}
		c->uid = pw->pw_uid;
		c->gid = pw->pw_gid;
		c->drop = 1;
	}
	snprintf(c->dir, sizeof c->dir, "/tmp/mb-pg-XXXXXX");
	if (!mkdtemp(c->dir)) {
		perror("mkdtemp");
		return -1;
	}
	if (c->drop && chown(c->dir, c->uid, c->gid) != 0) {
		perror("chown");
		return -1;
	}
	snprintf(c->conninfo, sizeof c->conninfo, "host=%s dbname=postgres user=postgres", c->dir);
	char data[200], log[200];
	snprintf(data, sizeof data, "%s/data", c->dir);
	snprintf(log, sizeof log, "%s/initdb.log", c->dir);
	pid_t p = fork();
	if (p == 0) {
		pg_cluster_child(c, log, 0);
		/* argv[0] the full path: initdb and postgres find their other programs and share
		 * directory from it (a bare name is looked up in PATH, which lacks it on Debian) */
		execl(prog, prog, "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
		      "--locale=C", "--no-sync", (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "initdb failed (status %d); %s says:\n", st, log);
		FILE *f = fopen(log, "r"); /* the directory goes with the cluster: show it now */
		char line[512];
		while (f && fgets(line, sizeof line, f))
			fprintf(stderr, "  %s", line);
		if (f)
			fclose(f);
		return -1;
	}
	return 0;
}

/* Starts the postmaster and waits (up to 30 s) until it accepts connections. 0 or -1. */
static inline int pg_cluster_start(pg_cluster *c)
{
	char prog[320], data[200], log[200];
	snprintf(prog, sizeof prog, "%s/postgres", c->bin);
	snprintf(data, sizeof data, "%s/data", c->dir);
	snprintf(log, sizeof log, "%s/postgres.log", c->dir);
	pid_t p = fork();
	if (p == 0) {
		pg_cluster_child(c, log, 1);
		if (c->durable)
			execl(prog, prog, "-D", data, "-k", c->dir, "-c", "listen_addresses=", "-c",
			      "max_connections=40", (char *)NULL);
		else
			execl(prog, prog, "-D", data, "-k", c->dir, "-c", "listen_addresses=", "-c",
			      "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=40",
			      (char *)NULL);
		_exit(127);
	}
	if (p < 0)
		return -1;
	c->pid = p;
	for (int i = 0; i < 300; i++) {
		if (PQping(c->conninfo) == PQPING_OK)
			return 0;
		int st;
		if (waitpid(p, &st, WNOHANG) == p) {
			c->pid = 0;
			fprintf(stderr, "postgres exited at start (see %s)\n", log);
			return -1;
		}
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "postgres did not answer within 30 s (see %s)\n", log);
	return -1;
}

/* Immediate shutdown (SIGQUIT, then SIGKILL after 10 s) and reaping; the socket goes too. */
static inline void pg_cluster_stop(pg_cluster *c)
{
	if (c->pid <= 0)
		return;
	kill(c->pid, SIGQUIT);
	for (int i = 0; i < 100; i++) {
		if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
			c->pid = 0;
			return;
		}
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	kill(c->pid, SIGKILL);
	waitpid(c->pid, NULL, 0);
	c->pid = 0;
}

/* Stops the cluster and removes its directory. */
static inline void pg_cluster_free(pg_cluster *c)
{
	pg_cluster_stop(c);
	if (c->dir[0]) {
		char cmd[200];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", c->dir);
	}
}

#endif
