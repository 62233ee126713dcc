// The target side of a slot move (server/slot_mover.h), without sockets:
// what a move's chunks put into the tables and the BSP buffer.
#include "server/slot_mover.h"

#include <map>
#include <string>
#include <vector>

#include "env/env.h"
#include "gtest/gtest.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

constexpr TableId kTable = 1;

class SlotMoverTarget : public ::testing::Test {
 protected:
  SlotMoverTarget()
      : tables_(&rules_, 2),
        mover_(SystemEnv(), nullptr, std::chrono::milliseconds(30000)) {
    TableOptions options;
    options.name = "t";
    options.value_width = 1;
    options.rule = UpdateRule::kAdd;
    options.consistency.mode = ConsistencyMode::kBsp;
    wire::TableConfig config = ToWire(options, kTable);
    EXPECT_TRUE(tables_.Create(config).ok());
    consistency_.AddTable(kTable, options.consistency);
    consistency_.SetWorkers({0});
    wire::ServerEndpoint a, b;
    a.set_id(0);
    b.set_id(2);
    routing_ = RoutingTable::Initial(16, {a, b});
  }

  // A MIGRATE_DATA chunk of move `id` for `key`'s slot: its value and,
  // if `push` is set, a BSP push of clock 3 not combined yet.
  Status Install(uint64_t id, Key key, float value, float push,
                 const std::vector<RequestDedup::Window>& windows = {}) {
    std::string chunk;
    for (const RequestDedup::Window& w : windows) {
      RecordCodec::AppendWindow(w, &chunk);
    }
    EntryRecord e;
    e.table = kTable;
    e.key = key;
    e.value = {value};
    RecordCodec::AppendEntry(e, &chunk);
    if (push != 0) {
      BspBuffer::Entry b;
      b.clock = 3;
      b.key = key;
      b.combined.values = {push};
      b.combined.pushes = 1;
      b.combined.batches = 3;      // a worker that trained 3 batches a step
      b.combined.rate_sum = 1.5f;  // a learning-rate factor of 0.5
      RecordCodec::AppendBuffered({kTable, b}, &chunk);
    }
    wire::Header h;
    h.set_type(wire::MIGRATE_DATA);
    h.set_change_id(id);
    h.set_seq(0);
    h.set_last(true);
    h.add_slots(routing_.SlotOf(kTable, key));
    const InMessage message =
        InMessage::Copy({"source", h.SerializeAsString(), chunk});
    return mover_.Install(h, message, routing_, tables_, consistency_, dedup_);
  }

  std::map<std::string, CustomRule> rules_;
  TableSet tables_;
  ConsistencyController consistency_;
  RoutingTable routing_;
  RequestDedup dedup_;
  SlotMover mover_;
};

TEST_F(SlotMoverTarget, AChunkPutsItsKeysAndItsPushesOnce) {
  ASSERT_TRUE(Install(11, 42, 5.0f, 1.0f).ok());
  ASSERT_TRUE(Install(11, 42, 5.0f, 1.0f).ok());  // the same chunk again
  std::vector<float> v;
  ASSERT_TRUE(tables_.Find(kTable)->Get(42, &v));
  EXPECT_EQ(v, std::vector<float>{5.0f});
  auto buffered =
      consistency_.TakeBufferedKeys([](TableId, Key key) { return key == 42; });
  ASSERT_EQ(buffered.size(), 1u);
  EXPECT_EQ(buffered[0].second.combined.pushes, 1);
  EXPECT_EQ(buffered[0].second.combined.batches, 3);
  EXPECT_EQ(buffered[0].second.combined.rate_sum, 1.5f);
}

// A move abandoned after its chunk arrived left the slot's key and a BSP
// push of clock 3 here. The source took the push back and combined clock 3
// into the value; a later move of the slot here brings that value and no
// push. The stale push must go, or clock 3 would count twice here.
TEST_F(SlotMoverTarget, AMovesFirstChunkDropsWhatAnAbandonedMoveLeft) {
  ASSERT_TRUE(Install(11, 42, 5.0f, 1.0f).ok());
  ASSERT_TRUE(Install(12, 42, 6.0f, 0.0f).ok());
  std::vector<float> v;
  ASSERT_TRUE(tables_.Find(kTable)->Get(42, &v));
  EXPECT_EQ(v, std::vector<float>{6.0f});
  EXPECT_TRUE(
      consistency_.TakeBufferedKeys([](TableId, Key key) { return key == 42; })
          .empty());
}

// A chunk's keys and pushes must be of the move's slots: one of another
// slot (a peer that lies, or a mix-up) refuses the whole chunk, and
// nothing of it is applied.
TEST_F(SlotMoverTarget, AKeyOfAnotherSlotThanTheMovesRefusesTheChunk) {
  Key other = 43;
  while (routing_.SlotOf(kTable, other) == routing_.SlotOf(kTable, 42)) ++other;
  for (bool as_push : {false, true}) {
    std::string chunk;
    EntryRecord e;
    e.table = kTable;
    e.key = as_push ? 42 : other;
    e.value = {1.0f};
    RecordCodec::AppendEntry(e, &chunk);
    if (as_push) {
      BspBuffer::Entry b;
      b.clock = 3;
      b.key = other;
      b.combined.values = {2.0f};
      b.combined.pushes = 1;
      RecordCodec::AppendBuffered({kTable, b}, &chunk);
    }
    wire::Header h;
    h.set_type(wire::MIGRATE_DATA);
    h.set_change_id(as_push ? 22 : 21);
    h.set_seq(0);
    h.set_last(true);
    h.add_slots(routing_.SlotOf(kTable, 42));
    const Status s = mover_.Install(
        h, InMessage::Copy({"source", h.SerializeAsString(), chunk}), routing_,
        tables_, consistency_, dedup_);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("not one of the move's"), std::string::npos)
        << s;
    std::vector<float> v;
    EXPECT_FALSE(tables_.Find(kTable)->Get(42, &v)) << as_push;
    EXPECT_FALSE(tables_.Find(kTable)->Get(other, &v)) << as_push;
    EXPECT_TRUE(consistency_.TakeBufferedKeys([](TableId, Key) { return true; })
                    .empty());
  }
}

// The source's exactly-once window travels in the chunk: a push the
// source applied (client 7, seq 31) is a duplicate at the target, one it
// did not apply is not.
TEST_F(SlotMoverTarget, TheSourcesExactlyOnceWindowComesWithTheChunk) {
  RequestDedup::Window w;
  w.client = 7;
  w.done_below = 30;
  w.applied = {31, 35};
  ASSERT_TRUE(Install(11, 42, 5.0f, 0.0f, {w}).ok());
  EXPECT_TRUE(dedup_.IsDuplicate(7, 29));
  EXPECT_TRUE(dedup_.IsDuplicate(7, 31));
  EXPECT_FALSE(dedup_.IsDuplicate(7, 32));
  EXPECT_TRUE(dedup_.IsDuplicate(7, 35));
  EXPECT_FALSE(dedup_.IsDuplicate(8, 31));
}

// A move's admission counts travel as 'F' records: read back as sent, and
// a record cut short refuses the chunk whole.
TEST_F(SlotMoverTarget, AdmissionCountsRoundTripAndACutRecordIsRefused) {
  const FilterRecord sent{kTable, 5, std::string("\x01\x00\xff", 3)};
  std::string chunk;
  RecordCodec::AppendFilter(sent, &chunk);
  std::vector<EntryRecord> entries;
  std::vector<SlotMover::Buffered> buffered;
  std::vector<RequestDedup::Window> windows;
  std::vector<FilterRecord> filters;
  ASSERT_TRUE(SlotMover::ParseChunk(InMessage::Copy({"source", "h", chunk}),
                                    &entries, &buffered, &windows, &filters)
                  .ok());
  ASSERT_EQ(filters.size(), 1u);
  EXPECT_EQ(filters[0].table, kTable);
  EXPECT_EQ(filters[0].slot, 5);
  EXPECT_EQ(filters[0].counts, sent.counts);
  chunk.resize(chunk.size() - 1);
  filters.clear();
  const Status s =
      SlotMover::ParseChunk(InMessage::Copy({"source", "h", chunk}), &entries,
                            &buffered, &windows, &filters);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
}

// Admission counts that do not fit the target's table (here one that
// admits every id, and keeps none), or of a slot the move does not name,
// refuse the chunk: none of its keys is put in.
TEST_F(SlotMoverTarget, CountsThatDoNotFitRefuseTheWholeChunk) {
  tables_.set_num_slots(16);
  const Key key = 42;
  const int32_t slot = routing_.SlotOf(kTable, key);
  for (const FilterRecord& bad : {FilterRecord{kTable, slot, "counts"},
                                  FilterRecord{kTable, (slot + 1) % 16, ""}}) {
    std::string chunk;
    EntryRecord e;
    e.table = kTable;
    e.key = key;
    e.value = {5.0f};
    RecordCodec::AppendEntry(e, &chunk);
    RecordCodec::AppendFilter(bad, &chunk);
    wire::Header h;
    h.set_type(wire::MIGRATE_DATA);
    h.set_change_id(21);
    h.set_last(true);
    h.add_slots(slot);
    const Status s = mover_.Install(
        h, InMessage::Copy({"source", h.SerializeAsString(), chunk}), routing_,
        tables_, consistency_, dedup_);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    std::vector<float> value;
    EXPECT_FALSE(tables_.Find(kTable)->Get(key, &value));
  }
}

// A chunk whose window record is cut short is refused whole.
TEST_F(SlotMoverTarget, ATruncatedWindowRecordIsRefused) {
  RequestDedup::Window w;
  w.client = 7;
  w.applied = {31, 35};
  std::string chunk;
  RecordCodec::AppendWindow(w, &chunk);
  chunk.resize(chunk.size() - 3);
  const InMessage message = InMessage::Copy({"source", "header", chunk});
  std::vector<EntryRecord> entries;
  std::vector<SlotMover::Buffered> buffered;
  std::vector<RequestDedup::Window> windows;
  const Status s =
      SlotMover::ParseChunk(message, &entries, &buffered, &windows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace ductile
