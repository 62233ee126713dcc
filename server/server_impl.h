// The parameter server process role (implements ductile::Server).
//
// Threads: one request thread (Run) owns both sockets and every table; it
// validates and applies requests in arrival order, answers the coordinator
// and sends heartbeats. Other threads only read atomics (counters) or signal
// `wakeup_` to stop.
#ifndef DUCTILE_SERVER_SERVER_IMPL_H_
#define DUCTILE_SERVER_SERVER_IMPL_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "consistency/bsp_buffer.h"
#include "consistency/clock_vector.h"
#include "consistency/consistency_schedule.h"
#include "ductile/server.h"
#include "proto/ductile.pb.h"
#include "server/checkpoint_store.h"
#include "server/live_counters.h"
#include "server/parameter_table.h"
#include "server/request_dedup.h"
#include "transport/message.h"
#include "transport/wakeup.h"

namespace ductile {

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(const ServerOptions& options);
  ~ServerImpl() override;

  // Binds, registers with the coordinator, starts the request thread.
  Status Init();

  Status Wait() override;
  void Stop() override;
  int32_t id() const override { return id_; }
  std::string address() const override { return tcp_address_; }
  ServerCounters counters() const override;

  // For tests only: a copy of one key's value, read on the request
  // thread's behalf (call only while the server is idle or stopped).
  bool GetForTesting(TableId table, Key key, std::vector<float>* value);

 private:
  using Time = std::chrono::steady_clock::time_point;
  // A pull waiting for the server clock to reach `required`.
  struct ParkedPull {
    InMessage message;  // the whole request, re-read when released
    TableId table = 0;
    int64_t required = 0;
    int64_t clock = 0;
    bool duplicate = false;  // its push part was a resend
    Time parked_at;
    Time deadline;
  };
  // A table with its consistency state.
  struct TableState {
    std::unique_ptr<ParameterTable> table;
    ConsistencySchedule schedule{Consistency{}};
    BspBuffer bsp;
    // While a consistency change is being agreed: requests with a clock
    // above this are held (in arrival order) until it is committed.
    std::optional<int64_t> hold_above;
    std::vector<InMessage> held;
  };

  void Run();
  // `replay`: a held request handled again (already counted).
  void HandleRequest(InMessage& message, bool replay = false);
  void HandleClock(const wire::Header& header);
  Status ParseData(const InMessage& message, const wire::Header& header,
                   const ParameterTable& table, DataFrames* request) const;
  void ServePull(const zmq::message_t& identity, const wire::Header& header,
                 TableState& state, const DataFrames& request,
                 uint64_t blocked_us, bool duplicate);
  void SetWorkers(const std::vector<int32_t>& ids);
  void AdvanceWorker(int32_t worker, int64_t clock);
  void OnServerClock();
  void ExpireParked();
  std::string Laggards(int64_t required) const;
  void PrepareChange(const wire::Header& header);
  void CommitChange(const wire::Header& header);
  void HandleCoordinator(InMessage& message);
  // Checkpoints (docs/fault_tolerance.md).
  bool HeldForCheckpoint(int64_t clock) const;
  void PrepareCheckpoint(const wire::Header& header);
  void CommitCheckpoint(const wire::Header& header);
  void ReplayCheckpointHeld();
  void MaybeWriteCheckpoint();
  Status WriteCheckpointAt(int64_t clock);
  void ExpireCheckpointPrepare();
  void ExpirePendingCheckpoints();
  // Recovery: roll back to a checkpoint under a new generation.
  void Recover(const wire::Header& header);
  Status RestoreState(const wire::Header& header);
  void AbortWaiting(const Status& status);
  Status OpenStore();
  // `busy_ms` > 0: about to write or restore a checkpoint, silent for up
  // to that long (-1: as long as the coordinator's checkpoint timeout).
  void SendHeartbeat(int64_t busy_ms = 0);
  void ReplyError(const zmq::message_t& identity, uint64_t seq,
                  const Status& s);
  void ReplyMoved(const zmq::message_t& identity, uint64_t seq, bool duplicate);
  int64_t min_clock() const { return worker_clocks_.min_clock(); }
  void Reply(const zmq::message_t& identity, const wire::Header& header,
             std::vector<float>* values);
  void InstallRouting(const wire::RoutingTable& routing);
  Status CreateTable(const wire::TableConfig& config);
  Status SendToCoordinator(const wire::Header& header);

  // Constant after construction.
  const ServerOptions options_;

  // Set by Init(), then constant.
  zmq::context_t context_{1};
  zmq::socket_t router_;
  zmq::socket_t coordinator_;
  int32_t id_ = -1;
  std::string tcp_address_;
  std::string ipc_address_;
  std::thread thread_;

  // Owned by the request thread.
  wire::RoutingTable routing_;
  std::vector<uint8_t> owned_slots_;  // 1 if this server owns the slot
  std::map<TableId, std::unique_ptr<TableState>> tables_;
  ClockVector worker_clocks_;                // live workers only
  std::map<int32_t, int64_t> known_clocks_;  // every worker heard from
  std::set<int32_t> live_workers_;
  int64_t max_clock_seen_ = 0;
  // Largest timestamp of a worker's push let through (applied or buffered):
  // a checkpoint's clock must lie above it on every server.
  int64_t max_push_clock_ = -1;
  std::vector<ParkedPull> parked_;
  RequestDedup dedup_;
  uint64_t routing_requested_epoch_ = 0;
  std::chrono::steady_clock::time_point next_heartbeat_;
  // Checkpoints and recovery.
  std::unique_ptr<CheckpointStore> store_;  // null without a state_dir
  std::string store_dir_;
  uint64_t generation_ = 0;
  int64_t checkpoint_every_ = 0;
  int64_t heartbeat_interval_ms_ = 500;
  int64_t last_checkpoint_ = -1;  // clock of the last one written
  int64_t due_reported_ = 0;      // server clock last reported as due
  // Between a checkpoint's prepare and its commit: pushes with a clock
  // above this are held.
  std::optional<int64_t> prepare_above_;
  uint64_t prepare_id_ = 0;
  Time prepare_deadline_{};
  // Committed checkpoint clocks not yet written: pushes with a clock at or
  // above the smallest are held until it is.
  // Each with the time by which the workers must have reached it; past
  // that the checkpoint is dropped (under async a straggler could hold
  // pushes past their senders' deadlines).
  std::map<int64_t, Time> pending_checkpoints_;
  // The newest checkpoint the coordinator knows complete: versions above
  // it not being written belong to rounds that failed.
  int64_t last_complete_checkpoint_ = -1;
  std::optional<uint64_t> restored_generation_;
  std::vector<InMessage> checkpoint_held_;  // in arrival order
  // Keys this server's store holds but no longer owns (after a restore).
  std::vector<std::pair<TableId, Key>> pending_deletes_;

  // Shared.
  Wakeup wakeup_;
  std::atomic<bool> stop_{false};
  LiveCounters counters_;
  std::mutex wait_mu_;
  Status exit_status_;  // written by the request thread before it ends
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SERVER_IMPL_H_
