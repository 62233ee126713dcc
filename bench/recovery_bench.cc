// recovery_bench: what fault tolerance costs a training job, end to end.
//
// A real cluster of processes on this host: a `ductile coordinator` and ONE
// `ductile server` (children of this program, with their state under --dir),
// and one worker, an in-process Client, holding a dense model of S MB (1 MB =
// 1e6 bytes) as a tensor table with the SGD rule (so there is no optimizer
// state: the checkpoint is the model). Each training step pushes a gradient
// of the whole model (every key changes), calls Clock() and pulls the whole
// model back. For each size, --repeats times (medians shown):
//
//   raw disk write   a file of S MB written sequentially in --dir and
//                    fsync'ed: the disk's speed, as the reference;
//   checkpoint       one requested with RequestCheckpoint while the worker
//                    trains, timed from the request until it is complete
//                    (every server wrote it, the worker reported in):
//                    MB/s = S / that time. The server's own "written in X
//                    ms" log line is shown alongside;
//   pause            what the checkpoint adds to training: the sum, over the
//                    steps that overlap the checkpoint, of (step time -
//                    median step time without a checkpoint). The server
//                    writes on its request thread, so the worker's requests
//                    wait for the write;
//   recovery         SIGKILL the server between two steps and restart it at
//                    once with the same id and state directory; timed from
//                    the kill until the worker's AwaitRecovery() returns
//                    (the job rolled back to the checkpoint) and until the
//                    first training step after it has succeeded.
// The coordinator's heartbeat timeout is an hour: the restart is noticed by
// the server's registration under its old id, not by a timeout.
//
//   recovery_bench                        # 10, 100, 1000 MB, 3 repeats
//   recovery_bench --quick                # 10 and 100 MB, 1 repeat (~10 s)
//   recovery_bench --sizes_mb=100 --repeats=5 --csv=/tmp/recovery.csv
//
// Memory: the worker holds the gradient and the pulled model (2 x S), the
// server the model, its receive buffers and, while checkpointing, one copy
// of every changed entry plus RocksDB's write batch (at 1000 MB about 3 GB
// here and 4.2 GB in the server, at peak); disk: about
// (keep_checkpoints + 2) x S under --dir. The full run takes about 3
// minutes. Every wait is bounded by
// --timeout_ms; the children die with this program (PR_SET_PDEATHSIG) and
// --dir is removed at exit, on SIGINT and SIGTERM included.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ductile/admin.h"
#include "ductile/client.h"
#include "ductile/status.h"
#include "ductile/table.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

#ifndef DUCTILE_CLI
#error "DUCTILE_CLI (path of the ductile binary) must be set"
#endif

DEFINE_string(sizes_mb, "10,100,1000",
              "Model sizes in MB (1e6 bytes), comma-separated positive "
              "integers; each at most 1073 (one push carries the whole "
              "model, and messages are limited to 1 GiB).");
DEFINE_int32(repeats, 3, "Runs of each measurement; the medians are shown.");
DEFINE_bool(quick, false,
            "10 and 100 MB (unless --sizes_mb is given), 1 repeat (unless "
            "--repeats is given).");
DEFINE_string(dir, "",
              "Working directory for the cluster's state and the raw write "
              "(default /tmp/ductile-recovery-bench-<pid>). Created by the "
              "benchmark, which refuses one that exists and is not empty, "
              "and removed at exit.");
DEFINE_string(csv, "", "Also write the results to this CSV file.");
DEFINE_string(ductile, DUCTILE_CLI, "Path of the `ductile` binary.");
DEFINE_int32(normal_steps, 5,
             "Steps without a checkpoint timed per repeat, at least (more "
             "are run until they add up to 2 s, at most 200).");
DEFINE_int32(keep_checkpoints, 3, "The server's --keep_checkpoints.");
DEFINE_int64(timeout_ms, 300000,
             "Bound of every wait: a request, a checkpoint, a recovery, a "
             "child's exit.");

namespace ductile::bench {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr double kBytesPerMb = 1e6;
// The largest request a Client builds by default (ClientOptions).
constexpr uint64_t kMaxMessageBytes = 1ull << 30;
// Bytes per write() of the raw reference.
constexpr size_t kRawWriteChunkBytes = 8u << 20;
// Warm-up steps after the cluster starts (the first one creates the keys).
constexpr int kWarmupSteps = 2;
// Normal steps per repeat: at least --normal_steps, and more until they
// take this long, but never more than kMaxNormalSteps.
constexpr double kNormalStepsSeconds = 2.0;
constexpr int kMaxNormalSteps = 200;
// How long a log line may lag behind the event it reports.
constexpr int64_t kLogLagMs = 3000;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A line on stdout, flushed at once.
[[gnu::format(printf, 1, 2)]] void Progress(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vfprintf(stdout, format, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// ------------------------------------------------------ interruption

// The children alive and the working directory, for the thread that handles
// SIGINT and SIGTERM: it kills the children and removes the directory before
// the program exits (destructors do that on every other way out).
class Cleanup {
 public:
  static Cleanup& Get() {
    // Never destroyed: the signal thread may use it until the very end.
    static Cleanup* cleanup = new Cleanup();
    return *cleanup;
  }

  void SetDir(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dir_ = dir;
  }
  void AddChild(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    children_.insert(pid);
  }
  void RemoveChild(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    children_.erase(pid);
  }

  // Blocks SIGINT and SIGTERM in this thread and every thread started after
  // it (call it first in main), and handles them on a thread of its own.
  void HandleSignals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([this, set] {
      int signal = 0;
      if (sigwait(&set, &signal) != 0) return;
      std::lock_guard<std::mutex> lock(mu_);
      std::fprintf(stderr, "recovery_bench: %s; cleaning up\n",
                   strsignal(signal));
      for (pid_t pid : children_) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
      std::error_code ec;
      if (!dir_.empty()) fs::remove_all(dir_, ec);
      _exit(128 + signal);
    }).detach();
  }

 private:
  Cleanup() = default;
  std::mutex mu_;
  std::string dir_;
  std::set<pid_t> children_;
};

// ------------------------------------------------------ child processes

// A child process running `args`, its stdout and stderr appended to a log
// file. It gets SIGKILL when this program dies (PR_SET_PDEATHSIG), and the
// destructor kills and reaps it if it is still running. Not thread-safe;
// create it on the main thread (the death signal follows the thread that
// forked).
class ChildProcess {
 public:
  static Result<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& args, const std::string& log_path) {
    // Everything the child needs is built before fork(): between fork and
    // exec it calls only async-signal-safe functions.
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int log_fd =
        open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return FailedPreconditionError("cannot open " + log_path + ": " +
                                     std::strerror(errno));
    }
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
        _exit(126);
      }
      sigprocmask(SIG_SETMASK, &none, nullptr);
      if (null_fd >= 0) dup2(null_fd, 0);
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const int fork_errno = errno;
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    if (pid < 0) {
      return UnavailableError(std::string("fork failed: ") +
                              std::strerror(fork_errno));
    }
    Cleanup::Get().AddChild(pid);
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
  }

  ~ChildProcess() {
    if (running_) Kill();
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // SIGKILL, then reaps it.
  void Kill() {
    if (!running_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    Reaped();
  }

  // Waits up to `limit_ms` for it to exit by itself; returns its exit code,
  // or -1 when it was killed by a signal or ran out of time (then killed).
  int WaitExit(int64_t limit_ms) {
    const auto deadline = SteadyClock::now() + milliseconds(limit_ms);
    while (running_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        Reaped();
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (SteadyClock::now() >= deadline) {
        Kill();
        return -1;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return -1;
  }

  // Its peak resident set so far (VmHWM), in MB; 0 if unknown.
  double PeakRssMb() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmHWM:", 0) == 0) {
        return std::stod(line.substr(6)) * 1024 / kBytesPerMb;  // kB
      }
    }
    return 0;
  }

 private:
  ChildProcess(pid_t pid, std::string log_path)
      : pid_(pid), log_path_(std::move(log_path)) {}

  void Reaped() {
    running_ = false;
    Cleanup::Get().RemoveChild(pid_);
  }

  const pid_t pid_;
  const std::string log_path_;
  bool running_ = true;
};

// The capture groups of the last line of `path` that matches `pattern`,
// waiting up to `limit_ms` for one to appear (a log line can lag a little
// behind the event it reports). Empty when there is none.
std::vector<std::string> LastLogMatch(const std::string& path,
                                      const std::regex& pattern,
                                      int64_t limit_ms) {
  const auto deadline = SteadyClock::now() + milliseconds(limit_ms);
  while (true) {
    std::vector<std::string> groups;
    std::ifstream in(path);
    std::string line;
    std::smatch match;
    while (std::getline(in, line)) {
      if (std::regex_search(line, match, pattern)) {
        groups.assign(match.begin() + 1, match.end());
      }
    }
    if (!groups.empty() || SteadyClock::now() >= deadline) return groups;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

// The last `lines` lines of a log, to show with an error.
std::string LogTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string tail;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size();
       ++i) {
    tail += "    " + all[i] + "\n";
  }
  return tail;
}

// -------------------------------------------------- raw disk reference

// Writes `bytes` to a new file at `path` in kRawWriteChunkBytes writes,
// fsyncs it and returns the seconds that took (the file is removed).
Result<double> RawWriteSeconds(const std::string& path, uint64_t bytes) {
  // Data that no layer below can compress or deduplicate.
  std::vector<uint64_t> chunk(kRawWriteChunkBytes / sizeof(uint64_t));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint64_t& v : chunk) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = x;
  }
  const auto start = SteadyClock::now();
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return FailedPreconditionError("cannot create " + path + ": " +
                                   std::strerror(errno));
  }
  Status status;
  uint64_t left = bytes;
  while (left > 0 && status.ok()) {
    const size_t n = std::min<uint64_t>(left, kRawWriteChunkBytes);
    const ssize_t written = write(fd, chunk.data(), n);
    if (written <= 0) {
      status = ResourceExhaustedError("cannot write " + path + ": " +
                                      std::strerror(errno));
    } else {
      left -= static_cast<uint64_t>(written);
    }
  }
  if (status.ok() && fsync(fd) != 0) {
    status = FailedPreconditionError("cannot fsync " + path + ": " +
                                     std::strerror(errno));
  }
  close(fd);
  const double seconds = SecondsSince(start);
  std::remove(path.c_str());
  if (!status.ok()) return status;
  return seconds;
}

// ------------------------------------------------------------- cluster

// A coordinator and one server, `ductile` children, with their state and
// logs under `dir`. The server can be killed and restarted.
class Cluster {
 public:
  explicit Cluster(std::string dir)
      : dir_(std::move(dir)), address_("ipc://" + dir_ + "/coordinator.sock") {}
  ~Cluster() {
    if (server_) {
      server_->Kill();  // if still running
      RemoveServerIpcFiles();
    }
  }

  const std::string& address() const { return address_; }
  ChildProcess& server() { return *server_; }
  ChildProcess& coordinator() { return *coordinator_; }

  Status Start() {
    std::error_code ec;
    fs::create_directories(dir_ + "/logs", ec);
    if (ec) {
      return FailedPreconditionError("cannot create " + dir_ +
                                     "/logs: " + ec.message());
    }
    Result<std::unique_ptr<ChildProcess>> coordinator = ChildProcess::Start(
        {FLAGS_ductile, "coordinator", "--listen=" + address_, "--servers=1",
         "--workers=1", "--slots=64", "--state_dir=" + dir_ + "/coordinator",
         "--heartbeat_timeout_ms=3600000",
         "--checkpoint_timeout_ms=" + std::to_string(FLAGS_timeout_ms)},
        dir_ + "/logs/coordinator.log");
    DUCTILE_RETURN_IF_ERROR(coordinator.status());
    coordinator_ = std::move(*coordinator);
    return StartServer();
  }

  // Starts the server (again): id 0, the same state directory.
  Status StartServer() {
    ++server_starts_;
    Result<std::unique_ptr<ChildProcess>> server = ChildProcess::Start(
        {FLAGS_ductile, "server", "--coordinator=" + address_, "--server_id=0",
         "--state_dir=" + dir_ + "/servers",
         "--keep_checkpoints=" + std::to_string(FLAGS_keep_checkpoints),
         "--timeout_ms=" + std::to_string(FLAGS_timeout_ms)},
        dir_ + "/logs/server-start" + std::to_string(server_starts_) + ".log");
    DUCTILE_RETURN_IF_ERROR(server.status());
    server_ = std::move(*server);
    return Status::Ok();
  }

  // SIGKILL; the server's ipc socket file stays behind, so remove it.
  void KillServer() {
    server_->Kill();
    RemoveServerIpcFiles();
  }

  // After the worker finished: the job shuts down by itself.
  void WaitExit() {
    const int64_t limit_ms = std::min<int64_t>(FLAGS_timeout_ms, 60000);
    if (server_ && server_->WaitExit(limit_ms) != 0) {
      Progress("  warning: the server did not exit cleanly (log %s)",
               server_->log_path().c_str());
    }
    if (coordinator_ && coordinator_->WaitExit(limit_ms) != 0) {
      Progress("  warning: the coordinator did not exit cleanly");
    }
  }

 private:
  // The server's ipc socket: /tmp/ductile-server-<pid>-<n>.sock (the
  // server's default ipc_dir).
  void RemoveServerIpcFiles() {
    if (!server_) return;
    const std::string prefix =
        "ductile-server-" + std::to_string(server_->pid()) + "-";
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/tmp", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.ends_with(".sock")) {
        fs::remove(entry.path(), ec);
      }
    }
  }

  const std::string dir_;
  const std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::unique_ptr<ChildProcess> server_;
  int server_starts_ = 0;
};

// -------------------------------------------------------------- worker

// One step's start and end.
struct StepTime {
  SteadyClock::time_point start, end;
  double seconds() const {
    return std::chrono::duration<double>(end - start).count();
  }
};

// The training loop's side: a Client holding the whole model.
class ModelWorker {
 public:
  static Result<std::unique_ptr<ModelWorker>> Connect(
      const std::string& address, uint64_t num_floats) {
    ClientOptions options;
    options.coordinator_address = address;
    options.connect_timeout_ms = FLAGS_timeout_ms;
    options.request_timeout_ms = FLAGS_timeout_ms;
    Result<std::unique_ptr<Client>> client = Client::Connect(options);
    DUCTILE_RETURN_IF_ERROR(client.status());
    std::unique_ptr<ModelWorker> worker(new ModelWorker(std::move(*client)));
    TableOptions table;
    table.name = "model";
    table.rule = UpdateRule::kSgd;
    table.learning_rate = 1e-3f;
    Result<Tensor> tensor = worker->client_->RegisterTensor(table, num_floats);
    DUCTILE_RETURN_IF_ERROR(tensor.status());
    worker->tensor_ = std::move(*tensor);
    // Every element is in [0.5, 1.5): each step changes every value.
    worker->gradient_.resize(num_floats);
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (float& g : worker->gradient_) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      g = 0.5f + static_cast<float>(x >> 40) * 0x1p-24f;
    }
    worker->model_.resize(num_floats);
    return worker;
  }

  Client& client() { return *client_; }

  // Push the gradient, Clock(), pull the model.
  Status Step(StepTime* time) {
    time->start = SteadyClock::now();
    Status s = client_->PushTensor(tensor_, gradient_);
    if (s.ok()) {
      client_->Clock();
      s = client_->PullTensor(tensor_, model_);
    }
    time->end = SteadyClock::now();
    return s;
  }

 private:
  explicit ModelWorker(std::unique_ptr<Client> client)
      : client_(std::move(client)) {}

  std::unique_ptr<Client> client_;
  Tensor tensor_;
  std::vector<float> gradient_;
  std::vector<float> model_;
};

// ------------------------------------------------------------- results

// One repeat's measurements of one size.
struct Sample {
  double raw_write_s = 0;
  double normal_step_s = 0;     // median of the repeat's normal steps
  double checkpoint_s = 0;      // request -> complete
  double server_write_ms = -1;  // the server's log line; -1 if not found
  double pause_s = 0;
  int overlapped_steps = 0;
  double restored_s = 0;    // kill -> AwaitRecovery returned
  double first_step_s = 0;  // kill -> first successful step
  double server_restore_ms = -1;
  double server_peak_rss_mb = 0;
};

struct SizeResult {
  int size_mb = 0;
  std::vector<Sample> samples;

  template <typename F>
  double MedianOf(F field) const {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(field(s));
    return Median(v);
  }
  // Medians that skip the repeats where a log line was not found.
  template <typename F>
  double MedianFound(F field) const {
    std::vector<double> v;
    for (const Sample& s : samples) {
      if (field(s) >= 0) v.push_back(field(s));
    }
    return v.empty() ? -1 : Median(v);
  }
};

// ------------------------------------------------------------ the runs

class SizeRun {
 public:
  SizeRun(int size_mb, std::string dir)
      : size_mb_(size_mb),
        bytes_(static_cast<uint64_t>(size_mb) * 1000000ull),
        dir_(std::move(dir)),
        cluster_(dir_) {}

  Result<SizeResult> Run() {
    SizeResult result;
    result.size_mb = size_mb_;
    Say("starting a coordinator and a server");
    DUCTILE_RETURN_IF_ERROR(cluster_.Start());
    Result<std::unique_ptr<ModelWorker>> worker =
        ModelWorker::Connect(cluster_.address(), bytes_ / sizeof(float));
    DUCTILE_RETURN_IF_ERROR(WithLogs(worker.status()));
    worker_ = std::move(*worker);
    for (int i = 0; i < kWarmupSteps; ++i) {
      StepTime t;
      DUCTILE_RETURN_IF_ERROR(WithLogs(worker_->Step(&t)));
      Say("warm-up step %d: %.3f s", i + 1, t.seconds());
    }
    for (int r = 0; r < FLAGS_repeats; ++r) {
      repeat_ = r + 1;
      Sample sample;
      DUCTILE_RETURN_IF_ERROR(RawWrite(&sample));
      DUCTILE_RETURN_IF_ERROR(NormalSteps(&sample));
      DUCTILE_RETURN_IF_ERROR(Checkpoint(&sample));
      sample.server_peak_rss_mb = cluster_.server().PeakRssMb();
      DUCTILE_RETURN_IF_ERROR(KillAndRecover(&sample));
      sample.server_peak_rss_mb =
          std::max(sample.server_peak_rss_mb, cluster_.server().PeakRssMb());
      result.samples.push_back(sample);
    }
    repeat_ = 0;
    DUCTILE_RETURN_IF_ERROR(WithLogs(worker_->client().Finish()));
    worker_.reset();
    cluster_.WaitExit();
    Say("done (this program's peak RSS %.0f MB)", SelfPeakRssMb());
    return result;
  }

 private:
  // A progress line naming the size and the repeat.
  [[gnu::format(printf, 2, 3)]] void Say(const char* format, ...) {
    char text[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof text, format, args);
    va_end(args);
    if (repeat_ > 0) {
      Progress("[%d MB] repeat %d/%d: %s", size_mb_, repeat_, FLAGS_repeats,
               text);
    } else {
      Progress("[%d MB] %s", size_mb_, text);
    }
  }

  // `s`, with the tails of the children's logs when it is an error.
  Status WithLogs(const Status& s) {
    if (s.ok()) return s;
    return Status(s.code(), s.message() + "\n  coordinator log:\n" +
                                LogTail(cluster_.coordinator().log_path(), 15) +
                                "  server log:\n" +
                                LogTail(cluster_.server().log_path(), 15));
  }

  static double SelfPeakRssMb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss * 1024.0 / kBytesPerMb;  // kB on Linux
  }

  Status RawWrite(Sample* sample) {
    Result<double> seconds = RawWriteSeconds(dir_ + "/raw-write.bin", bytes_);
    DUCTILE_RETURN_IF_ERROR(seconds.status());
    sample->raw_write_s = *seconds;
    Say("raw write + fsync %.3f s (%.0f MB/s)", *seconds, size_mb_ / *seconds);
    return Status::Ok();
  }

  Status NormalSteps(Sample* sample) {
    std::vector<double> times;
    double total = 0;
    while (static_cast<int>(times.size()) < kMaxNormalSteps &&
           (static_cast<int>(times.size()) < FLAGS_normal_steps ||
            total < kNormalStepsSeconds)) {
      StepTime t;
      DUCTILE_RETURN_IF_ERROR(WithLogs(worker_->Step(&t)));
      times.push_back(t.seconds());
      total += t.seconds();
    }
    sample->normal_step_s = Median(times);
    Say("step without a checkpoint %.3f s (median of %zu)",
        sample->normal_step_s, times.size());
    return Status::Ok();
  }

  // Requests a checkpoint from a second thread while this one trains.
  Status Checkpoint(Sample* sample) {
    std::atomic<bool> done{false};
    Result<int64_t> clock = UnavailableError("not requested");
    SteadyClock::time_point requested, completed;
    std::thread requester([&] {
      requested = SteadyClock::now();
      clock = RequestCheckpoint(cluster_.address(), FLAGS_timeout_ms);
      completed = SteadyClock::now();
      done.store(true);
    });
    std::vector<StepTime> steps;
    Status trained;
    while (!done.load() && trained.ok()) {
      trained = worker_->Step(&steps.emplace_back());
    }
    requester.join();  // RequestCheckpoint returns within timeout_ms
    DUCTILE_RETURN_IF_ERROR(WithLogs(trained));
    DUCTILE_RETURN_IF_ERROR(WithLogs(clock.status()));
    sample->checkpoint_s =
        std::chrono::duration<double>(completed - requested).count();
    // Steps that overlap [requested, completed] carry the checkpoint's cost.
    for (const StepTime& t : steps) {
      if (t.end > requested && t.start < completed) {
        sample->pause_s += t.seconds() - sample->normal_step_s;
        ++sample->overlapped_steps;
      }
    }
    const std::regex written("checkpoint at clock " + std::to_string(*clock) +
                             " written in ([0-9.eE+-]+) ms");
    const std::vector<std::string> m =
        LastLogMatch(cluster_.server().log_path(), written, kLogLagMs);
    if (!m.empty()) sample->server_write_ms = std::stod(m[0]);
    Say("checkpoint at clock %lld complete in %.3f s (%.0f MB/s; the server "
        "wrote it in %s ms); %d step(s) overlapped it, pause %.3f s",
        static_cast<long long>(*clock), sample->checkpoint_s,
        size_mb_ / sample->checkpoint_s, m.empty() ? "?" : m[0].c_str(),
        sample->overlapped_steps, sample->pause_s);
    return Status::Ok();
  }

  // Kills the server between two steps, restarts it at once and trains on.
  Status KillAndRecover(Sample* sample) {
    const auto killed = SteadyClock::now();
    cluster_.KillServer();
    DUCTILE_RETURN_IF_ERROR(cluster_.StartServer());
    bool rolled_back = false;
    int64_t resumed_at = -1;
    // At most a few rollbacks (one is expected); each wait is bounded.
    for (int attempt = 0; attempt < 4; ++attempt) {
      StepTime t;
      Status s = worker_->Step(&t);
      if (s.ok()) {
        if (!rolled_back) {
          return WithLogs(InternalError(
              "a step succeeded after the server was killed without the "
              "worker seeing a rollback"));
        }
        sample->first_step_s =
            std::chrono::duration<double>(t.end - killed).count();
        break;
      }
      if (s.code() != StatusCode::kAborted) return WithLogs(s);
      Result<Client::Recovery> recovery =
          worker_->client().AwaitRecovery(FLAGS_timeout_ms);
      DUCTILE_RETURN_IF_ERROR(WithLogs(recovery.status()));
      if (!rolled_back) sample->restored_s = SecondsSince(killed);
      rolled_back = true;
      resumed_at = recovery->clock;
    }
    if (sample->first_step_s == 0) {
      return WithLogs(InternalError("no successful step after 4 rollbacks"));
    }
    const std::regex restored("rolled back to clock " +
                              std::to_string(resumed_at) +
                              " \\(generation [0-9]+\\) in ([0-9.eE+-]+) ms");
    const std::vector<std::string> m =
        LastLogMatch(cluster_.server().log_path(), restored, kLogLagMs);
    if (!m.empty()) sample->server_restore_ms = std::stod(m[0]);
    Say("killed the server: job rolled back to clock %lld after %.3f s (the "
        "server restored it in %s ms), first step done after %.3f s",
        static_cast<long long>(resumed_at), sample->restored_s,
        m.empty() ? "?" : m[0].c_str(), sample->first_step_s);
    return Status::Ok();
  }

  const int size_mb_;
  const uint64_t bytes_;
  const std::string dir_;
  Cluster cluster_;
  std::unique_ptr<ModelWorker> worker_;
  int repeat_ = 0;
};

// ------------------------------------------------------------ reports

std::string Fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string MsOrUnknown(double ms) { return ms < 0 ? "?" : Fixed(ms, 0); }

void PrintTables(const std::vector<SizeResult>& results) {
  std::printf(
      "\nOne worker, one server on this host; tensor table with the SGD "
      "rule (no optimizer state); medians over %d repeat(s); MB = 1e6 "
      "bytes.\n\n",
      FLAGS_repeats);
  std::printf(
      "| size MB | raw disk write MB/s | checkpoint write MB/s (%% of raw) | "
      "checkpoint time s | pause per checkpoint s | recovery: kill -> first "
      "step s |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  for (const SizeResult& r : results) {
    const double raw =
        r.size_mb / r.MedianOf([](auto& s) { return s.raw_write_s; });
    const double ckpt_s = r.MedianOf([](auto& s) { return s.checkpoint_s; });
    const double ckpt = r.size_mb / ckpt_s;
    std::printf("| %d | %.0f | %.0f (%.0f%%) | %.3f | %.3f | %.3f |\n",
                r.size_mb, raw, ckpt, 100 * ckpt / raw, ckpt_s,
                r.MedianOf([](auto& s) { return s.pause_s; }),
                r.MedianOf([](auto& s) { return s.first_step_s; }));
  }
  std::printf(
      "\nDetails: the server's own write and restore times (its log lines), "
      "the step time without a checkpoint, the steps a checkpoint "
      "overlapped, kill -> rolled back (AwaitRecovery returned), and the "
      "server's peak RSS.\n\n");
  std::printf(
      "| size MB | server write ms | normal step s | steps overlapped | "
      "kill -> rolled back s | server restore ms | server peak RSS MB |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const SizeResult& r : results) {
    std::printf("| %d | %s | %.3f | %.0f | %.3f | %s | %.0f |\n", r.size_mb,
                MsOrUnknown(r.MedianFound([](auto& s) {
                  return s.server_write_ms;
                })).c_str(),
                r.MedianOf([](auto& s) { return s.normal_step_s; }),
                r.MedianOf([](auto& s) { return double(s.overlapped_steps); }),
                r.MedianOf([](auto& s) { return s.restored_s; }),
                MsOrUnknown(r.MedianFound([](auto& s) {
                  return s.server_restore_ms;
                })).c_str(),
                r.MedianOf([](auto& s) { return s.server_peak_rss_mb; }));
  }
  std::fflush(stdout);
}

Status WriteCsv(const std::string& path,
                const std::vector<SizeResult>& results) {
  std::ofstream out(path);
  if (!out) return FailedPreconditionError("cannot write " + path);
  out << "size_mb,raw_write_mb_per_s,checkpoint_write_mb_per_s,"
         "checkpoint_pct_of_raw,checkpoint_s,pause_s,kill_to_first_step_s,"
         "kill_to_rolled_back_s,server_write_ms,server_restore_ms,"
         "normal_step_s,steps_overlapped,server_peak_rss_mb,repeats,"
         "update_rule\n";
  for (const SizeResult& r : results) {
    const double raw =
        r.size_mb / r.MedianOf([](auto& s) { return s.raw_write_s; });
    const double ckpt_s = r.MedianOf([](auto& s) { return s.checkpoint_s; });
    const double ckpt = r.size_mb / ckpt_s;
    out << r.size_mb << "," << Fixed(raw, 1) << "," << Fixed(ckpt, 1) << ","
        << Fixed(100 * ckpt / raw, 1) << "," << Fixed(ckpt_s, 4) << ","
        << Fixed(r.MedianOf([](auto& s) { return s.pause_s; }), 4) << ","
        << Fixed(r.MedianOf([](auto& s) { return s.first_step_s; }), 4) << ","
        << Fixed(r.MedianOf([](auto& s) { return s.restored_s; }), 4) << ","
        << Fixed(r.MedianFound([](auto& s) { return s.server_write_ms; }), 1)
        << ","
        << Fixed(r.MedianFound([](auto& s) { return s.server_restore_ms; }), 1)
        << "," << Fixed(r.MedianOf([](auto& s) { return s.normal_step_s; }), 4)
        << ","
        << Fixed(r.MedianOf([](auto& s) { return double(s.overlapped_steps); }),
                 1)
        << ","
        << Fixed(r.MedianOf([](auto& s) { return s.server_peak_rss_mb; }), 0)
        << "," << r.samples.size() << ",sgd\n";
  }
  out.close();
  if (!out) return FailedPreconditionError("cannot write " + path);
  return Status::Ok();
}

// ---------------------------------------------------------------- main

Result<std::vector<int>> ParseSizes(const std::string& text) {
  std::vector<int> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || item.size() > 6 ||
        item.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(item) <= 0) {
      return InvalidArgumentError("--sizes_mb: '" + item +
                                  "' is not a positive integer");
    }
    const int mb = std::stoi(item);
    // Keys and lengths ride along with the values: keep a margin.
    if (static_cast<uint64_t>(mb) * 1000000ull + (1u << 20) >
        kMaxMessageBytes) {
      return InvalidArgumentError(
          "--sizes_mb: " + item +
          " MB does not fit one message (1 GiB): at most 1072");
    }
    sizes.push_back(mb);
  }
  if (sizes.empty()) return InvalidArgumentError("--sizes_mb is empty");
  return sizes;
}

// Creates `dir` (or takes it when it exists and is empty); removes it with
// everything in it when destroyed.
class WorkDir {
 public:
  static Result<std::unique_ptr<WorkDir>> Create(const std::string& dir) {
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
      return FailedPreconditionError(
          dir +
          " exists and is not empty (it is removed at exit, so it "
          "must be the benchmark's own)");
    }
    fs::create_directories(dir, ec);
    if (ec) {
      return FailedPreconditionError("cannot create " + dir + ": " +
                                     ec.message());
    }
    Cleanup::Get().SetDir(dir);
    return std::unique_ptr<WorkDir>(new WorkDir(dir));
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    Cleanup::Get().SetDir("");
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;

  const std::string& path() const { return dir_; }

 private:
  explicit WorkDir(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
};

Status Run() {
  if (FLAGS_quick) {
    if (gflags::GetCommandLineFlagInfoOrDie("sizes_mb").is_default) {
      FLAGS_sizes_mb = "10,100";
    }
    if (gflags::GetCommandLineFlagInfoOrDie("repeats").is_default) {
      FLAGS_repeats = 1;
    }
  }
  Result<std::vector<int>> sizes = ParseSizes(FLAGS_sizes_mb);
  DUCTILE_RETURN_IF_ERROR(sizes.status());
  if (FLAGS_repeats < 1 || FLAGS_normal_steps < 1 ||
      FLAGS_keep_checkpoints < 1 || FLAGS_timeout_ms < 1000) {
    return InvalidArgumentError(
        "--repeats, --normal_steps and --keep_checkpoints must be >= 1, "
        "--timeout_ms >= 1000");
  }
  if (access(FLAGS_ductile.c_str(), X_OK) != 0) {
    return FailedPreconditionError("--ductile=" + FLAGS_ductile +
                                   " is not an executable");
  }
  const std::string dir = FLAGS_dir.empty() ? "/tmp/ductile-recovery-bench-" +
                                                  std::to_string(getpid())
                                            : FLAGS_dir;
  Result<std::unique_ptr<WorkDir>> work = WorkDir::Create(dir);
  DUCTILE_RETURN_IF_ERROR(work.status());

  // The store keeps keep_checkpoints versions; each full rewrite has its
  // own files, and live/ and the raw write need one more copy each.
  const int largest = *std::max_element(sizes->begin(), sizes->end());
  const double needed_mb = (FLAGS_keep_checkpoints + 2.0) * largest;
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  if (!ec && space.available / kBytesPerMb < needed_mb) {
    return ResourceExhaustedError(
        dir + " has " + Fixed(space.available / kBytesPerMb, 0) + " MB free; " +
        Fixed(needed_mb, 0) + " MB are needed");
  }

  Progress("recovery_bench: sizes %s MB, %d repeat(s), dir %s, ductile %s",
           FLAGS_sizes_mb.c_str(), FLAGS_repeats, dir.c_str(),
           FLAGS_ductile.c_str());
  Progress(
      "model: one tensor table, update rule sgd (no optimizer state), "
      "chunks of 32768 floats");
  std::vector<SizeResult> results;
  for (int mb : *sizes) {
    // Each size gets a fresh cluster in a fresh directory.
    const std::string size_dir = dir + "/" + std::to_string(mb) + "mb";
    Result<SizeResult> result = SizeRun(mb, size_dir).Run();
    fs::remove_all(size_dir, ec);
    DUCTILE_RETURN_IF_ERROR(result.status());
    results.push_back(std::move(*result));
  }
  PrintTables(results);
  if (!FLAGS_csv.empty()) {
    DUCTILE_RETURN_IF_ERROR(WriteCsv(FLAGS_csv, results));
    std::printf("\nCSV written to %s\n", FLAGS_csv.c_str());
  }
  return Status::Ok();
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  // Before any thread starts, so that every thread inherits the mask.
  ductile::bench::Cleanup::Get().HandleSignals();
  gflags::SetUsageMessage(
      "recovery_bench: checkpoint throughput, training pause and recovery "
      "time of a real cluster");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  // The Client logs its rollbacks (WARNING) and resumptions (INFO).
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const ductile::Status s = ductile::bench::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "recovery_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
