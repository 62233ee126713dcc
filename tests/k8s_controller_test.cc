// `ductile k8s-controller` against a real coordinator and a kubectl that
// keeps the Jobs' sizes in memory (or, once, a script standing in for
// kubectl): targets and replacements become Job patches and drains.
#include "launch/k8s_controller.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ductile/admin.h"
#include "ductile/policy.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ductile::launch {
namespace {

// kubectl for Jobs that exist only here: `get job NAME` prints its size,
// `patch job NAME` sets it from the patch's completions.
// `get pods` prints what `pods` returns; `delete pod NAME` succeeds. A
// namespace
// (--namespace NAME first) is ignored.
struct FakeKubectl {
  std::map<std::string, int32_t> sizes;
  std::function<std::string()> pods;
  std::vector<std::string> calls;  // each call's arguments, joined
  int fail_next = 0;               // calls that fail before the next works
  int fail_deletes = 0;            // deletes that fail before one works

  K8sController::Tool tool() {
    return [this](std::vector<std::string> args, std::string* out) {
      std::string line;
      for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
      calls.push_back(line);
      if (args.size() >= 2 && args[0] == "--namespace") {
        args.erase(args.begin(), args.begin() + 2);
      }
      if (fail_next > 0) {
        --fail_next;
        return 1;
      }
      if (args.size() >= 2 && args[0] == "get" && args[1] == "pods") {
        if (pods) *out = pods();
        return 0;
      }
      if (args.size() >= 3 && args[0] == "delete" && args[1] == "pod") {
        if (fail_deletes == 0) return 0;
        --fail_deletes;
        return 1;
      }
      if (args.size() < 3 || args[1] != "job" || !sizes.contains(args[2])) {
        return 1;
      }
      if (args[0] == "get") {
        *out = std::to_string(sizes[args[2]]);
        return 0;
      }
      if (args[0] == "patch") {
        const std::string& patch = args.back();
        const size_t at = patch.find("\"completions\":");
        if (at == std::string::npos) return 1;
        sizes[args[2]] = std::stoi(patch.substr(at + 14));
        return 0;
      }
      return 1;
    };
  }
};

// Asks for the replacement of worker `ask` at its next reading.
class ReplaceWhenAsked final : public Policy {
 public:
  std::string name() const override { return "replace-when-asked"; }
  void OnStatus(const PolicyEvent&, PolicyActions& actions) override {
    const int32_t id = ask.exchange(-1);
    if (id >= 0) {
      EXPECT_TRUE(actions.ReplaceWorker(id).ok());
    }
  }
  std::atomic<int32_t> ask{-1};
};

// A worker that asks for its id, as a pod of an Indexed Job does.
std::unique_ptr<Client> ConnectAs(const testing::TestCluster& cluster,
                                  int32_t id) {
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.requested_worker_id = id;
  o.connect_timeout_ms = 20000;
  auto client = Client::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

ClusterStatus StatusOf(const testing::TestCluster& cluster) {
  Result<ClusterStatus> s = QueryClusterStatus(cluster.address(), 5000);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : ClusterStatus{};
}

std::string StateOf(const ClusterStatus& status, int32_t worker) {
  for (const MemberStatus& m : status.members) {
    if (m.role == "worker" && m.id == worker) return m.state;
  }
  return "";
}

// Whether the controller logged `line` among its actions.
bool Did(const K8sController& controller, const std::string& line) {
  const std::vector<std::string>& acts = controller.actions();
  return std::find(acts.begin(), acts.end(), line) != acts.end();
}

// Steps the controller until `done` holds of its fake kubectl and the
// status, for at most 10 s; the workers that were asked to leave leave.
void StepUntil(K8sController& controller, const testing::TestCluster& cluster,
               std::vector<std::unique_ptr<Client>>& workers,
               const std::function<bool(const ClusterStatus&)>& done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& w : workers) {
      if (w && w->leave_requested()) {
        EXPECT_TRUE(w->Leave().ok());
        w.reset();
      }
    }
    const ClusterStatus status = StatusOf(cluster);
    controller.Step(status);
    if (done(status)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "not done in 10 s";
}

TEST(K8sController, TargetsAndReplacementsBecomeJobPatchesAndDrains) {
  auto policy = std::make_shared<ReplaceWhenAsked>();
  testing::TestCluster cluster({.num_servers = 1,
                                .num_workers = 0,
                                .policies = {policy},
                                .policy_interval_ms = 100});
  std::vector<std::unique_ptr<Client>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(cluster.Connect());
    ASSERT_NE(workers.back(), nullptr);
    ASSERT_EQ(workers.back()->worker_id(), i);
  }
  FakeKubectl kubectl;
  kubectl.sizes = {{"job1-worker", 2}, {"job1-server", 1}};
  K8sControllerOptions o;
  o.coordinator = cluster.address();
  o.job_name = "job1";
  o.max_workers = 3;    // member keys for workers 0-2
  o.lost_after_ms = 0;  // no pods listed (the lost pods' test below)
  K8sController controller(o, kubectl.tool());

  // No target: nothing to do.
  controller.Step(StatusOf(cluster));
  EXPECT_TRUE(kubectl.calls.empty());

  // Grow to 3 workers: one more index. A failing kubectl is tried again.
  ASSERT_TRUE(RequestResize(cluster.address(), 3, 0, 5000).ok());
  kubectl.fail_next = 1;
  controller.Step(StatusOf(cluster));
  EXPECT_EQ(kubectl.sizes["job1-worker"], 2);
  controller.Step(StatusOf(cluster));
  EXPECT_EQ(kubectl.sizes["job1-worker"], 3);
  EXPECT_EQ(kubectl.calls.back(),
            "patch job job1-worker --type=merge "
            "--patch={\"spec\":{\"parallelism\":3,\"completions\":3}}");
  // Acted on once: its pod starting (worker 2) asks for nothing more.
  workers.push_back(cluster.Connect());
  ASSERT_NE(workers.back(), nullptr);
  ASSERT_EQ(workers.back()->worker_id(), 2);
  const size_t calls = kubectl.calls.size();
  controller.Step(StatusOf(cluster));
  EXPECT_EQ(kubectl.calls.size(), calls);

  // Shrink to 1: workers 2 and 1 drained, newest first; the Job is
  // lowered only once they are gone.
  ASSERT_TRUE(RequestResize(cluster.address(), 1, 0, 5000).ok());
  controller.Step(StatusOf(cluster));
  EXPECT_EQ(kubectl.sizes["job1-worker"], 3);
  ASSERT_FALSE(controller.actions().empty());
  EXPECT_NE(
      controller.actions().back().find("draining worker 2; draining worker 1;"),
      std::string::npos)
      << controller.actions().back();
  StepUntil(controller, cluster, workers, [&](const ClusterStatus&) {
    return kubectl.sizes["job1-worker"] == 1;
  });
  EXPECT_EQ(kubectl.sizes["job1-worker"], 1);
  const ClusterStatus after = StatusOf(cluster);
  EXPECT_EQ(StateOf(after, 1), "left");
  EXPECT_EQ(StateOf(after, 2), "left");
  EXPECT_EQ(StateOf(after, 0), "active");

  // A replacement of worker 0: one more index (1), and worker 0 drained
  // once the new worker is active.
  policy->ask.store(0);
  ClusterStatus asked;
  for (int i = 0; i < 500 && asked.replace_workers.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    asked = StatusOf(cluster);
  }
  ASSERT_EQ(asked.replace_workers, std::vector<int32_t>{0});
  controller.Step(asked);
  EXPECT_EQ(kubectl.sizes["job1-worker"], 2);
  EXPECT_EQ(controller.actions().back(),
            "started worker 1 in place of worker 0");
  EXPECT_EQ(StateOf(StatusOf(cluster), 0), "active");  // not drained yet
  workers.push_back(ConnectAs(cluster, 1));            // index 1's new pod
  ASSERT_NE(workers.back(), nullptr);
  StepUntil(controller, cluster, workers,
            [](const ClusterStatus& s) { return StateOf(s, 0) == "left"; });
  EXPECT_EQ(StateOf(StatusOf(cluster), 0), "left");
  EXPECT_TRUE(Did(controller, "worker 1 is active; draining worker 0"));
  // Servers were never asked for.
  EXPECT_EQ(kubectl.sizes["job1-server"], 1);

  // 4 workers would need indexes 2-4 past the Job's 2: only up to 3 have
  // keys.
  ASSERT_TRUE(RequestResize(cluster.address(), 4, 0, 5000).ok());
  controller.Step(StatusOf(cluster));
  EXPECT_EQ(kubectl.sizes["job1-worker"], 3);
  ASSERT_TRUE(RequestResize(cluster.address(), 5, 0, 5000).ok());
  const size_t before = kubectl.calls.size();
  controller.Step(StatusOf(cluster));
  EXPECT_EQ(kubectl.sizes["job1-worker"], 3);
  ASSERT_EQ(kubectl.calls.size(), before + 1);  // looked, did not patch
  EXPECT_EQ(kubectl.calls.back().rfind("get job job1-worker", 0), 0u);
}

// A pod that registers past the new size after the drains were asked (its
// index made by an earlier grow) is drained too before the Job is lowered.
TEST(K8sController, AMemberThatJoinsPastTheNewSizeIsDrainedToo) {
  testing::TestCluster cluster({.num_servers = 1, .num_workers = 0});
  std::vector<std::unique_ptr<Client>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(cluster.Connect());
    ASSERT_NE(workers.back(), nullptr);
  }
  FakeKubectl kubectl;
  kubectl.sizes = {{"j-worker", 2}, {"j-server", 1}};
  K8sControllerOptions o;
  o.coordinator = cluster.address();
  o.job_name = "j";
  o.lost_after_ms = 0;  // no pods listed
  K8sController controller(o, kubectl.tool());
  ASSERT_TRUE(RequestResize(cluster.address(), 3, 0, 5000).ok());
  controller.Step(StatusOf(cluster));
  ASSERT_EQ(kubectl.sizes["j-worker"], 3);
  // Index 2's pod has not registered when the job shrinks to 1.
  ASSERT_TRUE(RequestResize(cluster.address(), 1, 0, 5000).ok());
  controller.Step(StatusOf(cluster));
  EXPECT_NE(controller.actions().back().find("draining worker 1;"),
            std::string::npos)
      << controller.actions().back();
  EXPECT_EQ(controller.actions().back().find("worker 2"), std::string::npos)
      << controller.actions().back();
  workers.push_back(ConnectAs(cluster, 2));
  ASSERT_NE(workers.back(), nullptr);
  StepUntil(controller, cluster, workers, [&](const ClusterStatus&) {
    return kubectl.sizes["j-worker"] == 1;
  });
  EXPECT_EQ(kubectl.sizes["j-worker"], 1);
  const ClusterStatus after = StatusOf(cluster);
  EXPECT_EQ(StateOf(after, 2), "left");
  EXPECT_EQ(StateOf(after, 1), "left");
  EXPECT_EQ(StateOf(after, 0), "active");
  EXPECT_TRUE(Did(controller, "draining worker 2, past the new size"));
}

// The default tool runs the kubectl program with the namespace first; a
// kubectl that does not answer in time is killed and the patch retried.
TEST(K8sController, RunsKubectlWithItsNamespace) {
  char dir_template[] = "/tmp/ductile-kubectl-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  const std::string script = dir + "/kubectl";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\n"
           "echo \"$@\" >> "
        << dir
        << "/calls\n"
           "case \"$3\" in\n"
           "  get) echo 4 ;;\n"
           "  patch) [ -e "
        << dir << "/slow ] && { rm " << dir
        << "/slow; exec sleep 30; }; exit 0 ;;\n"
           "esac\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0700), 0);
  { std::ofstream slow(dir + "/slow"); }
  testing::TestCluster cluster({.num_servers = 1, .num_workers = 0});
  auto worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  K8sControllerOptions o;
  o.coordinator = cluster.address();
  o.job_name = "j";
  o.kube_namespace = "ml";
  o.kubectl = script;
  o.tool_timeout_ms = 1000;
  o.lost_after_ms = 0;  // no pods listed
  K8sController controller(o);
  ASSERT_TRUE(RequestResize(cluster.address(), 2, 0, 5000).ok());
  controller.Step(StatusOf(cluster));  // the patch times out
  EXPECT_TRUE(controller.actions().empty());
  controller.Step(StatusOf(cluster));
  ASSERT_EQ(controller.actions().size(), 2u);
  EXPECT_EQ(controller.actions()[0], "patched j-worker to 5");
  EXPECT_EQ(controller.actions()[1].rfind("workers 1 -> 2 at clock", 0), 0u)
      << controller.actions()[1];
  std::ifstream in(dir + "/calls");
  std::stringstream calls;
  calls << in.rdbuf();
  EXPECT_EQ(calls.str(),
            "--namespace ml get job j-worker "
            "--output=jsonpath={.spec.completions}\n"
            "--namespace ml patch job j-worker --type=merge "
            "--patch={\"spec\":{\"parallelism\":5,\"completions\":5}}\n"
            "--namespace ml get job j-worker "
            "--output=jsonpath={.spec.completions}\n"
            "--namespace ml patch job j-worker --type=merge "
            "--patch={\"spec\":{\"parallelism\":5,\"completions\":5}}\n");
}

// Kubernetes' form of the time `ago` before now, in UTC, to the second.
std::string KubeTime(std::chrono::seconds ago) {
  const time_t t = std::chrono::system_clock::to_time_t(
      std::chrono::system_clock::now() - ago);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

MemberStatus Member(const std::string& role, int32_t id, uint64_t incarnation) {
  MemberStatus m;
  m.role = role;
  m.id = id;
  m.alive = true;
  m.state = "active";
  m.pid = 40 + id;
  m.incarnation = incarnation;
  return m;
}

// A member the coordinator lists dead while its pod runs on (a stopped or
// hung process: Kubernetes sees a running container) has that pod deleted
// once it has been listed dead for lost_after_ms, so that its Job starts
// the index again; a delete that fails is tried again at the next look.
// Neither the pod the Job starts nor a container started again in the same
// pod is blamed for a registration from before it started.
TEST(K8sController, APodWhoseMemberIsListedDeadIsDeletedAfterTheGrace) {
  int64_t t = 0;  // the controller's clock (ms); its looks are 1 s apart
  // The job's pods, each container's start on that clock.
  struct FakePod {
    std::string job;
    int index;
    std::string name;
    int64_t started_t;
    int restarts;
  };
  std::vector<FakePod> pods = {{"j-server", 1, "j-server-1-abcde", -600000, 0},
                               {"j-worker", 0, "j-worker-0-fghij", -600000, 0}};
  FakeKubectl kubectl;
  kubectl.pods = [&] {
    std::string out = "j-worker\t1\tj-worker-1-klmno\tSucceeded\t\t0\n";
    for (const FakePod& p : pods) {
      out += p.job + "\t" + std::to_string(p.index) + "\t" + p.name +
             "\tRunning\t" +
             KubeTime(std::chrono::seconds((t - p.started_t) / 1000)) + "\t" +
             std::to_string(p.restarts) + "\n";
    }
    return out;
  };
  K8sControllerOptions o;
  o.coordinator = "tcp://127.0.0.1:1";  // not asked: no target, no drain
  o.job_name = "j";
  o.kube_namespace = "ml";
  o.lost_after_ms = 25000;
  K8sController controller(o, kubectl.tool());
  ClusterStatus status;
  status.members = {Member("server", 1, 7), Member("worker", 0, 8)};

  // The pods are listed once for the members' registrations, not again.
  controller.Step(status, t, t);
  t += 1000;
  controller.Step(status, t, t);
  ASSERT_EQ(kubectl.calls.size(), 1u);
  EXPECT_EQ(kubectl.calls[0],
            "--namespace ml get pods --selector=job-name in "
            "(j-worker,j-server) --output=jsonpath={range .items[*]}"
            "{.metadata.labels.job-name}{\"\\t\"}"
            "{.metadata.annotations.batch\\.kubernetes\\.io/"
            "job-completion-index}{\"\\t\"}{.metadata.name}{\"\\t\"}"
            "{.status.phase}{\"\\t\"}"
            "{.status.containerStatuses[0].state.running.startedAt}"
            "{\"\\t\"}{.status.containerStatuses[0].restartCount}"
            "{\"\\n\"}{end}");

  // Server 1 is stopped: last heard from at 2 s, listed dead from 7 s.
  MemberStatus& server = status.members[0];
  server.alive = false;
  server.state = "dead";
  const auto deletes = [&](const std::string& name) {
    return std::count(kubectl.calls.begin(), kubectl.calls.end(),
                      "--namespace ml delete pod " + name + " --wait=false");
  };
  // Looks until `end`, the server last heard from at `heard_at`.
  const auto run_until = [&](int64_t end, int64_t heard_at) {
    for (; t < end; t += 1000) {
      server.last_heartbeat_ms_ago = t - heard_at;
      controller.Step(status, t, t);
    }
  };
  t = 7000;
  const auto listings = [&] {
    return std::count_if(kubectl.calls.begin(), kubectl.calls.end(),
                         [](const std::string& c) {
                           return c.starts_with("--namespace ml get pods");
                         });
  };
  // While the dead member's pod runs, each look lists the pods (the pod
  // may be replaced).
  const auto listed = listings();
  run_until(20000, 2000);
  EXPECT_EQ(listings(), listed + 13);
  // 10 s of looks missed (the coordinator restarting): the grace starts
  // again at the next look.
  t = 30000;
  run_until(30000 + o.lost_after_ms, 2000);
  EXPECT_EQ(deletes("j-server-1-abcde"), 0);
  // The first delete fails; the next look's works.
  kubectl.fail_deletes = 1;
  t = 30000 + o.lost_after_ms;
  run_until(t + 3000, 2000);
  EXPECT_EQ(deletes("j-server-1-abcde"), 2);
  ASSERT_EQ(controller.actions().size(), 1u);
  EXPECT_EQ(controller.actions().back(),
            "deleted pod j-server-1-abcde: server 1 listed dead for 26.0 s "
            "while its pod runs on (stopped or hung); its Job starts it "
            "again");

  // Its Job starts a new pod, which has not registered yet: the dead
  // registration is its predecessor's.
  pods[0] = {"j-server", 1, "j-server-1-pqrst", t, 0};
  run_until(t + 2 * o.lost_after_ms, 2000);
  EXPECT_EQ(controller.actions().size(), 1u);

  // The new pod registers (9), then hangs. Its container is started again
  // in the same pod, and then a restarted coordinator moves the dead
  // registration's last heartbeat forward (past the container's start):
  // that registration is still the container's predecessor's.
  server.incarnation = 9;
  server.alive = true;
  server.state = "active";
  server.last_heartbeat_ms_ago = 0;
  controller.Step(status, t, t);
  t += 1000;
  server.alive = false;
  server.state = "dead";
  pods[0] = {"j-server", 1, "j-server-1-pqrst", t + 2000, 1};
  run_until(t + 2 * o.lost_after_ms, t + 12000);
  EXPECT_EQ(controller.actions().size(), 1u);
  EXPECT_EQ(deletes("j-server-1-pqrst"), 0);

  // The pod goes (its member still listed dead): listed once more, then
  // not while nothing changes.
  pods.clear();
  const auto before = listings();
  run_until(t + 5000, t + 12000);
  EXPECT_EQ(listings(), before + 1);
}

}  // namespace
}  // namespace ductile::launch
