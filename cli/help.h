// What `ductile help` prints: one screen of the commands, and for each
// command its flags, the common ones first, from the table in
// cli/commands.cc and the flags' own descriptions (cli/flags.cc).
#ifndef DUCTILE_CLI_HELP_H_
#define DUCTILE_CLI_HELP_H_

#include <string>

namespace ductile::cli {

// The commands, one line each, and how to get more: what a wrong command
// line gets too.
std::string Usage();

// `ductile help [<command>] [--all]`: Usage() without a command; else the
// command's flags, the advanced ones named (described with `all`). Prints
// to stdout and returns the exit code (2 for an unknown command, with the
// commands on stderr).
int PrintHelp(const std::string& command, bool all);

}  // namespace ductile::cli

#endif  // DUCTILE_CLI_HELP_H_
