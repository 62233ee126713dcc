#include "client/batch_queue.h"

#include <algorithm>

namespace ductile {
namespace {

bool Same(const wire::DataBatch& a, int64_t epoch, int64_t index) {
  return a.epoch() == epoch && a.batch() == index;
}

}  // namespace

void BatchQueue::Trained(const Client::Batch& batch, int64_t clock) {
  wire::DataBatch b;
  b.set_epoch(batch.epoch);
  b.set_batch(batch.index);
  b.set_clock(clock);
  unacked_.push_back(b);
  std::erase_if(in_hand_, [&](const Client::Batch& h) {
    return h.epoch == batch.epoch && h.index == batch.index;
  });
}

size_t BatchQueue::FillClaim(int want, wire::DataClaim* claim) const {
  claim->set_batches_per_epoch(batches_per_epoch_);
  claim->set_epochs(epochs_);
  claim->set_want(want);
  for (const wire::DataBatch& b : unacked_) *claim->add_done() = b;
  return unacked_.size();
}

void BatchQueue::OnGrant(const wire::DataGrant& grant, size_t reports) {
  unacked_.erase(unacked_.begin(),
                 unacked_.begin() + std::min(reports, unacked_.size()));
  epochs_done_ = std::max(epochs_done_, grant.epochs_done());
  // An answer saying more than a step may take is taken as the most.
  batches_per_step_ =
      std::clamp(grant.batches_per_step(), 1, kMaxBatchesPerStep);
  queue_.clear();
  for (const wire::DataBatch& b : grant.held()) {
    // The batches in hand, and those trained since the claim left, are
    // held too: not to be handed out again.
    if (std::any_of(in_hand_.begin(), in_hand_.end(), [&](const auto& h) {
          return h.epoch == b.epoch() && h.index == b.batch();
        })) {
      continue;
    }
    if (std::any_of(unacked_.begin(), unacked_.end(), [&](const auto& u) {
          return Same(u, b.epoch(), b.batch());
        })) {
      continue;
    }
    Client::Batch batch;
    batch.kind = Client::Batch::kTrain;
    batch.epoch = b.epoch();
    batch.index = b.batch();
    queue_.push_back(batch);
  }
  // Only the plan's end is kEnd: an answer granting nothing new (what it
  // holds for this worker is in hand) means ask again.
  idle_kind_ = grant.kind() == wire::DataGrant::END ? Client::Batch::kEnd
                                                    : Client::Batch::kWait;
}

std::optional<Client::Batch> BatchQueue::Pop() {
  if (queue_.empty()) return std::nullopt;
  Client::Batch b = queue_.front();
  queue_.pop_front();
  b.epochs_done = epochs_done_;
  b.batches_per_step = batches_per_step_;
  in_hand_.push_back(b);
  return b;
}

std::vector<wire::DataBatch> BatchQueue::UnackedBefore(int64_t clock) const {
  std::vector<wire::DataBatch> out;
  for (const wire::DataBatch& b : unacked_) {
    if (b.clock() < clock) out.push_back(b);
  }
  return out;
}

void BatchQueue::Clear() {
  queue_.clear();
  in_hand_.clear();
  unacked_.clear();
  idle_kind_ = Client::Batch::kEnd;
}

}  // namespace ductile
