#include "server/slot_mover.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "server/move_stream.h"
#include "server/record_codec.h"
#include "storage/checkpoint_format.h"

namespace ductile {

namespace cf = checkpoint_format;

// ------------------------------------------------------------------ source

SlotMover::SlotMover(Env* env, Transport* transport,
                     std::chrono::milliseconds ack_timeout,
                     std::function<void()> wakeup)
    : env_(env),
      transport_(transport),
      ack_timeout_(ack_timeout),
      wakeup_(std::move(wakeup)) {}

SlotMover::~SlotMover() = default;

SlotMover::Move::~Move() {
  if (stream != nullptr) stream->Cancel();
}

bool SlotMover::InSlots(const wire::Header& out, int32_t slot) {
  return std::find(out.slots().begin(), out.slots().end(), slot) !=
         out.slots().end();
}

void SlotMover::Start(const wire::Header& out, const RoutingTable& routing,
                      TableSet& tables, std::vector<Buffered> buffered,
                      const std::vector<RequestDedup::Window>& windows) {
  if (!started_.insert(out.change_id()).second) return;  // sent again
  started_order_.push_back(out.change_id());
  if (started_order_.size() > kRemembered) {
    started_.erase(started_order_.front());
    started_order_.pop_front();
  }
  // A slot already moving away (a failed move not aborted yet) is not
  // taken twice: this move fails, and the coordinator aborts it.
  std::string overlap;
  for (const auto& [id, other] : moves_) {
    for (int32_t slot : out.slots()) {
      if (other.slots.count(slot) > 0) overlap = std::to_string(slot);
    }
  }
  Move& m = moves_[out.change_id()];
  m.id = out.change_id();
  m.slots.insert(out.slots().begin(), out.slots().end());
  m.target = out.member_id();
  m.address = out.endpoint().tcp_address();
  if (!overlap.empty()) {
    m.failure = FailedPreconditionError(
        "slot " + overlap + " is moving away already, in another move");
    // Nothing to send; the pushes come back with the abort.
    m.stream = std::make_shared<MoveStream>(std::vector<std::string>(),
                                            std::vector<MoveStream::Row>(),
                                            std::move(buffered), kChunkBytes);
    m.last_progress = env_->Now();
    return;
  }
  const TimePoint copy_start = env_->Now();
  std::vector<MoveStream::Row> rows;
  std::vector<FilterRecord> counts;
  auto moving = [&](int32_t slot) { return m.slots.count(slot) > 0; };
  tables.ForEach([&](TableId id, ParameterTable& table) {
    std::vector<ParameterTable::RowRef> refs;
    table.Rows([&](Key key) { return moving(routing.SlotOf(id, key)); }, &refs);
    for (ParameterTable::RowRef ref : refs) rows.push_back({&table, ref});
    table.ExportCounts(moving, &counts);
  });
  // The window first: it is in place before any key is served there.
  std::vector<std::string> head;
  for (const RequestDedup::Window& w : windows) {
    RecordCodec::AppendWindow(w, &head.emplace_back());
  }
  for (const FilterRecord& f : counts) {
    RecordCodec::AppendFilter(f, &head.emplace_back());
  }
  const size_t pushes = buffered.size();
  m.stream = std::make_shared<MoveStream>(std::move(head), std::move(rows),
                                          std::move(buffered), kChunkBytes);
  m.last_progress = env_->Now();
  const double copy_ms =
      std::chrono::duration<double, std::milli>(m.last_progress - copy_start)
          .count();
  if (encoder_ == nullptr) {
    encoder_ = env_->NewBackgroundThread("ductile-move",
                                         BackgroundThread::Priority::kSame);
  }
  m.stream->Start(encoder_.get(), kAhead, wakeup_);
  LOG(INFO) << "move " << m.id << ": " << m.slots.size()
            << " slot(s) to server " << m.target << ": " << m.stream->rows()
            << " key(s), " << counts.size() << " slot(s) of admission counts, "
            << pushes << " buffered push(es), " << m.stream->bytes()
            << " bytes in " << m.stream->chunks() << " chunk(s); the copy took "
            << copy_ms << " ms";
  Connect(m);
  Pump(m);
}

bool SlotMover::Bounces(const RoutingTable& routing, TableId table,
                        std::span<const Key> keys) const {
  for (const auto& [id, m] : moves_) {
    for (Key key : keys) {
      if (m.slots.count(routing.SlotOf(table, key)) > 0) return true;
    }
  }
  return false;
}

void SlotMover::Connect(Move& m) {
  if (m.address.empty()) {
    m.failure = FailedPreconditionError("server " + std::to_string(m.target) +
                                        " has no address");
    return;
  }
  auto socket = transport_->NewDealer("", kControlMessageBytes);
  if (!socket.ok()) {
    m.failure = socket.status();
    return;
  }
  Status s = (*socket)->Connect(m.address);
  if (!s.ok()) {
    m.failure = s;
    return;
  }
  m.socket = std::move(*socket);
}

void SlotMover::Pump(Move& m) {
  if (!m.failure.ok() || m.socket == nullptr) return;
  while (m.next_chunk < m.stream->chunks() && m.unacked.size() < kWindow) {
    std::optional<std::string> chunk = m.stream->Take();
    if (!chunk) return;  // not encoded yet: the wakeup comes when it is
    wire::Header h;
    h.set_type(wire::MIGRATE_DATA);
    h.set_change_id(m.id);
    h.set_seq(m.next_chunk);
    h.set_last(m.next_chunk + 1 == m.stream->chunks());
    for (int32_t slot : m.slots) h.add_slots(slot);
    OutMessage out;
    out.AddString(h.SerializeAsString());
    m.unacked[m.next_chunk] = chunk->size();
    out.AddString(std::move(*chunk));
    Status s = m.socket->Send(std::move(out));
    if (!s.ok()) {
      m.failure = s;
      return;
    }
    ++m.next_chunk;
  }
}

std::vector<wire::Header> SlotMover::Step() {
  std::vector<wire::Header> done;
  const TimePoint now = env_->Now();
  for (auto& [id, m] : moves_) {
    if (m.socket != nullptr) {
      InMessage in;
      bool got = true;
      while (got && m.socket->Receive(&in, &got).ok() && got) {
        wire::Header ack;
        if (in.empty() || !ParseHeader(in.frame(0), &ack).ok() ||
            ack.type() != wire::MIGRATE_DATA || ack.change_id() != m.id) {
          continue;
        }
        Status s = StatusFromWire(ack);
        if (!s.ok()) {
          m.failure = Status(s.code(), "server " + std::to_string(m.target) +
                                           ": " + s.message());
          break;
        }
        auto sent = m.unacked.find(ack.seq());
        if (sent == m.unacked.end()) continue;  // again, or never sent
        m.acked_bytes += sent->second;
        m.unacked.erase(sent);
        ++m.acked;
        m.last_progress = now;
      }
      Pump(m);
    }
    if (m.failure.ok() && m.acked < m.stream->chunks() &&
        now - m.last_progress > ack_timeout_) {
      m.failure =
          DeadlineExceededError("server " + std::to_string(m.target) +
                                " acknowledged " + std::to_string(m.acked) +
                                " of " + std::to_string(m.stream->chunks()) +
                                " chunk(s) and then nothing for " +
                                std::to_string(ack_timeout_.count()) + " ms");
    }
    // A failed move encodes no more (its chunks will not be sent).
    if (!m.failure.ok()) m.stream->Cancel();
    const bool finished = m.acked >= m.stream->chunks();
    if (m.reported || (!finished && m.failure.ok())) continue;
    m.reported = true;
    wire::Header h;
    h.set_type(wire::MIGRATE_DONE);
    h.set_change_id(m.id);
    h.set_bytes(m.stream->bytes());
    if (!m.failure.ok()) {
      LOG(WARNING) << "move " << m.id << " failed: " << m.failure;
      StatusToWire(m.failure, &h);
    }
    done.push_back(std::move(h));
  }
  return done;
}

uint64_t SlotMover::OnRouting(const RoutingTable& routing, int32_t self,
                              TableSet& tables,
                              std::vector<ParameterTable::Erased>* erased) {
  uint64_t dropped = 0;
  for (auto it = moves_.begin(); it != moves_.end();) {
    Move& m = it->second;
    const bool gone = std::all_of(m.slots.begin(), m.slots.end(), [&](int s) {
      return s < routing.num_slots() && !routing.Serves(self, s);
    });
    if (!m.reported || !m.failure.ok() || !gone) {
      ++it;
      continue;
    }
    m.stream->Cancel();  // nothing reads the rows from here on
    tables.ForEach([&](TableId id, ParameterTable& table) {
      dropped += table.EraseIf(
          [&](Key key) { return m.slots.count(routing.SlotOf(id, key)) > 0; },
          &erased->emplace_back());
      table.EraseCounts([&](int32_t slot) { return m.slots.count(slot) > 0; });
    });
    LOG(INFO) << "move " << m.id << " done: " << m.slots.size()
              << " slot(s) now on server " << m.target;
    it = moves_.erase(it);
  }
  return dropped;
}

void SlotMover::Abort(uint64_t id, TableSet& tables,
                      ConsistencyController& consistency) {
  for (auto it = moves_.begin(); it != moves_.end();) {
    if (id != 0 && it->first != id) {
      ++it;
      continue;
    }
    PutBuffered(it->second.stream->Release(), tables, consistency);
    it = moves_.erase(it);
  }
}

void SlotMover::PutBuffered(std::vector<Buffered> buffered, TableSet& tables,
                            ConsistencyController& consistency) {
  // Oldest clock first for each key, as taken: a clock over here is
  // applied before a later one is buffered.
  for (Buffered& b : buffered) {
    ParameterTable* table = tables.Find(b.first);
    if (table == nullptr) continue;
    BspBuffer::Entry& e = b.second;
    // The combine of its clock: the source weighed its pushes by it.
    const BspCombine combine = consistency.At(b.first, e.clock).combine;
    if (consistency.PutBuffered(b.first, e)) continue;
    // Its clock is over here: every push of it is in the entry.
    Status s = table->ApplyCombined(
        e.key, e.combined.values, ParameterTable::BatchesOf(e.combined),
        combine, e.clock, static_cast<uint32_t>(std::max(e.combined.pushes, 1)),
        ParameterTable::RateOf(e.combined));
    if (!s.ok()) LOG(ERROR) << "a moved BSP clock: " << s.message();
  }
}

size_t SlotMover::slots_moving() const {
  size_t n = 0;
  for (const auto& [id, m] : moves_) n += m.slots.size();
  return n;
}

uint64_t SlotMover::bytes_left() const {
  uint64_t n = 0;
  for (const auto& [id, m] : moves_) {
    if (!m.reported)
      n += m.stream->bytes() - std::min(m.stream->bytes(), m.acked_bytes);
  }
  return n;
}

std::vector<Socket*> SlotMover::sockets() const {
  std::vector<Socket*> out;
  for (const auto& [id, m] : moves_) {
    if (m.socket != nullptr) out.push_back(m.socket.get());
  }
  return out;
}

std::optional<SlotMover::TimePoint> SlotMover::NextDeadline() const {
  std::optional<TimePoint> next;
  for (const auto& [id, m] : moves_) {
    if (m.reported) continue;
    const TimePoint t = m.last_progress + ack_timeout_;
    if (!next || t < *next) next = t;
  }
  return next;
}

// ------------------------------------------------------------------ target

Status SlotMover::Install(const wire::Header& header, const InMessage& message,
                          const RoutingTable& routing, TableSet& tables,
                          ConsistencyController& consistency,
                          RequestDedup& dedup) {
  std::vector<EntryRecord> entries;
  std::vector<Buffered> buffered;
  std::vector<RequestDedup::Window> windows;
  std::vector<FilterRecord> filters;
  DUCTILE_RETURN_IF_ERROR(
      ParseChunk(message, &entries, &buffered, &windows, &filters));
  const std::set<int32_t> slots(header.slots().begin(), header.slots().end());
  // Slots this server is moving away: their rows are being read for the
  // move out (MoveStream) and must not change.
  for (const auto& [id, m] : moves_) {
    for (int32_t slot : slots) {
      if (m.slots.count(slot) > 0) {
        return FailedPreconditionError("slot " + std::to_string(slot) +
                                       " is moving away from this server");
      }
    }
  }
  // A key of another slot than the move's would change a row the move
  // does not own.
  auto outside = [&](TableId table, Key key) {
    return InvalidArgumentError("key " + std::to_string(key) + " of table " +
                                std::to_string(table) + " is in slot " +
                                std::to_string(routing.SlotOf(table, key)) +
                                ", not one of the move's");
  };
  for (const EntryRecord& e : entries) {
    if (tables.Find(e.table) == nullptr) {
      return NotFoundError("no table " + std::to_string(e.table) +
                           " for a moved key");
    }
    if (slots.count(routing.SlotOf(e.table, e.key)) == 0) {
      return outside(e.table, e.key);
    }
  }
  for (const FilterRecord& f : filters) {
    ParameterTable* table = tables.Find(f.table);
    if (table == nullptr) {
      return NotFoundError("no table " + std::to_string(f.table) +
                           " for moved admission counts");
    }
    if (slots.count(f.slot) == 0) {
      return InvalidArgumentError("admission counts of slot " +
                                  std::to_string(f.slot) +
                                  " came with a move of other slots");
    }
    DUCTILE_RETURN_IF_ERROR(table->CheckCounts(f));
  }
  for (const Buffered& b : buffered) {
    if (tables.Find(b.first) == nullptr) {
      return NotFoundError("no table " + std::to_string(b.first) +
                           " for a moved push");
    }
    if (slots.count(routing.SlotOf(b.first, b.second.key)) == 0) {
      return outside(b.first, b.second.key);
    }
  }
  if (arrived_.count(header.change_id()) == 0) {
    // A move's first chunk here: whatever an earlier move of these slots
    // left here (one abandoned after some of its chunks arrived) is
    // stale, its keys and BSP pushes; this move brings them all again.
    auto moving = [&](TableId table, Key key) {
      return slots.count(routing.SlotOf(table, key)) > 0;
    };
    uint64_t stale = 0;
    tables.ForEach([&](TableId id, ParameterTable& table) {
      stale += table.EraseIf([&](Key key) { return moving(id, key); });
      stale += table.EraseCounts(
          [&](int32_t slot) { return slots.count(slot) > 0; });
    });
    stale += consistency.TakeBufferedKeys(moving).size();
    if (stale > 0) {
      LOG(WARNING) << "move " << header.change_id() << ": " << stale
                   << " stale key(s) and push(es) of its slots dropped";
    }
  }
  if (!FirstArrival(header.change_id(), header.seq())) return Status::Ok();
  for (const RequestDedup::Window& w : windows) dedup.Merge(w);
  for (const FilterRecord& f : filters) {
    // Checked above: it fits.
    Status s = tables.Find(f.table)->RestoreCounts(f, /*changed=*/true);
    if (!s.ok()) LOG(ERROR) << "moved admission counts: " << s;
  }
  for (EntryRecord& e : entries) {
    tables.Find(e.table)->Restore(std::move(e), /*changed=*/true);
  }
  const size_t pushes = buffered.size();
  PutBuffered(std::move(buffered), tables, consistency);
  VLOG(1) << "move " << header.change_id() << ", chunk " << header.seq() << ": "
          << entries.size() << " key(s), " << filters.size()
          << " slot(s) of admission counts, " << pushes
          << " buffered push(es) moved in";
  return Status::Ok();
}

bool SlotMover::FirstArrival(uint64_t id, uint64_t seq) {
  auto [it, new_move] = arrived_.try_emplace(id);
  if (new_move) {
    arrived_order_.push_back(id);
    if (arrived_order_.size() > kRemembered) {
      arrived_.erase(arrived_order_.front());
      arrived_order_.pop_front();
    }
  }
  return it->second.insert(seq).second;
}

Status SlotMover::ParseChunk(const InMessage& message,
                             std::vector<EntryRecord>* entries,
                             std::vector<Buffered>* buffered,
                             std::vector<RequestDedup::Window>* windows,
                             std::vector<FilterRecord>* filters) {
  if (message.size() != 3) {
    return InvalidArgumentError("a chunk of moved keys has 3 frames, not " +
                                std::to_string(message.size()));
  }
  RecordCodec::Records records;
  DUCTILE_RETURN_IF_ERROR(RecordCodec::Parse(
      message.frame_view(2), "a chunk of moved keys", &records));
  if ((!records.filters.empty() && filters == nullptr) ||
      !records.deleted.empty() || records.combined_below) {
    return InvalidArgumentError(
        "a chunk of moved keys holds a record that no move sends");
  }
  *entries = std::move(records.entries);
  *buffered = std::move(records.buffered);
  *windows = std::move(records.windows);
  if (filters != nullptr) *filters = std::move(records.filters);
  return Status::Ok();
}

}  // namespace ductile
