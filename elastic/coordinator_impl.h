// The coordinator (implements ductile::Coordinator).
//
// Threads: one loop thread (Run) owns the socket and all membership state.
// Other threads reach that state only through RunOnLoop(), which queues a
// task for the loop and waits for its result.
#ifndef DUCTILE_ELASTIC_COORDINATOR_IMPL_H_
#define DUCTILE_ELASTIC_COORDINATOR_IMPL_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ductile/coordinator.h"
#include "elastic/coordinator_store.h"
#include "env/env.h"
#include "proto/ductile.pb.h"
#include "transport/message.h"
#include "transport/socket.h"
#include "transport/wakeup.h"

namespace ductile {

class CoordinatorImpl final : public Coordinator {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& options);
  ~CoordinatorImpl() override;

  Status Init();

  Status Wait() override;
  void Stop() override;
  std::string address() const override { return address_; }
  Status MoveSlot(int32_t slot, int32_t server_id) override;
  Result<int64_t> Checkpoint(int64_t timeout_ms) override;

 private:
  using Time = std::chrono::steady_clock::time_point;
  struct Member {
    int32_t id = -1;
    wire::Role role = wire::ROLE_UNKNOWN;
    std::string identity;  // ZeroMQ routing id of its socket
    wire::ServerEndpoint endpoint;
    Time last_seen;
    bool finished = false;
    bool dead = false;             // silent past the heartbeat timeout
    std::string state_dir;         // servers: their checkpoint store
    int32_t keep_checkpoints = 0;  // servers: versions their store keeps
    // Servers: writing or restoring a checkpoint (announced by a heartbeat),
    // so silent; not declared dead before this.
    Time busy_until{};
    wire::Counters counters;
    wire::WorkerMetrics metrics;
  };
  // A request answered later (registration before routing, barrier, table
  // creation in progress).
  struct Waiter {
    std::string identity;
    uint64_t seq = 0;
  };
  // A caller waiting until every server has installed `epoch`.
  struct RoutingWaiter {
    uint64_t epoch = 0;
    std::set<int32_t> awaiting;
    std::shared_ptr<std::promise<Status>> done;
  };
  // A consistency change being agreed (see SET_CONSISTENCY in the proto).
  struct PendingChange {
    uint64_t id = 0;
    std::string table;  // name
    wire::ConsistencyConfig consistency;
    std::set<int32_t> awaiting;  // servers that have not acked the prepare
    std::set<int32_t> awaiting_workers;  // workers (their caches) likewise
    int64_t max_clock = 0;
    Waiter waiter;
    Time deadline;
  };
  // A checkpoint being taken: prepare (servers report their largest
  // clock), commit at clock C, then every server writes and every live
  // worker reports its resume state.
  struct CheckpointRound {
    uint64_t id = 0;
    int64_t clock = -1;          // -1 until committed
    int64_t max_clock = -1;      // largest push timestamp the servers let in
    std::set<int32_t> awaiting;  // servers (prepare acks, then dones)
    std::set<int32_t> awaiting_workers;  // after the commit
    std::map<int32_t, std::string> resume_states;
    wire::Header message;         // the prepare, then the commit (for resends)
    std::vector<Waiter> waiters;  // CHECKPOINT requests
    std::vector<std::shared_ptr<std::promise<Result<int64_t>>>> promises;
    Time deadline;
  };
  // A rollback under way: servers restore, then workers resume.
  struct Recovery {
    int64_t clock = 0;
    std::set<int32_t> awaiting;  // servers that have not acked
    wire::Header message;        // the RECOVER sent to each server
    Time deadline;
  };
  struct PendingTable {
    uint64_t seq = 0;  // of the TABLE_CREATE; the servers' acks echo it
    wire::TableConfig config;
    std::set<int32_t> awaiting;  // servers that have not acked
    std::vector<Waiter> waiters;
    Time deadline;
  };

  void Run();
  void Handle(InMessage& message);
  void HandleRegister(const std::string& identity, const wire::Header& h);
  void HandleCreateTable(const std::string& identity, const wire::Header& h);
  void HandleTableAck(const wire::Header& h);
  void HandleRoutingAck(const wire::Header& h);
  void HandleSetConsistency(const std::string& identity, const wire::Header& h);
  void HandleConsistencyAck(const wire::Header& h);
  void CommitChange(PendingChange& change, const wire::ConsistencyConfig& c);
  void PublishWorkers();
  void HandleBarrier(const std::string& identity, const wire::Header& h);
  void HandleFinish(const std::string& identity, const wire::Header& h);
  void CheckTimeouts();
  void MaybeAssignSlots();
  void MaybeReleaseBarrier();
  void MaybeShutDown();
  void BeginShutdown();
  void PublishRouting();
  void FillRegistration(const Member& member, wire::Header* reply) const;
  wire::ClusterState State() const;
  Member* FindByIdentity(const std::string& identity);
  void Send(const std::string& identity, const wire::Header& header);
  void ReplyStatus(const std::string& identity, uint64_t seq, const Status& s);
  // Workers a barrier waits for: every live worker, and those the job
  // expects (CoordinatorOptions::num_workers) that have not registered yet.
  std::set<int32_t> LiveWorkers() const;
  int32_t WorkersNotYetRegistered() const;
  // Fault tolerance.
  Status LoadState();
  void SaveState();
  Member* FindMember(const wire::Header& h, const std::string& identity);
  void MaybeStartCheckpoint(bool on_demand);
  void HandleCheckpointRequest(const std::string& identity,
                               const wire::Header& h);
  void HandleCheckpointAck(const wire::Header& h);
  void HandleCheckpointDone(const wire::Header& h);
  void MaybeCompleteCheckpoint();
  void FailCheckpoint(const Status& s);
  void StartRecovery(const std::string& why);
  void HandleRecoverAck(const wire::Header& h);
  void FinishRecovery();
  int64_t LastCheckpointClock() const;
  // Live servers that own slots: those a checkpoint is taken on.
  std::set<int32_t> ServersWithSlots() const;

  const CoordinatorOptions options_;
  Env* const env_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> socket_;
  std::string address_;
  std::thread thread_;
  Wakeup wakeup_;
  std::atomic<bool> stop_{false};

  std::mutex tasks_mu_;
  std::deque<std::function<void()>> tasks_;  // guarded by tasks_mu_

  // Owned by the loop thread.
  std::map<int32_t, Member> servers_;
  std::map<int32_t, Member> workers_;
  std::map<std::string, Time> observers_;  // identity -> last seen
  std::vector<Waiter> waiting_for_routing_;
  wire::RoutingTable routing_;
  std::map<std::string, wire::TableConfig> tables_;     // by name
  std::map<std::string, PendingTable> pending_tables_;  // by name
  uint32_t next_table_id_ = 1;
  uint64_t next_seq_ = 1;
  int32_t next_worker_id_ = 0;
  // The barrier round now open, and who waits at it (by worker id).
  int64_t barrier_round_ = 0;
  std::map<int32_t, Waiter> barrier_;
  std::map<int32_t, uint64_t> server_epochs_;  // routing epoch each acked
  std::vector<RoutingWaiter> routing_waiters_;
  std::map<uint64_t, PendingChange> changes_;  // by id
  // Fault tolerance.
  std::unique_ptr<CoordinatorStore> store_;  // null without a state_dir
  uint64_t generation_ = 0;
  std::vector<wire::CoordinatorState::CatalogEntry> catalog_;  // oldest first
  std::optional<CheckpointRound> round_;
  std::optional<Recovery> recovery_;
  // The last RESUME (without a worker's state) and each worker's state in
  // it: sent again to a worker whose heartbeat shows an older generation.
  std::optional<wire::Header> last_resume_;
  std::map<int32_t, std::string> last_resume_states_;
  bool resume_pending_recovery_ = false;  // restarted during a rollback
  Time last_checkpoint_at_{};
  bool shutting_down_ = false;
  Time shutdown_at_{};
};

}  // namespace ductile

#endif  // DUCTILE_ELASTIC_COORDINATOR_IMPL_H_
