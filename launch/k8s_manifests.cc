#include "launch/k8s_manifests.h"

#include <cstdio>
#include <sstream>

namespace ductile::launch {
namespace {

// A YAML double-quoted scalar (JSON's escapes, which YAML shares).
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\x%02x",
                        static_cast<unsigned char>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool IsDnsLabel(const std::string& name, size_t max_length) {
  if (name.empty() || name.size() > max_length) return false;
  if (name.front() < 'a' || name.front() > 'z' || name.back() == '-') {
    return false;
  }
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return false;
    }
  }
  return true;
}

// The Secret's keys and where each goes under /keys: what `ductile local`
// gives every member (admin.key stays with the admins).
std::vector<std::pair<std::string, std::string>> KeyItems(int max_servers,
                                                          int max_workers) {
  std::vector<std::pair<std::string, std::string>> items = {
      {"cluster.key", "cluster.key"},
      {"cluster.pub", "cluster.pub"},
      {"admin.pub", "admin.pub"}};
  const auto member = [&items](const std::string& name) {
    for (const char* ext : {".key", ".pub"}) {
      items.emplace_back("members." + name + ext, "members/" + name + ext);
    }
  };
  for (int i = 0; i < max_servers; ++i) member("server-" + std::to_string(i));
  for (int i = 0; i < max_workers; ++i) member("worker-" + std::to_string(i));
  return items;
}

class Writer {
 public:
  void Line(int indent, const std::string& text) {
    out_ << std::string(static_cast<size_t>(indent), ' ') << text << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

// The labels of every object of the job, at `indent`; `component` ""
// for the Service, which is the whole job's.
void WriteLabels(const std::string& job, const std::string& component,
                 int indent, Writer& w) {
  w.Line(indent, "labels:");
  w.Line(indent + 2, "app.kubernetes.io/name: ductile");
  w.Line(indent + 2, "app.kubernetes.io/instance: " + Quote(job));
  if (!component.empty()) {
    w.Line(indent + 2, "app.kubernetes.io/component: " + component);
  }
}

struct RoleSpec {
  std::string component;  // coordinator, server, worker, controller
  int count = 1;
  std::vector<std::string> args;
  bool pod_ip = false;  // POD_IP in the environment (servers' --host)
  int port = 0;         // a container port, 0: none
  // The controller: not Indexed, runs as its ServiceAccount, knows its
  // namespace (POD_NAMESPACE) and mounts no state.
  bool controller = false;
};

void WriteJob(const KubernetesJob& job, const RoleSpec& role,
              const std::vector<std::pair<std::string, std::string>>& keys,
              const std::string& secret, Writer& w) {
  w.Line(0, "---");
  w.Line(0, "apiVersion: batch/v1");
  w.Line(0, "kind: Job");
  w.Line(0, "metadata:");
  w.Line(2, "name: " + Quote(job.name + "-" + role.component));
  WriteLabels(job.name, role.component, 2, w);
  w.Line(0, "spec:");
  if (!role.controller) w.Line(2, "completionMode: Indexed");
  w.Line(2, "completions: " + std::to_string(role.count));
  w.Line(2, "parallelism: " + std::to_string(role.count));
  // A member that keeps failing stops being restarted: the job then fails
  // as `ductile local` does after its restarts per role.
  w.Line(2, "backoffLimit: 20");
  w.Line(2, "template:");
  w.Line(4, "metadata:");
  WriteLabels(job.name, role.component, 6, w);
  w.Line(4, "spec:");
  // Pod NAME-ROLE-I is then NAME-ROLE-I.NAME in DNS.
  w.Line(6, "subdomain: " + Quote(job.name));
  if (role.controller) {
    w.Line(6, "serviceAccountName: " + Quote(job.name + "-controller"));
  }
  w.Line(6, "restartPolicy: OnFailure");
  w.Line(6, "containers:");
  w.Line(8, "- name: " + role.component);
  w.Line(10, "image: " + Quote(job.image));
  w.Line(10, "command: [\"ductile\"]");
  w.Line(10, "args:");
  for (const std::string& a : role.args) w.Line(12, "- " + Quote(a));
  if (role.pod_ip || role.controller) {
    w.Line(10, "env:");
    w.Line(12, std::string("- name: ") +
                   (role.controller ? "POD_NAMESPACE" : "POD_IP"));
    w.Line(14, "valueFrom:");
    w.Line(16, "fieldRef:");
    w.Line(18, std::string("fieldPath: ") +
                   (role.controller ? "metadata.namespace" : "status.podIP"));
  }
  if (role.port > 0) {
    w.Line(10, "ports:");
    w.Line(12, "- containerPort: " + std::to_string(role.port));
  }
  if (role.controller && job.plain) return;  // nothing to mount
  w.Line(10, "volumeMounts:");
  if (!role.controller) {
    w.Line(12, "- name: state");
    w.Line(14, "mountPath: /state");
  }
  if (!job.plain) {
    w.Line(12, "- name: keys");
    w.Line(14, "mountPath: /keys");
    w.Line(14, "readOnly: true");
  }
  w.Line(6, "volumes:");
  if (!role.controller) {
    w.Line(8, "- name: state");
    if (job.state_claim.empty()) {
      w.Line(10, "emptyDir: {}");
    } else {
      w.Line(10, "persistentVolumeClaim:");
      w.Line(12, "claimName: " + Quote(job.state_claim));
    }
  }
  if (!job.plain) {
    w.Line(8, "- name: keys");
    w.Line(10, "secret:");
    w.Line(12, "secretName: " + Quote(secret));
    // 0400 (read by the owner only, as the key loader demands; the pod
    // runs as root, with no fsGroup that would add group read).
    w.Line(12, "defaultMode: 256");
    w.Line(12, "items:");
    for (const auto& [key, path] : keys) {
      w.Line(14, "- key: " + Quote(key));
      w.Line(16, "path: " + Quote(path));
    }
  }
}

// The controller's Job and what lets it patch the worker and server Jobs.
void WriteController(const KubernetesJob& job, const std::string& coordinator,
                     const std::string& secret, int max_servers,
                     int max_workers, Writer& w) {
  const std::string name = job.name + "-controller";
  // A document's first lines, down to its metadata.
  const auto begin = [&](const char* api_version, const char* kind) {
    w.Line(0, "---");
    w.Line(0, std::string("apiVersion: ") + api_version);
    w.Line(0, std::string("kind: ") + kind);
    w.Line(0, "metadata:");
    w.Line(2, "name: " + Quote(name));
    WriteLabels(job.name, "controller", 2, w);
  };
  begin("v1", "ServiceAccount");
  begin("rbac.authorization.k8s.io/v1", "Role");
  w.Line(0, "rules:");
  w.Line(2, "- apiGroups: [\"batch\"]");
  w.Line(4, "resources: [\"jobs\"]");
  w.Line(4, "resourceNames: [" + Quote(job.name + "-worker") + ", " +
                Quote(job.name + "-server") + "]");
  w.Line(4, "verbs: [\"get\", \"patch\"]");
  // A member's pod that runs on while the coordinator lists it dead
  // (stopped, hung) is deleted, for its Job to start it again.
  w.Line(2, "- apiGroups: [\"\"]");
  w.Line(4, "resources: [\"pods\"]");
  w.Line(4, "verbs: [\"list\", \"delete\"]");
  begin("rbac.authorization.k8s.io/v1", "RoleBinding");
  w.Line(0, "subjects:");
  w.Line(2, "- kind: ServiceAccount");
  w.Line(4, "name: " + Quote(name));
  w.Line(0, "roleRef:");
  w.Line(2, "apiGroup: rbac.authorization.k8s.io");
  w.Line(2, "kind: Role");
  w.Line(2, "name: " + Quote(name));
  RoleSpec r{"controller", 1, {"k8s-controller"}, false, 0, true};
  r.args.insert(r.args.end(),
                {"--coordinator=" + coordinator, "--job_name=" + job.name,
                 "--namespace=$(POD_NAMESPACE)",
                 "--max_workers=" + std::to_string(max_workers),
                 "--max_servers=" + std::to_string(max_servers),
                 job.plain ? "--insecure" : "--keys=/keys"});
  // The coordinator's heartbeat timeout: how long a member is listed dead
  // before its pod counts as lost.
  for (const std::string& flag : job.coordinator_flags) {
    if (flag.starts_with("--heartbeat_timeout_ms=")) r.args.push_back(flag);
  }
  // The admin key, which only this pod gets: resizes and drains need it.
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"cluster.pub", "cluster.pub"},
      {"admin.key", "admin.key"},
      {"admin.pub", "admin.pub"}};
  WriteJob(job, r, keys, secret, w);
}

}  // namespace

Status CheckJobName(const std::string& name) {
  if (IsDnsLabel(name, 40)) return Status::Ok();
  return InvalidArgumentError(
      "--job_name: '" + name +
      "' is not a DNS label of at most 40 characters (a-z, 0-9 and '-', "
      "starting with a letter, not ending with '-')");
}

Result<std::string> KubernetesManifests(const KubernetesJob& job) {
  DUCTILE_RETURN_IF_ERROR(CheckJobName(job.name));
  if (job.image.empty()) {
    return InvalidArgumentError("--image: the container image is needed");
  }
  if (job.servers < 1 || job.servers > 1024) {
    return InvalidArgumentError("--servers must be in [1, 1024]");
  }
  if (job.workers < 1 || job.workers > 65536) {
    return InvalidArgumentError("--workers must be in [1, 65536]");
  }
  const int max_workers = job.max_workers == 0 ? job.workers : job.max_workers;
  if (max_workers < job.workers || max_workers > 65536) {
    return InvalidArgumentError("--max_workers must be in [--workers, 65536]");
  }
  const int max_servers = job.max_servers == 0 ? job.servers : job.max_servers;
  if (max_servers < job.servers || max_servers > 1024) {
    return InvalidArgumentError("--max_servers must be in [--servers, 1024]");
  }
  for (const int port : {job.coordinator_port, job.server_port}) {
    if (port < 1 || port > 65535) {
      return InvalidArgumentError("ports must be in [1, 65535]");
    }
  }
  const std::string secret =
      job.keys_secret.empty() ? job.name + "-keys" : job.keys_secret;
  const std::string coordinator = "tcp://" + job.name + "-coordinator-0." +
                                  job.name + ":" +
                                  std::to_string(job.coordinator_port);
  const std::string keys_flag = job.plain ? "--insecure" : "--keys=/keys";

  RoleSpec c{"coordinator", 1, {"coordinator"}, false, job.coordinator_port};
  c.args.insert(c.args.end(), {"--listen=tcp://0.0.0.0:" +
                                   std::to_string(job.coordinator_port),
                               "--servers=" + std::to_string(job.servers),
                               "--workers=" + std::to_string(job.workers),
                               "--max_workers=" + std::to_string(max_workers),
                               "--state_dir=/state", keys_flag});
  c.args.insert(c.args.end(), job.coordinator_flags.begin(),
                job.coordinator_flags.end());
  RoleSpec s{"server", job.servers, {"server"}, true, job.server_port};
  s.args.insert(s.args.end(),
                {"--coordinator=" + coordinator, "--host=$(POD_IP)",
                 "--port=" + std::to_string(job.server_port),
                 "--state_dir=/state", keys_flag});
  s.args.insert(s.args.end(), job.server_flags.begin(), job.server_flags.end());
  RoleSpec wk{"worker", job.workers, {"worker"}, false, 0};
  wk.args.insert(wk.args.end(), {"--coordinator=" + coordinator, keys_flag});
  wk.args.insert(wk.args.end(), job.worker_flags.begin(),
                 job.worker_flags.end());

  Writer w;
  w.Line(0, "# ductile job " + Quote(job.name) + ": " +
                std::to_string(job.servers) + " server(s), " +
                std::to_string(job.workers) + " worker(s). Apply with");
  w.Line(0, "#   kubectl apply -f FILE");
  if (!job.plain) {
    w.Line(0, "# after making the Secret " + Quote(secret) +
                  " from `ductile keygen --out=keys --servers=" +
                  std::to_string(max_servers) +
                  " --workers=" + std::to_string(max_workers) + "`:");
    w.Line(0, "#   kubectl create secret generic " + secret +
                  " --from-file=keys/cluster.key --from-file=keys/cluster.pub"
                  " --from-file=keys/admin.pub" +
                  (job.controller ? " --from-file=keys/admin.key" : "") +
                  " $(for f in keys/members/*; do "
                  "printf -- '--from-file=members.%s=%s ' \"${f##*/}\" "
                  "\"$f\"; done)");
  }
  if (job.state_claim.empty()) {
    w.Line(0,
           "# WARNING: no --state_claim: each pod keeps its state in an "
           "emptyDir, and a server");
    w.Line(0,
           "# down past the heartbeat timeout takes its checkpoints with it "
           "(docs/adaptation.md).");
  }
  if (job.controller) {
    w.Line(0, "# Resize with `ductile resize` (up to " +
                  std::to_string(max_workers) +
                  " workers) or a policy: the Job " + job.name +
                  "-controller patches the Jobs (its image needs kubectl).");
  } else {
    w.Line(0, "# Resize the workers (up to " + std::to_string(max_workers) +
                  "; drain the highest ids first when shrinking):");
    w.Line(0, "#   kubectl patch job " + job.name +
                  "-worker --type=merge -p "
                  "'{\"spec\":{\"parallelism\":N,\"completions\":N}}'");
    w.Line(0,
           "# (or generate with --controller: a Job that carries `ductile "
           "resize` and the policies' targets out)");
  }
  w.Line(0, "---");
  w.Line(0, "apiVersion: v1");
  w.Line(0, "kind: Service");
  w.Line(0, "metadata:");
  w.Line(2, "name: " + Quote(job.name));
  WriteLabels(job.name, "", 2, w);
  w.Line(0, "spec:");
  w.Line(2, "clusterIP: None");
  w.Line(2, "publishNotReadyAddresses: true");
  w.Line(2, "selector:");
  w.Line(4, "app.kubernetes.io/instance: " + Quote(job.name));
  w.Line(2, "ports:");
  w.Line(4, "- name: coordinator");
  w.Line(6, "port: " + std::to_string(job.coordinator_port));
  w.Line(4, "- name: server");
  w.Line(6, "port: " + std::to_string(job.server_port));
  const auto keys = KeyItems(max_servers, max_workers);
  for (const RoleSpec* role : {&c, &s, &wk})
    WriteJob(job, *role, keys, secret, w);
  if (job.controller) {
    WriteController(job, coordinator, secret, max_servers, max_workers, w);
  }
  return w.str();
}

}  // namespace ductile::launch
