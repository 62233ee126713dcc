// ParseKillSchedule: the syntax of `ductile local --kill_schedule`, its
// errors, and how random kills are placed. No process is started.
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "launch/local_launcher.h"

namespace ductile::launch {
namespace {

using Role = KillEvent::Role;

KillScheduleContext Cluster(int servers, int workers, uint64_t seed = 1,
                            int64_t estimated_clocks = 1000) {
  KillScheduleContext c;
  c.num_servers = servers;
  c.num_workers = workers;
  c.seed = seed;
  c.estimated_clocks = estimated_clocks;
  return c;
}

// The error of parsing `spec`, or "" when it parses.
std::string ErrorOf(const std::string& spec,
                    const KillScheduleContext& context = Cluster(2, 3)) {
  auto events = ParseKillSchedule(spec, context);
  if (events.ok()) return "";
  EXPECT_EQ(events.status().code(), StatusCode::kInvalidArgument)
      << events.status();
  return events.status().message();
}

TEST(KillSchedule, AnEmptySpecKillsNothing) {
  auto events = ParseKillSchedule("", Cluster(2, 2));
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
  events = ParseKillSchedule("  ", Cluster(2, 2));
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
}

TEST(KillSchedule, ParsesEachRoleAndOrdersTheEventsByClock) {
  auto events = ParseKillSchedule(
      "worker:2@clock=80, server:1@clock=50,coordinator@clock=65",
      Cluster(2, 3));
  ASSERT_TRUE(events.ok()) << events.status();
  const std::vector<KillEvent> expected = {{Role::kServer, 1, 50},
                                           {Role::kCoordinator, 0, 65},
                                           {Role::kWorker, 2, 80}};
  EXPECT_EQ(*events, expected);
}

TEST(KillSchedule, KeepsTheWrittenOrderOfEventsAtTheSameClock) {
  auto events =
      ParseKillSchedule("server:1@clock=5,server:0@clock=5", Cluster(2, 2));
  ASSERT_TRUE(events.ok()) << events.status();
  const std::vector<KillEvent> expected = {{Role::kServer, 1, 5},
                                           {Role::kServer, 0, 5}};
  EXPECT_EQ(*events, expected);
}

TEST(KillSchedule, AServerMayBeKilledMoreThanOnce) {
  auto events =
      ParseKillSchedule("server:0@clock=10,server:0@clock=20", Cluster(1, 2));
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST(KillSchedule, NamesTargetsForLogLines) {
  EXPECT_EQ(KillTargetName({Role::kServer, 1, 50}), "server 1");
  EXPECT_EQ(KillTargetName({Role::kWorker, 0, 50}), "worker 0");
  EXPECT_EQ(KillTargetName({Role::kCoordinator, 0, 50}), "coordinator");
}

TEST(KillSchedule, RejectsAnUnknownRole) {
  const std::string e = ErrorOf("scheduler:0@clock=5");
  EXPECT_NE(e.find("unknown role 'scheduler'"), std::string::npos) << e;
  EXPECT_NE(e.find("scheduler:0@clock=5"), std::string::npos) << e;
}

TEST(KillSchedule, RejectsIdsOutsideTheCluster) {
  std::string e = ErrorOf("server:2@clock=5", Cluster(2, 3));
  EXPECT_NE(e.find("server 2 does not exist"), std::string::npos) << e;
  EXPECT_NE(e.find("ids 0-1"), std::string::npos) << e;
  e = ErrorOf("worker:3@clock=5", Cluster(2, 3));
  EXPECT_NE(e.find("worker 3 does not exist"), std::string::npos) << e;
  EXPECT_NE(ErrorOf("worker:-1@clock=5"), "");
  EXPECT_NE(ErrorOf("server:99999999999999999999@clock=5"), "");
}

TEST(KillSchedule, RejectsAMissingOrBadClock) {
  EXPECT_NE(ErrorOf("server:1").find("missing '@clock=N'"), std::string::npos);
  EXPECT_NE(ErrorOf("coordinator").find("missing '@clock=N'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("server:1@clock=").find("clock N >= 1"), std::string::npos);
  EXPECT_NE(ErrorOf("server:1@clock=0").find("clock N >= 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf("server:1@clock=5x").find("clock N >= 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf("server:1@step=5").find("'@clock='"), std::string::npos);
}

TEST(KillSchedule, RejectsMissingIdsAndGarbage) {
  EXPECT_NE(ErrorOf("server@clock=5").find("missing id"), std::string::npos);
  EXPECT_NE(ErrorOf("server:one@clock=5").find("bad id 'one'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("coordinator:0@clock=5").find("takes no id"),
            std::string::npos);
  EXPECT_NE(ErrorOf("server:1@clock=5,,worker:0@clock=9").find("empty item"),
            std::string::npos);
  EXPECT_NE(ErrorOf("server:1@clock=5,").find("empty item"), std::string::npos);
  EXPECT_NE(ErrorOf("%%%"), "");
}

TEST(KillSchedule, RejectsKillingAWorkerTwiceOrEveryWorker) {
  EXPECT_NE(ErrorOf("worker:1@clock=5,worker:1@clock=9").find("already"),
            std::string::npos);
  EXPECT_NE(ErrorOf("worker:0@clock=5,worker:1@clock=9", Cluster(2, 2))
                .find("every worker"),
            std::string::npos);
}

TEST(KillSchedule, RandomKillsFallInTheGivenRange) {
  auto events = ParseKillSchedule("random:50@clock=20-30", Cluster(2, 2));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 50u);
  for (const KillEvent& e : *events) {
    EXPECT_GE(e.clock, 20);
    EXPECT_LE(e.clock, 30);
  }
  EXPECT_TRUE(std::is_sorted(events->begin(), events->end(),
                             [](const KillEvent& a, const KillEvent& b) {
                               return a.clock < b.clock;
                             }));
}

// Without a range, kills fall from clock 10 to four fifths of the job's
// estimated length: none is left for the job's end, where the workers wait
// at the final barrier and every kill due would fire at once.
TEST(KillSchedule, RandomKillsWithoutARangeSpanFromClockTenToFourFifths) {
  auto events = ParseKillSchedule("random:200", Cluster(2, 2, 7, 50));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 200u);
  for (const KillEvent& e : *events) {
    EXPECT_GE(e.clock, 10);
    EXPECT_LE(e.clock, 40);
  }
  EXPECT_EQ(events->front().clock, 10) << "200 draws from 31 clocks";
  EXPECT_EQ(events->back().clock, 40) << "200 draws from 31 clocks";
  EXPECT_NE(ErrorOf("random:2", Cluster(2, 2, 1, 12)).find("only 12 clocks"),
            std::string::npos);
}

TEST(KillSchedule, RandomKillsNeedARangeWhenTheJobLengthIsUnknownOrShort) {
  EXPECT_NE(ErrorOf("random:2", Cluster(2, 2, 1, 0)).find("random:K@clock=A-B"),
            std::string::npos);
  EXPECT_NE(ErrorOf("random:2", Cluster(2, 2, 1, 5)).find("only 5 clocks"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("random:2@clock=1-3", Cluster(2, 2, 1, 0)), "");
}

TEST(KillSchedule, RejectsBadRandomCountsAndRanges) {
  EXPECT_NE(ErrorOf("random:0"), "");
  EXPECT_NE(ErrorOf("random"), "");
  EXPECT_NE(ErrorOf("random:x"), "");
  EXPECT_NE(ErrorOf("random:2@clock=30-20"), "");
  EXPECT_NE(ErrorOf("random:2@clock=0-20"), "");
  EXPECT_NE(ErrorOf("random:2@clock=20"), "");
  EXPECT_NE(ErrorOf("random:2@clock=a-b"), "");
}

TEST(KillSchedule, TheSameSeedGivesTheSameScheduleAndAnotherSeedAnother) {
  auto a = ParseKillSchedule("random:20", Cluster(3, 4, 11));
  auto b = ParseKillSchedule("random:20", Cluster(3, 4, 11));
  auto c = ParseKillSchedule("random:20", Cluster(3, 4, 12));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(KillSchedule, RandomKillsReachServersTheCoordinatorAndSpareWorkers) {
  // 6 workers: random kills may take up to 4 of them (2 must remain after
  // each) and never the same one twice.
  auto events = ParseKillSchedule("random:300", Cluster(2, 6, 3, 5000));
  ASSERT_TRUE(events.ok()) << events.status();
  int servers = 0, coordinators = 0;
  std::vector<int> worker_kills(6, 0);
  for (const KillEvent& e : *events) {
    if (e.role == Role::kServer) {
      ++servers;
      EXPECT_LT(e.id, 2);
    } else if (e.role == Role::kCoordinator) {
      ++coordinators;
    } else {
      ++worker_kills[e.id];
    }
  }
  EXPECT_GT(servers, 0);
  EXPECT_GT(coordinators, 0);
  int workers = 0;
  for (int k : worker_kills) {
    EXPECT_LE(k, 1);
    workers += k;
  }
  EXPECT_EQ(workers, 4);
}

TEST(KillSchedule, RandomKillsNeverLeaveFewerThanTwoWorkers) {
  // 2 workers: none may be killed. 3 workers, one killed by name: no more.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto two = ParseKillSchedule("random:10", Cluster(1, 2, seed));
    ASSERT_TRUE(two.ok()) << two.status();
    for (const KillEvent& e : *two) EXPECT_NE(e.role, Role::kWorker);
    auto three =
        ParseKillSchedule("worker:0@clock=500,random:10", Cluster(1, 3, seed));
    ASSERT_TRUE(three.ok()) << three.status();
    int workers = 0;
    for (const KillEvent& e : *three) workers += e.role == Role::kWorker;
    EXPECT_EQ(workers, 1);
  }
}

TEST(KillSchedule, RandomKillsCombineWithNamedOnes) {
  auto events = ParseKillSchedule(
      "server:0@clock=15,random:3@clock=100-200,coordinator@clock=300",
      Cluster(2, 2));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 5u);
  EXPECT_EQ(events->front(), (KillEvent{Role::kServer, 0, 15}));
  EXPECT_EQ(events->back(), (KillEvent{Role::kCoordinator, 0, 300}));
}

}  // namespace
}  // namespace ductile::launch
