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

// The job as the coordinator lists it (each member's state and when it
// was last heard from), and the launcher's processes.
struct Job {
  struct Listed {
    std::string state;
    int64_t heard_ms = 0;
    uint64_t incarnation = 1;
  };
  std::map<Member, Listed> members;
  std::map<Member, LostMembers::Process> processes;

  void Set(const Member& member, const std::string& state, int64_t heard_ms,
           uint64_t incarnation = 1) {
    members[member] = {state, heard_ms, incarnation};
  }

  // A look asked for at `now_ms`.
  std::vector<Member> Step(LostMembers& lost, int64_t now_ms) const {
    ClusterStatus status;
    for (const auto& [member, m] : members) {
      MemberStatus s;
      s.role = RoleName(member.first);
      s.id = member.second;
      s.state = m.state;
      s.last_heartbeat_ms_ago = now_ms - m.heard_ms;
      s.incarnation = m.incarnation;
      status.members.push_back(s);
    }
    return lost.Step(status, now_ms, now_ms, [this](const Member& member) {
      const auto it = processes.find(member);
      return it == processes.end() ? LostMembers::Process{} : it->second;
    });
  }
};

TEST(LostMembers, AMemberDeadForTheGraceWhileItsProcessRunsIsLostOnce) {
  LostMembers lost(1000);
  Job job;
  job.processes = {{kWorker0, {100, 0}}, {kWorker1, {101, 0}}};
  job.Set(kWorker0, "active", 0);
  job.Set(kWorker1, "active", 0);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  job.Set(kWorker1, "dead", 200);  // stopped after its heartbeat at 200
  for (int64_t t = 500; t < 1500; t += 300) {
    EXPECT_TRUE(job.Step(lost, t).empty()) << t;
  }
  EXPECT_EQ(lost.DeadForMs(kWorker1), 900);
  EXPECT_EQ(job.Step(lost, 1500), std::vector<Member>{kWorker1});
  // Not again while the same process runs (its kill is under way).
  EXPECT_TRUE(job.Step(lost, 2000).empty());
  EXPECT_EQ(lost.DeadForMs(kWorker0), std::nullopt);
}

TEST(LostMembers, AMemberHeardFromAgainWithinTheGraceIsNotLost) {
  LostMembers lost(1000);
  Job job;
  job.processes = {{kWorker0, {100, 0}}};
  job.Set(kWorker0, "dead", 10);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  job.Set(kWorker0, "active", 900);  // it was paused, and is back
  EXPECT_TRUE(job.Step(lost, 900).empty());
  job.Set(kWorker0, "dead", 900);
  // The grace counts from its latest death.
  EXPECT_TRUE(job.Step(lost, 1200).empty());
  EXPECT_TRUE(job.Step(lost, 2100).empty());
  EXPECT_EQ(job.Step(lost, 2200), std::vector<Member>{kWorker0});
}

TEST(LostMembers, ARestartedMemberIsNotBlamedForItsPredecessorsDeath) {
  LostMembers lost(1000);
  Job job;
  job.processes = {{kServer0, {100, 0}}};
  job.Set(kServer0, "active", 0, 3);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  // The process, last heard from at 400, died; the one started at 450 in
  // its place has not registered yet (as long as a Slurm queue takes):
  // the coordinator lists the old registration as dead all that time.
  job.Set(kServer0, "dead", 400, 3);
  job.processes[kServer0] = {200, 450};
  for (int64_t t = 500; t <= 10000; t += 500) {
    EXPECT_TRUE(job.Step(lost, t).empty()) << t;
  }
  // A coordinator restarted (or paused) meanwhile lists the old
  // registration as heard from since: it is still not the new process's.
  job.Set(kServer0, "dead", 10000, 3);
  for (int64_t t = 10500; t <= 20000; t += 500) {
    EXPECT_TRUE(job.Step(lost, t).empty()) << t;
  }
  EXPECT_EQ(lost.DeadForMs(kServer0), std::nullopt);
  // Its own registration, heard from, then declared dead: lost after the
  // grace.
  job.Set(kServer0, "dead", 20100, 7);
  EXPECT_TRUE(job.Step(lost, 20200).empty());
  EXPECT_EQ(job.Step(lost, 21200), std::vector<Member>{kServer0});
}

TEST(LostMembers, ALookAfterAGapStartsTheGraceAgain) {
  LostMembers lost(1000);
  Job job;
  job.processes = {{kWorker0, {100, 0}}};
  job.Set(kWorker0, "dead", 10);
  EXPECT_TRUE(job.Step(lost, 100).empty());
  // No answer for longer than kGapMs (the coordinator restarting): the
  // first look after it is no evidence of a death that long.
  const int64_t after = 100 + LostMembers::kGapMs + 1;
  EXPECT_TRUE(job.Step(lost, after).empty());
  EXPECT_EQ(lost.DeadForMs(kWorker0), 0);
  EXPECT_TRUE(job.Step(lost, after + 900).empty());
  EXPECT_EQ(job.Step(lost, after + 1000), std::vector<Member>{kWorker0});
}

TEST(LostMembers, AMemberWithNoProcessIsNeverLost) {
  LostMembers lost(1000);
  Job job;  // worker 0 exited (dropped): no process
  job.Set(kWorker0, "dead", 10);
  for (int64_t t = 0; t <= 5000; t += 1000) {
    EXPECT_TRUE(job.Step(lost, t).empty()) << t;
  }
  // A process started later, whose own registration then dies.
  job.processes[kWorker0] = {300, 5500};
  job.Set(kWorker0, "dead", 5600, 2);
  EXPECT_TRUE(job.Step(lost, 6000).empty());
  EXPECT_EQ(job.Step(lost, 7000), std::vector<Member>{kWorker0});
}

TEST(LostMembers, OtherStatesAreAlive) {
  LostMembers lost(0);
  Job job;
  job.processes = {
      {kWorker0, {100, 0}}, {kServer0, {101, 0}}, {kWorker1, {102, 0}}};
  job.Set(kWorker0, "draining", 10);
  job.Set(kServer0, "rejoining", 10);  // declared dead, back: alive
  job.Set(kWorker1, "finished", 10);
  EXPECT_TRUE(job.Step(lost, 100).empty());
  EXPECT_TRUE(job.Step(lost, 2000).empty());
}

// A worker listed finished whose process runs on past the grace (saving
// its results, or hung at exit) is never lost, only named once as
// lingering; a restarted process is named again only once it has
// finished in turn for the grace.
TEST(LostMembers, AFinishedWorkerWhoseProcessRunsOnIsNamedOnceNeverLost) {
  LostMembers lost(1000);
  Job job;
  job.processes = {{kWorker0, {100, 0}}, {kWorker1, {101, 0}}};
  job.Set(kWorker0, "finished", 0);
  job.Set(kWorker1, "active", 0);
  EXPECT_TRUE(job.Step(lost, 0).empty());
  EXPECT_TRUE(lost.lingering().empty());
  EXPECT_TRUE(job.Step(lost, 900).empty());
  EXPECT_TRUE(lost.lingering().empty());
  EXPECT_TRUE(job.Step(lost, 1000).empty());
  EXPECT_EQ(lost.lingering(), std::vector<Member>{kWorker0});
  EXPECT_TRUE(job.Step(lost, 5000).empty());
  EXPECT_TRUE(lost.lingering().empty());
  // A process that ended is not lingering; its successor starts afresh.
  job.processes[kWorker0] = {200, 6000};
  job.Set(kWorker0, "finished", 6500, 2);
  EXPECT_TRUE(job.Step(lost, 7000).empty());
  EXPECT_TRUE(lost.lingering().empty());
  EXPECT_TRUE(job.Step(lost, 8000).empty());
  EXPECT_EQ(lost.lingering(), std::vector<Member>{kWorker0});
}

}  // namespace
}  // namespace ductile::launch
