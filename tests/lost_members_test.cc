// Members declared dead while their process runs (launch/lost_members.h),
// against scripted statuses and processes: no process, no clock.
#include "launch/lost_members.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace ductile::launch {
namespace {

using Member = LostMembers::Member;
constexpr Member kWorker0{MemberRole::kWorker, 0};
constexpr Member kWorker1{MemberRole::kWorker, 1};
constexpr Member kServer0{MemberRole::kServer, 0};

// The job as the coordinator lists it, and the launcher's processes.
struct Job {
  ClusterStatus status;
  std::map<Member, pid_t> pids;

  void Set(const Member& member, const std::string& state,
           uint64_t incarnation) {
    for (MemberStatus& m : status.members) {
      if (m.role == RoleName(member.first) && m.id == member.second) {
        m.state = state;
        m.incarnation = incarnation;
        return;
      }
    }
    MemberStatus m;
    m.role = RoleName(member.first);
    m.id = member.second;
    m.state = state;
    m.incarnation = incarnation;
    status.members.push_back(m);
  }

  std::vector<Member> Step(LostMembers& lost, int64_t now_ms) const {
    return lost.Step(status, now_ms, [this](const Member& member) {
      const auto it = pids.find(member);
      return it == pids.end() ? pid_t{-1} : it->second;
    });
  }
};

TEST(LostMembers, AMemberDeadForTheGraceWhileItsProcessRunsIsLostOnce) {
  LostMembers lost(1000);
  Job job;
  job.pids = {{kWorker0, 100}, {kWorker1, 101}};
  job.Set(kWorker0, "active", 1);
  job.Set(kWorker1, "active", 2);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  job.Set(kWorker1, "dead", 2);
  EXPECT_TRUE(job.Step(lost, 500).empty());
  EXPECT_EQ(lost.DeadForMs(kWorker1), 0);
  EXPECT_TRUE(job.Step(lost, 1400).empty());
  EXPECT_EQ(lost.DeadForMs(kWorker1), 900);
  EXPECT_EQ(job.Step(lost, 1500), std::vector<Member>{kWorker1});
  // Not again while the same process runs (its kill is under way).
  EXPECT_TRUE(job.Step(lost, 5000).empty());
  EXPECT_EQ(lost.DeadForMs(kWorker0), std::nullopt);
}

TEST(LostMembers, AMemberHeardFromAgainWithinTheGraceIsNotLost) {
  LostMembers lost(1000);
  Job job;
  job.pids = {{kWorker0, 100}};
  job.Set(kWorker0, "dead", 1);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  job.Set(kWorker0, "active", 1);  // it was paused, and is back
  EXPECT_TRUE(job.Step(lost, 900).empty());
  job.Set(kWorker0, "dead", 1);
  // The grace counts from its latest death.
  EXPECT_TRUE(job.Step(lost, 1200).empty());
  EXPECT_TRUE(job.Step(lost, 2100).empty());
  EXPECT_EQ(job.Step(lost, 2200), std::vector<Member>{kWorker0});
}

TEST(LostMembers, ARestartedMemberIsNotBlamedForItsPredecessorsDeath) {
  LostMembers lost(1000);
  Job job;
  job.pids = {{kServer0, 100}};
  job.Set(kServer0, "active", 3);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  // The process died and was restarted; the coordinator still lists the
  // old registration as dead while the new process starts.
  job.Set(kServer0, "dead", 3);
  job.pids[kServer0] = 200;
  for (int64_t t = 100; t <= 10000; t += 500) {
    EXPECT_TRUE(job.Step(lost, t).empty()) << t;
  }
  EXPECT_EQ(lost.DeadForMs(kServer0), std::nullopt);
  // Its own registration, declared dead: lost after the grace.
  job.Set(kServer0, "active", 7);
  EXPECT_TRUE(job.Step(lost, 10100).empty());
  job.Set(kServer0, "dead", 7);
  EXPECT_TRUE(job.Step(lost, 10200).empty());
  EXPECT_EQ(job.Step(lost, 11200), std::vector<Member>{kServer0});
}

TEST(LostMembers, ARegistrationMadeBetweenTwoLooksIsTheNewProcesssOwn) {
  LostMembers lost(1000);
  Job job;
  job.pids = {{kServer0, 100}};
  job.Set(kServer0, "active", 3);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  // Restarted, registered and declared dead, all before the next look.
  job.pids[kServer0] = 200;
  job.Set(kServer0, "dead", 4);
  EXPECT_TRUE(job.Step(lost, 100).empty());
  EXPECT_EQ(job.Step(lost, 1100), std::vector<Member>{kServer0});
}

TEST(LostMembers, AMemberWithNoProcessIsNeverLost) {
  LostMembers lost(1000);
  Job job;  // worker 0 exited (dropped): no process
  job.Set(kWorker0, "dead", 1);
  for (int64_t t = 0; t <= 5000; t += 1000) {
    EXPECT_TRUE(job.Step(lost, t).empty()) << t;
  }
  // The first process of a member not listed before: any registration is
  // its own.
  job.pids[kWorker0] = 300;
  job.Set(kWorker0, "dead", 2);
  EXPECT_TRUE(job.Step(lost, 6000).empty());
  EXPECT_EQ(job.Step(lost, 7000), std::vector<Member>{kWorker0});
}

TEST(LostMembers, OtherStatesAreAlive) {
  LostMembers lost(0);
  Job job;
  job.pids = {{kWorker0, 100}, {kServer0, 101}, {kWorker1, 102}};
  job.Set(kWorker0, "draining", 1);
  job.Set(kServer0, "rejoining", 2);  // declared dead, back: alive
  job.Set(kWorker1, "finished", 3);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  EXPECT_TRUE(job.Step(lost, 100000).empty());
}

}  // namespace
}  // namespace ductile::launch
