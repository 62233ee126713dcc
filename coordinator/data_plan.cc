#include "coordinator/data_plan.h"

#include <algorithm>
#include <string>

namespace ductile {

Status DataPlan::Configure(int64_t batches_per_epoch, int64_t epochs) {
  if (batches_per_epoch < 1 || epochs < 1 ||
      batches_per_epoch > kMaxBatchesPerEpoch || epochs > kMaxEpochs) {
    return InvalidArgumentError(
        "a data plan needs 1 to " + std::to_string(kMaxBatchesPerEpoch) +
        " batches per epoch and 1 to " + std::to_string(kMaxEpochs) +
        " epochs (got " + std::to_string(batches_per_epoch) + " batch(es), " +
        std::to_string(epochs) + " epoch(s))");
  }
  if (configured() &&
      (batches_per_epoch != batches_per_epoch_ || epochs != epochs_)) {
    return InvalidArgumentError(
        "this job's data plan is " + std::to_string(epochs_) + " epoch(s) of " +
        std::to_string(batches_per_epoch_) + " batch(es); a worker asked for " +
        std::to_string(epochs) + " of " + std::to_string(batches_per_epoch) +
        " (every worker must train on the same data with the same batch "
        "size and epochs)");
  }
  batches_per_epoch_ = batches_per_epoch;
  epochs_ = epochs;
  return Status::Ok();
}

std::vector<int64_t>* DataPlan::EpochState(int64_t epoch) {
  if (epoch < first_epoch_ || epoch >= epochs_) return nullptr;
  while (first_epoch_ + static_cast<int64_t>(open_.size()) <= epoch) {
    open_.emplace_back(batches_per_epoch_, kNotDone);
  }
  return &open_[epoch - first_epoch_];
}

void DataPlan::Done(int32_t worker, int64_t epoch, int64_t batch,
                    int64_t clock) {
  auto held = held_.find(worker);
  if (held == held_.end()) return;
  auto& batches = held->second;
  auto it =
      std::find(batches.begin(), batches.end(), std::make_pair(epoch, batch));
  if (it == batches.end()) return;
  batches.erase(it);
  if (batches.empty()) held_.erase(held);
  std::vector<int64_t>* state = EpochState(epoch);
  if (state == nullptr) return;
  (*state)[batch] = std::max<int64_t>(clock, 0);
  Seal();
}

int64_t DataPlan::epochs_done() const {
  int64_t done = first_epoch_;
  for (const std::vector<int64_t>& state : open_) {
    if (!std::all_of(state.begin(), state.end(),
                     [](int64_t c) { return c >= 0; })) {
      break;
    }
    ++done;
  }
  return done;
}

std::vector<std::pair<int64_t, int64_t>> DataPlan::Take(
    int32_t worker, int want, wire::DataGrant::Kind* kind) {
  std::vector<std::pair<int64_t, int64_t>> held;
  *kind = wire::DataGrant::END;
  if (!configured()) return held;
  auto it = held_.find(worker);
  if (it != held_.end()) held = it->second;
  for (int64_t epoch = first_epoch_;
       static_cast<int>(held.size()) < want && epoch < epochs_;) {
    std::vector<int64_t>& state = *EpochState(epoch);
    auto free = std::find(state.begin(), state.end(), kNotDone);
    if (free == state.end()) {
      ++epoch;
      continue;
    }
    *free = kHeld;
    held.push_back({epoch, free - state.begin()});
  }
  if (!held.empty()) {
    held_[worker] = held;
    *kind = wire::DataGrant::GRANTED;
  } else if (!held_.empty()) {
    *kind = wire::DataGrant::WAIT;
  }
  return held;
}

DataPlan::Grant DataPlan::Next(int32_t worker) {
  Grant g;
  const std::vector<std::pair<int64_t, int64_t>> held =
      Take(worker, 1, &g.kind);
  if (!held.empty()) {
    g.epoch = held.front().first;
    g.batch = held.front().second;
  }
  return g;
}

void DataPlan::Release(int32_t worker) {
  auto held = held_.find(worker);
  if (held == held_.end()) return;
  for (const auto& [epoch, batch] : held->second) {
    std::vector<int64_t>* state = EpochState(epoch);
    if (state != nullptr && (*state)[batch] == kHeld) {
      (*state)[batch] = kNotDone;
    }
  }
  held_.erase(held);
}

size_t DataPlan::holders() const { return held_.size(); }

void DataPlan::Seal() {
  while (!open_.empty() && std::all_of(open_.front().begin(),
                                       open_.front().end(), [this](int64_t c) {
                                         return c >= 0 && c < forget_below_;
                                       })) {
    open_.pop_front();
    ++first_epoch_;
  }
}

void DataPlan::Forget(int64_t clock) {
  forget_below_ = std::max(forget_below_, clock);
  Seal();
}

int64_t DataPlan::batches_done_in_current() const {
  if (open_.empty()) return first_epoch_ >= epochs_ ? batches_per_epoch_ : 0;
  return std::count_if(open_.front().begin(), open_.front().end(),
                       [](int64_t c) { return c >= 0; });
}

wire::DataPlanState DataPlan::At(int64_t clock) const {
  wire::DataPlanState out;
  out.set_batches_per_epoch(batches_per_epoch_);
  out.set_epochs(epochs_);
  int64_t first = first_epoch_;
  std::vector<const std::vector<int64_t>*> kept;
  for (const std::vector<int64_t>& state : open_) {
    const bool all_before =
        std::all_of(state.begin(), state.end(),
                    [clock](int64_t c) { return c >= 0 && c < clock; });
    if (kept.empty() && all_before) {
      ++first;  // done in full at `clock`
      continue;
    }
    kept.push_back(&state);
  }
  // Trailing epochs with nothing done before `clock` need no entry.
  while (!kept.empty() &&
         std::none_of(kept.back()->begin(), kept.back()->end(),
                      [clock](int64_t c) { return c >= 0 && c < clock; })) {
    kept.pop_back();
  }
  out.set_first_epoch(first);
  for (const std::vector<int64_t>* state : kept) {
    wire::DataPlanState::Epoch* e = out.add_open();
    for (int64_t c : *state) e->add_done_clock(c >= 0 && c < clock ? c : -1);
  }
  return out;
}

Status DataPlan::SetBatchesPerStep(int32_t batches) {
  if (batches < 1 || batches > kMaxBatchesPerStep) {
    return InvalidArgumentError("batches per step must be 1 - " +
                                std::to_string(kMaxBatchesPerStep) + ", not " +
                                std::to_string(batches));
  }
  batches_per_step_ = batches;
  return Status::Ok();
}

wire::DataPlanState DataPlan::ToWire() const {
  wire::DataPlanState out;
  if (batches_per_step_ != 1) out.set_batches_per_step(batches_per_step_);
  out.set_batches_per_epoch(batches_per_epoch_);
  out.set_epochs(epochs_);
  out.set_first_epoch(first_epoch_);
  for (const std::vector<int64_t>& state : open_) {
    wire::DataPlanState::Epoch* e = out.add_open();
    for (int64_t c : state) e->add_done_clock(c >= 0 ? c : -1);
  }
  for (const auto& [worker, batches] : held_) {
    for (const auto& [epoch, batch] : batches) {
      wire::DataPlanState::Held* h = out.add_held();
      h->set_worker(worker);
      h->set_epoch(epoch);
      h->set_batch(batch);
    }
  }
  return out;
}

Status DataPlan::FromWire(const wire::DataPlanState& state) {
  DataPlan plan;
  if (state.batches_per_step() != 0) {
    DUCTILE_RETURN_IF_ERROR(plan.SetBatchesPerStep(state.batches_per_step()));
  }
  if (state.batches_per_epoch() == 0 && state.epochs() == 0) {
    *this = std::move(plan);
    return Status::Ok();
  }
  DUCTILE_RETURN_IF_ERROR(
      plan.Configure(state.batches_per_epoch(), state.epochs()));
  if (state.first_epoch() < 0 ||
      state.first_epoch() + state.open_size() > state.epochs()) {
    return InvalidArgumentError("data plan: epochs out of range");
  }
  plan.first_epoch_ = state.first_epoch();
  for (const auto& e : state.open()) {
    if (e.done_clock_size() != state.batches_per_epoch()) {
      return InvalidArgumentError(
          "data plan: an epoch of " + std::to_string(e.done_clock_size()) +
          " batch(es), not " + std::to_string(state.batches_per_epoch()));
    }
    plan.open_.emplace_back(e.done_clock().begin(), e.done_clock().end());
    for (int64_t& c : plan.open_.back()) c = std::max<int64_t>(c, kNotDone);
  }
  for (const auto& h : state.held()) {
    std::vector<int64_t>* s = plan.EpochState(h.epoch());
    if (s == nullptr || h.batch() < 0 || h.batch() >= plan.batches_per_epoch_ ||
        (*s)[h.batch()] != kNotDone) {
      return InvalidArgumentError("data plan: worker " +
                                  std::to_string(h.worker()) +
                                  " holds a batch that is not free");
    }
    (*s)[h.batch()] = kHeld;
    plan.held_[h.worker()].push_back({h.epoch(), h.batch()});
  }
  *this = std::move(plan);
  return Status::Ok();
}

void DataPlan::Restore(const wire::DataPlanState& state) {
  const int64_t batches = batches_per_epoch_, epochs = epochs_;
  const int32_t per_step = batches_per_step_;
  wire::DataPlanState clean = state;
  clean.clear_held();
  clean.clear_batches_per_step();
  if (!FromWire(clean).ok() || !configured()) {
    // No checkpoint (or none with a plan): the start, same shape.
    *this = DataPlan();
    if (batches > 0) Configure(batches, epochs).IgnoreError();
  }
  batches_per_step_ = per_step;  // the setting in force stays
}

}  // namespace ductile
