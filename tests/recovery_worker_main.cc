// A worker of the recovery tests (tests/recovery_process_test.cc): the
// counter workload of the consistency tests, with an exact expected state.
//
// Two tables of `keys` keys x 4 floats, "count" (add) and "adam" (Adam),
// under --mode: bsp (combined by sum), ssp (--staleness) or async. At clock c,
// worker w pushes to every key k the gradient g_w(c, k, j) = (w + 1) * 0.25 *
// (1 + (c + k + j) % 3), so the state after every update with timestamp < C is
// known exactly: the sums are exact in binary32, and Adam is replayed here with
// the servers' own kernel, one combined step per clock as BSP applies it. Under
// SSP and async the pushes apply one by one in arrival order, so only "count"
// has an exact expected state there; it is the one that shows whether a
// checkpoint is exactly the cut at its clock (pushes of later clocks held
// back), since nothing else stops them from being applied.
//
// After a rollback (a server was killed) the worker waits at a barrier (so
// nobody has pushed in the new timeline), pulls both tables and checks them
// bit for bit against the expected state at the checkpoint's clock, checks
// that the resume state it got back is the one it recorded at that clock,
// then resumes. At the end it checks the final state the same way: an
// update lost or applied twice across a rollback, or optimizer state not
// restored bit for bit, makes the final Adam values differ.
//
// A worker asked to leave (`ductile drain worker:N`) leaves before its next
// step, prints "left at clock L" and exits 0: its pushes of clocks [0, L)
// stay in the job. In its final check, the other worker, told by the
// coordinator that the leaver is "left", expects the leaver's pushes up to
// the one clock whose sums match the "count" table (every push adds a
// positive amount, so the sums grow with each clock), checks the rest of the
// state against that, and names it ("worker W left at clock L"): a test
// compares it with the leaver's own line.
//
// Prints "verified rollback to clock C" per rollback, "final state exact at
// clock N" at the end; exits 0 only if every check passed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ductile/ductile.h"
#include "sim/counter_oracle.h"
#include "util/update_rule.h"

namespace {

using ductile::Client;
using ductile::Key;
using ductile::Status;
using ductile::TableId;
using ductile::TableOptions;

constexpr uint32_t kWidth = 4;
constexpr int kWorkers = 2;

float Gradient(int worker, int64_t clock, Key key, uint32_t j) {
  return (worker + 1) * 0.25f *
         static_cast<float>(1 + (clock + static_cast<int64_t>(key) + j) % 3);
}

ductile::Consistency g_consistency;

TableOptions Table(const char* name, ductile::UpdateRule rule) {
  TableOptions t;
  t.name = name;
  t.value_width = kWidth;
  t.rule = rule;
  t.learning_rate = 0.01f;
  t.consistency = g_consistency;
  return t;
}

// The state of every key after the combined updates of clocks [0, clock),
// where worker w pushed at clocks [0, pushed_until[w]) only.
void Expected(int64_t clock, const int64_t (&pushed_until)[kWorkers],
              size_t keys, const TableOptions& options,
              std::vector<float>* out) {
  const ductile::UpdateRuleKernel kernel(options, nullptr);
  out->assign(keys * kWidth, 0.0f);
  std::vector<float> state(kernel.state_floats(kWidth));
  std::vector<float> g(kWidth);
  for (size_t k = 0; k < keys; ++k) {
    std::fill(state.begin(), state.end(), 0.0f);
    int64_t steps = 0;
    std::span<float> w(out->data() + k * kWidth, kWidth);
    for (int64_t c = 0; c < clock; ++c) {
      for (uint32_t j = 0; j < kWidth; ++j) {
        g[j] = 0.0f;
        for (int worker = 0; worker < kWorkers; ++worker) {
          if (ductile::counter_oracle::Holds({0, pushed_until[worker]}, c,
                                             clock)) {
            g[j] += Gradient(worker, c, k, j);
          }
        }
      }
      kernel.Apply(w, g, state, &steps);
    }
  }
}

struct Args {
  std::string coordinator;
  int64_t clocks = 100;
  size_t keys = 64;
  int sleep_ms = 10;
  std::string mode = "bsp";
  int staleness = 2;
  std::string cluster_keys;    // directory of the cluster's keys ("" plain)
  std::string member_key;      // this worker's own key pair ("" none)
  int worker_id = -1;          // the id to ask for (-1: any)
  bool prefer_ipc = true;      // to servers on this host over ipc://
  ductile::Security security;  // loaded from cluster_keys
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("coordinator")) {
      a->coordinator = v;
    } else if (const char* v = value("clocks")) {
      a->clocks = std::stoll(v);
    } else if (const char* v = value("keys")) {
      a->keys = std::stoul(v);
    } else if (const char* v = value("sleep_ms")) {
      a->sleep_ms = std::stoi(v);
    } else if (const char* v = value("mode")) {
      a->mode = v;
    } else if (const char* v = value("staleness")) {
      a->staleness = std::stoi(v);
    } else if (const char* v = value("cluster_keys")) {
      a->cluster_keys = v;
    } else if (const char* v = value("member_key")) {
      a->member_key = v;
    } else if (const char* v = value("worker_id")) {
      a->worker_id = std::stoi(v);
    } else if (const char* v = value("prefer_ipc")) {
      a->prefer_ipc = std::string(v) != "0" && std::string(v) != "false";
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return !a->coordinator.empty();
}

class Worker {
 public:
  Worker(Client& client, const Args& args)
      : client_(client),
        args_(args),
        exact_tables_(args.mode == "bsp" ? 2 : 1) {
    for (size_t k = 0; k < args.keys; ++k) keys_.push_back(k);
  }

  Status Setup() {
    for (int t = 0; t < 2; ++t) {
      auto id = client_.CreateTable(options_[t]);
      if (!id.ok()) return id.status();
      tables_[t] = *id;
    }
    std::printf("tables created\n");
    std::fflush(stdout);
    return client_.Barrier();
  }

  // One clock: both tables' pushes, then Clock().
  Status Step() {
    const int64_t c = client_.clock();
    std::vector<float> g(keys_.size() * kWidth);
    for (size_t k = 0; k < keys_.size(); ++k) {
      for (uint32_t j = 0; j < kWidth; ++j) {
        g[k * kWidth + j] = Gradient(client_.worker_id(), c, keys_[k], j);
      }
    }
    for (TableId t : tables_) {
      Status s = client_.Push(t, keys_, g);
      if (!s.ok()) return s;
    }
    client_.Clock();
    return Status::Ok();
  }

  // Pulls both tables and compares them bit for bit with the state after
  // clocks [0, clock). Everyone is at a barrier: nobody pushes meanwhile.
  // With `with_leavers`, a worker that left counts up to the clock it left
  // at (FindWhereLeaversStopped).
  Status Verify(int64_t clock, const char* what, bool with_leavers = false) {
    int64_t pushed_until[kWorkers];
    std::fill(std::begin(pushed_until), std::end(pushed_until), clock);
    for (int t = 0; t < exact_tables_; ++t) {
      std::vector<float> got(keys_.size() * kWidth), want;
      Status s = client_.Pull(tables_[t], keys_, got);
      if (!s.ok()) return s;
      if (t == 0 && with_leavers) {
        s = FindWhereLeaversStopped(clock, got, pushed_until);
        if (!s.ok()) return s;
      }
      Expected(clock, pushed_until, keys_.size(), options_[t], &want);
      if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) {
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            std::printf(
                "MISMATCH %s table %s at clock %lld: float %zu is "
                "%.9g, expected %.9g\n",
                what, options_[t].name.c_str(), static_cast<long long>(clock),
                i, got[i], want[i]);
            break;
          }
        }
        std::fflush(stdout);
        return ductile::InternalError("state mismatch");
      }
    }
    return Status::Ok();
  }

  // For each other worker the coordinator reports as "left", sets
  // pushed_until[worker] to the clock L < `clock` at which the "count"
  // table `count` matches its pushes of clocks [0, L). Leaves it as it is
  // when none matches: the check that follows fails.
  Status FindWhereLeaversStopped(int64_t clock, const std::vector<float>& count,
                                 int64_t (&pushed_until)[kWorkers]) {
    const std::vector<int32_t> live = client_.live_workers();
    bool all_live = true;
    for (int worker = 0; worker < kWorkers; ++worker) {
      if (std::find(live.begin(), live.end(), worker) == live.end()) {
        all_live = false;
      }
    }
    if (all_live) return Status::Ok();  // nobody left: no status query
    auto status =
        ductile::QueryClusterStatus(args_.coordinator, 10000, args_.security);
    if (!status.ok()) return status.status();
    for (const ductile::MemberStatus& m : status->members) {
      if (m.role != "worker" || m.state != "left" || m.id < 0 ||
          m.id >= kWorkers || m.id == client_.worker_id()) {
        continue;
      }
      int64_t until[kWorkers];
      std::copy(std::begin(pushed_until), std::end(pushed_until), until);
      std::vector<float> want;
      for (until[m.id] = 0; until[m.id] < clock; ++until[m.id]) {
        Expected(clock, until, keys_.size(), options_[0], &want);
        if (std::memcmp(count.data(), want.data(),
                        count.size() * sizeof(float)) == 0) {
          pushed_until[m.id] = until[m.id];
          left_at_[m.id] = until[m.id];
          break;
        }
      }
    }
    return Status::Ok();
  }

  // After a failed call: waits for the rollback, checks the restored state,
  // resumes. Returns an error when there is no rollback or a check fails.
  Status Recover(const Status& failed) {
    while (true) {
      auto r = client_.AwaitRecovery(60000);
      if (!r.ok()) {
        std::printf("no rollback after: %s\n", failed.ToString().c_str());
        return failed;
      }
      const std::string expected_state =
          r->clock == 0 ? std::string() : std::to_string(r->clock);
      if (r->resume_state != expected_state) {
        std::printf("MISMATCH resume state '%s' at clock %lld\n",
                    r->resume_state.c_str(), static_cast<long long>(r->clock));
        return ductile::InternalError("resume state mismatch");
      }
      Status s = client_.Barrier();
      if (s.ok()) s = Verify(r->clock, "after rollback");
      if (s.ok()) s = client_.Barrier();
      if (s.code() == ductile::StatusCode::kAborted) continue;  // again
      if (!s.ok()) return s;
      std::printf("verified rollback to clock %lld (generation %llu)\n",
                  static_cast<long long>(r->clock),
                  static_cast<unsigned long long>(r->generation));
      std::fflush(stdout);
      return Status::Ok();
    }
  }

  Status Run() {
    while (true) {
      Status s;
      const bool training = client_.clock() < args_.clocks;
      if (training && client_.leave_requested()) {
        s = client_.Leave();
        if (!s.ok()) return s;
        left_ = true;
        std::printf("left at clock %lld\n",
                    static_cast<long long>(client_.clock()));
        std::fflush(stdout);
        return Status::Ok();
      }
      if (training) {
        client_.SetResumeState(std::to_string(client_.clock()));
        s = Step();
        if (s.ok()) {
          std::this_thread::sleep_for(
              std::chrono::milliseconds(args_.sleep_ms));
        }
      } else {
        s = client_.Barrier();
        if (s.ok()) s = Verify(args_.clocks, "final", /*with_leavers=*/true);
        if (s.ok()) s = client_.Barrier();
        if (s.ok()) break;
      }
      if (s.ok()) continue;
      if (s.code() == ductile::StatusCode::kInternal) return s;  // mismatch
      Status r = Recover(s);
      if (!r.ok()) return r;
    }
    std::printf("final state exact at clock %lld",
                static_cast<long long>(args_.clocks));
    for (int worker = 0; worker < kWorkers; ++worker) {
      if (left_at_[worker] >= 0) {
        std::printf(" (worker %d left at clock %lld)", worker,
                    static_cast<long long>(left_at_[worker]));
      }
    }
    std::printf("\n");
    std::fflush(stdout);
    return Status::Ok();
  }

  // True once this worker has left the job (it was drained).
  bool left() const { return left_; }

 private:
  Client& client_;
  const Args args_;
  std::vector<Key> keys_;
  const TableOptions options_[2] = {Table("count", ductile::UpdateRule::kAdd),
                                    Table("adam", ductile::UpdateRule::kAdam)};
  TableId tables_[2] = {0, 0};
  const int exact_tables_;  // tables with an exact expected state
  bool left_ = false;
  // The clock each other worker left at, as the final check found it (-1:
  // it did not leave).
  int64_t left_at_[kWorkers] = {-1, -1};
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: recovery_worker --coordinator=ADDR [--clocks=N] "
                 "[--keys=K] [--sleep_ms=M] [--mode=bsp|ssp|async] "
                 "[--staleness=S] [--cluster_keys=DIR [--member_key=FILE]] "
                 "[--worker_id=N] [--prefer_ipc=0|1]\n");
    return 2;
  }
  if (args.mode == "bsp") {
    g_consistency.mode = ductile::ConsistencyMode::kBsp;
    g_consistency.combine = ductile::BspCombine::kSum;
  } else if (args.mode == "ssp") {
    g_consistency.mode = ductile::ConsistencyMode::kSsp;
    g_consistency.staleness = args.staleness;
  } else if (args.mode == "async") {
    g_consistency.mode = ductile::ConsistencyMode::kAsync;
  } else {
    std::fprintf(stderr, "--mode must be bsp, ssp or async\n");
    return 2;
  }
  ductile::ClientOptions o;
  o.coordinator_address = args.coordinator;
  o.heartbeat_interval_ms = 100;
  o.request_timeout_ms = 60000;
  if (!args.cluster_keys.empty()) {
    auto keys = ductile::LoadClusterKeys(args.cluster_keys, false);
    if (!keys.ok()) {
      std::printf("keys: %s\n", keys.status().ToString().c_str());
      return 1;
    }
    args.security = *keys;
    if (!args.member_key.empty()) {
      // A key of its own, and a cluster that admits no shared key.
      ductile::Status loaded =
          ductile::LoadMemberKey(args.member_key, &args.security);
      if (!loaded.ok()) {
        std::printf("member key: %s\n", loaded.ToString().c_str());
        return 1;
      }
      args.security.require_member_keys = true;
    }
  }
  o.security = args.security;
  o.requested_worker_id = args.worker_id;
  o.prefer_ipc = args.prefer_ipc;
  auto client = Client::Connect(o);
  if (!client.ok()) {
    std::printf("connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  if ((*client)->num_workers() != kWorkers) {
    std::printf("the workload needs exactly %d workers\n", kWorkers);
    return 1;
  }
  Worker worker(**client, args);
  Status s = worker.Setup();
  if (s.ok()) s = worker.Run();
  if (s.ok() && !worker.left()) s = (*client)->Finish();
  if (!s.ok()) {
    std::printf("worker failed: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
