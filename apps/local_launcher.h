// Runs a whole cluster on this machine as child processes of one
// supervisor: a coordinator, servers and workers.
//
// The supervisor never leaves orphans: children die with it (PDEATHSIG),
// Ctrl-C or SIGTERM stops them all (SIGTERM, then SIGKILL after a grace
// period), and if any child fails, the others are stopped and the launch
// fails naming it.
#ifndef DUCTILE_APPS_LOCAL_LAUNCHER_H_
#define DUCTILE_APPS_LOCAL_LAUNCHER_H_

#include <string>
#include <vector>

#include "ductile/status.h"

namespace ductile::apps {

struct LocalClusterOptions {
  std::string program;  // path of the ductile binary (children run it)
  int num_servers = 2;
  int num_workers = 2;
  // Extra flags for each role's command line ("--name=value").
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> server_flags;
  std::vector<std::string> worker_flags;
  // After the workers finish, how long the coordinator and servers get to
  // exit by themselves before they are killed.
  int shutdown_grace_ms = 10000;
};

// Runs the cluster to completion. OK when every worker exited with status 0.
Status RunLocalCluster(const LocalClusterOptions& options);

}  // namespace ductile::apps

#endif  // DUCTILE_APPS_LOCAL_LAUNCHER_H_
