/* config_doc.h - the man page and the option list, generated from the option table (config_doc.c).
 *
 * Both are printed by hidden flags of the binary (`--print-man`, `--print-options`) that the
 * build and the tests use; no state, any thread.
 */
#ifndef MB_CONFIG_DOC_H
#define MB_CONFIG_DOC_H

#include <stdio.h>

/// Writes the man page moonbox(1) in roff; `@PREFIX@` stands for the installation prefix.
/// @param f  where to write
void mb_config_print_man(FILE *f);

/// Writes one line per option: name, flag, variable, "int" or "string", default, minimum and
/// maximum (empty for strings), separated by tabs.
/// @param f  where to write
void mb_config_print_options(FILE *f);

#endif
