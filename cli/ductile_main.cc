// The `ductile` command: one binary, one subcommand per role and per
// request to a running cluster (cli/commands.h lists them). Flags are read
// only in cli/ and copied into each component's Options.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/help.h"
#include "glog/logging.h"
#include "util/malloc_policy.h"

namespace {

using ductile::cli::Command;
using ductile::cli::FindCommand;
using ductile::cli::PrintHelp;

bool HelpRequested() {
  std::string help;
  return gflags::GetCommandLineOption("help", &help) && help == "true";
}

// `ductile help [<command>] [--all]`, in any order of the two.
int RunHelp(int argc, char** argv) {
  std::string command;
  bool all = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--all") == 0) {
      all = true;
    } else if (command.empty() && argv[i][0] != '-') {
      command = argv[i];
    } else {
      std::fprintf(stderr, "usage: ductile help [<command>] [--all]\n");
      return 2;
    }
  }
  return PrintHelp(command, all);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = ductile::cli::Usage();
  gflags::SetUsageMessage(usage);
  gflags::SetVersionString("0.1.0");
  if (argc < 2) {
    std::fprintf(stderr, "%s", usage.c_str());
    return 2;
  }
  if (std::strcmp(argv[1], "help") == 0) return RunHelp(argc, argv);
  std::string command;
  if (argv[1][0] != '-') {
    command = argv[1];
    // Drop the subcommand so gflags sees only flags.
    for (int i = 1; i + 1 < argc; ++i) argv[i] = argv[i + 1];
    --argc;
  }
  // What follows the first `--` is a command for the workers (`ductile
  // local -- python3 train.py`), never flags: gflags sees what precedes it.
  bool dashes = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") != 0) continue;
    dashes = true;
    ductile::cli::CommandAfterDashes().assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  // gflags knows no -h.
  static char help_flag[] = "--help";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0) argv[i] = help_flag;
  }
  gflags::ParseCommandLineNonHelpFlags(&argc, &argv, true);
  if (HelpRequested()) {
    // `ductile --help server` as `ductile help server`.
    if (command.empty() && argc == 2) return PrintHelp(argv[1], false);
    return PrintHelp(command, false);
  }
  // --helpfull, --version and the other gflags help flags; each exits.
  gflags::HandleCommandLineHelpFlags();
  if (command.empty()) {
    std::fprintf(stderr, "%s", usage.c_str());
    return 2;
  }
  const Command* c = FindCommand(command);
  if (c == nullptr) {
    std::fprintf(stderr, "ductile: unknown command '%s'\n%s", command.c_str(),
                 usage.c_str());
    return 2;
  }
  if (dashes && c->after_dashes == nullptr) {
    std::fprintf(stderr,
                 "ductile %s: takes nothing after --; a worker command (-- "
                 "COMMAND) is supported by `ductile local` only, with "
                 "--provider=local or slurm\n",
                 c->name);
    return 2;
  }
  if (dashes && ductile::cli::CommandAfterDashes().empty()) {
    std::fprintf(stderr, "usage: ductile %s [flags] -- %s\n", c->name,
                 c->after_dashes);
    return 2;
  }
  std::string operand;
  if (c->operand != nullptr) {
    if (argc != 2) {
      std::fprintf(stderr, "usage: ductile %s [flags] %s\n", c->name,
                   c->operand);
      return 2;
    }
    operand = argv[1];
    argc = 1;
  }
  if (argc > 1) {
    std::fprintf(stderr, "ductile: unexpected argument '%s'\n%s", argv[1],
                 usage.c_str());
    return 2;
  }
  // Per-app defaults for flags the user did not set; set here, so that
  // `local` forwards them to its workers as any other value.
  if (FLAGS_app == "mf" &&
      gflags::GetCommandLineFlagInfoOrDie("learning_rate").is_default) {
    FLAGS_learning_rate = 0.03;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging("ductile");
  if (FLAGS_keep_freed_memory) ductile::KeepFreedMemory();
  return c->run(operand);
}
