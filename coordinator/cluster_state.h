// The coordinator's view of the cluster: members, routing, tables, the
// generation, the checkpoint catalog and the barrier round.
//
// It persists itself: PersistIfChanged() writes the durable part to the
// coordinator's store whenever it differs from what was last written, so
// no change can be left unsaved by a forgotten call. The coordinator calls
// it after every message and timer it handles, before sending anything
// (a message is never heard of before the state that caused it is
// durable). Members' liveness details (their socket identity, last
// heartbeat, counters) live only in memory.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_CLUSTER_STATE_H_
#define DUCTILE_COORDINATOR_CLUSTER_STATE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/data_plan.h"
#include "ductile/coordinator.h"
#include "ductile/status.h"
#include "env/env.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "storage/coordinator_store.h"

namespace ductile {

struct Member {
  using TimePoint = std::chrono::steady_clock::time_point;

  // A member's part in the job. It moves forward only: active -> draining
  // -> left, or -> finished (workers); a server whose drain fails or is
  // abandoned goes back from draining to active. Whether the coordinator
  // believes it alive is another matter (`dead`), not a stage: a worker
  // declared dead may come back, and stays draining meanwhile; a server
  // that dies while its drain lingers is left and dead at once (heard from
  // again, it is told to rejoin). Part of the persistent format through
  // the PersistedMember fields finished, left and draining (at most one of
  // them is set).
  enum class Stage : uint8_t {
    kActive,
    kDraining,  // asked to leave, not gone yet (a drain)
    kFinished,  // workers: called Finish()
    kLeft,      // workers: left the job (Leave, a drain); servers: drained
  };

  int32_t id = -1;
  wire::Role role = wire::ROLE_UNKNOWN;
  // Durable.
  wire::ServerEndpoint endpoint;
  std::string state_dir;         // servers: their checkpoint store
  int32_t keep_checkpoints = 0;  // servers: versions their store keeps
  Stage stage = Stage::kActive;
  // Declared dead (silent past the heartbeat timeout, or its exit
  // reported), whatever its stage; cleared when it is heard from again
  // (unless `exited`).
  bool dead = false;
  // Servers: joined a running job and owns no slot yet (its rebalance may
  // have been abandoned: MigrationManager plans it again).
  bool awaiting_slots = false;
  // Servers: declared dead, then heard from again (it was paused): it is
  // told to rejoin with no keys (REJOIN), and takes no slot until its
  // heartbeat shows the job's generation and no keys stored (after a
  // takeover the generation is the same). Kept over a death and a return.
  bool rejoining = false;
  // The member key (Z85) it registered with, "" for the cluster's shared
  // key: only a connection proving it may register under its id again or
  // speak for it.
  std::string key;
  // The connection identity its registration came from (durable; unlike
  // `identity`, not forgotten by a restart): a REGISTER from it again is
  // the same process asking again, not a restarted member.
  std::string registered_from;
  // The process that registered (its id on its host, 0: not given) and
  // the registration's number (ClusterState::next_incarnation): a report
  // of its exit must name this process (MembershipManager::ReportExit).
  int32_t pid = 0;
  uint64_t incarnation = 0;
  // Servers: the newest routing epoch at which every backup of its slots
  // held a whole copy, as its heartbeat last said (0: not heard).
  uint64_t backups_synced_epoch = 0;
  // Servers: the silence announced by the last heartbeat (0: none), in ms;
  // written with the state until `busy_until`.
  int64_t busy_ms = 0;
  // In memory only.
  // Declared dead on a report that its process exited (not by silence):
  // it cannot come back, so the job does not wait to see whether it does.
  bool exited = false;
  std::string identity;  // the socket identity it last spoke from
  TimePoint last_seen{};
  // Servers: writing or restoring a checkpoint (announced by a heartbeat),
  // so silent; not declared dead before this (a restarted coordinator
  // gives it `busy_ms` again).
  TimePoint busy_until{};
  wire::Counters counters;
  wire::WorkerMetrics metrics;

  bool finished() const { return stage == Stage::kFinished; }
  bool left() const { return stage == Stage::kLeft; }
  bool draining() const { return stage == Stage::kDraining; }
  // Neither finished nor left (whether alive or not).
  bool in_job() const {
    return stage == Stage::kActive || stage == Stage::kDraining;
  }
  bool live_worker() const { return in_job() && !dead; }
  // A drain that will not happen (failed, abandoned): active again.
  void AbandonDrain() {
    if (stage == Stage::kDraining) stage = Stage::kActive;
  }
  // Whether a connection that proved member key `k` ("" for the cluster's
  // shared key) may speak for this member.
  bool KeyFits(const std::string& k) const { return key.empty() || key == k; }
  // "server N" or "worker N", for messages.
  std::string name() const {
    return (role == wire::ROLE_SERVER ? "server " : "worker ") +
           std::to_string(id);
  }
};

using CatalogEntry = wire::CoordinatorState::CatalogEntry;

class ClusterState {
 public:
  // Complete checkpoints the catalog remembers at most (servers keep their
  // own K).
  static constexpr size_t kMaxCatalog = 8;

  ClusterState(Env* env, const CoordinatorOptions& options)
      : env_(env), options_(options) {}

  // Opens the store in options.state_dir ("" = nothing kept) and loads a
  // previous run's state from it. FailedPrecondition if it is of a cluster
  // with another number of slots.
  Status Open();
  bool durable() const { return store_ != nullptr; }
  // True when Open() found a previous run's state.
  bool resumed() const { return resumed_; }
  // Writes the durable part if it changed since the last write. An error
  // (a read-only or full disk) leaves it to be written at the next call;
  // meanwhile the coordinator sends nothing that tells of it.
  Status PersistIfChanged();

  // Derived from what follows.
  // The job's gradient noise scale in data-plan batches: the servers'
  // shares (ServerCounters::gns_batch_*) of those alive with at least
  // kAdaScaleMinClocks clocks, summed; 0 while none has. Each server's
  // heartbeat answer carries it, for AdaScale's one gain. Shares that are
  // not finite, non-negative numbers (a server that lies) are left out.
  double JobNoiseScale() const;
  // Drops the replacement requests of workers no longer live (a new
  // process may take a worker's id later).
  void ForgetReplacedWorkers();

  // ---- Durable.
  uint64_t generation = 0;
  RoutingTable routing;
  std::map<std::string, wire::TableConfig> tables;  // by name
  uint32_t next_table_id = 1;
  int32_t next_worker_id = 0;
  // The number of the next registration of a server or worker process
  // (Member::incarnation): never given twice in the cluster's life.
  uint64_t next_incarnation = 1;
  // Deaths whose slots backups took over (no rollback), in the job's life.
  uint64_t takeovers = 0;
  // Above every slot move's id given so far (MigrationManager::IdFloor).
  uint64_t next_move_id = 0;
  std::map<int32_t, Member> servers;
  std::map<int32_t, Member> workers;
  std::vector<CatalogEntry> catalog;  // complete checkpoints, oldest first
  bool recovering = false;            // a rollback is under way
  int64_t resume_clock = 0;           // the clock the last rollback resumed at
  int64_t barrier_round = 0;          // the barrier round now open
  // The size `ductile resize` asked for, which launchers act on (0: none).
  int32_t target_workers = 0;
  int32_t target_servers = 0;
  // Workers a policy asked to replace (CoordinatorNode::RequestReplacement)
  // that launchers act on; those no longer live are dropped when the next
  // request comes. Kept over a restart, so that a launcher still sees the
  // request and the policy does not ask again.
  std::set<int32_t> replace_workers;
  // The job's shared data plan: durable too, but in a record of its own
  // written without a sync (it changes at every step; see
  // CoordinatorStore::SaveDataPlan).
  DataPlan data_plan;

  // ---- Lookups.
  Member* FindByIdentity(const std::string& identity);
  const wire::TableConfig* TableById(TableId id) const;
  // Workers alive and not finished.
  std::set<int32_t> LiveWorkers() const;
  // Adds the live workers to a message for servers: their ids, and the
  // connections or keys they are bound to (wire::Header::worker_identities,
  // worker_keys).
  void AddLiveWorkers(wire::Header* to_servers) const;
  // Servers not declared dead, not drained and not rejoining (those take
  // part in nothing until they are at the job's generation).
  std::set<int32_t> LiveServers() const;
  // Live servers that may hold backups: not draining.
  std::set<int32_t> BackupCandidates() const;
  // Each server's backups_synced_epoch, as last reported.
  std::map<int32_t, uint64_t> BackupsSynced() const;
  // Slots whose backup is missing, not live, or not known to hold a whole
  // copy (each owner alone taken for dead: RoutingTable::
  // SlotsWithoutLiveBackup).
  int32_t SlotsWithoutCopy() const;
  // Live servers that own slots: those a checkpoint is taken on.
  std::set<int32_t> ServersWithSlots() const;
  // Workers the job expects (options.num_workers) not registered yet.
  int32_t WorkersNotYetRegistered() const;
  int64_t LastCheckpointClock() const {
    return catalog.empty() ? -1 : catalog.back().clock();
  }
  // The live servers' endpoints, for the routing table.
  std::vector<wire::ServerEndpoint> LiveEndpoints() const;

 private:
  wire::CoordinatorState ToWire() const;
  Status PersistDataPlan();

  Env* const env_;
  const CoordinatorOptions& options_;
  std::unique_ptr<CoordinatorStore> store_;  // null without a state_dir
  std::string saved_;       // the serialized state last written
  std::string saved_plan_;  // the serialized data plan last written
  bool resumed_ = false;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_CLUSTER_STATE_H_
