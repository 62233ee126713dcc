// DataPosition (train/data_position.h) against a scripted one-worker data
// plan: a step is the plan's next batches, sliced from their epoch's
// shuffle; it takes as many as the plan (or the worker) asks for, keeps
// those taken ahead for later steps, waits when the plan has none free,
// ends when it has none ever again; its counters go to the resume state
// and come back from it after a rollback, which drops the batches in hand.
#include "train/data_position.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "models/fmnist_data.h"

namespace ductile::train {
namespace {

using Batch = Client::Batch;

// A Client whose only working part is the shared data plan as one worker
// sees it: batches handed out in order, epoch after epoch; an epoch done
// once every batch of it was reported trained; kWait while `wait` is set;
// kEnd when every batch was handed out, and from a report that takes no
// next batch on. It keeps what SetResumeState recorded. DataPosition calls
// nothing else, and a test fails if it does.
class PlanClient final : public Client {
 public:
  struct Call {
    int64_t batches_per_epoch = 0;
    int64_t epochs = 0;
    std::optional<std::pair<int64_t, int64_t>> trained;  // (epoch, index)
    bool take_next = true;
  };

  // The plan's answers from now on.
  int32_t batches_per_step = 1;
  bool wait = false;
  Status fail_next;  // the next call's error, once

  std::vector<Call> calls;
  std::vector<std::pair<int64_t, int64_t>> reported;  // in order
  std::string resume_state;

  // What a rollback does to the plan: batches from the `next`-th on (in
  // handing-out order) are neither trained nor handed out any more.
  void RollBackTo(int64_t next) {
    next_ = next;
    trained_.erase(trained_.lower_bound(next), trained_.end());
    stopped_ = false;
  }

  Result<Batch> NextBatch(int64_t batches_per_epoch, int64_t epochs,
                          const Batch* trained, bool take_next) override {
    Call call;
    call.batches_per_epoch = batches_per_epoch;
    call.epochs = epochs;
    if (trained != nullptr) call.trained = {trained->epoch, trained->index};
    call.take_next = take_next;
    calls.push_back(call);
    if (!fail_next.ok()) return std::exchange(fail_next, Status::Ok());
    if (trained != nullptr) {
      reported.emplace_back(trained->epoch, trained->index);
      trained_.insert(trained->epoch * batches_per_epoch + trained->index);
    }
    if (!take_next) stopped_ = true;
    Batch b;
    b.batches_per_step = batches_per_step;
    b.epochs_done = EpochsDone(batches_per_epoch, epochs);
    if (stopped_) {
      b.kind = Batch::kEnd;
    } else if (wait) {
      b.kind = Batch::kWait;
    } else if (next_ == batches_per_epoch * epochs) {
      b.kind = Batch::kEnd;
    } else {
      b.kind = Batch::kTrain;
      b.epoch = next_ / batches_per_epoch;
      b.index = next_ % batches_per_epoch;
      ++next_;
    }
    return b;
  }
  void SetResumeState(std::string state) override {
    resume_state = std::move(state);
  }

  // Not used by DataPosition.
  Result<TableId> CreateTable(const TableOptions&) override {
    return Unused("CreateTable");
  }
  Result<TableInfo> GetTable(const std::string&) override {
    return Unused("GetTable");
  }
  Handle PushAsync(TableId, std::span<const Key>, std::span<const float>,
                   std::span<const uint32_t>) override {
    Unused("PushAsync").IgnoreError();
    return Handle();
  }
  Handle PullAsync(TableId, std::span<const Key>, std::span<float>,
                   std::span<const uint32_t>) override {
    Unused("PullAsync").IgnoreError();
    return Handle();
  }
  Handle PushPullAsync(TableId, std::span<const Key>, std::span<const float>,
                       std::span<float>, std::span<const uint32_t>) override {
    Unused("PushPullAsync").IgnoreError();
    return Handle();
  }
  Handle PullRowsAsync(TableId, std::span<const Key>,
                       std::span<float>) override {
    Unused("PullRowsAsync").IgnoreError();
    return Handle();
  }
  Handle PushRowsAsync(TableId, std::span<const Key>,
                       std::span<const float>) override {
    Unused("PushRowsAsync").IgnoreError();
    return Handle();
  }
  Result<Tensor> RegisterTensor(const TableOptions&, uint64_t,
                                uint32_t) override {
    return Unused("RegisterTensor");
  }
  int64_t Clock() override {
    Unused("Clock").IgnoreError();
    return 0;
  }
  int64_t clock() const override {
    Unused("clock").IgnoreError();
    return 0;
  }
  Status Barrier(int64_t) override { return Unused("Barrier"); }
  Status Finish() override { return Unused("Finish"); }
  Status Leave() override { return Unused("Leave"); }
  bool leave_requested() const override {
    Unused("leave_requested").IgnoreError();
    return false;
  }
  bool shutting_down() const override { return false; }
  Result<int64_t> SetConsistency(TableId, const Consistency&) override {
    return Unused("SetConsistency");
  }
  ClientStats stats() const override {
    Unused("stats").IgnoreError();
    return {};
  }
  void RecordSamples(uint64_t) override {
    Unused("RecordSamples").IgnoreError();
  }
  void RecordLoss(double) override { Unused("RecordLoss").IgnoreError(); }
  Status SetPushWeight(int32_t) override { return Unused("SetPushWeight"); }
  Status SetRateFactor(TableId, float) override {
    return Unused("SetRateFactor");
  }
  Result<Recovery> AwaitRecovery(int64_t) override {
    return Unused("AwaitRecovery");
  }
  std::vector<int32_t> live_workers() const override {
    Unused("live_workers").IgnoreError();
    return {};
  }
  int32_t worker_id() const override {
    Unused("worker_id").IgnoreError();
    return 0;
  }
  int32_t num_workers() const override {
    Unused("num_workers").IgnoreError();
    return 1;
  }

 private:
  static Status Unused(const char* call) {
    ADD_FAILURE() << "DataPosition called Client::" << call;
    return FailedPreconditionError(std::string(call) + " is not in the fake");
  }

  int64_t EpochsDone(int64_t batches_per_epoch, int64_t epochs) const {
    int64_t done = 0;
    while (done < epochs) {
      for (int64_t i = 0; i < batches_per_epoch; ++i) {
        if (trained_.count(done * batches_per_epoch + i) == 0) return done;
      }
      ++done;
    }
    return done;
  }

  int64_t next_ = 0;           // the next batch to hand out, in order
  std::set<int64_t> trained_;  // reported batches, in handing-out order
  bool stopped_ = false;
};

// The samples of batch `index` of `epoch`: the index-th slice of
// `batch_size` of the epoch's shuffle (the last one may be short).
std::vector<size_t> SliceOf(uint64_t num_samples, uint64_t seed, int batch_size,
                            int64_t epoch, int64_t index) {
  const std::vector<size_t> shuffle = models::PartitionIndices(
      num_samples, 0, 1, seed, static_cast<uint64_t>(epoch));
  const size_t size = static_cast<size_t>(batch_size);
  const size_t begin =
      std::min(shuffle.size(), static_cast<size_t>(index) * size);
  const size_t end = std::min(shuffle.size(), begin + size);
  return {shuffle.begin() + begin, shuffle.begin() + end};
}

// The slices of `batches` ((epoch, index) pairs), one after the other.
std::vector<size_t> SlicesOf(
    uint64_t num_samples, uint64_t seed, int batch_size,
    const std::vector<std::pair<int64_t, int64_t>>& batches) {
  std::vector<size_t> samples;
  for (const auto& [epoch, index] : batches) {
    std::vector<size_t> s =
        SliceOf(num_samples, seed, batch_size, epoch, index);
    samples.insert(samples.end(), s.begin(), s.end());
  }
  return samples;
}

TEST(DataPosition, AnEpochIsAsManyBatchesAsCoverItsSamples) {
  PlanClient plan;
  EXPECT_EQ(DataPosition(plan, 10, 1, 4, 1).batches_per_epoch(), 3);
  EXPECT_EQ(DataPosition(plan, 8, 1, 4, 1).batches_per_epoch(), 2);
  EXPECT_EQ(DataPosition(plan, 1, 1, 64, 1).batches_per_epoch(), 1);
  // No samples is still one (empty) batch an epoch.
  EXPECT_EQ(DataPosition(plan, 0, 1, 4, 1).batches_per_epoch(), 1);
  EXPECT_TRUE(plan.calls.empty());  // nothing is asked before a step
}

TEST(DataPosition, EachStepIsThePlansNextBatchSlicedFromItsEpochsShuffle) {
  constexpr uint64_t kSamples = 10, kSeed = 7;
  constexpr int kBatch = 4, kEpochs = 2;
  PlanClient plan;
  DataPosition data(plan, kSamples, kSeed, kBatch, kEpochs);
  std::vector<size_t> batch;
  int epoch = -1;
  std::vector<std::multiset<size_t>> seen(kEpochs);
  // 3 batches an epoch (4, 4 and 2 samples); the plan says an epoch is
  // done once its last batch is reported.
  const size_t sizes[] = {4, 4, 2, 4, 4, 2};
  const int64_t epochs_done_after[] = {0, 0, 1, 1, 1, 2};
  for (int step = 0; step < 6; ++step) {
    Result<bool> have = data.Current(&batch, &epoch);
    ASSERT_TRUE(have.ok()) << have.status();
    ASSERT_TRUE(*have) << step;
    EXPECT_EQ(epoch, step / 3) << step;
    EXPECT_EQ(data.batches_in_step(), 1);
    EXPECT_EQ(batch.size(), sizes[step]) << step;
    EXPECT_EQ(batch, SliceOf(kSamples, kSeed, kBatch, step / 3, step % 3))
        << step;
    seen[step / 3].insert(batch.begin(), batch.end());
    ASSERT_TRUE(data.Trained(/*stop=*/false).ok());
    EXPECT_EQ(data.epochs_done(), epochs_done_after[step]) << step;
    EXPECT_FALSE(data.done()) << step;
  }
  // Every sample once an epoch.
  for (const std::multiset<size_t>& s : seen) {
    std::vector<size_t> all(kSamples);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(std::vector<size_t>(s.begin(), s.end()), all);
  }
  // The plan has no batch ever again.
  Result<bool> have = data.Current(&batch, &epoch);
  ASSERT_TRUE(have.ok());
  EXPECT_FALSE(*have);
  EXPECT_TRUE(data.done());
  EXPECT_EQ(plan.reported,
            (std::vector<std::pair<int64_t, int64_t>>{
                {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}));
  // Every call gives the job's shape.
  for (const PlanClient::Call& c : plan.calls) {
    EXPECT_EQ(c.batches_per_epoch, 3);
    EXPECT_EQ(c.epochs, kEpochs);
  }
}

TEST(DataPosition, AskingAgainBeforeTrainingGivesTheSameStep) {
  PlanClient plan;
  DataPosition data(plan, 10, 3, 2, 1);
  std::vector<size_t> first, again;
  int epoch = -1;
  ASSERT_TRUE(*data.Current(&first, &epoch));
  const size_t calls = plan.calls.size();
  ASSERT_TRUE(*data.Current(&again, &epoch));
  EXPECT_EQ(again, first);
  EXPECT_EQ(plan.calls.size(), calls);  // the step in hand, not a new one
}

TEST(DataPosition, NoFreeBatchNowIsAWaitNotTheEnd) {
  PlanClient plan;
  DataPosition data(plan, 10, 1, 5, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  plan.wait = true;
  Result<bool> have = data.Current(&batch, &epoch);
  ASSERT_TRUE(have.ok());
  EXPECT_FALSE(*have);
  EXPECT_FALSE(data.done());
  plan.wait = false;  // another worker's batch came free
  have = data.Current(&batch, &epoch);
  ASSERT_TRUE(have.ok());
  EXPECT_TRUE(*have);
  EXPECT_EQ(batch, SliceOf(10, 1, 5, 0, 0));
}

TEST(DataPosition, AStepTrainsAsManyOfThePlansBatchesAsThePlanAsks) {
  constexpr uint64_t kSamples = 12, kSeed = 5;
  constexpr int kBatch = 3;  // 4 batches an epoch
  PlanClient plan;
  plan.batches_per_step = 2;
  DataPosition data(plan, kSamples, kSeed, kBatch, 2);
  EXPECT_EQ(data.per_step(), 1);  // the plan has not said yet
  std::vector<size_t> batch;
  int epoch = -1;
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(*data.Current(&batch, &epoch)) << step;
    EXPECT_EQ(data.per_step(), 2);
    EXPECT_EQ(data.batches_in_step(), 2) << step;
    const int64_t e = step / 2, first = 2 * (step % 2);
    EXPECT_EQ(epoch, e) << step;
    EXPECT_EQ(batch,
              SlicesOf(kSamples, kSeed, kBatch, {{e, first}, {e, first + 1}}))
        << step;
    ASSERT_TRUE(data.Trained(false).ok());
    EXPECT_EQ(data.batches_in_step(), 1);  // none in hand
  }
  ASSERT_TRUE(data.Current(&batch, &epoch).ok());
  EXPECT_TRUE(data.done());
  EXPECT_EQ(plan.reported.size(), 8u);
  EXPECT_EQ(data.epochs_done(), 2);
}

TEST(DataPosition, AStepCrossesAnEpochsEndAndTakesWhatIsLeftAtThePlansEnd) {
  constexpr uint64_t kSamples = 12, kSeed = 5;
  constexpr int kBatch = 3;  // 4 batches an epoch, 8 in all
  PlanClient plan;
  plan.batches_per_step = 3;
  DataPosition data(plan, kSamples, kSeed, kBatch, 2);
  std::vector<size_t> batch;
  int epoch = -1;
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(batch, SlicesOf(kSamples, kSeed, kBatch, {{0, 0}, {0, 1}, {0, 2}}));
  ASSERT_TRUE(data.Trained(false).ok());
  // Over the epoch's end: the step's epoch is its first batch's.
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(epoch, 0);
  EXPECT_EQ(data.batches_in_step(), 3);
  EXPECT_EQ(batch, SlicesOf(kSamples, kSeed, kBatch, {{0, 3}, {1, 0}, {1, 1}}));
  ASSERT_TRUE(data.Trained(false).ok());
  EXPECT_EQ(data.epochs_done(), 1);
  // Two batches are left: the step trains them, and is not the end.
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(epoch, 1);
  EXPECT_EQ(data.batches_in_step(), 2);
  EXPECT_EQ(batch, SlicesOf(kSamples, kSeed, kBatch, {{1, 2}, {1, 3}}));
  EXPECT_FALSE(data.done());
  ASSERT_TRUE(data.Trained(false).ok());
  Result<bool> have = data.Current(&batch, &epoch);
  ASSERT_TRUE(have.ok());
  EXPECT_FALSE(*have);
  EXPECT_TRUE(data.done());
  EXPECT_EQ(data.epochs_done(), 2);
  EXPECT_EQ(plan.reported.size(), 8u);
}

TEST(DataPosition, BatchesTakenAheadWaitForTheNextStepsWhenTheCountGoesDown) {
  constexpr uint64_t kSamples = 8;
  constexpr int kBatch = 1;  // batch i is sample shuffle[i]
  PlanClient plan;
  plan.batches_per_step = 3;
  DataPosition data(plan, kSamples, 2, kBatch, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(data.batches_in_step(), 3);
  plan.batches_per_step = 1;
  ASSERT_TRUE(data.Trained(false).ok());  // takes 3 more, hears "1"
  EXPECT_EQ(data.per_step(), 1);
  std::vector<int64_t> trained = {0, 1, 2};
  int steps = 1;
  while (true) {
    const size_t calls = plan.calls.size();
    Result<bool> have = data.Current(&batch, &epoch);
    ASSERT_TRUE(have.ok());
    if (!*have) break;
    ++steps;
    EXPECT_EQ(data.batches_in_step(), 1);
    // Held ahead: the step asks the plan nothing.
    EXPECT_EQ(plan.calls.size(), calls);
    ASSERT_TRUE(data.Trained(false).ok());
    trained.push_back(plan.reported.back().second);
    EXPECT_EQ(batch, SliceOf(kSamples, 2, kBatch, 0, trained.back()));
  }
  EXPECT_TRUE(data.done());
  // Each batch once, in the plan's order, none lost among those held.
  EXPECT_EQ(trained, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(steps, 6);
}

TEST(DataPosition, ThePlansCountIsTakenWithinOneTo64) {
  PlanClient plan;
  plan.batches_per_step = 100;
  DataPosition data(plan, 200, 1, 1, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(data.per_step(), kMaxBatchesPerStep);
  EXPECT_EQ(data.batches_in_step(), 64);
  EXPECT_EQ(batch.size(), 64u);
  plan.batches_per_step = 0;
  ASSERT_TRUE(data.Trained(false).ok());
  EXPECT_EQ(data.per_step(), 1);
}

TEST(DataPosition, AWorkersOwnCountIsTakenWhereItIsMoreThanThePlans) {
  PlanClient plan;  // the plan asks 1 a step
  DataPosition data(plan, 40, 4, 1, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  data.SetLocalPerStep(3);
  EXPECT_EQ(data.per_step(), 3);
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(data.batches_in_step(), 3);
  EXPECT_EQ(batch, SlicesOf(40, 4, 1, {{0, 0}, {0, 1}, {0, 2}}));
  ASSERT_TRUE(data.Trained(false).ok());
  data.SetLocalPerStep(0);  // the plan's again
  EXPECT_EQ(data.per_step(), 1);
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(data.batches_in_step(), 1);
  EXPECT_EQ(batch, SliceOf(40, 4, 1, 0, 3));
  ASSERT_TRUE(data.Trained(false).ok());
  // The plan's count, once it says it, where that is more.
  data.SetLocalPerStep(2);
  plan.batches_per_step = 4;
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(data.batches_in_step(), 2);  // its own: the plan said 1 so far
  ASSERT_TRUE(data.Trained(false).ok());
  EXPECT_EQ(data.per_step(), 4);
  data.SetLocalPerStep(0);
  EXPECT_EQ(data.per_step(), 4);
}

TEST(DataPosition, StoppingReportsTheStepTakingNothingMoreAndEnds) {
  PlanClient plan;
  plan.batches_per_step = 2;
  DataPosition data(plan, 20, 1, 2, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  const size_t before = plan.calls.size();
  ASSERT_TRUE(data.Trained(/*stop=*/true).ok());
  ASSERT_EQ(plan.calls.size(), before + 2);
  using Reported = std::pair<int64_t, int64_t>;
  ASSERT_TRUE(plan.calls[before].trained.has_value());
  EXPECT_EQ(*plan.calls[before].trained, Reported(0, 0));
  EXPECT_TRUE(plan.calls[before].take_next);
  ASSERT_TRUE(plan.calls[before + 1].trained.has_value());
  EXPECT_EQ(*plan.calls[before + 1].trained, Reported(0, 1));
  EXPECT_FALSE(plan.calls[before + 1].take_next);
  EXPECT_TRUE(data.done());
  // What the first report took was given back with the last: no step.
  Result<bool> have = data.Current(&batch, &epoch);
  ASSERT_TRUE(have.ok());
  EXPECT_FALSE(*have);
}

TEST(DataPosition, RecordWritesTheCountersThatRestoreReadsBack) {
  PlanClient plan;
  DataPosition data(plan, 10, 1, 2, 1);
  data.samples = 40;
  data.steps = 5;
  data.Record();
  // Part of the resume state kept with checkpoints.
  EXPECT_EQ(plan.resume_state, "samples=40 steps=5");
  data.samples = 99;
  data.steps = 12;
  data.batches = 12;
  ASSERT_TRUE(data.Restore(plan.resume_state).ok());
  EXPECT_EQ(data.samples, 40);
  EXPECT_EQ(data.steps, 5u);
  EXPECT_EQ(data.batches, 12u);  // progress only: not rolled back
}

TEST(DataPosition, AfterARollbackTheBatchesInHandAreNobodysAndThePlanIsAsked) {
  constexpr uint64_t kSamples = 12, kSeed = 9;
  constexpr int kBatch = 2;  // 6 batches
  PlanClient plan;           // the plan asks 1 a step
  DataPosition data(plan, kSamples, kSeed, kBatch, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  data.SetLocalPerStep(3);
  ASSERT_TRUE(*data.Current(&batch, &epoch));  // batches 0, 1 and 2
  data.samples = 6;
  data.steps = 1;
  ASSERT_TRUE(data.Trained(false).ok());  // takes 3, 4 and 5
  data.SetLocalPerStep(0);
  ASSERT_TRUE(*data.Current(&batch, &epoch));  // 3 in hand, 4 and 5 held
  EXPECT_EQ(batch, SliceOf(kSamples, kSeed, kBatch, 0, 3));
  // The job rolls back to a checkpoint taken when only batch 0 was in.
  plan.RollBackTo(1);
  ASSERT_TRUE(data.Restore("samples=2 steps=1").ok());
  EXPECT_EQ(data.samples, 2);
  EXPECT_EQ(data.steps, 1u);
  const size_t before = plan.calls.size();
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  // The plan's next, not the one in hand (3) nor one held (4).
  EXPECT_EQ(batch, SliceOf(kSamples, kSeed, kBatch, 0, 1));
  ASSERT_EQ(plan.calls.size(), before + 1);
  EXPECT_FALSE(plan.calls[before].trained.has_value());  // 3 not reported
}

TEST(DataPosition, ARollbackAfterTheEndTrainsAgain) {
  PlanClient plan;
  DataPosition data(plan, 2, 1, 2, 1);  // one batch
  std::vector<size_t> batch;
  int epoch = -1;
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  ASSERT_TRUE(data.Trained(false).ok());
  ASSERT_FALSE(*data.Current(&batch, &epoch));
  ASSERT_TRUE(data.done());
  plan.RollBackTo(0);
  ASSERT_TRUE(data.Restore("").ok());  // a rollback to before any record
  EXPECT_FALSE(data.done());
  EXPECT_EQ(data.samples, 0);
  EXPECT_EQ(data.steps, 0u);
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  EXPECT_EQ(batch, SliceOf(2, 1, 2, 0, 0));
}

TEST(DataPosition, AnUnreadableResumeStateIsInvalid) {
  PlanClient plan;
  DataPosition data(plan, 10, 1, 2, 1);
  for (const char* bad :
       {"steps=3", "samples=x steps=1", "nonsense", "steps=3 samples=4"}) {
    const Status s = data.Restore(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DataPosition, ThePlansErrorsAreReturned) {
  PlanClient plan;
  DataPosition data(plan, 10, 1, 2, 1);
  std::vector<size_t> batch;
  int epoch = -1;
  plan.fail_next = AbortedError("the job rolls back");
  Result<bool> have = data.Current(&batch, &epoch);
  EXPECT_EQ(have.status().code(), StatusCode::kAborted);
  ASSERT_TRUE(*data.Current(&batch, &epoch));
  plan.fail_next = AbortedError("the job rolls back");
  EXPECT_EQ(data.Trained(false).code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace ductile::train
