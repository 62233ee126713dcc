// A server's rollbacks: to a checkpoint (RECOVER), or, declared dead while
// it was alive, back into the job with no keys (REJOIN); and the routings
// that are not about this process (its predecessor's, its successor's).
#include <set>
#include <vector>

#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/table_config.h"
#include "server/server_node.h"

namespace ductile {

void ServerNode::StopReplaced(uint64_t by) {
  // Another process registered under this id since: the id and its slots
  // are that one's.
  failure_ = AbortedError(
      "server " + std::to_string(id_) +
      " was replaced: the coordinator registered another process under its "
      "id (registration " +
      std::to_string(by) + "; this one's is " + std::to_string(incarnation_) +
      "), so this one stops");
  LOG(ERROR) << failure_.message();
  shut_down_ = true;
}

bool ServerNode::ListsThisProcess(const RoutingTable& routing) {
  const wire::ServerEndpoint* self = routing.endpoint(id_);
  if (self == nullptr || incarnation_ == 0 || self->incarnation() == 0 ||
      self->incarnation() == incarnation_) {
    return true;
  }
  if (self->incarnation() > incarnation_) {
    StopReplaced(self->incarnation());
    return false;
  }
  // It lists the process this one replaced under its id (it was made
  // before this one registered): the slots it gives that process are not
  // this one's to serve, nor its keys this one's to hold. The coordinator
  // sends one that lists this process.
  VLOG(1) << "server " << id_ << ": routing epoch " << routing.epoch()
          << " lists its predecessor; not installed";
  return false;
}

void ServerNode::Recover(const wire::Header& header) {
  if (header.generation() < generation_) return;  // an older rollback's
  wire::Header ack;
  ack.set_type(wire::RECOVER_ACK);
  ack.set_member_id(id_);
  ack.set_generation(header.generation());
  ack.set_clock(header.clock());
  if (restored_generation_ == header.generation()) {
    // Sent again (the coordinator restarted, or missed the ack): restored
    // already, and requests of this generation may have been applied since.
    return Send(ack);
  }
  // The store is the writer's until the write in flight is done; that
  // version is reported as any other (the coordinator knows whether its
  // round still counts).
  checkpointer_.FinishWrite(tables_).IgnoreError();
  // Its workers' connections are those of when the rollback began (a
  // resend's too): they only fill in workers not known yet.
  admission_.BindWorkers(header, /*overwrite=*/false);
  Heartbeat(/*busy_ms=*/-1);  // no heartbeat goes out while restoring
  const TimePoint start = env_->Now();
  const int64_t clock = header.clock();
  // Everything waiting belongs to the abandoned timeline.
  const Status aborted =
      AbortedError("the job is rolling back to the checkpoint at clock " +
                   std::to_string(clock));
  replies_.FailAll(consistency_.TakeAllWaiting(), aborted);
  replies_.FailAll(checkpointer_.TakeHeld(), aborted);
  counters_.Set(&ServerCounters::parked_pulls, 0);
  generation_ = header.generation();
  admission_.Reset();
  noise_.Reset();
  // Moves under way belong to the abandoned timeline too: the
  // checkpoint's routing says who owns what (what they put back is
  // cleared with the rest below).
  mover_->Abort(0, tables_, consistency_);
  SetMoveCounters();  // and evictions are no longer held
  Status s;
  for (const auto& config : header.tables()) {
    // A table this server has keeps its own options: they differ from the
    // coordinator's after a consistency change (kept in the schedule).
    if (tables_.Has(config.id())) continue;
    s = tables_.Create(config);
    if (!s.ok()) break;
    consistency_.AddTable(config.id(), FromWire(config.consistency()));
  }
  Result<uint64_t> restored = 0;
  bool unreadable = false;
  if (s.ok()) {
    restored = restorer_.Restore(header, routing_, id_, tables_, checkpointer_,
                                 &unreadable);
    s = restored.status();
  }
  if (s.ok()) {
    // Every live worker resumes at the checkpoint's clock.
    consistency_.Reset(std::set<int32_t>(header.worker_ids().begin(),
                                         header.worker_ids().end()),
                       clock);
    counters_.Set(&ServerCounters::min_clock, consistency_.server_clock());
    tables_.RestartClock(consistency_.server_clock());
    clock_learned_ = true;  // every live worker is at the checkpoint's
    restored_generation_ = header.generation();
  }
  SetKeysStored();
  Heartbeat(0);  // done: silence means death again
  const double ms =
      std::chrono::duration<double, std::milli>(env_->Now() - start).count();
  if (s.ok()) {
    LOG(INFO) << "server " << id_ << ": rolled back to clock " << clock
              << " (generation " << generation_ << ", " << *restored
              << " keys) in " << ms << " ms";
  } else {
    LOG(ERROR) << "server " << id_
               << ": cannot restore the checkpoint at clock " << clock << ": "
               << s;
  }
  StatusToWire(s, &ack);
  ack.set_checkpoint_unreadable(!s.ok() && unreadable);
  Send(ack);
}

void ServerNode::Rejoin(const wire::Header& header) {
  // Sent again, unless the job went on without a rollback (its backups
  // took this server's slots over) and this server still holds keys, and
  // the REJOIN is not one of those the coordinator sent for the same
  // takeover (their routing is the one taken at the first: slots moved
  // here since must stay).
  if (header.generation() < generation_ ||
      (header.generation() == generation_ &&
       (tables_.keys() == 0 ||
        header.routing().epoch() <= rejoined_at_epoch_))) {
    return;
  }
  rejoined_at_epoch_ = header.routing().epoch();
  checkpointer_.FinishWrite(tables_).IgnoreError();  // the store is needed
  DropReplicas();  // of slots elsewhere now, as its own are
  admission_.BindWorkers(header, /*overwrite=*/false);
  LOG(WARNING) << "server " << id_
               << ": the coordinator declared this server dead (it was "
                  "silent past the heartbeat timeout) and went on without it "
                  "(its slots taken over by their backups, or the job rolled "
                  "back); rejoining at generation "
               << header.generation() << " with no keys";
  const Status aborted = AbortedError(
      "server " + std::to_string(id_) +
      " was declared dead and rejoined the job; its slots are elsewhere");
  replies_.FailAll(consistency_.TakeAllWaiting(), aborted);
  replies_.FailAll(checkpointer_.TakeHeld(), aborted);
  counters_.Set(&ServerCounters::parked_pulls, 0);
  generation_ = header.generation();
  restored_generation_ = header.generation();
  admission_.Reset();
  noise_.Reset();
  mover_->Abort(0, tables_, consistency_);
  SetMoveCounters();
  tables_.ClearKeys();
  // As a server joining the job: the tables' models as the coordinator has
  // them now (changes were made without this server), every live worker
  // at the start until its clock arrives with the slots' routing.
  consistency_ = ConsistencyController(options_.max_parked_pulls_per_worker,
                                       options_.max_parked_pulls);
  for (const auto& config : header.tables()) {
    if (!tables_.Has(config.id())) {
      if (Status s = tables_.Create(config); !s.ok()) {
        failure_ = FailedPreconditionError("cannot host table '" +
                                           config.name() + "': " + s.message());
        return;
      }
    }
    consistency_.AddTable(config.id(), FromWire(config.consistency()));
  }
  // A table whose creation round ended after the coordinator sent this
  // keeps the model it was created with.
  tables_.ForEach([&](TableId id, ParameterTable& table) {
    if (!consistency_.HasTable(id)) {
      consistency_.AddTable(id, table.options().consistency);
    }
  });
  consistency_.SetWorkers(std::set<int32_t>(header.worker_ids().begin(),
                                            header.worker_ids().end()));
  counters_.Set(&ServerCounters::min_clock, consistency_.server_clock());
  tables_.RestartClock(consistency_.server_clock());
  clock_learned_ = false;  // the workers' clocks come with their CLOCKs
  Status s =
      checkpointer_.StartOver(std::vector<int64_t>(header.keep_clocks().begin(),
                                                   header.keep_clocks().end()),
                              header.clock());
  if (!s.ok()) {
    LOG(ERROR) << "server " << id_
               << ": its store cannot drop what it kept from before (tried "
                  "again before the next checkpoint): "
               << s;
  }
  SetKeysStored();
  Heartbeat(0);  // the coordinator moves slots here once it sees this
}

}  // namespace ductile
