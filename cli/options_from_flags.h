// Each role's Options, built from the `ductile` command's flags in one
// function per role and checked by the library's own Validate, so that a
// flag is read in one place and its range is checked in one place.
//
// Example (`ductile server`):
//   Result<ServerOptions> o = ServerOptionsFromFlags(/*requested_id=*/-1);
//   if (!o.ok()) return Fail(o.status());
//   auto server = Server::Start(*o);
//
// `ductile local` and `ductile k8s` build the Options of every role they
// will launch, so that a bad flag is reported before any process starts.
//
// Thread safety: reads the global flags; call from main's thread.
#ifndef DUCTILE_CLI_OPTIONS_FROM_FLAGS_H_
#define DUCTILE_CLI_OPTIONS_FROM_FLAGS_H_

#include <cstdint>
#include <string>

#include "ductile/ductile.h"
#include "train/trainer.h"

namespace ductile::cli {

// Prints "ductile: <status>" to stderr; returns the exit code 1.
int Fail(const Status& status);

// The security --keys and --insecure ask for; `as_admin` for commands that
// need the admin key. `member` names the server or worker this process is
// ("server-0", "worker-3"; "" for others): with --keys and no
// --member_key, its own key is DIR/members/MEMBER.key.
Result<Security> SecurityFromFlags(bool as_admin,
                                   const std::string& member = "");

// The id a server or worker asks for: its flag, else the rank its launcher
// gave it (launch/launch_env.h), else -1 (any).
Result<int32_t> IdOrRank(int32_t flag, const char* role);

// A launched job's checkpoint interval when its flags give none, in
// clocks: a crashed server then costs at most this many clocks.
inline constexpr int64_t kLaunchedCheckpointEvery = 100;

// The coordinator's Options from its flags, security left out (the
// caller adds it), checked by Validate(CoordinatorOptions). `launched`:
// as `ductile local` and `ductile k8s` start it, with a state directory of
// theirs and checkpoints every kLaunchedCheckpointEvery clocks unless the
// flags say otherwise.
Result<CoordinatorOptions> CoordinatorOptionsFromFlags(bool launched = false);

// A server's Options from its flags, asking for `requested_id`, security
// left out, checked by Validate(ServerOptions).
Result<ServerOptions> ServerOptionsFromFlags(int32_t requested_id);

// A training worker's client Options from its flags (its id and security
// left out).
Result<ClientOptions> WorkerClientOptionsFromFlags();

// The training flags as TrainerOptions, checked by train::Validate.
Result<train::TrainerOptions> TrainerOptionsFromFlags();

}  // namespace ductile::cli

#endif  // DUCTILE_CLI_OPTIONS_FROM_FLAGS_H_
