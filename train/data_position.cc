#include "train/data_position.h"

#include <cinttypes>
#include <cstdio>

#include "models/fmnist_data.h"

namespace ductile::train {

using models::PartitionIndices;

Result<bool> DataPosition::Current(std::vector<size_t>* batch, int* epoch) {
  if (step_.empty()) {
    DUCTILE_ASSIGN_OR_RETURN(std::optional<Client::Batch> first, Take());
    if (!first) return false;
    step_.push_back(*first);
    while (step_.size() < static_cast<size_t>(per_step())) {
      // Short of the count at the plan's end: the step takes fewer.
      DUCTILE_ASSIGN_OR_RETURN(std::optional<Client::Batch> more, Take());
      if (!more) {
        done_ = false;  // this step still trains
        break;
      }
      step_.push_back(*more);
    }
  }
  batch->clear();
  for (const Client::Batch& b : step_) Slice(b.epoch, b.index, batch);
  *epoch = static_cast<int>(step_.front().epoch);
  return true;
}

Status DataPosition::Trained(bool stop) {
  for (size_t i = 0; i < step_.size(); ++i) {
    const bool take = !(stop && i + 1 == step_.size());
    DUCTILE_ASSIGN_OR_RETURN(
        Client::Batch next,
        client_.NextBatch(batches_per_epoch_, epochs_, &step_[i], take));
    Note(next);
    if (next.kind == Client::Batch::kTrain) held_.push_back(next);
  }
  step_.clear();
  if (stop) {
    done_ = true;
    held_.clear();  // given back with the last report
  }
  return Status::Ok();
}

Status DataPosition::Restore(const std::string& saved) {
  samples = 0;
  steps = 0;
  step_.clear();
  held_.clear();
  done_ = false;
  if (saved.empty()) return Status::Ok();
  if (std::sscanf(saved.c_str(), "samples=%" SCNd64 " steps=%" SCNu64, &samples,
                  &steps) != 2) {
    return InvalidArgumentError("unreadable resume state '" + saved + "'");
  }
  return Status::Ok();
}

void DataPosition::Record() {
  client_.SetResumeState("samples=" + std::to_string(samples) +
                         " steps=" + std::to_string(steps));
}

Result<std::optional<Client::Batch>> DataPosition::Take() {
  if (!held_.empty()) {
    Client::Batch b = held_.front();
    held_.pop_front();
    return std::optional<Client::Batch>(b);
  }
  DUCTILE_ASSIGN_OR_RETURN(
      Client::Batch next,
      client_.NextBatch(batches_per_epoch_, epochs_, nullptr, true));
  Note(next);
  if (next.kind == Client::Batch::kTrain) {
    return std::optional<Client::Batch>(next);
  }
  done_ = next.kind == Client::Batch::kEnd;
  return std::optional<Client::Batch>();
}

void DataPosition::Note(const Client::Batch& b) {
  epochs_done_ = b.epochs_done;
  if (b.kind == Client::Batch::kTrain) {
    per_step_ = std::clamp(b.batches_per_step, 1, kMaxBatchesPerStep);
  }
}

void DataPosition::Slice(int64_t epoch, int64_t index,
                         std::vector<size_t>* batch) {
  if (shuffle_epoch_ != epoch) {
    shuffle_ = PartitionIndices(num_samples_, 0, 1, seed_,
                                static_cast<uint64_t>(epoch));
    shuffle_epoch_ = epoch;
  }
  const size_t begin =
      std::min(shuffle_.size(), static_cast<size_t>(index) * batch_size_);
  const size_t end = std::min(shuffle_.size(), begin + batch_size_);
  batch->insert(batch->end(), shuffle_.begin() + begin, shuffle_.begin() + end);
}

}  // namespace ductile::train
