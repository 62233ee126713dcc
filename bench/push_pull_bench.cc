// push_pull_bench: how fast ductile pushes and pulls one large value, next
// to raw ZeroMQ moving the same bytes over the same transport.
//
// Everything runs in this one process: a coordinator, S servers and W worker
// threads, each worker with its own Client. Clients reach servers on this
// host over ipc:// (ClientOptions::prefer_ipc), so the data path is the one
// two processes on one host would use: Unix-domain sockets, with ZeroMQ I/O
// threads on both sides. The raw reference gives each side its own ZeroMQ
// context for the same reason.
//
// For each value size, one key holds the whole value (a kAdd table whose
// value_width is size / 4 floats); each worker uses a key owned by server
// (worker % S). Measured:
//   latency     one request at a time: p50 and p99 in microseconds
//   pipelined   --inflight requests outstanding per worker: GB/s, ops/s
// and, as the reference, W concurrent raw ZeroMQ pairs:
//   one-way     PUSH -> PULL, zero-copy sends: GB/s
//   rt push     DEALER sends `size` bytes, ROUTER answers 16 bytes
//   rt pull     DEALER sends 16 bytes, ROUTER answers `size` bytes
// Every measurement runs --repeats times; the tables show the medians.
//
//   push_pull_bench                 # about 2 minutes on 2 cores
//   push_pull_bench --quick         # about 20 s: 4 KiB and 1 MiB only
//   push_pull_bench --sizes=65536 --configs=1x1 --csv=/tmp/bench.csv
//   push_pull_bench --configs=1x1,1x1+curve   # the cost of CURVE (keys)
//   push_pull_bench --configs=2x2,2x2+replicas  # the cost of backups
//   push_pull_bench --shm_reference --sizes=1048576,16777216
//
// --shm_reference measures, instead of ductile, what shared memory would
// give a value frame between two peers on one host, next to the raw ipc://
// stream in the same run: the sender copies the value into a slot of a
// shared memory segment (mapped twice, as two processes would) and sends a
// 16-byte header naming the slot over ipc://; the receiver copies it out
// (as a server reads a push into its table) and returns the slot. "1 copy"
// leaves out the sender's copy, as if the caller's buffer were already in
// the segment; memcpy is one thread's copy of the same bytes.
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "bench/in_process_cluster.h"
#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/security.h"
#include "ductile/server.h"
#include "ductile/status.h"
#include "ductile/table.h"
#include "gflags/gflags.h"
#include "util/malloc_policy.h"

DEFINE_string(sizes, "4096,1048576,16777216",
              "Value sizes in bytes, comma-separated; each a positive "
              "multiple of 4. One key holds the whole value.");
DEFINE_string(configs, "1x1,2x2",
              "Cluster shapes SERVERSxWORKERS, comma-separated; "
              "SERVERSxWORKERS+curve runs that shape with CURVE keys, "
              "+replicas with a backup server for every slot.");
DEFINE_int32(iters, 0,
             "Requests per worker per measurement; 0 scales with the size: "
             "one at a time 2000 up to 64 KiB, 300 up to 4 MiB, 100 above; "
             "pipelined 20000, 1000, 200; half of that with --quick.");
DEFINE_int32(repeats, 3, "Runs of each measurement; the median is shown.");
DEFINE_int32(inflight, 8, "Requests outstanding per worker when pipelined.");
DEFINE_int32(io_threads, 1,
             "ServerOptions::io_threads and ClientOptions::io_threads of "
             "every server and worker.");
DEFINE_string(csv, "", "Also write every result to this CSV file.");
DEFINE_bool(quick, false,
            "A run of about 20 s: 4 KiB and 1 MiB (unless --sizes is given) "
            "and half the iterations (unless --iters is given).");
DEFINE_string(ipc_dir, "/tmp", "Directory for the ipc:// socket files.");
DEFINE_bool(shm_reference, false,
            "Measure shared memory against raw ipc:// instead of ductile (see "
            "the top of the source); --configs' worker counts give the "
            "pairs.");
DEFINE_bool(shm_values, true,
            "Values through the worker's shared memory "
            "(ClientOptions::shm_reply_bytes, ServerOptions::shm_values); "
            "false: through the socket.");
DEFINE_bool(keep_freed_memory, true,
            "Keep freed memory for reuse, as the ductile programs do "
            "(util/malloc_policy.h); false: glibc's defaults, for ductile "
            "and the raw reference alike.");

namespace ductile::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A receive or send that waits longer than this fails the run rather than
// hanging it (the peer thread has failed).
constexpr int kSocketTimeoutMs = 60000;
// Bytes of the small message in a raw round trip (the ack, or the request
// of the pull mirror): about what a ductile header and one key take.
constexpr size_t kSmallMessageBytes = 16;
// Floats of each value compared against the expected sum by the check.
constexpr int kCheckedFloats = 16;
// Keys tried to find one owned by each server.
constexpr Key kMaxProbedKeys = 64;

// ------------------------------------------------------------------ options

struct ClusterShape {
  int servers = 1;
  int workers = 1;
  bool curve = false;  // every connection CURVE-authenticated and encrypted
  int replicas = 1;    // 2: each slot also on a backup server (+replicas)
  std::string name;    // "2x2", "2x2+curve"
};

// What to measure; filled from the flags in main().
struct BenchOptions {
  std::vector<uint64_t> sizes;  // bytes per value
  std::vector<ClusterShape> configs;
  int iters = 0;          // requests per measurement; 0: by size
  int iters_divisor = 1;  // 2 with --quick
  int repeats = 3;        // >= 1
  int inflight = 8;       // >= 1
  std::string ipc_dir = "/tmp";
};

int LatencyIters(const BenchOptions& options, uint64_t size) {
  if (options.iters > 0) return options.iters;
  const int by_size = size <= (64u << 10)  ? 2000
                      : size <= (4u << 20) ? 300
                                           : 100;
  return std::max(by_size / options.iters_divisor, 8);
}

// Pipelined runs (and raw one-way streams) go faster per request, so they
// get more requests than latency runs to last long enough to time.
int PipelinedOps(const BenchOptions& options, uint64_t size) {
  int ops = options.iters;
  if (ops == 0) {
    const int by_size = size <= (64u << 10)  ? 20000
                        : size <= (4u << 20) ? 1000
                                             : 200;
    ops = by_size / options.iters_divisor;
  }
  return std::max(ops, 4 * options.inflight);
}

int WarmupIters(const BenchOptions& options, uint64_t size) {
  return std::max(LatencyIters(options, size) / 10, 3);
}

// ------------------------------------------------------------------ results

struct Latency {
  double p50_us = 0;
  double p99_us = 0;
};

struct Rate {
  double gb_per_s = 0;  // payload bytes / wall time, GB = 1e9 bytes
  double ops_per_s = 0;
};

// Raw ZeroMQ with `pairs` pairs running at once.
struct RawResult {
  std::string config;     // the ductile config it ran next to
  std::string transport;  // "ipc" or "tcp"
  int pairs = 1;
  uint64_t size = 0;
  Rate one_way;
  Latency rt_push;  // size bytes there, small ack back
  Latency rt_pull;  // small request there, size bytes back
};

struct DuctileResult {
  std::string config;
  int workers = 1;
  uint64_t size = 0;
  Latency push_latency;
  Latency pull_latency;
  Rate push_rate;
  Rate pull_rate;
};

// The q-quantile (0 < q <= 1) of `v` by nearest rank.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

Latency LatencyOf(const std::vector<double>& samples_us) {
  return {Quantile(samples_us, 0.5), Quantile(samples_us, 0.99)};
}

// Field-wise medians over the repeats.
Latency MedianOf(const std::vector<Latency>& runs) {
  std::vector<double> p50, p99;
  for (const Latency& l : runs) {
    p50.push_back(l.p50_us);
    p99.push_back(l.p99_us);
  }
  return {Quantile(p50, 0.5), Quantile(p99, 0.5)};
}

Rate MedianOf(const std::vector<Rate>& runs) {
  std::vector<double> gb, ops;
  for (const Rate& r : runs) {
    gb.push_back(r.gb_per_s);
    ops.push_back(r.ops_per_s);
  }
  return {Quantile(gb, 0.5), Quantile(ops, 0.5)};
}

Rate RateOf(uint64_t ops, uint64_t bytes_per_op, double seconds) {
  return {static_cast<double>(ops * bytes_per_op) / seconds / 1e9,
          static_cast<double>(ops) / seconds};
}

double MicrosSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - start)
      .count();
}

double SecondsSince(SteadyClock::time_point start) {
  return MicrosSince(start) / 1e6;
}

std::string SizeName(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) {
    return std::to_string(bytes >> 10) + " KiB";
  }
  return std::to_string(bytes) + " B";
}

// Runs body(0) .. body(n - 1) on n threads and joins them; returns the
// first error. ZeroMQ exceptions become Status here and in Guarded().
Status RunOnThreads(int n, const std::function<Status(int)>& body) {
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&body, &statuses, i] {
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

Status Guarded(const char* what, const std::function<Status()>& body) {
  try {
    return body();
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string(what) + ": " + e.what());
  }
}

// ----------------------------------------------------------- raw ZeroMQ

void NoFree(void* /*data*/, void* /*hint*/) {}

// A message ZeroMQ reads in place from `bytes`, which must stay unchanged
// until the socket's context is gone (the payloads here are never written).
zmq::message_t Borrowed(const std::vector<char>& bytes) {
  return zmq::message_t(const_cast<char*>(bytes.data()), bytes.size(), &NoFree);
}

Status Receive(zmq::socket_t& socket, zmq::message_t* message) {
  if (!socket.recv(*message)) {
    return DeadlineExceededError("raw zmq: nothing received in " +
                                 std::to_string(kSocketTimeoutMs) + " ms");
  }
  return Status::Ok();
}

Status Send(zmq::socket_t& socket, zmq::message_t&& message,
            zmq::send_flags flags = zmq::send_flags::none) {
  if (!socket.send(message, flags)) {
    return DeadlineExceededError("raw zmq: send blocked for " +
                                 std::to_string(kSocketTimeoutMs) + " ms");
  }
  return Status::Ok();
}

// Two connected sockets in two contexts, as two processes would have. A
// pair must be gone before the payloads it sent in place: RawReference owns
// the payloads and makes pairs only for the length of one call.
struct RawPair {
  zmq::context_t bound_context{1};
  zmq::context_t connected_context{1};
  zmq::socket_t bound;
  zmq::socket_t connected;
  std::string endpoint;

  ~RawPair() {
    connected.close();
    bound.close();
    if (endpoint.rfind("ipc://", 0) == 0) {
      std::remove(endpoint.substr(6).c_str());
    }
  }
};

Result<std::unique_ptr<RawPair>> MakeRawPair(const std::string& transport,
                                             const std::string& ipc_dir,
                                             zmq::socket_type bound_type,
                                             zmq::socket_type connected_type) {
  static int next_id = 0;  // pairs are made on the main thread only
  std::string address = "tcp://127.0.0.1:*";
  if (transport == "ipc") {
    address = "ipc://" + ipc_dir + "/ductile-bench-" +
              std::to_string(getpid()) + "-" + std::to_string(next_id++) +
              ".sock";
  }
  auto pair = std::make_unique<RawPair>();
  Status s = Guarded("raw zmq setup", [&] {
    pair->bound = zmq::socket_t(pair->bound_context, bound_type);
    pair->connected = zmq::socket_t(pair->connected_context, connected_type);
    for (zmq::socket_t* socket : {&pair->bound, &pair->connected}) {
      socket->set(zmq::sockopt::linger, 0);
      socket->set(zmq::sockopt::rcvtimeo, kSocketTimeoutMs);
      socket->set(zmq::sockopt::sndtimeo, kSocketTimeoutMs);
    }
    pair->bound.bind(address);
    pair->endpoint = pair->bound.get(zmq::sockopt::last_endpoint);
    pair->connected.connect(pair->endpoint);
    return Status::Ok();
  });
  DUCTILE_RETURN_IF_ERROR(s);
  return pair;
}

// PUSH -> PULL, `count` messages of payload.size() bytes per pair, all
// pairs at once. Wall time runs from the start of the senders to the last
// message received.
Result<Rate> RawOneWay(const std::string& transport, int pairs,
                       const std::vector<char>& payload, int count, int warmup,
                       const std::string& ipc_dir) {
  std::vector<std::unique_ptr<RawPair>> raw;
  for (int p = 0; p < pairs; ++p) {
    auto pair = MakeRawPair(transport, ipc_dir, zmq::socket_type::pull,
                            zmq::socket_type::push);
    DUCTILE_RETURN_IF_ERROR(pair.status());
    raw.push_back(std::move(*pair));
  }
  // Warm-up on this thread: connects and sizes the buffers.
  DUCTILE_RETURN_IF_ERROR(Guarded("raw zmq warm-up", [&] {
    for (auto& pair : raw) {
      for (int i = 0; i < warmup; ++i) {
        DUCTILE_RETURN_IF_ERROR(Send(pair->connected, Borrowed(payload)));
        zmq::message_t in;
        DUCTILE_RETURN_IF_ERROR(Receive(pair->bound, &in));
      }
    }
    return Status::Ok();
  }));
  const auto start = SteadyClock::now();
  DUCTILE_RETURN_IF_ERROR(RunOnThreads(2 * pairs, [&](int i) -> Status {
    RawPair& pair = *raw[i / 2];
    for (int n = 0; n < count; ++n) {
      if (i % 2 == 0) {
        DUCTILE_RETURN_IF_ERROR(Send(pair.connected, Borrowed(payload)));
      } else {
        zmq::message_t in;
        DUCTILE_RETURN_IF_ERROR(Receive(pair.bound, &in));
        if (in.size() != payload.size()) {
          return InternalError("raw zmq: received a message of wrong size");
        }
      }
    }
    return Status::Ok();
  }));
  return RateOf(static_cast<uint64_t>(pairs) * count, payload.size(),
                SecondsSince(start));
}

// The ROUTER side of a round trip: answers every request with `reply` until
// an empty request arrives.
Status Echo(zmq::socket_t& router, const std::vector<char>& reply) {
  while (true) {
    zmq::message_t identity, request;
    DUCTILE_RETURN_IF_ERROR(Receive(router, &identity));
    DUCTILE_RETURN_IF_ERROR(Receive(router, &request));
    if (request.size() == 0) return Status::Ok();
    DUCTILE_RETURN_IF_ERROR(
        Send(router, std::move(identity), zmq::send_flags::sndmore));
    DUCTILE_RETURN_IF_ERROR(Send(router, Borrowed(reply)));
  }
}

// DEALER sends `request`, ROUTER answers `reply`; one at a time, `iters`
// per pair, all pairs at once. Percentiles are over all pairs' round trips.
Result<Latency> RawRoundTrip(const std::string& transport, int pairs,
                             const std::vector<char>& request,
                             const std::vector<char>& reply, int iters,
                             int warmup, const std::string& ipc_dir) {
  std::vector<std::unique_ptr<RawPair>> raw;
  for (int p = 0; p < pairs; ++p) {
    auto pair = MakeRawPair(transport, ipc_dir, zmq::socket_type::router,
                            zmq::socket_type::dealer);
    DUCTILE_RETURN_IF_ERROR(pair.status());
    raw.push_back(std::move(*pair));
  }
  std::vector<std::vector<double>> samples(pairs);
  DUCTILE_RETURN_IF_ERROR(RunOnThreads(2 * pairs, [&](int i) -> Status {
    RawPair& pair = *raw[i / 2];
    if (i % 2 == 1) return Echo(pair.bound, reply);
    std::vector<double>& times = samples[i / 2];
    times.reserve(iters);
    for (int n = 0; n < warmup + iters; ++n) {
      const auto start = SteadyClock::now();
      DUCTILE_RETURN_IF_ERROR(Send(pair.connected, Borrowed(request)));
      zmq::message_t in;
      DUCTILE_RETURN_IF_ERROR(Receive(pair.connected, &in));
      if (n >= warmup) times.push_back(MicrosSince(start));
      if (in.size() != reply.size()) {
        return InternalError("raw zmq: reply of wrong size");
      }
    }
    return Send(pair.connected, zmq::message_t());  // stops the echo
  }));
  std::vector<double> all;
  for (const auto& s : samples) all.insert(all.end(), s.begin(), s.end());
  return LatencyOf(all);
}

// Raw ZeroMQ runs for one transport, pair count and size, gathered over
// the repeats. Each repeat runs right next to the matching ductile runs, so
// that both see the same machine (on a shared VM, speeds drift by tens of
// percent from one minute to the next).
class RawReference {
 public:
  RawReference(std::string transport, int pairs, uint64_t size,
               const BenchOptions& options)
      : transport_(std::move(transport)),
        pairs_(pairs),
        size_(size),
        options_(options),
        payload_(size, 'x'),
        small_(kSmallMessageBytes, 's') {}

  Status RunOnce() {
    const int iters = LatencyIters(options_, size_);
    const int warmup = WarmupIters(options_, size_);
    auto rate =
        RawOneWay(transport_, pairs_, payload_, PipelinedOps(options_, size_),
                  warmup, options_.ipc_dir);
    DUCTILE_RETURN_IF_ERROR(rate.status());
    one_way_.push_back(*rate);
    auto push = RawRoundTrip(transport_, pairs_, payload_, small_, iters,
                             warmup, options_.ipc_dir);
    DUCTILE_RETURN_IF_ERROR(push.status());
    rt_push_.push_back(*push);
    auto pull = RawRoundTrip(transport_, pairs_, small_, payload_, iters,
                             warmup, options_.ipc_dir);
    DUCTILE_RETURN_IF_ERROR(pull.status());
    rt_pull_.push_back(*pull);
    return Status::Ok();
  }

  RawResult Medians(const std::string& config) const {
    RawResult result;
    result.config = config;
    result.transport = transport_;
    result.pairs = pairs_;
    result.size = size_;
    result.one_way = MedianOf(one_way_);
    result.rt_push = MedianOf(rt_push_);
    result.rt_pull = MedianOf(rt_pull_);
    return result;
  }

 private:
  const std::string transport_;
  const int pairs_;
  const uint64_t size_;
  const BenchOptions& options_;
  const std::vector<char> payload_;  // never written: sent in place
  const std::vector<char> small_;
  std::vector<Rate> one_way_;
  std::vector<Latency> rt_push_, rt_pull_;
};

// ------------------------------------------------------------- ductile

// The in-process cluster of one shape, with CURVE keys of its own if the
// shape asks for them.
Result<std::unique_ptr<InProcessCluster>> StartCluster(
    const ClusterShape& shape, const std::string& ipc_dir) {
  Security security;
  if (shape.curve) {
    // Keys of this cluster only, in a directory removed at once.
    const std::string dir = ipc_dir + "/ductile-bench-keys-" +
                            std::to_string(getpid()) + "-" + shape.name;
    std::filesystem::remove_all(dir);
    Status made = GenerateClusterKeys(dir);
    Result<Security> keys =
        made.ok() ? LoadClusterKeys(dir, true) : Result<Security>(made);
    std::filesystem::remove_all(dir);
    DUCTILE_RETURN_IF_ERROR(keys.status());
    security = *keys;
  }
  InProcessClusterOptions o;
  o.servers = shape.servers;
  o.workers = shape.workers;
  o.coordinator.security = security;
  o.coordinator.replicas = shape.replicas;
  o.server.ipc_dir = ipc_dir;
  o.server.connect_timeout_ms = 20000;
  o.server.security = security;
  o.client.connect_timeout_ms = 20000;
  o.client.prefer_ipc = true;
  o.server.io_threads = FLAGS_io_threads;
  o.client.io_threads = FLAGS_io_threads;
  o.server.shm_values = FLAGS_shm_values;
  if (!FLAGS_shm_values) o.client.shm_reply_bytes = 0;
  o.client.security = security;
  return InProcessCluster::Start(o);
}

// Element i of every pushed vector: small integers, so that sums stay exact
// in float and a misplaced offset shows.
float Pattern(size_t i) { return static_cast<float>(i % 8 + 1); }

// One value size on one cluster: the table, each worker's key and buffers,
// and how many pushes each worker has made (for the final check).
class SizeBench {
 public:
  SizeBench(InProcessCluster* cluster, uint64_t size,
            const BenchOptions& options)
      : cluster_(*cluster),
        options_(options),
        size_(size),
        width_(static_cast<uint32_t>(size / sizeof(float))),
        values_(width_),
        pushes_(cluster->num_workers(), 0) {
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = Pattern(i);
  }

  // Creates the table and picks each worker's key.
  Status SetUp() {
    TableOptions t;
    t.name = "bench_" + std::to_string(size_);
    t.value_width = width_;
    t.rule = UpdateRule::kAdd;
    for (int w = 0; w < cluster_.num_workers(); ++w) {
      auto id = cluster_.client(w).CreateTable(t);
      DUCTILE_RETURN_IF_ERROR(id.status());
      if (w > 0 && *id != table_) {
        return InternalError("workers got different ids for one table");
      }
      table_ = *id;
    }
    DUCTILE_RETURN_IF_ERROR(FindKeyPerServer());
    outs_.resize(cluster_.num_workers());
    for (auto& out : outs_) {
      out.assign(options_.inflight, std::vector<float>(width_, 0.0f));
    }
    return Status::Ok();
  }

  // A few requests per worker, one worker after the other.
  Status WarmUp() {
    for (int w = 0; w < cluster_.num_workers(); ++w) {
      for (int i = 0; i < WarmupIters(options_, size_); ++i) {
        DUCTILE_RETURN_IF_ERROR(Push(w));
        DUCTILE_RETURN_IF_ERROR(
            cluster_.client(w).Pull(table_, KeyOf(w), outs_[w][0]));
      }
    }
    return Status::Ok();
  }

  // One repeat of the four measurements.
  Status RunOnce() {
    const int iters = LatencyIters(options_, size_);
    const int ops = PipelinedOps(options_, size_);
    auto l = MeasureLatency(/*push=*/true, iters);
    DUCTILE_RETURN_IF_ERROR(l.status());
    push_latency_.push_back(*l);
    l = MeasureLatency(/*push=*/false, iters);
    DUCTILE_RETURN_IF_ERROR(l.status());
    pull_latency_.push_back(*l);
    auto rate = MeasurePipelined(/*push=*/true, ops);
    DUCTILE_RETURN_IF_ERROR(rate.status());
    push_rate_.push_back(*rate);
    rate = MeasurePipelined(/*push=*/false, ops);
    DUCTILE_RETURN_IF_ERROR(rate.status());
    pull_rate_.push_back(*rate);
    return Status::Ok();
  }

  DuctileResult Medians(const std::string& config) const {
    DuctileResult result;
    result.config = config;
    result.workers = cluster_.num_workers();
    result.size = size_;
    result.push_latency = MedianOf(push_latency_);
    result.pull_latency = MedianOf(pull_latency_);
    result.push_rate = MedianOf(push_rate_);
    result.pull_rate = MedianOf(pull_rate_);
    return result;
  }

  // Pulls each worker key and compares kCheckedFloats of its floats with
  // (pushes made to that key) x Pattern. Returns a one-line summary.
  Result<std::string> Check() {
    std::map<Key, uint64_t> pushes_per_key;
    for (int w = 0; w < cluster_.num_workers(); ++w) {
      pushes_per_key[worker_keys_[w]] += pushes_[w];
    }
    std::vector<float> out(width_);
    std::ostringstream summary;
    for (const auto& [key, pushes] : pushes_per_key) {
      DUCTILE_RETURN_IF_ERROR(
          cluster_.client(0).Pull(table_, std::span<const Key>(&key, 1), out));
      // Sums above 2^24 are no longer exact in float.
      const bool exact = pushes * 8 <= (1u << 24);
      for (int j = 0; j < kCheckedFloats; ++j) {
        const size_t i =
            static_cast<uint64_t>(j) * (width_ - 1) / (kCheckedFloats - 1);
        const double expected = static_cast<double>(pushes) * Pattern(i);
        const double error = std::abs(out[i] - expected);
        if (exact ? error != 0 : error > 1e-3 * expected) {
          return InternalError("check failed: key " + std::to_string(key) +
                               " float " + std::to_string(i) + " is " +
                               std::to_string(out[i]) + ", expected " +
                               std::to_string(expected) + " after " +
                               std::to_string(pushes) + " pushes");
        }
      }
      summary << "key " << key << " (server " << key_owner_.at(key)
              << "): " << pushes << " pushes, " << kCheckedFloats
              << " sampled floats " << (exact ? "exact" : "within 0.1%")
              << "; ";
    }
    summary << "OK";
    return summary.str();
  }

 private:
  std::span<const Key> KeyOf(int worker) const {
    return {&worker_keys_[worker], 1};
  }

  Status Push(int w) {
    DUCTILE_RETURN_IF_ERROR(cluster_.client(w).Push(table_, KeyOf(w), values_));
    ++pushes_[w];
    return Status::Ok();
  }

  // Worker w gets a key owned by server (w % servers). Where a key lives is
  // private to the library, so probe: pull keys 0, 1, ... and see whose
  // pull counter moves.
  Status FindKeyPerServer() {
    const int servers = cluster_.num_servers();
    std::vector<Key> key_of_server(servers);
    std::vector<bool> found(servers, servers == 1);
    if (servers == 1) key_owner_[0] = 0;
    std::vector<float> scratch(width_);
    for (Key key = 0; key < kMaxProbedKeys; ++key) {
      if (std::all_of(found.begin(), found.end(), [](bool f) { return f; })) {
        break;
      }
      std::vector<uint64_t> before(servers);
      for (int s = 0; s < servers; ++s) {
        before[s] = cluster_.server(s).counters().pulls;
      }
      DUCTILE_RETURN_IF_ERROR(cluster_.client(0).Pull(
          table_, std::span<const Key>(&key, 1), scratch));
      for (int s = 0; s < servers; ++s) {
        if (cluster_.server(s).counters().pulls == before[s] || found[s]) {
          continue;
        }
        key_of_server[s] = key;
        key_owner_[key] = s;
        found[s] = true;
      }
    }
    for (int s = 0; s < servers; ++s) {
      if (!found[s]) {
        return InternalError("no key among the first " +
                             std::to_string(kMaxProbedKeys) +
                             " lands on server " + std::to_string(s));
      }
    }
    for (int w = 0; w < cluster_.num_workers(); ++w) {
      worker_keys_.push_back(key_of_server[w % servers]);
    }
    return Status::Ok();
  }

  // Every worker makes `iters` requests, one at a time, all workers at once.
  Result<Latency> MeasureLatency(bool push, int iters) {
    const int workers = cluster_.num_workers();
    std::vector<std::vector<double>> samples(workers);
    DUCTILE_RETURN_IF_ERROR(RunOnThreads(workers, [&](int w) -> Status {
      Client& client = cluster_.client(w);
      samples[w].reserve(iters);
      for (int i = 0; i < iters; ++i) {
        const auto start = SteadyClock::now();
        if (push) {
          DUCTILE_RETURN_IF_ERROR(Push(w));
        } else {
          DUCTILE_RETURN_IF_ERROR(client.Pull(table_, KeyOf(w), outs_[w][0]));
        }
        samples[w].push_back(MicrosSince(start));
      }
      return Status::Ok();
    }));
    std::vector<double> all;
    for (const auto& s : samples) all.insert(all.end(), s.begin(), s.end());
    return LatencyOf(all);
  }

  // Every worker makes `ops` requests keeping options_.inflight outstanding,
  // each pull with its own output buffer; all workers at once.
  Result<Rate> MeasurePipelined(bool push, int ops) {
    const int workers = cluster_.num_workers();
    const int depth = options_.inflight;
    const auto start = SteadyClock::now();
    DUCTILE_RETURN_IF_ERROR(RunOnThreads(workers, [&](int w) -> Status {
      Client& client = cluster_.client(w);
      std::vector<Handle> handles(depth);
      for (int i = 0; i < ops + depth; ++i) {
        const int slot = i % depth;
        if (i >= depth) {
          Status s = handles[slot].Wait();
          if (!s.ok()) {
            // The others still use our buffers: let them finish first.
            for (const Handle& h : handles) h.Wait().IgnoreError();
            return s;
          }
          if (push) ++pushes_[w];
        }
        if (i >= ops) continue;
        handles[slot] =
            push ? client.PushAsync(table_, KeyOf(w), values_)
                 : client.PullAsync(table_, KeyOf(w), outs_[w][slot]);
      }
      return Status::Ok();
    }));
    return RateOf(static_cast<uint64_t>(workers) * ops, size_,
                  SecondsSince(start));
  }

  InProcessCluster& cluster_;
  const BenchOptions& options_;
  const uint64_t size_;
  const uint32_t width_;  // floats per key
  TableId table_ = 0;
  std::vector<float> values_;     // what every push adds
  std::vector<Key> worker_keys_;  // one per worker
  std::map<Key, int> key_owner_;  // key -> server index
  std::vector<uint64_t> pushes_;  // per worker; written by its thread
  // outs_[worker][slot]: a pull's output buffer, one per in-flight request.
  std::vector<std::vector<std::vector<float>>> outs_;
  std::vector<Latency> push_latency_, pull_latency_;  // one per repeat
  std::vector<Rate> push_rate_, pull_rate_;
};

// Runs every size on one cluster shape, each repeat of the ductile
// measurements right after one of the raw reference: ipc with as many pairs
// as workers and, when `with_tcp`, tcp loopback with one pair.
Status MeasureConfig(const ClusterShape& shape, bool with_tcp,
                     const BenchOptions& options,
                     std::vector<RawResult>* raw_results,
                     std::vector<DuctileResult>* results,
                     std::vector<std::string>* checks) {
  auto cluster = StartCluster(shape, options.ipc_dir);
  DUCTILE_RETURN_IF_ERROR(cluster.status());
  for (uint64_t size : options.sizes) {
    std::cerr << shape.name << ", " << SizeName(size) << " ..." << std::endl;
    std::vector<std::unique_ptr<RawReference>> raw;
    raw.push_back(
        std::make_unique<RawReference>("ipc", shape.workers, size, options));
    if (with_tcp) {
      raw.push_back(std::make_unique<RawReference>("tcp", 1, size, options));
    }
    SizeBench bench(cluster->get(), size, options);
    DUCTILE_RETURN_IF_ERROR(bench.SetUp());
    DUCTILE_RETURN_IF_ERROR(bench.WarmUp());
    for (int r = 0; r < options.repeats; ++r) {
      for (auto& reference : raw) DUCTILE_RETURN_IF_ERROR(reference->RunOnce());
      DUCTILE_RETURN_IF_ERROR(bench.RunOnce());
    }
    for (auto& reference : raw) {
      raw_results->push_back(reference->Medians(shape.name));
    }
    results->push_back(bench.Medians(shape.name));
    auto check = bench.Check();
    DUCTILE_RETURN_IF_ERROR(check.status());
    checks->push_back(shape.name + " " + SizeName(size) + ": " + *check);
  }
  std::ostringstream counters;
  counters << shape.name << " server counters:";
  for (int s = 0; s < (*cluster)->num_servers(); ++s) {
    const ServerCounters c = (*cluster)->server(s).counters();
    counters << " [server " << s << ": " << c.pushes << " pushes, " << c.pulls
             << " pulls, " << c.duplicates << " duplicates, " << c.errors
             << " errors, " << c.bytes_in / 1000000 << " MB in, "
             << c.bytes_out / 1000000 << " MB out]";
  }
  checks->push_back(counters.str());
  return Status::Ok();
}

// ------------------------------------------------------------- output

// The raw ipc reference that ran next to `d`.
const RawResult* FindRaw(const std::vector<RawResult>& raw,
                         const DuctileResult& d) {
  for (const RawResult& r : raw) {
    if (r.transport == "ipc" && r.config == d.config && r.size == d.size) {
      return &r;
    }
  }
  return nullptr;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Three significant-ish digits for numbers that span decades.
std::string Short(double v) {
  if (v >= 100) return Fixed(v, 0);
  if (v >= 10) return Fixed(v, 1);
  return Fixed(v, 2);
}

std::string Ratio(double num, double den, bool percent) {
  if (den <= 0) return "-";
  return percent ? Fixed(100 * num / den, 0) + "%" : Fixed(num / den, 1) + "x";
}

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return static_cast<int>(std::thread::hardware_concurrency());
  }
  return CPU_COUNT(&set);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

void PrintHeader(const BenchOptions& options) {
  const auto [major, minor, patch] = zmq::version();
  std::printf("push_pull_bench: ductile push/pull vs raw ZeroMQ\n");
  std::printf("machine: nproc=%d (%s), ZeroMQ %d.%d.%d\n", AffinityCpus(),
              CpuModel().c_str(), major, minor, patch);
  std::printf(
      "settings: repeats=%d (medians shown), inflight=%d, iters=%s\n",
      options.repeats, options.inflight,
      options.iters > 0 ? std::to_string(options.iters).c_str() : "by size");
  std::printf(
      "note: coordinator, servers and workers are threads of this one "
      "process,\n"
      "      but all data goes over ipc:// sockets in %s, with a ZeroMQ "
      "context\n"
      "      (and I/O thread) per client and per server, as between "
      "processes on\n"
      "      one host. SxW = S servers, W worker threads with a Client "
      "each, worker w\n"
      "      on a key of server w %% S. 2x2 runs about a dozen busy threads; "
      "on few\n"
      "      cores read it against 1x1 as contention, not scaling.\n\n",
      options.ipc_dir.c_str());
}

void PrintRaw(const std::vector<RawResult>& raw) {
  std::printf(
      "Raw ZeroMQ reference (zero-copy sends, a context per side; the pairs "
      "run at once;\n"
      "  each repeat ran right before the same repeat of the ductile config "
      "named)\n"
      "  one-way: PUSH->PULL stream. rt push: DEALER sends size bytes, ROUTER "
      "answers %zu B.\n"
      "  rt pull: DEALER sends %zu B, ROUTER answers size bytes.\n",
      kSmallMessageBytes, kSmallMessageBytes);
  std::printf("%-7s %-5s %5s %8s | %9s %9s | %9s %9s | %9s %9s\n", "", "", "",
              "", "one-way", "", "rt push", "", "rt pull", "");
  std::printf("%-7s %-5s %5s %8s | %9s %9s | %9s %9s | %9s %9s\n", "next to",
              "trans", "pairs", "size", "GB/s", "msg/s", "p50 us", "p99 us",
              "p50 us", "p99 us");
  for (const RawResult& r : raw) {
    std::printf(
        "%-7s %-5s %5d %8s | %9s %9.0f | %9s %9s | %9s %9s\n", r.config.c_str(),
        r.transport.c_str(), r.pairs, SizeName(r.size).c_str(),
        Fixed(r.one_way.gb_per_s, 2).c_str(), r.one_way.ops_per_s,
        Short(r.rt_push.p50_us).c_str(), Short(r.rt_push.p99_us).c_str(),
        Short(r.rt_pull.p50_us).c_str(), Short(r.rt_pull.p99_us).c_str());
  }
  std::printf("\n");
}

void PrintDuctile(const std::vector<DuctileResult>& results,
                  const std::vector<RawResult>& raw, int inflight) {
  std::printf(
      "ductile, one request at a time (x raw = p50 / p50 of the raw ipc "
      "round trip next to it,\n"
      "  with as many pairs as workers: push vs rt push, pull vs rt pull)\n");
  std::printf("%-6s %8s | %9s %9s %6s | %9s %9s %6s\n", "config", "size",
              "push p50", "p99 us", "x raw", "pull p50", "p99 us", "x raw");
  for (const DuctileResult& d : results) {
    const RawResult* r = FindRaw(raw, d);
    std::printf(
        "%-6s %8s | %9s %9s %6s | %9s %9s %6s\n", d.config.c_str(),
        SizeName(d.size).c_str(), Short(d.push_latency.p50_us).c_str(),
        Short(d.push_latency.p99_us).c_str(),
        r ? Ratio(d.push_latency.p50_us, r->rt_push.p50_us, false).c_str()
          : "-",
        Short(d.pull_latency.p50_us).c_str(),
        Short(d.pull_latency.p99_us).c_str(),
        r ? Ratio(d.pull_latency.p50_us, r->rt_pull.p50_us, false).c_str()
          : "-");
  }
  std::printf(
      "\nductile, %d requests in flight per worker (GB = 1e9 payload bytes, "
      "all workers together;\n"
      "  %% raw = GB/s / GB/s of the raw ipc one-way stream next to it, "
      "as many pairs as workers)\n",
      inflight);
  std::printf("%-6s %8s | %9s %9s %6s | %9s %9s %6s\n", "config", "size",
              "push GB/s", "ops/s", "% raw", "pull GB/s", "ops/s", "% raw");
  for (const DuctileResult& d : results) {
    const RawResult* r = FindRaw(raw, d);
    const double raw_gb = r ? r->one_way.gb_per_s : 0;
    std::printf("%-6s %8s | %9s %9.0f %6s | %9s %9.0f %6s\n", d.config.c_str(),
                SizeName(d.size).c_str(),
                Fixed(d.push_rate.gb_per_s, 2).c_str(), d.push_rate.ops_per_s,
                Ratio(d.push_rate.gb_per_s, raw_gb, true).c_str(),
                Fixed(d.pull_rate.gb_per_s, 2).c_str(), d.pull_rate.ops_per_s,
                Ratio(d.pull_rate.gb_per_s, raw_gb, true).c_str());
  }
  std::printf("\n");
}

Status WriteCsv(const std::string& path, const std::vector<RawResult>& raw,
                const std::vector<DuctileResult>& results) {
  std::ofstream out(path);
  if (!out) return InvalidArgumentError("cannot write " + path);
  // config: the ductile config (for raw rows, the one it ran next to);
  // pairs: concurrent raw pairs, or workers.
  out << "source,transport,config,pairs,size_bytes,measure,p50_us,p99_us,"
         "gb_per_s,ops_per_s,vs_raw\n";
  for (const RawResult& r : raw) {
    const std::string head = "raw," + r.transport + "," + r.config + "," +
                             std::to_string(r.pairs) + "," +
                             std::to_string(r.size) + ",";
    out << head << "one_way,,," << r.one_way.gb_per_s << ","
        << r.one_way.ops_per_s << ",\n";
    out << head << "rt_push," << r.rt_push.p50_us << "," << r.rt_push.p99_us
        << ",,,\n";
    out << head << "rt_pull," << r.rt_pull.p50_us << "," << r.rt_pull.p99_us
        << ",,,\n";
  }
  for (const DuctileResult& d : results) {
    const RawResult* r = FindRaw(raw, d);
    auto ratio = [&](double num, double den) {
      return r && den > 0 ? std::to_string(num / den) : std::string();
    };
    const std::string head = "ductile,ipc," + d.config + "," +
                             std::to_string(d.workers) + "," +
                             std::to_string(d.size) + ",";
    out << head << "push_latency," << d.push_latency.p50_us << ","
        << d.push_latency.p99_us << ",,,"
        << ratio(d.push_latency.p50_us, r ? r->rt_push.p50_us : 0) << "\n";
    out << head << "pull_latency," << d.pull_latency.p50_us << ","
        << d.pull_latency.p99_us << ",,,"
        << ratio(d.pull_latency.p50_us, r ? r->rt_pull.p50_us : 0) << "\n";
    out << head << "push_pipelined,,," << d.push_rate.gb_per_s << ","
        << d.push_rate.ops_per_s << ","
        << ratio(d.push_rate.gb_per_s, r ? r->one_way.gb_per_s : 0) << "\n";
    out << head << "pull_pipelined,,," << d.pull_rate.gb_per_s << ","
        << d.pull_rate.ops_per_s << ","
        << ratio(d.pull_rate.gb_per_s, r ? r->one_way.gb_per_s : 0) << "\n";
  }
  out.close();
  if (!out) return UnavailableError("error writing " + path);
  return Status::Ok();
}

// ------------------------------------------------------------- flags

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

Result<BenchOptions> OptionsFromFlags() {
  BenchOptions options;
  std::string sizes = FLAGS_sizes;
  if (FLAGS_quick) {
    options.iters_divisor = 2;
    if (gflags::GetCommandLineFlagInfoOrDie("sizes").is_default) {
      sizes = "4096,1048576";
    }
  }
  for (const std::string& part : SplitCommas(sizes)) {
    char* end = nullptr;
    const unsigned long long size = std::strtoull(part.c_str(), &end, 10);
    if (*end != '\0' || size == 0 || size % sizeof(float) != 0 ||
        size / sizeof(float) > UINT32_MAX) {
      return InvalidArgumentError("--sizes: '" + part +
                                  "' is not a positive multiple of 4 bytes");
    }
    options.sizes.push_back(size);
  }
  for (const std::string& part : SplitCommas(FLAGS_configs)) {
    ClusterShape shape;
    char x = 0;
    std::string plain = part;
    const std::string kCurve = "+curve", kReplicas = "+replicas";
    for (bool more = true; more;) {
      more = false;
      if (plain.ends_with(kCurve)) {
        shape.curve = more = true;
        plain.resize(plain.size() - kCurve.size());
      }
      if (plain.ends_with(kReplicas)) {
        shape.replicas = 2;
        more = true;
        plain.resize(plain.size() - kReplicas.size());
      }
    }
    std::istringstream in(plain);
    if (!(in >> shape.servers >> x >> shape.workers) || x != 'x' || !in.eof() ||
        shape.servers < 1 || shape.workers < 1) {
      return InvalidArgumentError(
          "--configs: '" + part +
          "' is not SERVERSxWORKERS[+curve][+replicas]");
    }
    shape.name = part;
    options.configs.push_back(shape);
  }
  if (options.sizes.empty() || options.configs.empty()) {
    return InvalidArgumentError("--sizes and --configs must not be empty");
  }
  if (FLAGS_iters < 0 || FLAGS_repeats < 1 || FLAGS_inflight < 1) {
    return InvalidArgumentError(
        "--iters must be >= 0, --repeats and --inflight >= 1");
  }
  options.iters = FLAGS_iters;
  options.repeats = FLAGS_repeats;
  options.inflight = FLAGS_inflight;
  options.ipc_dir = FLAGS_ipc_dir;
  return options;
}

// ------------------------------------------------- shared memory reference

constexpr int kShmSlots = 8;  // frames in flight per pair, as --inflight

// One pair's segment: kShmSlots slots of `size` bytes, mapped twice.
struct ShmSegment {
  int fd = -1;
  size_t bytes = 0;
  char* sender_view = nullptr;
  char* receiver_view = nullptr;
  ~ShmSegment() {
    if (sender_view != nullptr) munmap(sender_view, bytes);
    if (receiver_view != nullptr) munmap(receiver_view, bytes);
    if (fd >= 0) close(fd);
  }
};

Result<std::unique_ptr<ShmSegment>> MakeShmSegment(uint64_t size) {
  auto segment = std::make_unique<ShmSegment>();
  segment->bytes = static_cast<size_t>(size) * kShmSlots;
  segment->fd = memfd_create("ductile-bench", 0);
  if (segment->fd < 0 ||
      ftruncate(segment->fd, static_cast<off_t>(segment->bytes)) != 0) {
    return UnavailableError(std::string("memfd: ") + std::strerror(errno));
  }
  for (char** view : {&segment->sender_view, &segment->receiver_view}) {
    void* p = mmap(nullptr, segment->bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   segment->fd, 0);
    if (p == MAP_FAILED) {
      return UnavailableError(std::string("mmap: ") + std::strerror(errno));
    }
    *view = static_cast<char*>(p);
  }
  return segment;
}

// `count` frames of payload.size() bytes per pair through shared memory,
// all pairs at once: headers go over an ipc:// PUSH -> PULL pair, freed
// slots come back over another. With `copy_in`, the sender first copies
// the payload into the slot.
Result<Rate> ShmOneWay(int pairs, const std::vector<char>& payload, int count,
                       bool copy_in, const std::string& ipc_dir) {
  const uint64_t size = payload.size();
  std::vector<std::unique_ptr<RawPair>> headers, credits;
  std::vector<std::unique_ptr<ShmSegment>> segments;
  std::vector<std::vector<char>> sinks(pairs, std::vector<char>(size));
  for (int p = 0; p < pairs; ++p) {
    auto h = MakeRawPair("ipc", ipc_dir, zmq::socket_type::pull,
                         zmq::socket_type::push);
    auto c = MakeRawPair("ipc", ipc_dir, zmq::socket_type::pull,
                         zmq::socket_type::push);
    auto seg = MakeShmSegment(size);
    DUCTILE_RETURN_IF_ERROR(h.status());
    DUCTILE_RETURN_IF_ERROR(c.status());
    DUCTILE_RETURN_IF_ERROR(seg.status());
    // Touch every page once on both sides, as a long-lived segment would be.
    std::memset((*seg)->sender_view, 1, (*seg)->bytes);
    std::memset(sinks[p].data(), 1, size);
    headers.push_back(std::move(*h));
    credits.push_back(std::move(*c));
    segments.push_back(std::move(*seg));
  }
  const auto start = SteadyClock::now();
  DUCTILE_RETURN_IF_ERROR(RunOnThreads(2 * pairs, [&](int i) -> Status {
    const int p = i / 2;
    ShmSegment& seg = *segments[p];
    if (i % 2 == 0) {  // sender: header pair's connected end, credits' bound
      int free_slots = kShmSlots;
      uint32_t next = 0;
      for (int n = 0; n < count; ++n) {
        if (free_slots == 0) {
          zmq::message_t credit;
          DUCTILE_RETURN_IF_ERROR(Receive(credits[p]->bound, &credit));
          ++free_slots;
        }
        const uint32_t slot = next++ % kShmSlots;
        if (copy_in) {
          std::memcpy(seg.sender_view + size_t{slot} * size, payload.data(),
                      size);
        }
        char header[kSmallMessageBytes] = {};
        std::memcpy(header, &slot, sizeof(slot));
        DUCTILE_RETURN_IF_ERROR(Send(headers[p]->connected,
                                     zmq::message_t(header, sizeof(header))));
        --free_slots;
      }
      return Status::Ok();
    }
    for (int n = 0; n < count; ++n) {  // receiver
      zmq::message_t header;
      DUCTILE_RETURN_IF_ERROR(Receive(headers[p]->bound, &header));
      uint32_t slot = 0;
      std::memcpy(&slot, header.data(), sizeof(slot));
      if (slot >= static_cast<uint32_t>(kShmSlots)) {
        return InternalError("shm: a header names no slot");
      }
      std::memcpy(sinks[p].data(), seg.receiver_view + size_t{slot} * size,
                  size);
      DUCTILE_RETURN_IF_ERROR(
          Send(credits[p]->connected, zmq::message_t(header.data(), 4)));
    }
    return Status::Ok();
  }));
  const double seconds = SecondsSince(start);
  if (copy_in && std::memcmp(sinks[0].data(), payload.data(), size) != 0) {
    return InternalError("shm: the receiver read other bytes than were sent");
  }
  return RateOf(static_cast<uint64_t>(pairs) * count, size, seconds);
}

// One thread copying `count` times `payload`, pairs threads at once.
Rate MemcpyRate(int pairs, const std::vector<char>& payload, int count) {
  std::vector<std::vector<char>> sinks(pairs,
                                       std::vector<char>(payload.size(), 1));
  const auto start = SteadyClock::now();
  RunOnThreads(pairs, [&](int p) {
    for (int n = 0; n < count; ++n) {
      std::memcpy(sinks[p].data(), payload.data(), payload.size());
    }
    return Status::Ok();
  }).IgnoreError();
  return RateOf(static_cast<uint64_t>(pairs) * count, payload.size(),
                SecondsSince(start));
}

Status RunShmReference(const BenchOptions& options) {
  std::printf(
      "push_pull_bench --shm_reference: value frames through shared memory "
      "against raw ipc://\n(GB/s of payload, all pairs together, medians "
      "of %d; the settings alternate within each repeat)\n\n",
      options.repeats);
  std::printf("%5s %10s | %9s %12s %12s %9s | %9s %9s\n", "pairs", "size",
              "ipc", "shm 2 copies", "shm 1 copy", "memcpy", "shm2/ipc",
              "shm1/ipc");
  std::set<int> pair_counts;
  for (const ClusterShape& shape : options.configs) {
    pair_counts.insert(shape.workers);
  }
  for (int pairs : pair_counts) {
    for (uint64_t size : options.sizes) {
      std::vector<char> payload(size);
      for (size_t i = 0; i < payload.size(); ++i) {
        payload[i] = static_cast<char>(i * 131 + 7);
      }
      const int count = PipelinedOps(options, size);
      std::vector<Rate> ipc, shm2, shm1, copy;
      for (int r = 0; r < options.repeats; ++r) {
        auto a = RawOneWay("ipc", pairs, payload, count,
                           WarmupIters(options, size), options.ipc_dir);
        DUCTILE_RETURN_IF_ERROR(a.status());
        auto b = ShmOneWay(pairs, payload, count, true, options.ipc_dir);
        DUCTILE_RETURN_IF_ERROR(b.status());
        auto c = ShmOneWay(pairs, payload, count, false, options.ipc_dir);
        DUCTILE_RETURN_IF_ERROR(c.status());
        ipc.push_back(*a);
        shm2.push_back(*b);
        shm1.push_back(*c);
        copy.push_back(MemcpyRate(pairs, payload, count));
      }
      const double i = MedianOf(ipc).gb_per_s, s2 = MedianOf(shm2).gb_per_s,
                   s1 = MedianOf(shm1).gb_per_s, m = MedianOf(copy).gb_per_s;
      std::printf("%5d %10s | %9.2f %12.2f %12.2f %9.2f | %8.2fx %8.2fx\n",
                  pairs, SizeName(size).c_str(), i, s2, s1, m, s2 / i, s1 / i);
      std::fflush(stdout);
    }
  }
  return Status::Ok();
}

Status RunBench(const BenchOptions& options, const std::string& csv_path) {
  const auto start = SteadyClock::now();
  PrintHeader(options);
  std::vector<RawResult> raw;
  std::vector<DuctileResult> results;
  std::vector<std::string> checks;
  for (size_t i = 0; i < options.configs.size(); ++i) {
    DUCTILE_RETURN_IF_ERROR(MeasureConfig(options.configs[i],
                                          /*with_tcp=*/i == 0, options, &raw,
                                          &results, &checks));
  }
  PrintRaw(raw);
  PrintDuctile(results, raw, options.inflight);
  std::printf("Checks (after all pushes, a pull returns pushes x pattern):\n");
  for (const std::string& line : checks) std::printf("  %s\n", line.c_str());
  if (!csv_path.empty()) {
    DUCTILE_RETURN_IF_ERROR(WriteCsv(csv_path, raw, results));
    std::printf("CSV written to %s\n", csv_path.c_str());
  }
  std::printf("total time %.1f s\n", SecondsSince(start));
  return Status::Ok();
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  // The library logs through glog; keep its INFO lines (servers listening,
  // stopping) out of the table unless --minloglevel=0 is given.
  gflags::SetCommandLineOptionWithMode("minloglevel", "1",
                                       gflags::SET_FLAGS_DEFAULT);
  gflags::SetUsageMessage(
      "ductile push/pull latency and throughput vs raw ZeroMQ");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_keep_freed_memory) ductile::KeepFreedMemory();
  auto options = ductile::bench::OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "push_pull_bench: " << options.status() << "\n";
    return 2;
  }
  ductile::Status s = FLAGS_shm_reference
                          ? ductile::bench::RunShmReference(*options)
                          : ductile::bench::RunBench(*options, FLAGS_csv);
  std::fflush(stdout);
  if (!s.ok()) {
    std::cerr << "push_pull_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
