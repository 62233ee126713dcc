#include "server/replicator.h"

#include <algorithm>
#include <random>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "server/record_codec.h"
#include "transport/endpoint.h"

namespace ductile {

void Replicator::OnRouting() {
  const RoutingTable& routing = *routing_;
  std::set<int32_t> backups;
  for (int32_t s = 0; s < routing.num_slots(); ++s) {
    if (routing.owner(s) == self_ && routing.backup(s) >= 0) {
      backups.insert(routing.backup(s));
    }
  }
  active_ = !backups.empty();
  tables_->set_replicating(active_);
  if (!active_) {
    pending_.clear();
    buffered_.clear();
    combined_below_.reset();
  }
  for (int32_t b : backups) {
    if (links_.count(b) == 0) Connect(b);
  }
  // A backup gone from the servers is dead: what it did not acknowledge
  // has no copy to wait for.
  for (auto it = links_.begin(); it != links_.end();) {
    if (routing.endpoint(it->first) != nullptr) {
      ++it;
      continue;
    }
    it->second.acked = it->second.sent;
    it = links_.erase(it);
  }
  Settle();
}

void Replicator::Connect(int32_t backup) {
  Link& link = links_[backup];
  link.stream = std::uniform_int_distribution<uint64_t>(1)(random_);
  const wire::ServerEndpoint* e = routing_->endpoint(backup);
  if (e == nullptr) {
    link.failure = FailedPreconditionError(
        "backup server " + std::to_string(backup) + " has no address");
    return;
  }
  auto socket = transport_->NewDealer("", kControlMessageBytes);
  if (socket.ok()) {
    const std::string address = ChooseAddress(
        e->tcp_address(), e->ipc_address(), e->host_id(), /*prefer_ipc=*/true);
    Status s = (*socket)->Connect(address);
    if (s.ok()) {
      link.socket = std::move(*socket);
      return;
    }
    link.failure = s;
  } else {
    link.failure = socket.status();
  }
  LOG(WARNING) << "server " << self_ << ": cannot reach backup server "
               << backup << ": " << link.failure;
}

int32_t Replicator::BackupOf(TableId table, Key key) const {
  const int32_t s = routing_->SlotOf(table, key);
  return routing_->owner(s) == self_ ? routing_->backup(s) : -1;
}

void Replicator::NoteApplied(int64_t client, uint64_t seq, uint64_t done_below,
                             TableId table, std::span<const Key> keys) {
  if (!active_) return;
  int32_t last = -1;
  for (Key key : keys) {
    const int32_t b = BackupOf(table, key);
    if (b < 0 || b == last) continue;
    last = b;
    RequestDedup::Window& w = pending_[b].windows[client];
    w.client = client;
    w.done_below = std::max(w.done_below, done_below);
    if (w.applied.empty() || w.applied.back() != seq) w.applied.push_back(seq);
  }
}

void Replicator::NoteBuffered(TableId table, int64_t clock,
                              std::span<const Key> keys) {
  if (!active_) return;
  for (Key key : keys) buffered_.emplace(table, clock, key);
}

uint64_t Replicator::Ticket() {
  if (!active_ && flushes_.empty()) return 0;
  Send();
  return flushes_.empty() ? 0 : next_flush_ - 1;
}

bool Replicator::Send() {
  if (!active_ || fenced_) return false;
  // Evictions first: a key evicted and stored again is a row after them.
  tables_->ForEach([&](TableId id, ParameterTable& table) {
    if (!table.has_replica_changes()) return;
    table.TakeReplicaChanges(
        [&](Key key) {
          const int32_t b = BackupOf(id, key);
          if (b >= 0) RecordCodec::AppendDeleted(id, key, &pending_[b].payload);
        },
        [&](ParameterTable::RowRef row) {
          const int32_t b = BackupOf(id, row.key());
          if (b >= 0) {
            RecordCodec::AppendRow(table, row, &pending_[b].payload);
          }
        });
  });
  for (const auto& [table, clock, key] : buffered_) {
    const int32_t b = BackupOf(table, key);
    const BspBuffer::Combined* c =
        consistency_->FindBuffered(table, clock, key);
    if (b >= 0 && c != nullptr) {
      RecordCodec::AppendBuffered(table, clock, key, *c, &pending_[b].payload);
    }
  }
  buffered_.clear();
  if (combined_below_) {
    for (const auto& [b, link] : links_) {
      RecordCodec::AppendCombinedBelow(*combined_below_, &pending_[b].payload);
    }
    combined_below_.reset();
  }
  Flush flush;
  for (auto& [b, p] : pending_) {
    for (const auto& [client, w] : p.windows) {
      RecordCodec::AppendWindow(w, &p.payload);
    }
    if (p.payload.empty()) continue;
    auto link = links_.find(b);
    if (link == links_.end()) continue;
    Link& l = link->second;
    const uint64_t seq = ++l.sent;
    if (l.unacked.empty()) l.last_progress = env_->Now();
    l.unacked[seq] = std::move(p.payload);
    Transmit(b, l, seq);
    flush.records.emplace_back(b, seq);
  }
  pending_.clear();
  if (flush.records.empty()) return false;
  flush.id = next_flush_++;
  flushes_.push_back(std::move(flush));
  return true;
}

void Replicator::Transmit(int32_t backup, Link& link, uint64_t seq) {
  if (link.socket == nullptr) return;  // waits for the backup's death
  wire::Header h;
  h.set_type(wire::REPLICATE);
  h.set_member_id(self_);
  h.set_epoch(routing_->epoch());
  h.set_change_id(link.stream);
  h.set_seq(seq);
  OutMessage out;
  out.AddString(h.SerializeAsString());
  out.AddString(link.unacked.at(seq));
  if (Status s = link.socket->Send(std::move(out)); !s.ok()) {
    // Sent again after kResendAfter.
    LOG_EVERY_N(WARNING, 100) << "server " << self_ << ": records for backup "
                              << backup << " not sent: " << s;
  }
}

void Replicator::Resend(int32_t backup, Link& link) {
  for (const auto& [seq, payload] : link.unacked) Transmit(backup, link, seq);
  link.last_progress = env_->Now();
}

void Replicator::ReadAcks() {
  for (auto& [b, link] : links_) {
    if (link.socket == nullptr) continue;
    InMessage in;
    bool got = true;
    while (link.socket->Receive(&in, &got).ok() && got) {
      wire::Header ack;
      if (in.empty() || !ParseHeader(in.frame(0), &ack).ok() ||
          ack.type() != wire::REPLICATE || !ack.ack()) {
        continue;
      }
      if (ack.change_id() != link.stream) continue;  // an older stream's
      Status s = StatusFromWire(ack);
      if (s.code() == StatusCode::kUnavailable) {
        // A gap: the backup holds the records up to ack.seq() only.
        Acknowledge(link, ack.seq());
        Resend(b, link);
        continue;
      }
      if (!s.ok()) {
        if (!fenced_) {
          LOG(ERROR) << "server " << self_ << ": backup server " << b
                     << " refused its records (" << s
                     << "); this server no longer answers for its slots";
        }
        fenced_ = true;
        continue;
      }
      Acknowledge(link, ack.seq());
    }
    if (!link.unacked.empty() &&
        env_->Now() - link.last_progress > kResendAfter) {
      Resend(b, link);
    }
  }
  Settle();
}

void Replicator::Acknowledge(Link& link, uint64_t seq) {
  seq = std::min(seq, link.sent);
  if (seq <= link.acked) return;
  link.acked = seq;
  link.unacked.erase(link.unacked.begin(), link.unacked.upper_bound(seq));
  link.last_progress = env_->Now();
}

void Replicator::Settle() {
  while (!flushes_.empty()) {
    for (const auto& [b, seq] : flushes_.front().records) {
      auto link = links_.find(b);
      if (link != links_.end() && link->second.acked < seq) return;
    }
    flushes_.pop_front();
  }
}

void Replicator::Reset() {
  flushes_.clear();
  pending_.clear();
  buffered_.clear();
  combined_below_.reset();
  links_.clear();
  fenced_ = false;
  OnRouting();
}

std::vector<Socket*> Replicator::sockets() const {
  std::vector<Socket*> out;
  for (const auto& [b, link] : links_) {
    if (link.socket != nullptr) out.push_back(link.socket.get());
  }
  return out;
}

}  // namespace ductile
