// The client library (implements ductile::Client).
//
// Threads: caller threads validate a call, build an operation and queue it;
// one I/O thread (Run) owns every socket and the routing table, splits each
// operation into one request per server, sends, matches replies, resends on
// "routing changed" or "unavailable" answers, and fails requests past their
// deadline. Caller threads never touch a socket.
#ifndef DUCTILE_CLIENT_CLIENT_IMPL_H_
#define DUCTILE_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/operation.h"
#include "client/param_cache.h"
#include "client/table_registry.h"
#include "ductile/client.h"
#include "proto/ductile.pb.h"
#include "transport/message.h"
#include "transport/socket.h"
#include "transport/wakeup.h"

namespace ductile {

using SteadyTime = std::chrono::steady_clock::time_point;

// A push, pull or push-pull call: borrows the caller's spans.
struct DataOperation : internal::Operation {
  wire::MessageType type = wire::PUSH;
  TableId table = 0;
  uint32_t width = 0;  // 0: variable, see offsets
  std::span<const Key> keys;
  std::span<const float> values;
  std::span<float> out;
  std::span<const uint32_t> lengths;
  std::vector<uint64_t> offsets;  // variable width: float offset of key i
  int64_t clock = 0;
  uint64_t generation = 0;  // the job's generation when submitted
  SteadyTime deadline;
  // Largest wait at a server among this call's replies so far (I/O thread):
  // the parts wait side by side, so the call waited that long.
  uint64_t blocked_us = 0;
  // Install pulled values into the cache (fetch issued at cache_mark).
  bool cache_install = false;
  uint64_t cache_mark = 0;

  uint64_t offset(size_t i) const { return width ? i * width : offsets[i]; }
  uint32_t length(size_t i) const { return width ? width : lengths[i]; }
};

// Clock(): tell every server this worker's new clock.
struct ClockOperation : internal::Operation {
  int64_t clock = 0;
  uint64_t generation = 0;
};

// A message to the coordinator that needs no answer (a worker's resume
// state for a checkpoint).
struct NoticeOperation : internal::Operation {
  wire::Header message;
};

// A request to the coordinator; `reply` is filled before completion.
struct ControlOperation : internal::Operation {
  wire::Header request;
  wire::Header reply;
  SteadyTime deadline;
  // Barrier and Finish are sent again while unanswered: a coordinator that
  // restarted lost them (the coordinator takes a resent one as the same).
  SteadyTime resend_at{};
};

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(const ClientOptions& options);
  ~ClientImpl() override;

  // Starts the I/O thread and registers; waits for the routing table.
  Status Init();

  Result<TableId> CreateTable(const TableOptions& options) override;
  Result<TableInfo> GetTable(const std::string& name) override;
  Handle PushAsync(TableId table, std::span<const Key> keys,
                   std::span<const float> values,
                   std::span<const uint32_t> lengths) override;
  Handle PullAsync(TableId table, std::span<const Key> keys,
                   std::span<float> out,
                   std::span<const uint32_t> lengths) override;
  Handle PushPullAsync(TableId table, std::span<const Key> keys,
                       std::span<const float> values, std::span<float> out,
                       std::span<const uint32_t> lengths) override;
  Result<Tensor> RegisterTensor(const TableOptions& options,
                                uint64_t num_floats,
                                uint32_t chunk_floats) override;
  int64_t Clock() override;
  Result<int64_t> SetConsistency(TableId table,
                                 const Consistency& consistency) override;
  ClientStats stats() const override;
  int64_t clock() const override { return clock_.load(); }
  Status Barrier(int64_t timeout_ms) override;
  Status Finish() override;
  Result<Recovery> AwaitRecovery(int64_t timeout_ms) override;
  void SetResumeState(std::string state) override;
  std::vector<int32_t> live_workers() const override;
  int32_t worker_id() const override { return worker_id_; }
  int32_t num_workers() const override { return num_workers_; }

 private:
  // One request to one server: the keys of `op` at `indices` (or the
  // contiguous range [begin, end) when indices is empty).
  struct Part {
    std::shared_ptr<DataOperation> op;
    int32_t server = -1;
    uint64_t seq = 0;
    size_t begin = 0, end = 0;
    std::vector<uint32_t> indices;
    // A push-pull whose push a server already applied: only pull.
    bool pull_only = false;
    SteadyTime retry_at{};   // waiting for a retry (not in flight) if set
    SteadyTime resend_at{};  // resend the same seq if silent until then
    size_t size() const {
      return indices.empty() ? end - begin : indices.size();
    }
    size_t index(size_t j) const {
      return indices.empty() ? begin + j : indices[j];
    }
  };
  struct ServerConnection {
    std::string address;
    std::unique_ptr<Socket> socket;
  };

  Handle SubmitData(wire::MessageType type, TableId table,
                    std::span<const Key> keys, std::span<const float> values,
                    std::span<float> out, std::span<const uint32_t> lengths);
  Handle SubmitData(std::shared_ptr<DataOperation> op);
  // The cache's part of a call to an SSP table: records a push, answers a
  // pull that it can (true: op done). Caller's thread.
  bool UseCache(DataOperation& op, const TableRegistry::View& table);
  // Caller's thread: what can be refused before any part is sent (values
  // NaN or infinite, widths that differ from the servers'), so a request
  // split over several servers is never half applied.
  Status CheckPushValues(const DataOperation& op,
                         const TableRegistry::View& table) const;
  // I/O thread: a consistency change of `table` is being agreed (suspend
  // the cache) or was committed from clock B on.
  void HandleConsistencyChange(const wire::Header& header);
  Result<wire::Header> Control(wire::Header request, int64_t timeout_ms);
  void Enqueue(std::shared_ptr<internal::Operation> op);

  // I/O thread.
  void Run();
  void Dispatch(const std::shared_ptr<internal::Operation>& op);
  void SplitAndSend(const std::shared_ptr<DataOperation>& op,
                    const std::vector<uint32_t>* subset, bool pull_only);
  void SendPart(Part& part);
  void HandleDataReply(InMessage& message);
  void HandleControlReply(InMessage& message);
  void HandleTimers();
  void SendHeartbeat();
  void InstallRouting(const wire::RoutingTable& routing);
  void RequestRouting();
  ServerConnection* ConnectionTo(int32_t server);
  void RebuildPollItems();
  void FinishPart(uint64_t seq, const Status& status);
  uint64_t DoneBelow() const;
  void FailAll(const Status& status);
  // Fault tolerance (I/O thread).
  void HandleResume(const wire::Header& header);
  void HandleCheckpointCommit(const wire::Header& header);
  void ReportResumeState(int64_t clock, const std::string& state);
  // True (and `op` released with kAborted) while a rollback is announced
  // and not yet taken by AwaitRecovery.
  bool RefuseDuringRecovery(internal::Operation& op);

  // Constant after construction.
  const ClientOptions options_;
  const int64_t client_id_;

  // Set by Init(); the I/O thread reads worker_id_ for heartbeats.
  std::atomic<int32_t> worker_id_{-1};
  int32_t num_workers_ = 0;

  std::atomic<int64_t> clock_{0};
  // The next barrier round this worker waits at (from its registration).
  std::atomic<int64_t> barrier_round_{0};
  std::atomic<bool> stop_{false};
  Wakeup wakeup_;

  std::mutex queue_mu_;
  std::deque<std::shared_ptr<internal::Operation>> queue_;  // guarded

  ParamCache cache_;

  // Fault tolerance. `generation_` stamps every request: the generation
  // the caller has resumed in (AwaitRecovery moves it).
  std::atomic<uint64_t> generation_{0};
  mutable std::mutex recovery_mu_;
  std::condition_variable recovery_cv_;
  std::optional<Recovery> pending_recovery_;      // guarded by recovery_mu_
  std::map<int64_t, std::string> resume_states_;  // guarded by recovery_mu_
  bool uses_resume_state_ = false;                // guarded by recovery_mu_
  // A committed checkpoint whose state this worker has not reported yet.
  std::optional<int64_t> report_clock_;  // guarded by recovery_mu_
  std::vector<int32_t> live_workers_;    // guarded by recovery_mu_

  mutable std::mutex stats_mu_;
  ClientStats stats_;  // guarded by stats_mu_

  TableRegistry tables_;

  // Owned by the I/O thread.
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> coordinator_;
  wire::RoutingTable routing_;
  std::map<int32_t, ServerConnection> servers_;
  std::vector<Socket*> poll_sockets_;  // the coordinator's, then servers'
  std::vector<int32_t> poll_servers_;  // server id of poll_sockets_[1 + i]
  uint64_t next_seq_ = 1;
  std::unordered_map<uint64_t, Part> parts_;  // by seq, in flight or retrying
  std::set<uint64_t> open_seqs_;              // seqs that may still be (re)sent
  std::unordered_map<uint64_t, std::shared_ptr<ControlOperation>> controls_;
  std::vector<std::shared_ptr<DataOperation>> waiting_for_routing_;
  SteadyTime routing_requested_at_{};

  std::thread thread_;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_CLIENT_IMPL_H_
