/* types_cli.h - `moonbox types DIR` (types_cli.c): the sandbox API's LuaLS files for editors. */
#ifndef MB_TYPES_CLI_H
#define MB_TYPES_CLI_H

/// Writes DIR/types/sandbox.lua and DIR/.luarc.json, printing each path.
/// @returns the exit status: 0, 1 when a file cannot be written, 2 for a bad argument
int mb_types_main(const char *dir);

/// `moonbox check FILE|DIR...`: luacheck with the sandbox's globals (argv as main's).
/// @returns 0 clean, 1 findings, 2 bad arguments, 4 luacheck missing or failing
int mb_check_main(int argc, char **argv);

#endif
