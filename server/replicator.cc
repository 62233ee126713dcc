#include "server/replicator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "server/record_codec.h"
#include "transport/endpoint.h"

namespace ductile {

namespace {

std::string AddressOf(const wire::ServerEndpoint& e) {
  return ChooseAddress(e.tcp_address(), e.ipc_address(), e.host_id(),
                       /*prefer_ipc=*/true);
}

}  // namespace

void Replicator::OnRouting() {
  const RoutingTable& routing = *routing_;
  std::set<int32_t>& backups = backups_;
  backups.clear();
  for (int32_t s = 0; s < routing.num_slots(); ++s) {
    if (routing.owner(s) == self_ && routing.backup(s) >= 0) {
      backups.insert(routing.backup(s));
    }
  }
  // Fenced at an epoch: no records until a newer routing says which slots
  // are this server's.
  active_ = !backups.empty() && routing.epoch() > fenced_epoch_;
  tables_->set_replicating(active_);
  if (!active_) {
    pending_.clear();
    buffered_.clear();
    combined_below_.reset();
  }
  for (auto it = links_.begin(); it != links_.end();) {
    const wire::ServerEndpoint* e = routing.endpoint(it->first);
    Link& link = it->second;
    const bool dead = e == nullptr || AddressOf(*e) != link.address ||
                      e->incarnation() != link.incarnation;
    const bool unneeded = backups.count(it->first) == 0 && link.unacked.empty();
    if (!dead && !unneeded) {
      ++it;
      continue;
    }
    // What waited for it waits no more (a new connection to a backup of
    // that id, a restarted process, numbers its records anew).
    for (Batch& flush : flushes_) {
      std::erase_if(flush.records,
                    [&](const auto& r) { return r.first == it->first; });
    }
    KeepShm(link);
    it = links_.erase(it);
  }
  for (int32_t b : backups) {
    if (links_.count(b) == 0) Connect(b);
  }
  Settle();
}

std::set<int32_t> Replicator::TakeNewPairs() {
  if (!active_) return {};  // (fenced: Reset() forgot what was copied)
  const RoutingTable& routing = *routing_;
  copied_from_.resize(routing.num_slots(), 0);
  std::set<int32_t> slots;
  for (int32_t s = 0; s < routing.num_slots(); ++s) {
    if (routing.owner(s) != self_ || routing.backup(s) < 0 ||
        copied_from_[s] == routing.backup_from(s)) {
      continue;
    }
    copied_from_[s] = routing.backup_from(s);
    slots.insert(s);
  }
  if (!slots.empty()) copies_.push_back({routing.epoch(), copy_queued_, 0});
  return slots;
}

void Replicator::QueueCopy(TableId table, Key key) {
  if (copies_.empty()) return;
  copy_rows_.emplace_back(table, key);
  copies_.back().rows_end = ++copy_queued_;
}

uint64_t Replicator::synced_epoch() {
  while (!copies_.empty() && copies_.front().flush != 0 &&
         Passed(copies_.front().flush)) {
    synced_ = copies_.front().epoch;
    copies_.pop_front();
    copies_done_ = true;
  }
  if (copies_.empty()) synced_ = routing_->epoch();
  return synced_;
}

void Replicator::TakeCopyChunk() {
  while (!chunk_flushes_.empty() && Passed(chunk_flushes_.front())) {
    chunk_flushes_.pop_front();
  }
  if (chunk_flushes_.size() >= kCopyChunksInFlight) return;
  size_t bytes = 0;
  while (!copy_rows_.empty() && bytes < copy_chunk_bytes_) {
    const auto [id, key] = copy_rows_.front();
    copy_rows_.pop_front();
    ++copy_taken_;
    // Gone since (evicted, moved away: a record of that went already),
    // or its slot now backed elsewhere (a later copy sends it there).
    const ParameterTable* table = tables_->Find(id);
    const int32_t b = BackupOf(id, key);
    if (table == nullptr || b < 0) continue;
    const std::optional<ParameterTable::RowRef> row = table->FindRow(key);
    if (!row) continue;
    std::string& out = pending_[b].payload;
    const size_t before = out.size();
    RecordCodec::AppendRow(*table, *row, &out);
    bytes += out.size() - before;
  }
  if (bytes > 0) chunk_flushes_.push_back(next_flush_);
  // A copy whose rows are all taken is whole at this flush (sent with
  // it, or earlier): the flush is counted even if it carries nothing.
  for (Copy& c : copies_) {
    if (c.flush == 0 && c.rows_end <= copy_taken_) {
      c.flush = next_flush_;
      ticket_given_ = true;
    }
  }
}

void Replicator::Connect(int32_t backup) {
  Link& link = links_[backup];
  // Later connections have larger stream ids, also across restarts.
  link.stream = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  link.retry_at = env_->Now() + kResendAfter;
  const wire::ServerEndpoint* e = routing_->endpoint(backup);
  if (e == nullptr) {
    link.failure = FailedPreconditionError(
        "backup server " + std::to_string(backup) + " has no address");
    return;
  }
  link.address = AddressOf(*e);
  link.incarnation = e->incarnation();
  auto socket = transport_->NewDealer("", kControlMessageBytes);
  Status s = socket.ok() ? (*socket)->Connect(link.address) : socket.status();
  if (s.ok()) {
    link.socket = std::move(*socket);
    link.failure = Status::Ok();
    return;
  }
  link.failure = s;
  LOG(WARNING) << "server " << self_ << ": cannot reach backup server "
               << backup << " (tried again in " << kResendAfter.count()
               << " ms): " << s;
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

void Replicator::NoteWindows(int32_t backup,
                             const std::vector<RequestDedup::Window>& windows) {
  if (!active_) return;
  for (const RequestDedup::Window& from : windows) {
    RequestDedup::Window& w = pending_[backup].windows[from.client];
    w.client = from.client;
    w.done_below = std::max(w.done_below, from.done_below);
    w.applied.insert(w.applied.end(), from.applied.begin(), from.applied.end());
  }
}

void Replicator::NoteBuffered(TableId table, int64_t clock,
                              std::span<const Key> keys) {
  if (!active_) return;
  for (Key key : keys) buffered_.emplace(table, clock, key);
}

uint64_t Replicator::Ticket() {
  if (!active_ && flushes_.empty()) return 0;
  if (flushes_.empty() && !ticket_given_ && !Dirty()) return 0;
  ticket_given_ = true;
  return next_flush_;
}

bool Replicator::Dirty() {
  if (!pending_.empty() || !buffered_.empty() || combined_below_) return true;
  bool dirty = false;
  tables_->ForEach([&](TableId, ParameterTable& table) {
    dirty = dirty || table.has_replica_changes();
  });
  return dirty;
}

void Replicator::Flush() {
  if (!active_) {
    if (ticket_given_) ++next_flush_;  // the replies waiting for it go
    ticket_given_ = false;
    return;
  }
  // Each backup's payload starts with room for as much as its last one
  // held: appended to, it is not copied over as it grows.
  for (const auto& [b, bytes] : payload_hint_) {
    if (backups_.count(b) > 0) pending_[b].payload.reserve(bytes);
  }
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
    std::vector<FilterRecord> counts;
    table.TakeReplicaCountChanges(&counts);
    for (const FilterRecord& f : counts) {
      const int32_t b =
          f.slot < routing_->num_slots() && routing_->owner(f.slot) == self_
              ? routing_->backup(f.slot)
              : -1;
      if (b >= 0) RecordCodec::AppendFilter(f, &pending_[b].payload);
    }
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
  TakeCopyChunk();
  if (combined_below_) {
    for (int32_t b : backups_) {
      RecordCodec::AppendCombinedBelow(*combined_below_, &pending_[b].payload);
    }
    combined_below_.reset();
  }
  Batch flush;
  for (auto& [b, p] : pending_) {
    for (const auto& [client, w] : p.windows) {
      RecordCodec::AppendWindow(w, &p.payload);
    }
    if (p.payload.empty()) continue;
    payload_hint_[b] = p.payload.size();
    auto link = links_.find(b);
    if (link == links_.end()) continue;
    Link& l = link->second;
    const uint64_t seq = ++l.sent;
    if (l.unacked.empty()) l.retry_at = env_->Now() + kResendAfter;
    l.unacked[seq] = {std::make_shared<const std::string>(std::move(p.payload)),
                      routing_->epoch()};
    Transmit(b, l, seq);
    VLOG(2) << "server " << self_ << ": records " << seq << " to backup " << b
            << " (flush " << next_flush_ << ")";
    flush.records.emplace_back(b, seq);
  }
  pending_.clear();
  const bool waited_for = std::exchange(ticket_given_, false);
  if (flush.records.empty()) {
    if (waited_for) ++next_flush_;
    return;
  }
  flush.id = next_flush_++;
  flushes_.push_back(std::move(flush));
}

bool Replicator::LendShm(int32_t backup, const Link& link, Record& record,
                         wire::ShmRef* ref) {
  if (!shm_enabled_ || shm_failed_ || link.shm_refused ||
      !link.address.starts_with("ipc://")) {
    return false;
  }
  if (shm_ == nullptr) {
    Result<std::unique_ptr<ShmValueArea>> area =
        ShmValueArea::Create(kShmAreaBytes);
    if (!area.ok()) {
      LOG(WARNING) << "server " << self_
                   << ": no shared memory for records to backups on this "
                      "host (they go in frames): "
                   << area.status();
      shm_failed_ = true;
      return false;
    }
    shm_ = std::move(*area);
  }
  const uint64_t bytes = record.payload->size();
  const uint64_t ticket = next_shm_ticket_++;
  if (!shm_->Lend(ticket, backup, bytes, kShmTimeoutMs, ref)) return false;
  std::memcpy(shm_->Data(ticket, backup, bytes), record.payload->data(), bytes);
  record.shm_ticket = ticket;
  return true;
}

void Replicator::KeepShm(Link& link) {
  for (auto& [seq, record] : link.unacked) {
    if (record.shm_ticket != 0) shm_->Keep(record.shm_ticket);
  }
}

void Replicator::Transmit(int32_t backup, Link& link, uint64_t seq) {
  if (link.socket == nullptr) return;  // connected again, then sent
  Record& record = link.unacked.at(seq);
  // Sent again: the first copy may still be read from its region, which
  // waits for its time to be up; this one goes in a frame.
  wire::ShmRef ref;
  const bool in_shm = !record.sent && LendShm(backup, link, record, &ref);
  if (record.shm_ticket != 0 && !in_shm) shm_->Keep(record.shm_ticket);
  record.sent = true;
  wire::Header h;
  h.set_type(wire::REPLICATE);
  h.set_member_id(self_);
  h.set_epoch(record.epoch);
  h.set_change_id(link.stream);
  h.set_seq(seq);
  if (const wire::ServerEndpoint* self = routing_->endpoint(self_)) {
    h.set_incarnation(self->incarnation());
  }
  if (in_shm) {
    *h.mutable_push_shm() = std::move(ref);
    h.set_timeout_ms(kShmTimeoutMs);
  }
  OutMessage out;
  out.AddString(h.SerializeAsString());
  if (!in_shm) {
    // Sent in place: the transport holds the payload until it is written.
    std::shared_ptr<const std::string> payload = record.payload;
    out.AddBorrowed(payload->data(), payload->size(),
                    [payload]() mutable { payload.reset(); });
  }
  if (Status s = link.socket->Send(std::move(out)); !s.ok()) {
    // Sent again after kResendAfter.
    LOG_EVERY_N(WARNING, 100) << "server " << self_ << ": records for backup "
                              << backup << " not sent: " << s;
  }
}

void Replicator::Resend(int32_t backup, Link& link) {
  for (const auto& [seq, record] : link.unacked) Transmit(backup, link, seq);
  link.retry_at = env_->Now() + kResendAfter;
}

void Replicator::ReadAcks() {
  const Env::TimePoint now = env_->Now();
  for (auto& [b, link] : links_) {
    if (link.socket == nullptr) {
      if (now < link.retry_at) continue;
      Connect(b);
      if (link.socket != nullptr) Resend(b, link);
      continue;
    }
    InMessage in;
    bool got = true;
    while (link.socket->Receive(&in, &got).ok() && got) {
      wire::Header ack;
      if (in.empty() || !ParseHeader(in.frame(0), &ack).ok() ||
          ack.type() != wire::REPLICATE || !ack.ack() ||
          ack.change_id() != link.stream) {
        continue;  // not an answer, or an older connection's
      }
      const Status s = StatusFromWire(ack);
      VLOG(2) << "server " << self_ << ": backup " << b << " holds up to "
              << ack.seq() << ": " << s;
      Acknowledge(b, link, ack.seq());  // what it holds, whatever the status
      if (ack.shm_refused() && !link.shm_refused) {
        link.shm_refused = true;
        LOG(WARNING) << "server " << self_ << ": backup server " << b
                     << " cannot read records in shared memory (" << s
                     << "); they go in frames";
      }
      switch (s.code()) {
        case StatusCode::kOk:
          break;
        case StatusCode::kAborted:      // a gap: send the rest again soon
        case StatusCode::kUnavailable:  // its routing is behind this one's
          link.retry_at = std::min(link.retry_at, now + kRetryAfter);
          break;
        case StatusCode::kFailedPrecondition:
        case StatusCode::kPermissionDenied:
          if (!fenced_) {
            LOG(ERROR) << "server " << self_ << ": backup server " << b
                       << " refused its records (" << s
                       << "); this server no longer answers for its slots";
          }
          fenced_ = true;
          break;
        default:
          LOG_EVERY_N(ERROR, 100) << "server " << self_ << ": backup server "
                                  << b << " refused its records: " << s;
          break;
      }
    }
    if (!link.unacked.empty() && now >= link.retry_at) Resend(b, link);
  }
  Settle();
}

std::optional<Env::TimePoint> Replicator::NextDeadline() const {
  std::optional<Env::TimePoint> next;
  // The next piece of a copy goes at the next flush, if the window has
  // room.
  const bool copying =
      !copy_rows_.empty() || (!copies_.empty() && copies_.back().flush == 0);
  if (active_ && copying &&
      std::count_if(chunk_flushes_.begin(), chunk_flushes_.end(),
                    [this](uint64_t f) { return !Passed(f); }) <
          static_cast<ptrdiff_t>(kCopyChunksInFlight)) {
    next = env_->Now();
  }
  for (const auto& [b, link] : links_) {
    if (link.unacked.empty() && link.socket != nullptr) continue;
    if (!next || link.retry_at < *next) next = link.retry_at;
  }
  return next;
}

void Replicator::Acknowledge(int32_t backup, Link& link, uint64_t seq) {
  seq = std::min(seq, link.sent);
  if (seq <= link.acked) return;
  link.acked = seq;
  const auto end = link.unacked.upper_bound(seq);
  for (auto it = link.unacked.begin(); it != end; ++it) {
    if (it->second.shm_ticket != 0) shm_->Return(it->second.shm_ticket, backup);
  }
  link.unacked.erase(link.unacked.begin(), end);
  link.retry_at = env_->Now() + kResendAfter;
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
  if (fenced_) fenced_epoch_ = routing_->epoch();
  flushes_.clear();
  if (std::exchange(ticket_given_, false)) ++next_flush_;
  pending_.clear();
  buffered_.clear();
  combined_below_.reset();
  for (auto& [b, link] : links_) KeepShm(link);
  links_.clear();
  copied_from_.clear();
  copies_.clear();
  copy_rows_.clear();
  copy_taken_ = copy_queued_;
  chunk_flushes_.clear();
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
