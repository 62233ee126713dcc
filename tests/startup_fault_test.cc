// A server dying while the workers start (docs/fault_tolerance.md): a
// worker of the training apps has created its tables and waits at the
// start barrier for the other one when a server is killed and restarted.
// The job rolls back; the worker waits for the rollback and starts again
// (StartUp in train/trainer.cc), and once the second worker comes the job
// runs to its end. Real processes on loopback; every wait is bounded and
// every process killed when the test ends.
#include <memory>
#include <string>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using testing::ChildProcess;
using testing::Kill9;
using testing::kWaitMs;
using testing::RecoveryCluster;

std::unique_ptr<ChildProcess> StartMfWorker(const RecoveryCluster& cluster) {
  return std::make_unique<ChildProcess>(std::vector<std::string>{
      DUCTILE_CLI, "worker", "--coordinator=" + cluster.address(), "--app=mf",
      "--mf_rows=200", "--mf_cols=200", "--mf_observed=0.2", "--epochs=2",
      "--consistency=bsp", "--timeout_ms=30000"});
}

TEST(StartupFault, AServerRestartedWhileWorkersStartRollsBackAndTheJobEnds) {
  RecoveryCluster cluster(/*heartbeat_timeout_ms=*/10000);
  cluster.StartCoordinator();
  cluster.StartServer(0);
  cluster.StartServer(1);
  std::unique_ptr<ChildProcess> first = StartMfWorker(cluster);
  // Its tables are created; it waits at the start barrier for the other.
  ASSERT_TRUE(cluster.WaitForStatus(
      [](const ClusterStatus& s) { return s.tables.size() == 2; }, kWaitMs))
      << first->output();
  Kill9(cluster.server(1));
  cluster.StartServer(1);  // same id, same state directory: a rollback
  ASSERT_TRUE(cluster.WaitForStatus(
      [](const ClusterStatus& s) { return s.generation > 0 && !s.recovering; },
      kWaitMs))
      << cluster.coordinator().output();
  std::unique_ptr<ChildProcess> second = StartMfWorker(cluster);
  EXPECT_EQ(first->WaitExit(kWaitMs), 0) << first->output();
  EXPECT_EQ(second->WaitExit(kWaitMs), 0) << second->output();
  EXPECT_NE(first->output().find("rolled back while it started"),
            std::string::npos)
      << first->output();
  // The lead worker reports the result.
  EXPECT_NE((first->output() + second->output()).find("final test RMSE"),
            std::string::npos)
      << first->output() << second->output();
  if (::testing::Test::HasFailure()) return;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
}

}  // namespace
}  // namespace ductile
