// The routing table value type: every change bumps the epoch, peers'
// tables are checked, and a dead server's slots go to the least loaded.
#include "routing/routing_table.h"

#include <set>

#include "gtest/gtest.h"

namespace ductile {
namespace {

wire::ServerEndpoint Endpoint(int32_t id, const std::string& address) {
  wire::ServerEndpoint e;
  e.set_id(id);
  e.set_tcp_address(address);
  return e;
}

RoutingTable TwoServers() {
  return RoutingTable::Initial(8, {Endpoint(1, "b"), Endpoint(0, "a")});
}

TEST(RoutingTable, StartsEmptyAtEpochZero) {
  RoutingTable t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.epoch(), 0u);
  EXPECT_EQ(t.num_slots(), 0);
}

TEST(RoutingTable, InitialSpreadsSlotsOverServersInIdOrderAtEpochOne) {
  const RoutingTable t = TwoServers();
  EXPECT_EQ(t.epoch(), 1u);
  for (int s = 0; s < 4; ++s) EXPECT_TRUE(t.Serves(0, s)) << s;
  for (int s = 4; s < 8; ++s) EXPECT_TRUE(t.Serves(1, s)) << s;
  EXPECT_EQ(t.servers().front().id(), 0);
  EXPECT_EQ(t.SlotsPerServer().at(1), 4);
}

TEST(RoutingTable, EveryChangeBumpsTheEpochByOne) {
  RoutingTable t = TwoServers();
  t.Move(0, 1);
  EXPECT_EQ(t.epoch(), 2u);
  EXPECT_EQ(t.owner(0), 1);
  t.SetServers({Endpoint(0, "a"), Endpoint(1, "b")});  // the same
  EXPECT_EQ(t.epoch(), 2u);
  t.SetServers({Endpoint(0, "a"), Endpoint(1, "moved")});
  EXPECT_EQ(t.epoch(), 3u);
  EXPECT_EQ(t.Reassign({0}), 5);  // slots 0 and 4-7 were server 1's
  EXPECT_EQ(t.epoch(), 4u);
  EXPECT_EQ(t.Owners(), std::set<int32_t>{0});
}

TEST(RoutingTable, ReassignGivesSlotsToTheLeastLoadedSurvivors) {
  RoutingTable t = RoutingTable::Initial(
      9, {Endpoint(0, "a"), Endpoint(1, "b"), Endpoint(2, "c")});
  t.Move(0, 1);  // 0: 2 slots, 1: 4 slots, 2: 3 slots
  t.Reassign({0, 2});
  const auto per = t.SlotsPerServer();
  EXPECT_EQ(per.at(0) + per.at(2), 9);
  EXPECT_LE(std::abs(per.at(0) - per.at(2)), 1);
}

TEST(RoutingTable, ReassignToNoServerMovesNothing) {
  RoutingTable t = TwoServers();
  EXPECT_EQ(t.Reassign({}), 0);
  EXPECT_EQ(t.epoch(), 1u);
}

TEST(RoutingTable, RoundTripsThroughTheWireWithSlotStates) {
  const RoutingTable t = TwoServers();
  wire::RoutingTable w;
  t.ToWire(&w);
  EXPECT_EQ(w.slot_state_size(), 0) << "all owned: no states sent";
  Result<RoutingTable> back = RoutingTable::FromWire(w);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->epoch(), t.epoch());
  for (int s = 0; s < 8; ++s) EXPECT_EQ(back->owner(s), t.owner(s));
  w.add_slot_state(0);
  w.mutable_slot_state()->Resize(8, 0);
  w.set_slot_state(3, static_cast<int32_t>(RoutingTable::SlotState::kLeaving));
  back = RoutingTable::FromWire(w);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->Serves(0, 3)) << "a leaving slot is not served";
  EXPECT_TRUE(back->Serves(0, 2));
}

TEST(RoutingTable, APeersMalformedTableIsRefused) {
  wire::RoutingTable w;
  TwoServers().ToWire(&w);
  wire::RoutingTable short_owners = w;
  short_owners.mutable_slot_owner()->RemoveLast();
  EXPECT_EQ(RoutingTable::FromWire(short_owners).status().code(),
            StatusCode::kInvalidArgument);
  wire::RoutingTable bad_state = w;
  for (int s = 0; s < 8; ++s) bad_state.add_slot_state(0);
  bad_state.set_slot_state(5, 7);
  EXPECT_EQ(RoutingTable::FromWire(bad_state).status().code(),
            StatusCode::kInvalidArgument);
  wire::RoutingTable huge = w;
  huge.set_num_slots(RoutingTable::kMaxSlots + 1);
  EXPECT_EQ(RoutingTable::FromWire(huge).status().code(),
            StatusCode::kInvalidArgument);
  wire::RoutingTable slots_at_zero = w;
  slots_at_zero.set_epoch(0);
  EXPECT_FALSE(RoutingTable::FromWire(slots_at_zero).ok());
}

}  // namespace
}  // namespace ductile
