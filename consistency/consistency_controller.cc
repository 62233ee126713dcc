#include "consistency/consistency_controller.h"

#include <algorithm>
#include <string>
#include <utility>

namespace ductile {
namespace {

const Consistency kAsyncModel{};

}  // namespace

void ConsistencyController::AddTable(TableId table,
                                     const Consistency& initial) {
  auto [it, inserted] = tables_.try_emplace(table);
  if (inserted) it->second.schedule = ConsistencySchedule(initial);
}

const Consistency& ConsistencyController::latest(TableId table) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? kAsyncModel : it->second.schedule.latest();
}

int64_t ConsistencyController::latest_from(TableId table) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? 0 : it->second.schedule.latest_from();
}

const Consistency& ConsistencyController::At(TableId table,
                                             int64_t clock) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? kAsyncModel : it->second.schedule.At(clock);
}

void ConsistencyController::NoteClock(int64_t clock) {
  max_clock_seen_ = std::max(max_clock_seen_, clock);
}

bool ConsistencyController::Advance(int32_t worker, int64_t clock) {
  NoteClock(clock);
  int64_t& known = known_[worker];
  known = std::max(known, clock);
  if (live_.count(worker) == 0) return false;
  const bool moved = clocks_.Advance(worker, clock);
  floor_ = std::max(floor_, server_clock());
  return moved;
}

bool ConsistencyController::SetWorkers(const std::set<int32_t>& live) {
  const int64_t before = server_clock();
  for (int32_t gone : live_) {
    if (live.count(gone) == 0) clocks_.Remove(gone);
  }
  // A worker that joins (or comes back) starts at the server clock: it
  // never lowers anyone's bound, and under BSP it takes part from the
  // first clock not yet combined.
  for (int32_t id : live) {
    if (live_.count(id) > 0) continue;
    int64_t& known = known_[id];
    known = std::max(known, floor_);
    clocks_.Advance(id, known);
  }
  live_ = live;
  floor_ = std::max(floor_, server_clock());
  return server_clock() != before;
}

std::string ConsistencyController::Laggards(int64_t required) const {
  std::string out;
  for (int32_t w : live_) {
    const int64_t c = clocks_.clock_of(w);
    if (c < required) {
      if (!out.empty()) out += ", ";
      out += std::to_string(w) + " (at clock " + std::to_string(c) + ")";
    }
  }
  return out.empty() ? "none" : out;
}

void ConsistencyController::Reset(const std::set<int32_t>& live,
                                  int64_t clock) {
  clocks_ = ClockVector();
  known_.clear();
  live_ = live;
  floor_ = clock;
  for (int32_t w : live_) {
    clocks_.Advance(w, clock);
    known_[w] = clock;
  }
  max_clock_seen_ = clock;
  for (auto& [id, state] : tables_) {
    state.bsp = BspBuffer();
    state.hold_above.reset();
    state.held.clear();
  }
  parked_.clear();
  parked_per_worker_.clear();
}

bool ConsistencyController::Buffers(TableId table, int64_t clock) const {
  auto it = tables_.find(table);
  return it != tables_.end() && it->second.schedule.Buffers(clock) &&
         clock >= server_clock();
}

Status ConsistencyController::CheckBuffered(TableId table, int64_t clock,
                                            const DataFrames& request) const {
  const BspBuffer& bsp = tables_.at(table).bsp;
  const auto keys = request.keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    DUCTILE_RETURN_IF_ERROR(bsp.Check(clock, keys[i], request.length(i)));
  }
  return Status::Ok();
}

void ConsistencyController::Buffer(TableId table, int64_t clock,
                                   const DataFrames& request, int32_t batches,
                                   bool replace, float rate_factor) {
  TableState& state = tables_.at(table);
  // A mean weighs each push by the batches it stands for.
  const bool weigh =
      batches > 1 && state.schedule.At(clock).combine == BspCombine::kMean;
  const auto keys = request.keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    state.bsp.Add(clock, keys[i], request.value(i), replace, batches, weigh,
                  rate_factor);
  }
}

std::vector<ConsistencyController::CombinedClock>
ConsistencyController::TakeCombined() {
  std::vector<CombinedClock> out;
  for (auto& [id, state] : tables_) {
    if (state.bsp.empty()) continue;
    for (auto& [clock, keys] : state.bsp.TakeBefore(server_clock())) {
      out.push_back(
          {id, clock, state.schedule.At(clock).combine, std::move(keys)});
    }
  }
  return out;
}

int64_t ConsistencyController::RequiredServerClock(TableId table,
                                                   int64_t clock) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? ConsistencySchedule::kNoWait
                             : it->second.schedule.RequiredServerClock(clock);
}

Status ConsistencyController::Park(ParkedPull&& pull) {
  if (!live_.empty() && live_.count(pull.worker_id) == 0) {
    return UnavailableError("worker " + std::to_string(pull.worker_id) +
                            " is not a live worker of the job here: its "
                            "pull cannot wait on the staleness bound");
  }
  if (parked_.size() >= max_parked_) {
    return ResourceExhaustedError(
        "this server has " + std::to_string(parked_.size()) +
        " pulls waiting on a staleness bound, its limit "
        "(--max_parked_pulls): pull refused");
  }
  auto [mine, added] = parked_per_worker_.try_emplace(pull.worker_id, 0);
  if (mine->second >= max_parked_per_worker_) {
    return ResourceExhaustedError(
        "worker " + std::to_string(pull.worker_id) + " has " +
        std::to_string(mine->second) +
        " pulls waiting on a staleness bound at this server, its limit "
        "(--max_parked_pulls_per_worker): pull refused");
  }
  ++mine->second;
  parked_.push_back(std::move(pull));
  return Status::Ok();
}

template <typename Pred>
std::vector<ConsistencyController::ParkedPull>
ConsistencyController::TakeParkedIf(Pred&& take) {
  std::vector<ParkedPull> taken, still;
  for (ParkedPull& p : parked_) {
    if (!take(p)) {
      still.push_back(std::move(p));
      continue;
    }
    auto it = parked_per_worker_.find(p.worker_id);
    if (it != parked_per_worker_.end() && --it->second == 0) {
      parked_per_worker_.erase(it);
    }
    taken.push_back(std::move(p));
  }
  parked_ = std::move(still);
  return taken;
}

std::vector<ConsistencyController::ParkedPull>
ConsistencyController::TakeReleasable() {
  const int64_t now = server_clock();
  return TakeParkedIf([&](const ParkedPull& p) { return p.required <= now; });
}

std::vector<ConsistencyController::ParkedPull>
ConsistencyController::TakeExpired(TimePoint now) {
  return TakeParkedIf([&](const ParkedPull& p) { return now >= p.deadline; });
}

std::vector<ConsistencyController::ParkedPull>
ConsistencyController::TakeOfGoneWorkers() {
  return TakeParkedIf(
      [&](const ParkedPull& p) { return live_.count(p.worker_id) == 0; });
}

std::optional<ConsistencyController::TimePoint>
ConsistencyController::NextDeadline() const {
  std::optional<TimePoint> next;
  for (const ParkedPull& p : parked_) {
    if (!next || p.deadline < *next) next = p.deadline;
  }
  return next;
}

Result<int64_t> ConsistencyController::Prepare(TableId table) {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return NotFoundError("no table " + std::to_string(table));
  }
  it->second.hold_above = max_clock_seen_;
  return max_clock_seen_;
}

bool ConsistencyController::HoldsForChange(TableId table, int64_t clock) const {
  auto it = tables_.find(table);
  return it != tables_.end() && it->second.hold_above &&
         clock > *it->second.hold_above;
}

void ConsistencyController::HoldForChange(TableId table, InMessage message) {
  tables_.at(table).held.push_back(std::move(message));
}

std::vector<InMessage> ConsistencyController::Commit(TableId table,
                                                     int64_t from_clock,
                                                     const Consistency& c) {
  auto it = tables_.find(table);
  if (it == tables_.end()) return {};
  TableState& state = it->second;
  state.schedule.Set(from_clock, c);
  state.hold_above.reset();
  std::vector<InMessage> held = std::move(state.held);
  state.held.clear();
  // The new model may let parked pulls go (a larger bound) or hold fewer.
  for (ParkedPull& p : parked_) {
    if (p.table == table) {
      p.required = state.schedule.RequiredServerClock(p.clock);
    }
  }
  return held;
}

std::vector<InMessage> ConsistencyController::TakeAllWaiting() {
  std::vector<InMessage> out;
  for (ParkedPull& p : parked_) out.push_back(std::move(p.message));
  parked_.clear();
  parked_per_worker_.clear();
  for (auto& [id, state] : tables_) {
    for (InMessage& m : state.held) out.push_back(std::move(m));
    state.held.clear();
    state.hold_above.reset();
    state.bsp = BspBuffer();
  }
  return out;
}

bool ConsistencyController::PutBuffered(TableId table, BspBuffer::Entry entry) {
  auto it = tables_.find(table);
  if (it == tables_.end() || entry.clock < server_clock()) return false;
  it->second.bsp.PutEntry(std::move(entry));
  return true;
}

}  // namespace ductile
