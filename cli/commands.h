// The commands of `ductile`: what each does, which flags it reads, and the
// function that runs it. `ductile help` prints from this table rather than
// from gflags, which would list every flag linked into the binary (glog's,
// RocksDB's tools').
//
//   ductile local        a whole cluster on this machine
//   (cli/launch_commands.cc) ductile coordinator  the membership manager
//   (cli/role_commands.cc) ductile server       a parameter server ductile
//   worker       a worker running a built-in app ductile status ...   requests
//   to a running cluster   (cli/admin_commands.cc) ductile k8s ... Kubernetes
//   manifests and controller
//
// Each Run* function reads the flags (cli/flags.h), builds the Options of
// what it starts (cli/options_from_flags.h) and returns the process's exit
// code: 0 done, 1 failed (the reason on stderr).
#ifndef DUCTILE_CLI_COMMANDS_H_
#define DUCTILE_CLI_COMMANDS_H_

#include <span>
#include <string>
#include <vector>

namespace ductile::cli {

struct Command {
  const char* name;
  // One line (at most about 60 characters) for `ductile help`.
  const char* summary;
  // More of what it does, for `ductile help <name>`.
  const char* details;
  // The flags most runs set, described by `ductile help <name>`.
  std::vector<const char*> flags;
  // The others: named by `ductile help <name>`, described with --all.
  std::vector<const char*> advanced;
  // Whether the command also reads the training flags (kTrainingFlags).
  bool trains;
  // Runs the command with its operand ("" when it takes none).
  int (*run)(const std::string& operand);
  // The name of the one operand the command takes (nullptr: none).
  const char* operand = nullptr;
  // What the command takes after `--` (nullptr: nothing), as
  // CommandAfterDashes() then holds it.
  const char* after_dashes = nullptr;
};

// The words after the first `--` of the command line (`ductile local --
// /usr/bin/python3 train.py`); empty when there is none. Set by main()
// before the command runs.
std::vector<std::string>& CommandAfterDashes();

// Every command, in the order `ductile help` lists them.
const std::vector<Command>& Commands();
// nullptr when there is no such command.
const Command* FindCommand(const std::string& name);

// Flags `worker` reads to train its app; `local` and `k8s` forward them to
// their workers. One list, so that a new training flag is both documented
// and forwarded. The first kCommonTrainingFlags are the ones most runs set.
std::span<const char* const> TrainingFlags();
// The server's and the coordinator's flags a launcher forwards to the
// members it starts (`local`, `k8s`), and documents under its own flags.
std::span<const char* const> ServerTuningFlags();
std::span<const char* const> CoordinatorTuningFlags();
inline constexpr size_t kCommonTrainingFlags = 8;

int RunLocal(const std::string& operand);
int RunK8s(const std::string& operand);
int RunK8sController(const std::string& operand);
int RunCoordinator(const std::string& operand);
int RunServer(const std::string& operand);
int RunWorker(const std::string& operand);
int RunStatus(const std::string& operand);
int RunShutdown(const std::string& operand);
int RunCheckpoint(const std::string& operand);
int RunDrain(const std::string& operand);
int RunResize(const std::string& operand);
int RunExited(const std::string& operand);
int RunKeygen(const std::string& operand);

}  // namespace ductile::cli

#endif  // DUCTILE_CLI_COMMANDS_H_
