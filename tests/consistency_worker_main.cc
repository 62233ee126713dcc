// One worker of consistency_process_test, as a process of its own: runs the
// counter workload of consistency_property_test against a cluster and
// checks every read it makes. A worker given --stop_at=K stops itself with
// SIGSTOP after its read at clock K (the test resumes it with SIGCONT).
//
// Flags (all --name=value):
//   --coordinator  coordinator address
//   --workers      P, the number of workers (keys 0..P-1, shared key P)
//   --clocks       clocks to run (<= 23)
//   --mode         ssp | bsp | async
//   --staleness    SSP's bound
//   --combine      sum | mean (BSP)
//   --seed         seed of the random sleeps
//   --max_sleep_us longest random sleep between steps
//   --stop_at      clock after whose read to SIGSTOP itself (-1: never)
//
// Prints, one line each and flushed:
//   "worker <id>"               once registered
//   "clock <c>"                 after each Clock()
//   "pulled <c>"                after the reads at clock c completed
//   "stopping <c>"              just before SIGSTOP
//   "VIOLATION <text>"          each broken property (the first 20)
//   "RESULT worker=<id> violations=<n> max_staleness=<m> pulls=<p>
//    counters=<a,b,..> bits=<..> last=<..>"  at the end
// Exit status: 0 when the run completed (violations are in RESULT), 2 when
// a call failed, 3 on bad flags.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ductile/client.h"
#include "ductile/table.h"
#include "sim/counter_oracle.h"

namespace {

using ductile::Client;
using ductile::ClientOptions;
using ductile::Consistency;
using ductile::ConsistencyMode;
using ductile::Handle;
using ductile::Key;
using ductile::Status;
using ductile::TableId;
using ductile::TableOptions;
using ductile::UpdateRule;

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Fail(const std::string& what, const Status& s) {
  Say("ERROR " + what + ": " + s.ToString());
  return 2;
}

std::string Join(const std::vector<float>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(static_cast<int64_t>(v[i]));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      Say("ERROR bad flag " + arg);
      return 3;
    }
    flags[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  auto flag = [&](const std::string& name, const std::string& def) {
    auto it = flags.find(name);
    return it == flags.end() ? def : it->second;
  };
  const int workers = std::stoi(flag("workers", "0"));
  const int64_t clocks = std::stoll(flag("clocks", "10"));
  const std::string mode = flag("mode", "ssp");
  const int64_t stop_at = std::stoll(flag("stop_at", "-1"));
  const int max_sleep_us = std::stoi(flag("max_sleep_us", "1000"));
  Consistency consistency;
  consistency.staleness = std::stoi(flag("staleness", "0"));
  consistency.combine = flag("combine", "sum") == "sum"
                            ? ductile::BspCombine::kSum
                            : ductile::BspCombine::kMean;
  if (mode == "ssp") {
    consistency.mode = ConsistencyMode::kSsp;
  } else if (mode == "bsp") {
    consistency.mode = ConsistencyMode::kBsp;
    consistency.staleness = 0;
  } else if (mode == "async") {
    consistency.mode = ConsistencyMode::kAsync;
  } else {
    Say("ERROR bad --mode " + mode);
    return 3;
  }
  if (workers < 1 || clocks < 1 || clocks > 23 ||
      flag("coordinator", "").empty()) {
    Say("ERROR need --coordinator, --workers >= 1, 1 <= --clocks <= 23");
    return 3;
  }
  ClientOptions options;
  options.coordinator_address = flag("coordinator", "");
  options.connect_timeout_ms = 30000;
  options.request_timeout_ms = 30000;
  auto connected = Client::Connect(options);
  if (!connected.ok()) return Fail("connect", connected.status());
  std::unique_ptr<Client> client = std::move(*connected);
  const int self = client->worker_id();
  Say("worker " + std::to_string(self));
  if (self < 0 || self >= workers) {
    Say("ERROR worker id out of range");
    return 2;
  }
  // Every worker registered before any table exists: the servers know the
  // whole live set before the first clock moves.
  Status s = client->Barrier(30000);
  if (!s.ok()) return Fail("barrier", s);
  TableId tables[3];
  const char* names[3] = {"counter", "bits", "last"};
  for (int t = 0; t < 3; ++t) {
    TableOptions o;
    o.name = names[t];
    o.value_width = 1;
    o.rule = t == 2 ? UpdateRule::kAssign : UpdateRule::kAdd;
    o.consistency = consistency;
    auto id = client->CreateTable(o);
    if (!id.ok()) return Fail("create table", id.status());
    tables[t] = *id;
  }

  std::vector<Key> keys;
  for (int k = 0; k <= workers; ++k) keys.push_back(k);
  const Key own_keys[] = {static_cast<Key>(self), static_cast<Key>(workers)};
  const float ones[] = {1.0f, 1.0f};
  const Key own_key = static_cast<Key>(self);
  std::vector<float> bit_values, last_values;
  bit_values.reserve(clocks);
  last_values.reserve(clocks);
  std::vector<Handle> in_flight;
  std::mt19937 rng(std::stoul(flag("seed", "1")));
  std::uniform_int_distribution<int> sleep_us(0, max_sleep_us);
  auto sleep = [&] {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us(rng)));
  };
  int64_t violations = 0;
  auto violation = [&](int64_t c, const std::string& what) {
    if (++violations <= 20) {
      Say("VIOLATION worker " + std::to_string(self) + " clock " +
          std::to_string(c) + ": " + what);
    }
  };
  std::vector<float> counter(keys.size()), bits(keys.size()), last(keys.size());
  auto read_all = [&]() -> Status {
    Status st = client->Pull(tables[0], keys, counter);
    if (st.ok()) st = client->Pull(tables[1], keys, bits);
    if (st.ok()) st = client->Pull(tables[2], keys, last);
    return st;
  };

  for (int64_t c = 1; c <= clocks; ++c) {
    const int64_t t = c - 1;  // this step's pushes carry timestamp t
    s = client->Push(tables[0], own_keys, ones);
    if (!s.ok()) return Fail("push", s);
    bit_values.push_back(static_cast<float>(uint64_t{1} << t));
    last_values.push_back(static_cast<float>(t + 1));
    in_flight.push_back(
        client->PushAsync(tables[1], {&own_key, 1}, {&bit_values.back(), 1}));
    in_flight.push_back(
        client->PushAsync(tables[2], {&own_key, 1}, {&last_values.back(), 1}));
    sleep();
    if (client->Clock() != c) {
      Say("ERROR clock out of step");
      return 2;
    }
    Say("clock " + std::to_string(c));
    sleep();  // others may push clock c's updates first: BSP hides them
    s = read_all();
    if (!s.ok()) return Fail("read at clock " + std::to_string(c), s);
    // Properties 1, 2 and 8 (and BSP's exact snapshot).
    const ductile::counter_oracle::Read read{c, counter, bits, last};
    for (const std::string& what :
         ductile::counter_oracle::CheckRead(read, self, workers, consistency)) {
      violation(c, what);
    }
    Say("pulled " + std::to_string(c));
    if (c == stop_at) {
      Say("stopping " + std::to_string(c));
      raise(SIGSTOP);
    }
    sleep();
  }
  for (Handle& h : in_flight) {
    s = h.Wait();
    if (!s.ok()) return Fail("in-flight push", s);
  }
  s = client->Barrier(30000);
  if (!s.ok()) return Fail("final barrier", s);
  s = read_all();
  if (!s.ok()) return Fail("final read", s);
  const ductile::ClientStats stats = client->stats();
  Say("RESULT worker=" + std::to_string(self) +
      " violations=" + std::to_string(violations) +
      " max_staleness=" + std::to_string(stats.max_staleness()) +
      " pulls=" + std::to_string(stats.pulls) + " counters=" + Join(counter) +
      " bits=" + Join(bits) + " last=" + Join(last));
  return 0;
}
