// The PyTorch examples (examples/torch/) as a user runs them: `ductile local
// --servers=2 --workers=2 -- python3 examples/torch/SCRIPT.py`, real
// processes on loopback, each run a few hundred steps. Every run is bounded
// in time and the test checks that no process of its cluster is left.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/example_output.h"
#include "tests/marked_processes.h"

namespace {

using ductile::testing::BatchesTrained;
using ductile::testing::ChildProcess;
using ductile::testing::ExpectResized2To3To1;
using ductile::testing::NoProcessesLeft;
using ductile::testing::ProcessesWith;

const std::string kBinary = DUCTILE_BINARY;
constexpr int64_t kRunLimitMs = 240000;
// The accuracy every run must pass on Fashion-MNIST's test set: well above
// chance (0.1), below what the scripts reach undisturbed in these few
// hundred steps (0.82 and more).
constexpr double kMinAccuracy = 0.75;
// One epoch of Fashion-MNIST's 60,000 training samples in batches of 64.
constexpr int kBatchesPerEpoch = 60000 / 64;
// Runs that need no more train on the first 32,000 samples: 500 batches.
const std::string kFirstSamples = "--train_samples=32000";
constexpr int kBatchesOfTheFirstSamples = 32000 / 64;

// A flag unique to this test that every process of its cluster carries
// (the launcher passes --timeout_ms on to servers and workers).
std::string UniqueTimeoutFlag() {
  static int n = 0;
  return "--timeout_ms=" + std::to_string(50000 + (getpid() % 1000) * 10 + n++);
}

// `ductile local --servers=2 --workers=2 FLAGS -- python3 SCRIPT ARGS`,
// with the build tree's package on the workers' PYTHONPATH.
std::vector<std::string> TorchJob(const std::string& marker,
                                  const std::vector<std::string>& flags,
                                  const std::string& script,
                                  const std::vector<std::string>& args) {
  std::vector<std::string> job = {kBinary, "local", "--servers=2",
                                  "--workers=2", marker};
  job.insert(job.end(), flags.begin(), flags.end());
  job.insert(job.end(),
             {"--", "/usr/bin/env",
              std::string("PYTHONPATH=") + DUCTILE_PYTHON_PATH, DUCTILE_PYTHON,
              std::string(DUCTILE_SOURCE_DIR) + "/examples/torch/" + script});
  job.insert(job.end(), args.begin(), args.end());
  return job;
}

// The accuracies the workers printed ("test accuracy X").
std::vector<double> Accuracies(const std::string& output) {
  std::vector<double> found;
  const std::regex line("test accuracy ([0-9.]+)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    found.push_back(std::stod((*it)[1].str()));
  }
  return found;
}

// Every worker that finished printed an accuracy past the bar.
void ExpectAccuracyOf(const std::string& output, size_t workers) {
  const std::vector<double> accuracies = Accuracies(output);
  EXPECT_EQ(accuracies.size(), workers) << output;
  for (double a : accuracies) EXPECT_GE(a, kMinAccuracy) << output;
}

TEST(TorchExamples, TwoWorkersUnderBspTrainTheMlpPastTheBar) {
  const std::string marker = UniqueTimeoutFlag();
  ChildProcess p(TorchJob(marker, {}, "mlp.py", {"--epochs=1", kFirstSamples}));
  ASSERT_EQ(p.WaitExit(kRunLimitMs), 0) << p.output();
  EXPECT_NE(p.output().find("ductile local: done"), std::string::npos)
      << p.output();
  ExpectAccuracyOf(p.output(), 2);
  EXPECT_EQ(BatchesTrained(p.output()), kBatchesOfTheFirstSamples)
      << p.output();
  EXPECT_TRUE(NoProcessesLeft(marker));
}

// The CNN (two convolutions, two dense layers), a third of an epoch (20000
// samples) shared by two workers under BSP: both print the same accuracy,
// past the bar.
TEST(TorchExamples, TwoWorkersUnderBspTrainTheCnnPastTheBar) {
  const std::string marker = UniqueTimeoutFlag();
  ChildProcess p(
      TorchJob(marker, {}, "cnn.py", {"--epochs=1", "--train_samples=20000"}));
  ASSERT_EQ(p.WaitExit(kRunLimitMs), 0) << p.output();
  EXPECT_NE(p.output().find("ductile local: done"), std::string::npos)
      << p.output();
  ExpectAccuracyOf(p.output(), 2);
  const std::vector<double> accuracies = Accuracies(p.output());
  ASSERT_EQ(accuracies.size(), 2u);
  EXPECT_EQ(accuracies[0], accuracies[1]) << p.output();
  EXPECT_TRUE(NoProcessesLeft(marker));
}

// A script that raises (here: no data where it looks) stops the cluster;
// the launcher fails naming the worker, with the traceback's end.
TEST(TorchExamples, AScriptThatRaisesStopsTheClusterWithItsTraceback) {
  const std::string marker = UniqueTimeoutFlag();
  ChildProcess p(
      TorchJob(marker, {}, "mlp.py", {"--data_dir=/nonexistent/fmnist"}));
  const int code = p.WaitExit(kRunLimitMs);
  EXPECT_NE(code, 0) << p.output();
  EXPECT_NE(code, -1) << "did not stop: " << p.output();
  const std::string& out = p.output();
  const size_t verdict = out.find("failed with exit status 1\n");
  ASSERT_NE(verdict, std::string::npos) << out;
  const size_t tail = out.find("  its stderr ended with:\n", verdict);
  ASSERT_NE(tail, std::string::npos) << out;
  EXPECT_NE(out.find("  | FileNotFoundError: [Errno 2] No such file or "
                     "directory: '/nonexistent/fmnist/",
                     tail),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("stopping the cluster"), std::string::npos) << out;
  EXPECT_EQ(out.find("ductile local: done"), std::string::npos) << out;
  EXPECT_TRUE(NoProcessesLeft(marker));
}

// A server SIGKILLed mid-job: the launcher restarts it, the job rolls back
// to its latest checkpoint, each worker's DistributedOptimizer takes the
// rollback in step() and the job finishes, past the bar.
TEST(TorchExamples, AServerKilledMidwayRollsTheJobBackAndItFinishes) {
  const std::string marker = UniqueTimeoutFlag();
  ChildProcess p(
      TorchJob(marker,
               {"--checkpoint_every=40", "--heartbeat_timeout_ms=2000",
                "--kill_schedule=server:1@clock=150"},
               "mlp.py", {"--epochs=1", kFirstSamples}));
  ASSERT_EQ(p.WaitExit(kRunLimitMs), 0) << p.output();
  const std::string& out = p.output();
  EXPECT_NE(out.find("kill-schedule: restarted server 1"), std::string::npos)
      << out;
  for (const char* worker : {"worker 0", "worker 1"}) {
    EXPECT_NE(out.find(std::string(worker) +
                       ": the job rolled back to the checkpoint at clock "),
              std::string::npos)
        << worker << "\n"
        << out;
  }
  ExpectAccuracyOf(out, 2);
  // The batches the rollback undid were trained again, once.
  EXPECT_EQ(BatchesTrained(out), kBatchesOfTheFirstSamples) << out;
  EXPECT_TRUE(NoProcessesLeft(marker));
}

// Workers 2 -> 3 -> 1: the joiner runs the same script and takes its share
// of the epoch, the two drained workers leave at their next batch and exit
// 0, the last one trains the rest: every batch once.
TEST(TorchExamples, TheMlpTrainsEveryBatchOnceThroughAResize2To3To1) {
  const std::string marker = UniqueTimeoutFlag();
  ChildProcess p(TorchJob(
      marker, {"--resize_schedule=workers=3@clock=100,workers=1@clock=250"},
      "mlp.py", {"--epochs=1"}));
  ASSERT_EQ(p.WaitExit(kRunLimitMs), 0) << p.output();
  const std::string& out = p.output();
  ExpectResized2To3To1(out);
  EXPECT_EQ(BatchesTrained(out), kBatchesPerEpoch) << out;
  // The last worker's accuracy, after the whole epoch, passes the bar.
  const std::vector<double> accuracies = Accuracies(out);
  ASSERT_EQ(accuracies.size(), 3u) << out;
  EXPECT_GE(accuracies.back(), kMinAccuracy) << out;
  EXPECT_TRUE(NoProcessesLeft(marker));
}

}  // namespace
