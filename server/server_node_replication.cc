// A server's part in replication (--replicas=2): as a backup, it keeps the
// records its primaries send and takes their slots over when they die; as
// a primary, its Replicator sends its own (server/replicator.h).
#include <algorithm>
#include <set>
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
  ReplicaStream& stream = replica_streams_[primary];
  if (stream.stream != header.change_id()) {
    stream = {header.change_id(), 1};  // a new connection of the primary
  }
  if (header.seq() < stream.next_seq) {
    ack.set_seq(stream.next_seq - 1);  // held already: sent again
    return replies_.ReplyNow(identity, ack);
  }
  if (header.seq() > stream.next_seq) {
    // Records before it were lost on the way: the primary sends them again.
    ack.set_seq(stream.next_seq - 1);
    return refuse(UnavailableError("records from " +
                                   std::to_string(stream.next_seq) +
                                   " on did not arrive"));
  }
  RecordCodec::Records records;
  Status s = message.size() == 3
                 ? RecordCodec::Parse(message.frame_view(2),
                                      "a primary's records", &records)
                 : InvalidArgumentError("records come in 3 frames, not " +
                                        std::to_string(message.size()));
  // Fencing: a primary this server's routing no longer names for a
  // record's slot (it was taken for dead, and the slot taken over) is
  // refused, unless the sender knows a newer routing than this server.
  auto backed = [&](TableId table, Key key) {
    const int32_t slot = routing_.SlotOf(table, key);
    return routing_.owner(slot) == primary && routing_.backup(slot) == id_;
  };
  const bool trusted = header.epoch() > routing_.epoch();
  auto check = [&](TableId table, Key key) -> Status {
    if (trusted || backed(table, key)) return Status::Ok();
    return FailedPreconditionError(
        "server " + std::to_string(id_) + " does not back server " +
        std::to_string(primary) + "'s slot " +
        std::to_string(routing_.SlotOf(table, key)) + " at epoch " +
        std::to_string(routing_.epoch()));
  };
  for (size_t i = 0; s.ok() && i < records.entries.size(); ++i) {
    s = check(records.entries[i].table, records.entries[i].key);
  }
  for (size_t i = 0; s.ok() && i < records.deleted.size(); ++i) {
    s = check(records.deleted[i].first, records.deleted[i].second);
  }
  for (size_t i = 0; s.ok() && i < records.buffered.size(); ++i) {
    s = check(records.buffered[i].first, records.buffered[i].second.key);
  }
  if (s.ok() && routing_.empty()) {
    s = UnavailableError("no routing table yet");
  }
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 100) << "server " << id_ << ": records of server "
                              << primary << " refused: " << s;
    if (s.code() == StatusCode::kUnavailable) {
      ack.set_seq(stream.next_seq - 1);
    }
    return refuse(s);
  }
  replicas_.Apply(primary, std::move(records), [&](TableId table, Key key) {
    return routing_.owner(routing_.SlotOf(table, key)) == primary;
  });
  ack.set_seq(stream.next_seq++);
  replies_.ReplyNow(identity, ack);
}

void ServerNode::OnReplicaRouting(const RoutingTable& old) {
  replicator_->OnRouting();
  if (old.empty() || old.num_slots() != routing_.num_slots()) return;
  // Slots backed here whose primary is gone from the servers and that
  // this server owns now: taken over.
  std::set<int32_t> taken;
  std::vector<int32_t> dead;
  for (int32_t s = 0; s < routing_.num_slots(); ++s) {
    const int32_t was = old.owner(s);
    if (old.backup(s) == id_ && was != id_ && routing_.owner(s) == id_ &&
        routing_.endpoint(was) == nullptr) {
      taken.insert(s);
      if (std::find(dead.begin(), dead.end(), was) == dead.end()) {
        dead.push_back(was);
      }
    }
  }
  if (!taken.empty()) {
    ReplicaStore::Taken t = replicas_.Take(
        [&](TableId table, Key key) {
          return taken.count(routing_.SlotOf(table, key)) > 0;
        },
        dead);
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
    const size_t pushes = t.buffered.size();
    SlotMover::PutBuffered(std::move(t.buffered), tables_, consistency_);
    for (const RequestDedup::Window& w : t.windows) {
      admission_.dedup().Merge(w);
    }
    LOG(INFO) << "server " << id_ << ": took over " << taken.size()
              << " slot(s) of dead server(s) at epoch " << routing_.epoch()
              << ": " << rows << " row(s), " << pushes << " buffered push(es), "
              << t.windows.size() << " client window(s)";
    if (missing > 0) {
      LOG(ERROR) << "server " << id_ << ": " << missing
                 << " taken-over row(s) of tables this server lacks dropped";
    }
    SetKeysStored();
  }
  // Copies of slots no longer backed here go (their primary's windows
  // with them once it backs nothing here).
  replicas_.Drop([&](TableId table, Key key) {
    return routing_.backup(routing_.SlotOf(table, key)) != id_;
  });
  std::set<int32_t> primaries;
  for (int32_t s = 0; s < routing_.num_slots(); ++s) {
    if (routing_.backup(s) == id_) primaries.insert(routing_.owner(s));
  }
  for (auto it = replica_streams_.begin(); it != replica_streams_.end();) {
    if (primaries.count(it->first) > 0) {
      ++it;
      continue;
    }
    replicas_.DropWindows(it->first);
    it = replica_streams_.erase(it);
  }
}

void ServerNode::StepReplication() {
  replicator_->ReadAcks();
  if (replicator_->fenced()) {
    const size_t dropped = replies_.DropHeld();
    if (dropped > 0) {
      LOG(WARNING) << "server " << id_ << ": " << dropped
                   << " repl(ies) not sent: a backup refused this server's "
                      "records (its slots were taken over)";
    }
  } else if (replies_.held() > 0) {
    // Acknowledged, or the backup died: the coordinator took it out.
    replies_.SendHeld();
  }
  // Changes no reply waited for (a BSP clock combined, rows evicted).
  if (replicator_->active()) replicator_->Ticket();
}

void ServerNode::DropReplicas() {
  replicas_.Clear();
  replica_streams_.clear();
  replies_.DropHeld();
  replicator_->Reset();
}

}  // namespace ductile
