// Kubernetes manifests for a ductile job (`ductile k8s`): a headless
// Service and three Indexed Jobs (coordinator, servers, workers) running
// the same commands, with the same flags, as `ductile local` runs.
//
// Each member takes its id from its pod's completion index
// (JOB_COMPLETION_INDEX, launch/launch_env.h) and is found by name through
// the Service: pods of an Indexed Job with `subdomain: NAME` are
// NAME-coordinator-0.NAME and so on. A crashed container restarts in its
// pod (restartPolicy OnFailure), with its address and its id. The state
// directory (/state) must be one volume shared by the coordinator and all
// servers (`state_claim`, a ReadWriteMany PersistentVolumeClaim), as
// `ductile local` shares one directory: when a server is declared dead,
// the others restore its slots from its checkpoints there. Without one,
// each pod has an emptyDir of its own, and a server that stays down past
// the heartbeat timeout (a crash loop's back-off, a lost pod) takes its
// slots' checkpoints with it: the rollback cannot restore them. Workers
// and servers are resized by changing their Job's parallelism and
// completions (docs/adaptation.md).
#ifndef DUCTILE_LAUNCH_K8S_MANIFESTS_H_
#define DUCTILE_LAUNCH_K8S_MANIFESTS_H_

#include <string>
#include <vector>

#include "ductile/status.h"

namespace ductile::launch {

struct KubernetesJob {
  // The Service's name and the prefix of the Jobs' names: a DNS label of
  // at most 40 characters, [a-z0-9-], starting with a letter.
  std::string name = "ductile";
  std::string image;  // with `ductile` on its PATH
  int servers = 2;    // >= 1
  int workers = 2;    // >= 1
  int coordinator_port = 7000;
  int server_port = 7100;
  // Cluster keys (ductile keygen --servers --workers) from the Secret
  // `keys_secret` (docs/adaptation.md says how to make it), mounted at
  // /keys; every member proves its own key. `plain`: no keys, and the
  // members listen beyond loopback without them (--insecure): only for a
  // namespace nobody else reaches.
  std::string keys_secret;  // "" = NAME-keys
  bool plain = false;
  // A ReadWriteMany PersistentVolumeClaim mounted at /state in every pod
  // ("" = an emptyDir per pod; see above).
  std::string state_claim;
  // Member keys made for up to this many workers (>= workers), so that
  // the worker Job can grow to it.
  int max_workers = 0;  // 0 = workers
  // And for up to this many servers (>= servers): the server Job can grow
  // to it.
  int max_servers = 0;  // 0 = servers
  // Also a Job NAME-controller running `ductile k8s-controller`, which
  // carries the job's target size (`ductile resize`, the autoscale policy)
  // and the stragglers policy's replacements out by patching the worker
  // and server Jobs with kubectl (the image must have kubectl on its
  // PATH), with a ServiceAccount, Role and RoleBinding that allow it to
  // get and patch those two Jobs only. With keys, it alone mounts the
  // admin key (admin.key in the Secret too).
  bool controller = false;
  // Extra flags of each role's command line ("--name=value").
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> server_flags;
  std::vector<std::string> worker_flags;
};

// OK if `name` can name a job (KubernetesJob::name), else InvalidArgument
// saying why.
Status CheckJobName(const std::string& name);

// The manifests as one YAML stream (documents separated by "---"), or
// InvalidArgument naming what is wrong with `job`.
Result<std::string> KubernetesManifests(const KubernetesJob& job);

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_K8S_MANIFESTS_H_
