// model_bench: a training-like loop on a dense model, next to the raw
// transfer of the same bytes.
//
// Everything runs in this one process: a coordinator, S servers (each with
// --apply_threads) and W worker threads, each with its own Client reaching
// the servers over ipc:// as processes on one host would. The model is one
// Adam table of --floats floats cut into keys of --key_floats, spread over
// the servers by the routing. Each step, every worker pushes a gradient for
// the whole model and pulls the updated parameters back in the same round
// trip (PushPull, async): what a data-parallel worker does per step.
//
// Measured per configuration (the median of --repeats runs):
//   step ms       wall time of one worker step (mean over workers and steps)
//   apply ms      the servers' time applying updates per worker step
//                 (ServerCounters::apply_us; the busiest server)
//   server ms     the servers' other time on data requests per worker step
//                 (busy_us - apply_us: receipt, decoding, copying the reply)
//   rest ms       step - apply - server: the transport and the client
//   raw ms        raw ZeroMQ in the same run: each worker's DEALER sends its
//                 share of the model's bytes to each server's ROUTER, which
//                 answers with as many bytes, all pairs at once
//   step/raw      how far the step is from moving its bytes
//   samples/s     here: worker steps per second over the whole cluster
//
//   model_bench                       # 1M and 10M floats, 1x1 to 4x4
//   model_bench --floats=100000000 --configs=1x1,4x4
//   model_bench --apply_threads=1               # servers on one thread
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench/in_process_cluster.h"
#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/server.h"
#include "ductile/status.h"
#include "ductile/table.h"
#include "gflags/gflags.h"
#include "util/malloc_policy.h"

DEFINE_string(floats, "1000000,10000000",
              "Model sizes in floats, comma-separated (1000 to 10^9).");
DEFINE_string(configs, "1x1,1x2,2x2,4x4",
              "Cluster shapes SERVERSxWORKERS, comma-separated (1-16 each).");
DEFINE_int64(key_floats, 1 << 18,
             "Floats per key (the model is cut into keys of this width).");
DEFINE_int32(steps, 0,
             "Steps per worker per run; 0: 200 up to 2M floats, 40 up to "
             "20M, 10 above.");
DEFINE_int32(repeats, 3, "Runs of each measurement; medians are shown.");
DEFINE_int32(apply_threads, 0,
             "ServerOptions::apply_threads of every server (0: default).");
DEFINE_int32(io_threads, 1,
             "ServerOptions::io_threads and ClientOptions::io_threads of "
             "every server and worker.");
DEFINE_string(csv, "", "Also write every result to this CSV file.");
DEFINE_string(ipc_dir, "/tmp", "Directory for the ipc:// socket files.");
DEFINE_int64(shm_reply_mb, 256,
             "Each worker's shared memory for pushed and pulled values "
             "(ClientOptions::shm_reply_bytes), MiB; 0: values through the "
             "socket.");
DEFINE_bool(keep_freed_memory, true,
            "Keep freed memory for reuse, as the ductile programs do "
            "(util/malloc_policy.h); false: glibc's defaults, for ductile "
            "and the raw reference alike.");

namespace ductile::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr int kSocketTimeoutMs = 120000;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Runs body(0) .. body(n - 1) on n threads; returns the first error.
Status RunOnThreads(int n, const std::function<Status(int)>& body) {
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        statuses[i] = body(i);
      } catch (const zmq::error_t& e) {
        statuses[i] = UnavailableError(std::string("zmq: ") + e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (Status& s : statuses) DUCTILE_RETURN_IF_ERROR(s);
  return Status::Ok();
}

struct Shape {
  int servers = 1;
  int workers = 1;
  std::string name;
};

struct Result1 {
  double step_ms = 0, apply_ms = 0, server_ms = 0, raw_ms = 0;
  double steps_per_s = 0;
};

Result<std::unique_ptr<InProcessCluster>> StartCluster(const Shape& shape) {
  InProcessClusterOptions o;
  o.servers = shape.servers;
  o.workers = shape.workers;
  o.server.ipc_dir = FLAGS_ipc_dir;
  o.server.connect_timeout_ms = 20000;
  o.server.apply_threads = FLAGS_apply_threads;
  o.server.noise_scale_sample = 0;  // a model of made-up gradients
  o.client.connect_timeout_ms = 20000;
  o.client.request_timeout_ms = kSocketTimeoutMs;
  o.client.prefer_ipc = true;
  o.server.io_threads = FLAGS_io_threads;
  o.client.io_threads = FLAGS_io_threads;
  o.client.shm_reply_bytes = static_cast<uint64_t>(FLAGS_shm_reply_mb) << 20;
  return InProcessCluster::Start(o);
}

void NoFree(void*, void*) {}

// Raw ZeroMQ: W x S DEALER -> ROUTER pairs, each side in a context of its
// own; each dealer sends `bytes` and the router answers `bytes`, `steps`
// times, all pairs at once. Returns the mean round trip in ms.
Result<double> RawStep(int workers, int servers, size_t bytes, int steps) {
  const int pairs = workers * servers;
  std::vector<char> payload(bytes, 'x');
  struct Pair {
    zmq::context_t a{1}, b{1};
    zmq::socket_t router, dealer;
    std::string path;
  };
  std::vector<std::unique_ptr<Pair>> raw;
  for (int p = 0; p < pairs; ++p) {
    auto pair = std::make_unique<Pair>();
    pair->router = zmq::socket_t(pair->a, zmq::socket_type::router);
    pair->dealer = zmq::socket_t(pair->b, zmq::socket_type::dealer);
    for (zmq::socket_t* s : {&pair->router, &pair->dealer}) {
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::rcvtimeo, kSocketTimeoutMs);
      s->set(zmq::sockopt::sndtimeo, kSocketTimeoutMs);
    }
    pair->path = FLAGS_ipc_dir + "/ductile-model-bench-" +
                 std::to_string(getpid()) + "-" + std::to_string(p) + ".sock";
    pair->router.bind("ipc://" + pair->path);
    pair->dealer.connect("ipc://" + pair->path);
    raw.push_back(std::move(pair));
  }
  const int warmup = 2;
  std::vector<double> seconds(pairs);
  Status s = RunOnThreads(2 * pairs, [&](int i) -> Status {
    Pair& pair = *raw[i / 2];
    for (int n = 0; n < warmup + steps; ++n) {
      if (i % 2 == 1) {  // the server's side
        zmq::message_t id, in;
        if (!pair.router.recv(id) || !pair.router.recv(in)) {
          return DeadlineExceededError("raw: nothing received");
        }
        pair.router.send(std::move(id), zmq::send_flags::sndmore);
        pair.router.send(zmq::message_t(payload.data(), bytes, &NoFree),
                         zmq::send_flags::none);
        continue;
      }
      const auto start = SteadyClock::now();
      pair.dealer.send(zmq::message_t(payload.data(), bytes, &NoFree),
                       zmq::send_flags::none);
      zmq::message_t in;
      if (!pair.dealer.recv(in)) {
        return DeadlineExceededError("raw: nothing received");
      }
      if (in.size() != bytes) return InternalError("raw: wrong size");
      if (n == warmup) seconds[i / 2] = 0;
      if (n >= warmup) seconds[i / 2] += SecondsSince(start);
    }
    return Status::Ok();
  });
  for (auto& pair : raw) {
    pair->dealer.close();
    pair->router.close();
    std::remove(pair->path.c_str());
  }
  DUCTILE_RETURN_IF_ERROR(s);
  // A worker's step waits for its slowest server: per worker, the longest
  // of its pairs; then the mean over workers.
  double total = 0;
  for (int w = 0; w < workers; ++w) {
    double worst = 0;
    for (int v = 0; v < servers; ++v) {
      worst = std::max(worst, seconds[w * servers + v]);
    }
    total += worst;
  }
  return 1e3 * total / workers / steps;
}

int StepsFor(uint64_t floats) {
  if (FLAGS_steps > 0) return FLAGS_steps;
  return floats <= 2000000 ? 200 : floats <= 20000000 ? 40 : 10;
}

Result<Result1> RunOnce(InProcessCluster& cluster, const Shape& shape,
                        TableId table, const std::vector<Key>& keys,
                        uint64_t floats) {
  const int steps = StepsFor(floats);
  const int W = shape.workers;
  std::vector<std::vector<float>> grads(W), params(W);
  for (int w = 0; w < W; ++w) {
    // Small gradients of either sign, different per worker; cheap to make
    // at 100M floats.
    grads[w].resize(floats);
    uint32_t x = 2463534242u + static_cast<uint32_t>(w);
    for (float& g : grads[w]) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      g = (static_cast<float>(x >> 8) / 16777216.0f - 0.5f) * 2e-3f;
    }
    params[w].assign(floats, 0.0f);
  }
  // Warm-up: a step per worker.
  for (int w = 0; w < W; ++w) {
    DUCTILE_RETURN_IF_ERROR(
        cluster.client(w).PushPull(table, keys, grads[w], params[w]));
  }
  std::vector<ServerCounters> before;
  for (int s = 0; s < cluster.num_servers(); ++s) {
    before.push_back(cluster.server(s).counters());
  }
  std::vector<double> seconds(W);
  const auto start = SteadyClock::now();
  DUCTILE_RETURN_IF_ERROR(RunOnThreads(W, [&](int w) -> Status {
    const auto t0 = SteadyClock::now();
    for (int n = 0; n < steps; ++n) {
      DUCTILE_RETURN_IF_ERROR(
          cluster.client(w).PushPull(table, keys, grads[w], params[w]));
    }
    seconds[w] = SecondsSince(t0);
    return Status::Ok();
  }));
  const double wall = SecondsSince(start);
  Result1 r;
  double sum = 0;
  for (double s : seconds) sum += s;
  r.step_ms = 1e3 * sum / W / steps;
  r.steps_per_s = W * steps / wall;
  // The busiest server's time per worker step (each worker step reaches
  // every server that owns one of its keys).
  for (int s = 0; s < cluster.num_servers(); ++s) {
    const ServerCounters now = cluster.server(s).counters();
    const double apply = (now.apply_us - before[s].apply_us) / 1e3;
    const double busy = (now.busy_us - before[s].busy_us) / 1e3;
    r.apply_ms = std::max(r.apply_ms, apply / (W * steps));
    r.server_ms = std::max(r.server_ms, (busy - apply) / (W * steps));
  }
  auto raw = RawStep(W, shape.servers, floats * 4 / shape.servers,
                     std::max(steps / 2, 5));
  DUCTILE_RETURN_IF_ERROR(raw.status());
  r.raw_ms = *raw;
  return r;
}

Status Main() {
  std::vector<uint64_t> sizes;
  std::stringstream fs(FLAGS_floats);
  for (std::string t; std::getline(fs, t, ',');) {
    const uint64_t n = std::stoull(t);
    if (n < 1000 || n > 1000000000) {
      return InvalidArgumentError("--floats: " + t + " is not in [1000, 1e9]");
    }
    sizes.push_back(n);
  }
  std::vector<Shape> shapes;
  std::stringstream cs(FLAGS_configs);
  for (std::string t; std::getline(cs, t, ',');) {
    Shape shape;
    shape.name = t;
    if (std::sscanf(t.c_str(), "%dx%d", &shape.servers, &shape.workers) != 2 ||
        shape.servers < 1 || shape.servers > 16 || shape.workers < 1 ||
        shape.workers > 16) {
      return InvalidArgumentError("--configs: bad shape '" + t + "'");
    }
    shapes.push_back(shape);
  }
  if (FLAGS_key_floats < 1 || FLAGS_key_floats > (1 << 24)) {
    return InvalidArgumentError("--key_floats must be in [1, 2^24]");
  }
  if (FLAGS_repeats < 1) return InvalidArgumentError("--repeats must be >= 1");
  std::ofstream csv;
  if (!FLAGS_csv.empty()) {
    csv.open(FLAGS_csv);
    if (!csv) return InvalidArgumentError("cannot write " + FLAGS_csv);
    csv << "floats,config,servers,workers,apply_threads,step_ms,apply_ms,"
           "server_ms,rest_ms,raw_ms,step_over_raw,steps_per_s\n";
  }
  std::printf("%-11s %-6s %9s %9s %9s %9s %9s %8s %10s\n", "floats", "SxW",
              "step ms", "apply ms", "server ms", "rest ms", "raw ms",
              "step/raw", "steps/s");
  for (uint64_t floats : sizes) {
    for (const Shape& shape : shapes) {
      auto cluster = StartCluster(shape);
      DUCTILE_RETURN_IF_ERROR(cluster.status());
      TableOptions t;
      t.name = "model";
      t.rule = UpdateRule::kAdam;
      t.learning_rate = 1e-3f;
      t.value_width = static_cast<uint32_t>(FLAGS_key_floats);
      auto table = (*cluster)->client(0).CreateTable(t);
      DUCTILE_RETURN_IF_ERROR(table.status());
      for (int w = 1; w < shape.workers; ++w) {
        DUCTILE_RETURN_IF_ERROR(
            (*cluster)->client(w).GetTable(t.name).status());
      }
      // Whole keys: the model is rounded up to a multiple of --key_floats.
      std::vector<Key> keys((floats + FLAGS_key_floats - 1) / FLAGS_key_floats);
      for (size_t k = 0; k < keys.size(); ++k) keys[k] = k;
      const uint64_t model = keys.size() * FLAGS_key_floats;
      std::vector<Result1> runs;
      for (int r = 0; r < FLAGS_repeats; ++r) {
        auto one = RunOnce(**cluster, shape, *table, keys, model);
        if (!one.ok()) return one.status();
        runs.push_back(*one);
      }
      auto median = [&](double Result1::*f) {
        std::vector<double> v;
        for (const Result1& x : runs) v.push_back(x.*f);
        return Median(v);
      };
      Result1 m;
      m.step_ms = median(&Result1::step_ms);
      m.apply_ms = median(&Result1::apply_ms);
      m.server_ms = median(&Result1::server_ms);
      m.raw_ms = median(&Result1::raw_ms);
      m.steps_per_s = median(&Result1::steps_per_s);
      const double rest = std::max(0.0, m.step_ms - m.apply_ms - m.server_ms);
      std::printf("%-11llu %-6s %9.2f %9.2f %9.2f %9.2f %9.2f %8.2f %10.1f\n",
                  static_cast<unsigned long long>(model), shape.name.c_str(),
                  m.step_ms, m.apply_ms, m.server_ms, rest, m.raw_ms,
                  m.step_ms / m.raw_ms, m.steps_per_s);
      std::fflush(stdout);
      if (csv) {
        csv << model << "," << shape.name << "," << shape.servers << ","
            << shape.workers << "," << FLAGS_apply_threads << "," << m.step_ms
            << "," << m.apply_ms << "," << m.server_ms << "," << rest << ","
            << m.raw_ms << "," << m.step_ms / m.raw_ms << "," << m.steps_per_s
            << std::endl;
      }
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  // Keep the library's INFO lines out of the table (--minloglevel=0 shows
  // them).
  gflags::SetCommandLineOptionWithMode("minloglevel", "1",
                                       gflags::SET_FLAGS_DEFAULT);
  gflags::SetUsageMessage(
      "a training-like loop (PushPull of a dense Adam model) against raw "
      "ZeroMQ moving the same bytes");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_keep_freed_memory) ductile::KeepFreedMemory();
  ductile::Status s = ductile::bench::Main();
  if (!s.ok()) {
    std::cerr << "model_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
