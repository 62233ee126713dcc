// A server's part in replication (--replicas=2): as a backup, it keeps the
// records its primaries send and takes their slots over when they die; as
// a primary, its Replicator sends its own (server/replicator.h).
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "proto/codec.h"
#include "server/record_codec.h"
#include "server/server_node.h"

namespace ductile {

void ServerNode::InstallReplica(InMessage& message,
                                const wire::Header& header) {
  const ByteSpan identity = message.frame(0);
  const int32_t primary = header.member_id();
  wire::Header ack;
  ack.set_type(wire::REPLICATE);
  ack.set_ack(true);
  ack.set_change_id(header.change_id());
  auto refuse = [&](const Status& s) {
    counters_.Add(&ServerCounters::errors);
    StatusToWire(s, &ack);
    replies_.ReplyNow(identity, ack);
  };
  bool server_key = false;
  int32_t key_id = -1;
  if (MemberKeyRole(message.member_key_name(), &server_key, &key_id) &&
      (!server_key || key_id != primary)) {
    counters_.Add(&ServerCounters::refused_permission);
    return refuse(
        PermissionDeniedError("member key '" + message.member_key_name() +
                              "' is not server " + std::to_string(primary) +
                              "'s: only a slot's primary sends its records"));
  }
  if (routing_.empty() || header.epoch() > routing_.epoch()) {
    // Checked against the routing they were made under: asked for.
    wire::Header get;
    get.set_type(wire::GET_ROUTING);
    get.set_member_id(id_);
    Send(get);
    return refuse(UnavailableError(
        "server " + std::to_string(id_) + " has routing epoch " +
        std::to_string(routing_.epoch()) + ", the records " +
        std::to_string(header.epoch())));
  }
  if (routing_.endpoint(primary) == nullptr) {
    // Not a server of this routing (or of the newer one the records name):
    // no stream is kept for it.
    return refuse(FailedPreconditionError(
        "server " + std::to_string(primary) + " is not in routing epoch " +
        std::to_string(routing_.epoch()) + ": its records are refused"));
  }
  ReplicaStream& stream = replica_streams_[primary];
  if (header.change_id() < stream.stream) {
    return;  // an older connection's, sent before the newer one's
  }
  if (header.change_id() > stream.stream) {
    stream = {header.change_id(), 1};  // a new connection of the primary
  }
  ack.set_seq(stream.next_seq - 1);
  if (header.seq() < stream.next_seq) {
    return replies_.ReplyNow(identity, ack);  // held already: sent again
  }
  if (header.seq() > stream.next_seq) {
    // Records before it were lost on the way: the primary sends them again
    // (told once per gap; the records behind the first are dropped).
    if (stream.gap_reported == stream.next_seq) return;
    stream.gap_reported = stream.next_seq;
    return refuse(AbortedError("records from " +
                               std::to_string(stream.next_seq) +
                               " on did not arrive"));
  }
  RecordCodec::Records records;
  std::string_view payload;
  Status s;
  if (header.has_push_shm()) {
    // In the primary's shared memory, which it keeps until this answer.
    const wire::ShmRef& ref = header.push_shm();
    Result<float*> from =
        message.size() != 2
            ? Result<float*>(InvalidArgumentError(
                  "records in shared memory come in 2 frames, not " +
                  std::to_string(message.size())))
        : ref.bytes() > options_.max_message_bytes
            ? Result<float*>(InvalidArgumentError(
                  "records of " + std::to_string(ref.bytes()) +
                  " bytes in shared memory, over the message limit (" +
                  std::to_string(options_.max_message_bytes) + ")"))
            : shm_regions_.Region(ref, ref.bytes(), header.timeout_ms(),
                                  message.peer_pid());
    if (!from.ok()) {
      // Nothing held: the primary sends them again, in a frame.
      ack.set_shm_refused(from.status().code() !=
                          StatusCode::kDeadlineExceeded);
      return refuse(
          UnavailableError("server " + std::to_string(id_) +
                           " cannot read the records in shared memory: " +
                           from.status().message()));
    }
    payload = {reinterpret_cast<const char*>(*from), ref.bytes()};
    counters_.Add(&ServerCounters::bytes_in, ref.bytes());
  } else if (message.size() == 3) {
    payload = message.frame_view(2);
  } else {
    s = InvalidArgumentError("records come in 3 frames, not " +
                             std::to_string(message.size()));
  }
  if (s.ok()) {
    s = RecordCodec::Parse(payload, "a primary's records", &records,
                           /*rows_in_place=*/true);
  }
  if (s.ok() && header.has_push_shm()) {
    counters_.Add(&ServerCounters::shm_records);
  }
  // Fencing: a primary this server's routing no longer names for a
  // record's slot (it was taken for dead, and the slot taken over) is
  // refused. From the process the routing lists under that id, such
  // records are about slots that moved away from it, or whose pair
  // changed, since it made them: their new owner sends them whole, and
  // they are dropped.
  auto backed_slot = [&](int32_t slot) {
    return slot >= 0 && slot < routing_.num_slots() &&
           routing_.owner(slot) == primary && routing_.backup(slot) == id_;
  };
  auto backed = [&](TableId table, Key key) {
    return backed_slot(routing_.SlotOf(table, key));
  };
  const bool listed_process =
      header.incarnation() != 0 &&
      routing_.endpoint(primary)->incarnation() == header.incarnation();
  size_t stale = 0;
  if (s.ok() && listed_process) {
    stale += std::erase_if(records.entry_views, [&](const auto& e) {
      return !backed(e.table, e.key);
    });
    stale += std::erase_if(records.deleted, [&](const auto& d) {
      return !backed(d.first, d.second);
    });
    stale += std::erase_if(records.buffered, [&](const auto& b) {
      return !backed(b.first, b.second.key);
    });
    stale += std::erase_if(records.filters, [&](const FilterRecord& f) {
      return !backed_slot(f.slot);
    });
  }
  if (stale > 0) {
    VLOG(1) << "server " << id_ << ": " << stale << " record(s) of server "
            << primary << " about slots it no longer owns with this backup "
            << "dropped";
  }
  auto check = [&](TableId table, Key key) -> Status {
    if (backed(table, key)) return Status::Ok();
    return FailedPreconditionError(
        "server " + std::to_string(id_) + " does not back server " +
        std::to_string(primary) + "'s slot " +
        std::to_string(routing_.SlotOf(table, key)) + " at epoch " +
        std::to_string(routing_.epoch()));
  };
  for (size_t i = 0; s.ok() && i < records.entry_views.size(); ++i) {
    s = check(records.entry_views[i].table, records.entry_views[i].key);
  }
  for (size_t i = 0; s.ok() && i < records.deleted.size(); ++i) {
    s = check(records.deleted[i].first, records.deleted[i].second);
  }
  for (size_t i = 0; s.ok() && i < records.buffered.size(); ++i) {
    s = check(records.buffered[i].first, records.buffered[i].second.key);
  }
  for (size_t i = 0; s.ok() && i < records.filters.size(); ++i) {
    if (!backed_slot(records.filters[i].slot)) {
      s = FailedPreconditionError(
          "server " + std::to_string(id_) + " does not back server " +
          std::to_string(primary) + "'s slot " +
          std::to_string(records.filters[i].slot) + " at epoch " +
          std::to_string(routing_.epoch()));
    }
  }
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 100) << "server " << id_ << ": records of server "
                              << primary << " refused: " << s;
    return refuse(s);
  }
  // Rows new here are allocated one by one, as a push's: many take a while.
  AnnounceLongWork(records.entry_views.size() + records.buffered.size(),
                   payload.size());
  replicas_.Apply(primary, std::move(records));
  ack.set_seq(stream.next_seq++);
  replies_.ReplyNow(identity, ack);
}

void ServerNode::OnReplicaRouting(const RoutingTable& old) {
  replicator_->OnRouting();
  // (With no table before to compare with, nothing was taken over or
  // moved away; a pair new to this server is still sent whole.)
  const bool comparable =
      !old.empty() && old.num_slots() == routing_.num_slots();
  // A server gone from the routing, or listed with another process's
  // address or registration, died.
  auto died = [&](int32_t server) {
    const wire::ServerEndpoint* was = old.endpoint(server);
    const wire::ServerEndpoint* now = routing_.endpoint(server);
    return was != nullptr &&
           (now == nullptr || now->tcp_address() != was->tcp_address() ||
            now->ipc_address() != was->ipc_address() ||
            now->incarnation() != was->incarnation());
  };
  std::set<int32_t> taken;
  for (int32_t s = 0; comparable && s < routing_.num_slots(); ++s) {
    const int32_t was = old.owner(s);
    if (was == id_ || routing_.owner(s) != id_) continue;
    if (old.backup(s) == id_ && died(was)) {
      taken.insert(s);  // its primary died: the copy here is the slot now
    }
  }
  auto in = [](const std::set<int32_t>& slots, const RoutingTable& routing) {
    return [&slots, &routing](TableId table, Key key) {
      return slots.count(routing.SlotOf(table, key)) > 0;
    };
  };
  if (!taken.empty()) TakeOver(taken);
  // Slots with a backup new to them, or moved here (a move brought their
  // rows, pushes and windows; the source's records stop at the move): the
  // backup's copy comes from here now, whole: every row, buffered push
  // and window entry.
  const std::set<int32_t> copied = replicator_->TakeNewPairs();
  if (!copied.empty()) {
    const auto copying = in(copied, routing_);
    tables_.ForEach([&](TableId id, ParameterTable& table) {
      table.ForEachKey([&](Key key) {
        if (copying(id, key)) replicator_->QueueCopy(id, key);
      });
      for (int32_t s : copied) table.MarkReplicaCountsChanged(s);
    });
    consistency_.ForEachBuffered([&](TableId table, int64_t clock, Key key) {
      if (copying(table, key))
        replicator_->NoteBuffered(table, clock, {&key, 1});
    });
    const std::vector<RequestDedup::Window> windows =
        admission_.dedup().Snapshot();
    std::set<int32_t> backups;
    for (int32_t s : copied) {
      if (routing_.backup(s) >= 0) backups.insert(routing_.backup(s));
    }
    for (int32_t b : backups) replicator_->NoteWindows(b, windows);
  }
  if (!comparable) return;
  // Copies of slots no longer backed here go, and so do those of slots
  // backed here in a new pair (moved to another owner, or paired with this
  // server anew): their owner sends them whole, and what is held of an
  // earlier pair (rows evicted since, pushes of clocks combined since)
  // must not come back at a takeover.
  // Copies are held only of slots backed here (a record of another slot
  // is refused), so only a slot backed here before can have rows to drop:
  // when none does, the copies (possibly millions of rows) are not looked
  // through at all.
  std::vector<char> goes(routing_.num_slots(), 0);
  bool any_held_goes = false;
  for (int32_t s = 0; s < routing_.num_slots(); ++s) {
    const bool anew =
        routing_.backup(s) == id_ &&
        (old.backup(s) != id_ || old.owner(s) != routing_.owner(s) ||
         old.backup_from(s) != routing_.backup_from(s));
    goes[s] = routing_.backup(s) != id_ || anew;
    if (goes[s] && old.backup(s) == id_) any_held_goes = true;
  }
  if (any_held_goes) {
    ReplicaStore::Dropped dropped;
    replicas_.Drop(
        [&](TableId table, Key key) {
          return goes[routing_.SlotOf(table, key)] != 0;
        },
        &dropped);
    // Freed beside this thread: a million rows take a while.
    if (dropped.size() > 0) FreeHeldBeside(std::move(dropped));
  }
  replicas_.DropFilters([&](int32_t slot) {
    return slot >= routing_.num_slots() || goes[slot] != 0;
  });
  std::set<int32_t> primaries;
  for (int32_t s = 0; s < routing_.num_slots(); ++s) {
    if (routing_.backup(s) == id_) primaries.insert(routing_.owner(s));
  }
  // (A stream's numbering stays: the primary may still send on it, records
  // made under an older routing, which are checked as they come.)
  for (const auto& [primary, stream] : replica_streams_) {
    if (primaries.count(primary) == 0) replicas_.DropWindows(primary);
  }
}

void ServerNode::FreeBeside(std::function<void()> free) {
  if (!freer_) {
    freer_ = env_->NewBackgroundThread("ductile-free",
                                       BackgroundThread::Priority::kLower);
  }
  if (freer_) return freer_->Schedule(std::move(free));
  free();
}

void ServerNode::TakeOver(const std::set<int32_t>& slots) {
  auto taken = [&](TableId table, Key key) {
    return slots.count(routing_.SlotOf(table, key)) > 0;
  };
  // Whatever an abandoned move of these slots left here is stale: the copy
  // is the slots' state.
  const auto in = [&](int32_t slot) { return slots.count(slot) > 0; };
  uint64_t stale = consistency_.TakeBufferedKeys(taken).size();
  tables_.ForEach([&](TableId id, ParameterTable& table) {
    stale += table.EraseIf([&](Key key) { return taken(id, key); });
    table.EraseCounts(in);
  });
  ReplicaStore::Taken t = replicas_.Take(taken);
  uint64_t missing = 0;
  const size_t rows = t.rows.size();
  for (EntryRecord& e : t.rows) {
    ParameterTable* table = tables_.Find(e.table);
    if (table == nullptr) {
      ++missing;
      continue;
    }
    table->Restore(std::move(e), /*changed=*/true);
  }
  size_t counts = 0;
  for (const FilterRecord& f : replicas_.TakeFilters(in)) {
    ParameterTable* table = tables_.Find(f.table);
    const Status s = table == nullptr
                         ? NotFoundError("no table " + std::to_string(f.table))
                         : table->RestoreCounts(f, /*changed=*/true);
    if (s.ok()) {
      ++counts;
    } else {
      LOG(ERROR) << "server " << id_ << ": the admission counts of slot "
                 << f.slot << " taken over are dropped: " << s;
    }
  }
  const size_t pushes = t.buffered.size();
  SlotMover::PutBuffered(std::move(t.buffered), tables_, consistency_);
  // Every window held: the dead primary's, and those that came with slots
  // moved to it (they merge by union).
  const std::vector<RequestDedup::Window> windows = replicas_.Windows();
  for (const RequestDedup::Window& w : windows) admission_.dedup().Merge(w);
  LOG(INFO) << "server " << id_ << ": took over " << slots.size()
            << " slot(s) of a dead server at epoch " << routing_.epoch() << ": "
            << rows << " row(s), " << counts << " slot(s) of admission "
            << "counts, " << pushes << " buffered push(es), " << windows.size()
            << " client window(s)"
            << (stale > 0 ? " (" + std::to_string(stale) +
                                " stale key(s) of an abandoned move dropped)"
                          : "");
  if (missing > 0) {
    LOG(ERROR) << "server " << id_ << ": " << missing
               << " taken-over row(s) of tables this server lacks dropped";
  }
  SetKeysStored();
}

void ServerNode::StepReplication() {
  // What the step's requests changed (and what changed with no request to
  // wait for it: a BSP clock combined, rows evicted) goes in one flush.
  replicator_->Flush();
  replicator_->ReadAcks();
  if (replicator_->fenced()) return Fenced();
  // Acknowledged, or the backup died (the coordinator took it out).
  if (replies_.held() > 0) replies_.SendHeld();
  // New backups hold whole copies: the coordinator may promote them now.
  replicator_->synced_epoch();
  if (replicator_->TakeCopiesDone()) Heartbeat(0);
}

void ServerNode::Fenced() {
  // Its slots are another server's now: what it holds of them is stale.
  const size_t dropped = replies_.DropHeld();
  replicator_->Reset();  // and no records until a newer routing
  const Status moved = UnavailableError(
      "server " + std::to_string(id_) +
      " was taken for dead and its slots are elsewhere: ask again");
  replies_.FailAll(consistency_.TakeAllWaiting(), moved);
  counters_.Set(&ServerCounters::parked_pulls, 0);
  consistency_.TakeBufferedKeys([](TableId, Key) { return true; });
  tables_.ClearKeys();
  SetKeysStored();
  LOG(WARNING) << "server " << id_ << ": fenced; " << dropped
               << " answer(s) not sent and its keys dropped; it waits to be "
                  "given slots again";
  wire::Header get;
  get.set_type(wire::GET_ROUTING);
  get.set_member_id(id_);
  Send(get);
}

void ServerNode::DropReplicas() {
  replicas_.Clear();
  replica_streams_.clear();
  replies_.DropHeld();
  replicator_->Reset();
}

}  // namespace ductile
