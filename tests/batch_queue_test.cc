// A worker's side of the data plan (client/batch_queue.h): what a claim
// carries, and what the queue holds after its answer.
#include "client/batch_queue.h"

#include <vector>

#include "gtest/gtest.h"

namespace ductile {
namespace {

wire::DataGrant Grant(std::vector<std::pair<int64_t, int64_t>> held,
                      int64_t epochs_done = 0) {
  wire::DataGrant g;
  g.set_kind(held.empty() ? wire::DataGrant::END : wire::DataGrant::GRANTED);
  for (const auto& [epoch, batch] : held) {
    wire::DataBatch* b = g.add_held();
    b->set_epoch(epoch);
    b->set_batch(batch);
  }
  g.set_epochs_done(epochs_done);
  return g;
}

TEST(BatchQueue, AnAnswerNeverHandsOutTheBatchInHandOrOneTrainedSince) {
  BatchQueue q;
  q.SetShape(10, 1);
  q.OnGrant(Grant({{0, 0}, {0, 1}, {0, 2}}), 0);
  std::optional<Client::Batch> a = q.Pop();  // 0 in hand
  ASSERT_TRUE(a);
  EXPECT_EQ(a->index, 0);
  // A claim leaves; meanwhile 0 is trained and 1 taken.
  wire::DataClaim claim;
  const size_t carried = q.FillClaim(5, &claim);
  EXPECT_EQ(carried, 0u);
  q.Trained(*a, 3);
  std::optional<Client::Batch> b = q.Pop();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->index, 1);
  // Its answer: the coordinator saw none of that, it holds 0..4 for us.
  q.OnGrant(Grant({{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}}, 0), carried);
  std::vector<int64_t> queued;
  while (std::optional<Client::Batch> c = q.Pop()) queued.push_back(c->index);
  EXPECT_EQ(queued, (std::vector<int64_t>{2, 3, 4}));
  // The report of 0 was not carried by that claim: still unacknowledged.
  EXPECT_TRUE(q.has_unacked());
}

// A worker training several batches a step holds them all in hand at once:
// none of them comes back from an answer, and each report frees its own.
TEST(BatchQueue, SeveralBatchesInHandAreNeverHandedOutAgain) {
  BatchQueue q;
  q.SetShape(10, 1);
  EXPECT_EQ(q.ahead(), BatchQueue::kAhead);
  wire::DataGrant g = Grant({{0, 0}, {0, 1}, {0, 2}});
  g.set_batches_per_step(2);
  q.OnGrant(g, 0);
  EXPECT_EQ(q.batches_per_step(), 2);
  EXPECT_EQ(q.ahead(), BatchQueue::kAhead + 2);
  std::optional<Client::Batch> a = q.Pop();
  std::optional<Client::Batch> b = q.Pop();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->batches_per_step, 2);
  EXPECT_EQ(b->index, 1);
  // An answer listing both in hand (the coordinator holds them for us).
  q.OnGrant(Grant({{0, 0}, {0, 1}, {0, 2}, {0, 3}}), 0);
  std::vector<int64_t> queued;
  while (std::optional<Client::Batch> c = q.Pop()) queued.push_back(c->index);
  EXPECT_EQ(queued, (std::vector<int64_t>{2, 3}));
  // That answer said nothing of a count: one batch a step again.
  EXPECT_EQ(q.batches_per_step(), 1);
  q.Trained(*a, 4);
  // 1 reported since the claim left: not handed out again either.
  q.Trained(*b, 4);
  q.OnGrant(Grant({{0, 1}, {0, 5}}), 0);
  std::optional<Client::Batch> c = q.Pop();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index, 5);
  EXPECT_FALSE(q.Pop());
}

TEST(BatchQueue, ReportsGoUntilAnAnswerCarriesThem) {
  BatchQueue q;
  q.SetShape(10, 1);
  q.OnGrant(Grant({{0, 0}, {0, 1}}), 0);
  std::optional<Client::Batch> a = q.Pop();
  q.Trained(*a, 5);
  std::optional<Client::Batch> b = q.Pop();
  q.Trained(*b, 6);
  // A checkpoint report at clock 6 carries the batch pushed at 5.
  const std::vector<wire::DataBatch> before6 = q.UnackedBefore(6);
  ASSERT_EQ(before6.size(), 1u);
  EXPECT_EQ(before6[0].batch(), 0);
  EXPECT_EQ(before6[0].clock(), 5);
  wire::DataClaim claim;
  const size_t carried = q.FillClaim(4, &claim);
  EXPECT_EQ(carried, 2u);
  EXPECT_EQ(claim.done_size(), 2);
  EXPECT_EQ(claim.want(), 4);
  EXPECT_EQ(claim.batches_per_epoch(), 10);
  q.OnGrant(Grant({}, 1), carried);
  EXPECT_FALSE(q.has_unacked());
  EXPECT_EQ(q.idle_kind(), Client::Batch::kEnd);
  EXPECT_EQ(q.epochs_done(), 1);
  // A rollback: nothing of before is this worker's.
  q.OnGrant(Grant({{0, 7}}), 0);
  q.Clear();
  EXPECT_FALSE(q.Pop());
}

}  // namespace
}  // namespace ductile
