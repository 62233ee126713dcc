// The launchers' reconcile loop (launch/reconciler.h) against a scripted
// provider and drainer: no process, no socket, no clock.
#include "launch/reconciler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ductile::launch {
namespace {

// Members by role: started ids, which count (not drained), which are gone.
class ScriptedProvider final : public Provider {
 public:
  Result<std::vector<int32_t>> Grow(MemberRole role, int32_t count) override {
    ++grows;
    if (!fail_next.ok()) return std::exchange(fail_next, Status::Ok());
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < count && Started(role) < max; ++i) {
      const int32_t id = Started(role);
      started[Index(role)].push_back(id);
      ids.push_back(id);
    }
    return ids;
  }
  std::vector<int32_t> Members(MemberRole role, const ClusterStatus&) override {
    std::vector<int32_t> ids;
    for (const int32_t id : started[Index(role)]) {
      if (!drained[Index(role)].contains(id) &&
          !gone[Index(role)].contains(id)) {
        ids.push_back(id);
      }
    }
    return ids;
  }
  bool Gone(MemberRole role, int32_t id) override {
    return gone[Index(role)].contains(id);
  }
  void Shrink(MemberRole role, const std::vector<int32_t>& staying,
              const std::vector<int32_t>& leaving) override {
    last_staying = staying;
    for (const int32_t id : leaving) drained[Index(role)].insert(id);
  }
  void Retire(MemberRole role, int32_t id) override {
    drained[Index(role)].insert(id);
  }
  void Keep(MemberRole role, int32_t id) override {
    drained[Index(role)].erase(id);
  }
  bool Settle(MemberRole role, const ClusterStatus&,
              const std::vector<int32_t>& keep,
              std::vector<int32_t>* drain) override {
    if (role == MemberRole::kWorker) kept_by_settle = keep;
    return settling;
  }

  // Starts `n` members of `role` as a launcher does at first.
  void StartWith(MemberRole role, int n) {
    for (int i = 0; i < n; ++i) started[Index(role)].push_back(Started(role));
  }
  int32_t Started(MemberRole role) const {
    return static_cast<int32_t>(started[Index(role)].size());
  }
  static int Index(MemberRole role) { return static_cast<int>(role); }

  std::vector<int32_t> started[2];
  std::set<int32_t> drained[2];
  std::set<int32_t> gone[2];
  std::vector<int32_t> last_staying;
  std::vector<int32_t> kept_by_settle;
  int32_t max = 100;  // ids stop here
  int grows = 0;
  bool settling = false;
  Status fail_next;
};

// Records the drains asked; the test answers them.
class ScriptedDrainer final : public Drainer {
 public:
  void Drain(MemberRole role, int32_t id) override {
    asked.push_back({role, id});
  }
  std::vector<Outcome> Answered() override {
    return std::exchange(answers, {});
  }
  void Answer(MemberRole role, int32_t id, Status status) {
    answers.push_back(Outcome{role, id, std::move(status)});
  }
  std::vector<std::pair<MemberRole, int32_t>> asked;
  std::vector<Outcome> answers;
};

constexpr MemberRole kWorker = MemberRole::kWorker;
constexpr MemberRole kServer = MemberRole::kServer;

struct Fixture {
  Fixture() {
    provider.StartWith(kServer, 2);
    provider.StartWith(kWorker, 2);
  }
  ScriptedProvider provider;
  ScriptedDrainer drainer;
  std::vector<std::string> lines;
  Reconciler reconciler{
      &provider, &drainer,
      [this](const std::string& source, const std::string& line) {
        lines.push_back(source + ": " + line);
      }};
};

MemberStatus Worker(int32_t id, const std::string& state) {
  MemberStatus m;
  m.id = id;
  m.role = "worker";
  m.alive = true;
  m.state = state;
  m.clock = 7;
  return m;
}

TEST(Reconciler, ANewTargetStartsMembersOnce) {
  Fixture f;
  ClusterStatus status;
  status.target_workers = 4;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.started[0], (std::vector<int32_t>{0, 1, 2, 3}));
  ASSERT_EQ(f.lines.size(), 1u);
  EXPECT_EQ(f.lines[0],
            "resize: workers 2 -> 4 at clock 0: started worker 2; started "
            "worker 3;");
  // Acted on once, whatever the members are later.
  f.provider.gone[0].insert(3);
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.grows, 1);
  EXPECT_TRUE(f.drainer.asked.empty());
}

TEST(Reconciler, AShrinkDrainsTheNewestFirstAndAnswersAreLogged) {
  Fixture f;
  f.provider.StartWith(kServer, 2);  // servers 0-3
  ClusterStatus status;
  status.members = {Worker(0, "active")};
  status.target_servers = 2;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  ASSERT_EQ(f.drainer.asked.size(), 2u);
  EXPECT_EQ(f.drainer.asked[0], std::make_pair(kServer, 3));
  EXPECT_EQ(f.drainer.asked[1], std::make_pair(kServer, 2));
  EXPECT_EQ(f.provider.last_staying, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(f.lines.back(),
            "resize: servers 4 -> 2 at clock 7: draining server 3; draining "
            "server 2;");
  EXPECT_TRUE(f.reconciler.Busy());
  f.drainer.Answer(kServer, 3, Status::Ok());
  f.drainer.Answer(kServer, 2, Status::Ok());
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.lines[f.lines.size() - 2], "resize: drained server 3");
  EXPECT_EQ(f.lines.back(), "resize: drained server 2");
  EXPECT_FALSE(f.reconciler.Busy());
}

TEST(Reconciler, ARefusedDrainKeepsTheMemberAndADrainPastItsWaitGoesOn) {
  Fixture f;
  ClusterStatus status;
  status.target_servers = 1;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  ASSERT_EQ(f.drainer.asked.size(), 1u);
  EXPECT_TRUE(f.provider.drained[1].contains(1));
  f.drainer.Answer(kServer, 1,
                   FailedPreconditionError("the only server cannot drain"));
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_FALSE(f.provider.drained[1].contains(1));  // it stays
  EXPECT_EQ(f.lines.back(),
            "resize: could not drain server 1: the only server cannot drain");

  status.target_servers = 2;  // back to 2: nothing to start
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  status.target_servers = 1;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  f.drainer.Answer(kServer, 1, DeadlineExceededError("still moving slots"));
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_TRUE(f.provider.drained[1].contains(1));  // goes on
}

TEST(Reconciler, ADrainAnsweredNotFoundIsAskedAgainWhileTheMemberMayCome) {
  Fixture f;
  ClusterStatus status;
  status.target_workers = 1;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  ASSERT_EQ(f.drainer.asked.size(), 1u);
  f.drainer.Answer(kWorker, 1, NotFoundError("no worker 1"));
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  ASSERT_EQ(f.drainer.asked.size(), 2u);  // asked again
  EXPECT_EQ(f.drainer.asked[1], std::make_pair(kWorker, 1));
  // Gone for good: not asked again.
  f.provider.gone[0].insert(1);
  f.drainer.Answer(kWorker, 1, NotFoundError("no worker 1"));
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.drainer.asked.size(), 2u);
  EXPECT_FALSE(f.reconciler.Busy());
}

TEST(Reconciler, AReplacementDrainsTheOldWorkerOnceTheNewIsActive) {
  Fixture f;
  ClusterStatus status;
  status.members = {Worker(0, "active"), Worker(1, "active")};
  status.replace_workers = {0};
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.started[0], (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(f.lines.back(), "replace: started worker 2 in place of worker 0");
  EXPECT_TRUE(f.drainer.asked.empty());
  // Asked again while the new one joins: nothing more.
  status.members.push_back(Worker(2, "joining"));
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.grows, 1);
  EXPECT_TRUE(f.drainer.asked.empty());

  status.members.back().state = "active";
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  ASSERT_EQ(f.drainer.asked.size(), 1u);
  EXPECT_EQ(f.drainer.asked[0], std::make_pair(kWorker, 0));
  EXPECT_TRUE(f.provider.drained[0].contains(0));
  EXPECT_EQ(f.lines.back(), "replace: worker 2 is active; draining worker 0");
}

TEST(Reconciler, AWorkerAndItsReplacementCountAsOneAndNeitherIsDrained) {
  Fixture f;
  f.provider.StartWith(kWorker, 1);  // workers 0-2
  ClusterStatus status;
  status.members = {Worker(0, "active"), Worker(1, "active"),
                    Worker(2, "active")};
  status.replace_workers = {2};
  ASSERT_TRUE(f.reconciler.Step(status).ok());  // worker 3 for worker 2
  status.replace_workers.clear();
  status.target_workers = 2;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  // 0, 1 and the pair (2, 3): 3 -> 2 drains worker 1, the newest unpaired.
  ASSERT_EQ(f.drainer.asked.size(), 1u);
  EXPECT_EQ(f.drainer.asked[0], std::make_pair(kWorker, 1));
  EXPECT_EQ(f.lines.back(),
            "resize: workers 3 -> 2 at clock 7: draining worker 1;");
}

TEST(Reconciler, AReplacementGoneBeforeItIsActiveIsStartedAgainThenGivenUp) {
  Fixture f;
  ClusterStatus status;
  status.members = {Worker(0, "active"), Worker(1, "active")};
  status.replace_workers = {1};
  ASSERT_TRUE(f.reconciler.Step(status).ok());  // worker 2
  for (int32_t id = 2; id < 2 + Reconciler::kReplaceTries; ++id) {
    f.provider.gone[0].insert(id);
    ASSERT_TRUE(f.reconciler.Step(status).ok());
  }
  EXPECT_EQ(f.provider.Started(kWorker), 2 + Reconciler::kReplaceTries);
  EXPECT_EQ(f.lines.back(),
            "replace: worker 4 died before it was active; giving up on "
            "replacing worker 1 after 3 tries");
  // Kept: not replaced again though still asked.
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.Started(kWorker), 2 + Reconciler::kReplaceTries);
  EXPECT_TRUE(f.drainer.asked.empty());
}

TEST(Reconciler, AWorkerThatCannotBeReplacedIsNotAskedAgain) {
  Fixture f;
  f.provider.max = 2;  // no id past worker 1
  ClusterStatus status;
  status.members = {Worker(0, "active"), Worker(1, "active")};
  status.replace_workers = {0};
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.lines.back(),
            "replace: cannot replace worker 0: no worker can be started in "
            "its place");
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.grows, 1);
}

TEST(Reconciler, AProviderErrorLeavesTheTargetToTheNextStep) {
  Fixture f;
  ClusterStatus status;
  status.target_workers = 3;
  f.provider.fail_next = UnavailableError("kubectl exited with 1");
  EXPECT_EQ(f.reconciler.Step(status).code(), StatusCode::kUnavailable);
  EXPECT_EQ(f.provider.Started(kWorker), 2);
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.Started(kWorker), 3);
}

TEST(Reconciler, NothingNewStartsWhileTheProviderSettles) {
  Fixture f;
  ClusterStatus status;
  status.members = {Worker(0, "active"), Worker(1, "active")};
  status.target_workers = 3;
  status.replace_workers = {0};
  f.provider.settling = true;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.grows, 0);
  f.provider.settling = false;
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.grows, 2);  // the target, then the replacement
  // The replacement under way is one the provider must keep.
  ASSERT_TRUE(f.reconciler.Step(status).ok());
  EXPECT_EQ(f.provider.kept_by_settle, (std::vector<int32_t>{3}));
}

TEST(Reconciler, TheLaunchersScheduleResizesAsATargetDoes) {
  Fixture f;
  ClusterStatus status;
  status.members = {Worker(0, "active")};
  ASSERT_TRUE(f.reconciler.Resize(kServer, 3, "resize-schedule", status).ok());
  EXPECT_EQ(f.provider.Started(kServer), 3);
  EXPECT_EQ(f.lines.back(),
            "resize-schedule: servers 2 -> 3 at clock 7: started server 2;");
}

}  // namespace
}  // namespace ductile::launch
