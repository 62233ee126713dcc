// The routing table value type: every change bumps the epoch, peers'
// tables are checked, a dead server's slots go to the least loaded, and
// backups are assigned, kept apart from their owners and promoted.
#include "routing/routing_table.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

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

RoutingTable ThreeServers(int32_t num_slots = 9) {
  return RoutingTable::Initial(
      num_slots, {Endpoint(0, "a"), Endpoint(1, "b"), Endpoint(2, "c")});
}

TEST(RoutingTable, AssignBackupsNamesTheNextLiveServerAfterTheOwner) {
  RoutingTable t = ThreeServers();
  EXPECT_FALSE(t.HasBackups());
  for (int s = 0; s < 9; ++s) EXPECT_EQ(t.backup(s), -1) << s;
  t.AssignBackups({0, 1, 2});
  EXPECT_TRUE(t.HasBackups());
  EXPECT_EQ(t.epoch(), 2u) << "one epoch for the whole assignment";
  for (int s = 0; s < 9; ++s) {
    // Owners 0, 1, 2 (three slots each) are backed up by 1, 2 and 0.
    EXPECT_EQ(t.backup(s), (t.owner(s) + 1) % 3) << s;
    EXPECT_NE(t.backup(s), t.owner(s)) << s;
    EXPECT_TRUE(t.Serves(t.owner(s), s)) << s;
    EXPECT_FALSE(t.Serves(t.backup(s), s)) << "a backup serves nothing";
  }
  t.AssignBackups({0, 1, 2});
  EXPECT_EQ(t.epoch(), 2u) << "nothing changed";
}

TEST(RoutingTable, AssignBackupsSkipsServersNotLiveAndWrapsAround) {
  RoutingTable t = RoutingTable::Initial(
      8,
      {Endpoint(0, "a"), Endpoint(3, "b"), Endpoint(5, "c"), Endpoint(9, "d")});
  t.AssignBackups({0, 5, 9});  // 3 is not live
  const std::map<int32_t, int32_t> next = {{0, 5}, {3, 5}, {5, 9}, {9, 0}};
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(t.backup(s), next.at(t.owner(s))) << s;
  }
}

TEST(RoutingTable, AssignBackupsSpreadsTheCopiesEvenly) {
  for (int32_t servers = 2; servers <= 7; ++servers) {
    std::vector<wire::ServerEndpoint> endpoints;
    std::set<int32_t> live;
    for (int32_t id = 0; id < servers; ++id) {
      endpoints.push_back(Endpoint(id, "s" + std::to_string(id)));
      live.insert(id);
    }
    RoutingTable t = RoutingTable::Initial(4096, endpoints);
    t.AssignBackups(live);
    std::map<int32_t, int32_t> copies;
    for (int s = 0; s < t.num_slots(); ++s) ++copies[t.backup(s)];
    ASSERT_EQ(copies.size(), static_cast<size_t>(servers)) << servers;
    int32_t least = t.num_slots(), most = 0;
    for (const auto& [id, n] : copies) {
      EXPECT_GE(id, 0);
      least = std::min(least, n);
      most = std::max(most, n);
    }
    EXPECT_LE(most - least, 1) << servers << " servers";
  }
}

TEST(RoutingTable, AssignBackupsWithOneServerGivesNone) {
  RoutingTable t = RoutingTable::Initial(4, {Endpoint(0, "a")});
  t.AssignBackups({0});
  EXPECT_FALSE(t.HasBackups());
  EXPECT_EQ(t.epoch(), 1u);
  t.AssignBackups({});
  EXPECT_FALSE(t.HasBackups());
}

TEST(RoutingTable, SetBackupBumpsTheEpochAndNeverNamesTheOwner) {
  RoutingTable t = TwoServers();
  t.SetBackup(0, 1);
  EXPECT_EQ(t.backup(0), 1);
  EXPECT_EQ(t.epoch(), 2u);
  t.SetBackup(0, 0);  // slot 0's owner
  EXPECT_EQ(t.backup(0), -1);
  EXPECT_EQ(t.epoch(), 3u);
}

TEST(RoutingTable, MoveToTheBackupLeavesTheSlotWithNone) {
  RoutingTable t = ThreeServers();
  t.AssignBackups({0, 1, 2});
  ASSERT_EQ(t.owner(0), 0);
  ASSERT_EQ(t.backup(0), 1);
  t.Move(0, 2);  // another server: the backup stays
  EXPECT_EQ(t.owner(0), 2);
  EXPECT_EQ(t.backup(0), 1);
  t.Move(0, 1);  // the backup itself
  EXPECT_EQ(t.owner(0), 1);
  EXPECT_EQ(t.backup(0), -1);
  EXPECT_EQ(t.epoch(), 4u);
}

TEST(RoutingTable, ReassignNeverLeavesASlotBackedUpByItsOwner) {
  RoutingTable t = TwoServers();
  t.AssignBackups({0, 1});
  t.Reassign({0});  // server 1's slots go to 0, their backup
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(t.owner(s), 0) << s;
    EXPECT_NE(t.backup(s), 0) << s;
  }
}

TEST(RoutingTable, ClearBackupsLeavesNoneInOneEpoch) {
  RoutingTable t = ThreeServers();
  t.AssignBackups({0, 1, 2});
  const uint64_t epoch = t.epoch();
  t.ClearBackups();
  EXPECT_FALSE(t.HasBackups());
  EXPECT_EQ(t.epoch(), epoch + 1);
  t.ClearBackups();
  EXPECT_EQ(t.epoch(), epoch + 1) << "nothing changed";
}

TEST(RoutingTable, PromoteGivesTheDeadOwnersSlotsToTheirBackups) {
  RoutingTable t = ThreeServers();  // 0: slots 0-2, 1: 3-5, 2: 6-8
  t.AssignBackups({0, 1, 2});       // backed up by 1, 2, 0
  const uint64_t epoch = t.epoch();
  EXPECT_EQ(t.SlotsWithoutLiveBackup({1}, {0, 2}, {}), 0);
  EXPECT_EQ(t.Promote({1}), 3);
  EXPECT_EQ(t.epoch(), epoch + 1) << "one epoch for the whole takeover";
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(t.owner(s), 0) << s;
    EXPECT_EQ(t.backup(s), -1) << s << ": its backup was the dead server";
  }
  for (int s = 3; s < 6; ++s) {
    EXPECT_TRUE(t.Serves(2, s)) << s << ": the backup owns it now";
    EXPECT_EQ(t.backup(s), -1) << s;
  }
  for (int s = 6; s < 9; ++s) {
    EXPECT_EQ(t.owner(s), 2) << s;
    EXPECT_EQ(t.backup(s), 0) << s << ": untouched";
  }
  EXPECT_FALSE(t.OwnsAny(1));
}

TEST(RoutingTable, PromoteLeavesSlotsWithoutALiveBackupToTheirOwner) {
  RoutingTable t = ThreeServers();
  t.AssignBackups({0, 1, 2});
  // 0 and 1 both die: 0's slots are backed up by 1, which is dead too.
  EXPECT_EQ(t.SlotsWithoutLiveBackup({0, 1}, {2}, {}), 3);
  EXPECT_EQ(t.SlotsWithoutLiveBackup({0}, {2}, {}), 3)
      << "1 is not live: 0's slots have no live backup";
  EXPECT_EQ(t.Promote({0, 1}), 3);  // 1's slots go to 2
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(t.owner(s), 0) << s << ": not promoted";
    EXPECT_EQ(t.backup(s), -1) << s;
  }
  for (int s = 3; s < 9; ++s) EXPECT_EQ(t.owner(s), 2) << s;
  for (int s = 6; s < 9; ++s) EXPECT_EQ(t.backup(s), -1) << s;
}

TEST(RoutingTable, PromoteOfAServerThatOwnsNothingOnlyDropsItsCopies) {
  RoutingTable t = TwoServers();
  t.AssignBackups({0, 1});
  t.Move(4, 0);
  t.Move(5, 0);
  t.Move(6, 0);
  t.Move(7, 0);  // 1 owns nothing, and backs up 0-3
  const uint64_t epoch = t.epoch();
  EXPECT_EQ(t.SlotsWithoutLiveBackup({1}, {0}, {}), 0);
  EXPECT_EQ(t.Promote({1}), 0);
  EXPECT_FALSE(t.HasBackups());
  EXPECT_EQ(t.epoch(), epoch + 1);
  EXPECT_EQ(t.Promote({1}), 0);
  EXPECT_EQ(t.epoch(), epoch + 1) << "nothing changed";
}

TEST(RoutingTable, RoundTripsBackupsThroughTheWire) {
  RoutingTable t = ThreeServers();
  wire::RoutingTable w;
  t.ToWire(&w);
  EXPECT_EQ(w.slot_backup_size(), 0) << "no backups: none sent";
  t.AssignBackups({0, 1, 2});
  t.SetBackup(4, -1);
  t.ToWire(&w);
  ASSERT_EQ(w.slot_backup_size(), 9);
  Result<RoutingTable> back = RoutingTable::FromWire(w);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->epoch(), t.epoch());
  for (int s = 0; s < 9; ++s) {
    EXPECT_EQ(back->owner(s), t.owner(s)) << s;
    EXPECT_EQ(back->backup(s), t.backup(s)) << s;
  }
  EXPECT_EQ(back->backup(4), -1);
}

TEST(RoutingTable, APeersTableWithBadBackupsIsRefused) {
  RoutingTable t = ThreeServers();
  t.AssignBackups({0, 1, 2});
  wire::RoutingTable w;
  t.ToWire(&w);
  ASSERT_TRUE(RoutingTable::FromWire(w).ok());

  wire::RoutingTable short_backups = w;
  short_backups.mutable_slot_backup()->RemoveLast();
  Result<RoutingTable> r = RoutingTable::FromWire(short_backups);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("lists 8 backups"), std::string::npos)
      << r.status();

  wire::RoutingTable negative = w;
  negative.set_slot_backup(2, -2);
  r = RoutingTable::FromWire(negative);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("slot 2 has backup server -2"),
            std::string::npos)
      << r.status();

  wire::RoutingTable own = w;
  own.set_slot_backup(7, w.slot_owner(7));
  r = RoutingTable::FromWire(own);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("slot 7 names server 2 as both its "
                                      "owner and its backup"),
            std::string::npos)
      << r.status();

  wire::RoutingTable backups_at_zero;
  backups_at_zero.add_slot_backup(-1);
  EXPECT_FALSE(RoutingTable::FromWire(backups_at_zero).ok());

  t.Move(0, 2);  // a new pair: its epoch goes on the wire
  t.ToWire(&w);
  ASSERT_EQ(w.slot_backup_from_size(), 9);
  wire::RoutingTable short_from = w;
  short_from.mutable_slot_backup_from()->RemoveLast();
  r = RoutingTable::FromWire(short_from);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("9 backups and 8 epochs"),
            std::string::npos)
      << r.status();
  wire::RoutingTable future = w;
  future.set_slot_backup_from(0, w.epoch() + 1);
  r = RoutingTable::FromWire(future);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("slot 0's backup pair is from epoch"),
            std::string::npos)
      << r.status();
}

TEST(RoutingTable, FillBackupsGivesTheSlotsWithoutOneTheLeastLoadedOther) {
  RoutingTable t = ThreeServers();  // 0: slots 0-2, 1: 3-5, 2: 6-8
  t.AssignBackups({0, 1, 2});       // backed up by 1, 2, 0
  EXPECT_EQ(t.FillBackups({0, 1, 2}), 0) << "every slot has one";
  ASSERT_EQ(t.Promote({1}), 3);  // 3-5 go to 2; 0-2 lose their backup
  const uint64_t epoch = t.epoch();
  // Server 1 came back as a new process. 0 backs 6-8 already, so 0's
  // slots go to 1 and 2 in turn, and 2's to 1 and 0 as their counts
  // even out.
  EXPECT_EQ(t.FillBackups({0, 1, 2}), 6);
  EXPECT_EQ(t.epoch(), epoch + 1) << "one epoch for the whole change";
  std::map<int32_t, int> backing;
  for (int s = 0; s < 9; ++s) {
    ASSERT_GE(t.backup(s), 0) << s;
    EXPECT_NE(t.backup(s), t.owner(s)) << s;
    ++backing[t.backup(s)];
  }
  EXPECT_EQ(backing, (std::map<int32_t, int>{{0, 4}, {1, 4}, {2, 1}}));
  EXPECT_EQ(t.backup(0), 1) << "a tie goes to the next id after the owner";
  EXPECT_EQ(t.backup(1), 2) << "then to the one backing fewer";
  for (int s = 0; s < 6; ++s) {
    EXPECT_EQ(t.backup_from(s), t.epoch()) << s << ": a new pair";
  }
  for (int s = 6; s < 9; ++s) {
    EXPECT_EQ(t.backup_from(s), 0u) << s << ": the first assignment's";
  }
  EXPECT_EQ(t.FillBackups({0, 1, 2}), 0);
  EXPECT_EQ(t.epoch(), epoch + 1) << "nothing changed";

  RoutingTable alone = ThreeServers();
  EXPECT_EQ(alone.FillBackups({1}), 6) << "1's own slots have no other";
  for (int s = 3; s < 6; ++s) EXPECT_EQ(alone.backup(s), -1) << s;
}

TEST(RoutingTable, ABackupIsSavingOnlyOnceItsOwnerReportedItWhole) {
  RoutingTable t = ThreeServers();
  t.AssignBackups({0, 1, 2});
  // The first assignment's pairs: the slots were empty, their copies whole.
  EXPECT_EQ(t.SlotsWithoutLiveBackup({0}, {1, 2}, {}), 0);
  t.Move(0, 2);  // slot 0 to 2, backed up by 1 still: a new pair
  const uint64_t moved = t.epoch();
  EXPECT_EQ(t.backup_from(0), moved);
  EXPECT_EQ(t.backup(0), 1);
  EXPECT_EQ(t.SlotsWithoutLiveBackup({2}, {0, 1}, {}), 1)
      << "2 has not said its copy of slot 0 is whole";
  EXPECT_EQ(t.SlotsWithoutLiveBackup({2}, {0, 1}, {{2, moved - 1}}), 1);
  EXPECT_EQ(t.SlotsWithoutLiveBackup({2}, {0, 1}, {{2, moved}}), 0);
  EXPECT_EQ(t.SlotsWithoutLiveBackup({2}, {0, 1}, {{1, moved}}), 1)
      << "the owner's report counts, not the backup's";
}

// The slots without a whole copy, counted in one pass, are the sum of
// each owner's SlotsWithoutLiveBackup: through new pairs, a slot left with
// no backup, reports and deaths.
TEST(RoutingTable, SlotsWithoutCopyIsTheSumOverTheOwners) {
  RoutingTable t = ThreeServers();
  t.AssignBackups({0, 1, 2});
  t.Move(0, 2);
  t.Move(4, 0);
  const auto sum = [&](const std::set<int32_t>& live,
                       const std::map<int32_t, uint64_t>& synced) {
    int32_t n = 0;
    for (int32_t owner : t.Owners()) {
      n += t.SlotsWithoutLiveBackup({owner}, live, synced);
    }
    return n;
  };
  const uint64_t epoch = t.epoch();
  for (const std::set<int32_t>& live :
       {std::set<int32_t>{0, 1, 2}, {0, 1}, {2}, {}}) {
    for (const std::map<int32_t, uint64_t>& synced :
         {std::map<int32_t, uint64_t>{},
          {{2, epoch}},
          {{0, epoch}, {2, epoch}}}) {
      EXPECT_EQ(t.SlotsWithoutCopy(live, synced), sum(live, synced));
    }
  }
  EXPECT_EQ(t.SlotsWithoutCopy({0, 1, 2}, {}), 2) << "the two new pairs";
  EXPECT_EQ(t.SlotsWithoutCopy({0, 1, 2}, {{0, epoch}, {2, epoch}}), 0);
  EXPECT_EQ(t.SlotsWithoutCopy({}, {}), t.num_slots());
}

}  // namespace
}  // namespace ductile
