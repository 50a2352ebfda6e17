/* run_cli.h - `moonbox run` (run_cli.c): one chunk in the sandbox from the shell. */
#ifndef MB_RUN_CLI_H
#define MB_RUN_CLI_H

/// argv as main's, argv[1] being "run". @returns the exit status (0 success, 1 an error in the
/// code, 2 bad arguments, 3 a limit tripped, 4 the server could not start or answer)
int mb_run_main(int argc, char **argv);

#endif
