// The coordinator's cluster state persists itself: a change is written
// once, no change is not written, and a restarted coordinator reads back
// what was written. AckRound: the generic "wait for every ack" round.
#include "coordinator/cluster_state.h"

#include <chrono>
#include <cmath>
#include <set>

#include "coordinator/ack_round.h"
#include "ductile/table.h"
#include "gtest/gtest.h"

namespace ductile {
namespace {

// A coordinator store in memory that counts its writes.
class CountingStore final : public CoordinatorStore {
 public:
  CountingStore(std::optional<wire::CoordinatorState>* saved, int* saves,
                std::optional<wire::DataPlanState>* plan, int* plan_saves)
      : saved_(saved), saves_(saves), plan_(plan), plan_saves_(plan_saves) {}
  Result<std::optional<wire::CoordinatorState>> Load() const override {
    return *saved_;
  }
  Status Save(const wire::CoordinatorState& state) override {
    *saved_ = state;
    ++*saves_;
    return Status::Ok();
  }
  Result<std::optional<wire::DataPlanState>> LoadDataPlan() const override {
    return *plan_;
  }
  Status SaveDataPlan(const wire::DataPlanState& plan) override {
    *plan_ = plan;
    ++*plan_saves_;
    return Status::Ok();
  }

 private:
  std::optional<wire::CoordinatorState>* saved_;
  int* saves_;
  std::optional<wire::DataPlanState>* plan_;
  int* plan_saves_;
};

// Time and a counting coordinator store; nothing else is used.
class StoreOnlyEnv final : public Env {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  int64_t UnixMs() override { return 0; }
  uint64_t RandomU64() override { return 4; }
  int32_t ProcessId() override { return 1; }
  std::unique_ptr<Transport> NewTransport(const std::string&, const Security&,
                                          int) override {
    return nullptr;
  }
  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions&) override {
    return FailedPreconditionError("not here");
  }
  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string&,
                                              int64_t) override {
    return FailedPreconditionError("not here");
  }
  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions&) override {
    return std::unique_ptr<CoordinatorStore>(
        new CountingStore(&saved, &saves, &plan, &plan_saves));
  }

  std::optional<wire::CoordinatorState> saved;
  int saves = 0;
  std::optional<wire::DataPlanState> plan;
  int plan_saves = 0;
};

CoordinatorOptions Durable() {
  CoordinatorOptions o;
  o.state_dir = "/nowhere/coordinator";
  o.num_slots = 16;
  return o;
}

TEST(ClusterState, EveryChangeIsWrittenOnceAndNoChangeIsNotWritten) {
  StoreOnlyEnv env;
  const CoordinatorOptions options = Durable();
  ClusterState state(&env, options);
  ASSERT_TRUE(state.Open().ok());
  EXPECT_FALSE(state.resumed());
  ASSERT_TRUE(state.PersistIfChanged().ok());
  const int first = env.saves;
  ASSERT_TRUE(state.PersistIfChanged().ok());
  EXPECT_EQ(env.saves, first) << "nothing changed";
  // A change anywhere in the durable part, even one no caller thought of
  // saving (a slot moved, a barrier passed), is written.
  wire::ServerEndpoint e;
  e.set_id(0);
  state.routing = RoutingTable::Initial(16, {e});
  ASSERT_TRUE(state.PersistIfChanged().ok());
  EXPECT_EQ(env.saves, first + 1);
  state.routing.Move(3, 0);
  state.barrier_round = 2;
  ASSERT_TRUE(state.PersistIfChanged().ok());
  EXPECT_EQ(env.saves, first + 2);
  // Liveness details are not durable: no write for them.
  Member& m = state.workers[0];
  m.role = wire::ROLE_WORKER;
  m.last_seen = std::chrono::steady_clock::now();
  ASSERT_TRUE(state.PersistIfChanged().ok());
  const int with_worker = env.saves;
  m.last_seen = std::chrono::steady_clock::now();
  m.identity = "somewhere";
  ASSERT_TRUE(state.PersistIfChanged().ok());
  EXPECT_EQ(env.saves, with_worker);
}

// A member's silence under one coordinator carries over to the next: a
// worker that died just before a restart is not given a fresh heartbeat
// timeout by it (restarts in a row would otherwise keep it "alive", and
// every checkpoint waiting for it, for ever).
TEST(ClusterState, ASilenceCarriesOverARestart) {
  StoreOnlyEnv env;
  CoordinatorOptions options = Durable();
  options.heartbeat_timeout_ms = 8000;  // silences kept in steps of 2 s
  const auto now = std::chrono::steady_clock::now();
  {
    ClusterState state(&env, options);
    ASSERT_TRUE(state.Open().ok());
    state.workers[0].role = wire::ROLE_WORKER;
    state.workers[0].last_seen = now - std::chrono::milliseconds(5000);
    state.workers[1].role = wire::ROLE_WORKER;
    state.workers[1].last_seen = now;
    ASSERT_TRUE(state.PersistIfChanged().ok());
  }
  ClusterState again(&env, options);
  ASSERT_TRUE(again.Open().ok());
  const auto silence = [&](int id) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now() - again.workers[id].last_seen)
        .count();
  };
  EXPECT_GE(silence(0), 4000);
  EXPECT_LT(silence(0), 5000 + 2000);
  EXPECT_LT(silence(1), 2000);
}

// A server silent by announcement (restoring a checkpoint, say) when the
// coordinator restarts is given the silence it announced again, not one
// heartbeat timeout: the restore it is busy with outlasts the restart. A
// spell that had ended is not written, and one longer than the
// checkpoint timeout is cut to it.
TEST(ClusterState, AnAnnouncedBusySpellCarriesOverARestart) {
  StoreOnlyEnv env;
  CoordinatorOptions options = Durable();
  options.checkpoint_timeout_ms = 90000;
  const auto now = std::chrono::steady_clock::now();
  {
    ClusterState state(&env, options);
    ASSERT_TRUE(state.Open().ok());
    for (int id : {0, 1, 2}) state.servers[id].role = wire::ROLE_SERVER;
    state.servers[0].busy_ms = 60000;
    state.servers[0].busy_until = now + std::chrono::milliseconds(60000);
    state.servers[1].busy_ms = 60000;  // over: not busy any more
    state.servers[1].busy_until = now - std::chrono::milliseconds(1);
    state.servers[2].busy_ms = 500000;  // as read from an older state
    state.servers[2].busy_until = now + std::chrono::milliseconds(500000);
    const int saves = env.saves;
    ASSERT_TRUE(state.PersistIfChanged().ok());
    EXPECT_EQ(env.saves, saves + 1);
  }
  ClusterState again(&env, options);
  ASSERT_TRUE(again.Open().ok());
  const auto busy_left = [&](int id) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               again.servers[id].busy_until - std::chrono::steady_clock::now())
        .count();
  };
  EXPECT_GT(busy_left(0), 55000);
  EXPECT_LE(busy_left(0), 60000);
  EXPECT_EQ(again.servers[1].busy_until, Member::TimePoint{});
  EXPECT_EQ(again.servers[1].busy_ms, 0);
  EXPECT_EQ(again.servers[2].busy_ms, 90000);
  EXPECT_LE(busy_left(2), 90000);
}

TEST(ClusterState, ARestartedCoordinatorReadsBackWhatWasWritten) {
  StoreOnlyEnv env;
  const CoordinatorOptions options = Durable();
  {
    ClusterState state(&env, options);
    ASSERT_TRUE(state.Open().ok());
    wire::ServerEndpoint e;
    e.set_id(0);
    state.routing = RoutingTable::Initial(16, {e});
    state.generation = 3;
    state.barrier_round = 5;
    state.servers[0].role = wire::ROLE_SERVER;
    state.servers[0].endpoint = e;
    state.target_workers = 4;
    state.replace_workers = {2, 5};  // a policy's requests
    ASSERT_TRUE(state.PersistIfChanged().ok());
  }
  ClusterState again(&env, options);
  ASSERT_TRUE(again.Open().ok());
  EXPECT_TRUE(again.resumed());
  EXPECT_EQ(again.generation, 3u);
  EXPECT_EQ(again.barrier_round, 5);
  EXPECT_EQ(again.routing.epoch(), 1u);
  EXPECT_EQ(again.servers.count(0), 1u);
  EXPECT_FALSE(again.servers[0].dead);
  EXPECT_EQ(again.target_workers, 4);
  EXPECT_EQ(again.replace_workers, (std::set<int32_t>{2, 5}));
}

// A member's stage and the marks beside it (dead, rejoining, awaiting
// slots) come back as they were, in every combination the coordinator
// makes: a worker declared dead while draining, a server dead after its
// drain ended (left), a server rejoining and dead again.
TEST(ClusterState, EveryStageAndMarkIsReadBackAfterARestart) {
  StoreOnlyEnv env;
  const CoordinatorOptions options = Durable();
  using Stage = Member::Stage;
  struct Case {
    wire::Role role;
    Stage stage;
    bool dead, rejoining, awaiting_slots;
  };
  const Case cases[] = {
      {wire::ROLE_WORKER, Stage::kActive, false, false, false},
      {wire::ROLE_WORKER, Stage::kDraining, true, false, false},
      {wire::ROLE_WORKER, Stage::kFinished, true, false, false},
      {wire::ROLE_WORKER, Stage::kLeft, false, false, false},
      {wire::ROLE_SERVER, Stage::kActive, false, false, true},
      {wire::ROLE_SERVER, Stage::kDraining, false, false, false},
      {wire::ROLE_SERVER, Stage::kLeft, true, false, false},
      {wire::ROLE_SERVER, Stage::kActive, true, true, false},
  };
  {
    ClusterState state(&env, options);
    ASSERT_TRUE(state.Open().ok());
    for (int32_t id = 0; id < 8; ++id) {
      const Case& c = cases[id];
      Member& m =
          (c.role == wire::ROLE_SERVER ? state.servers : state.workers)[id];
      m.id = id;
      m.role = c.role;
      m.stage = c.stage;
      m.dead = c.dead;
      m.rejoining = c.rejoining;
      m.awaiting_slots = c.awaiting_slots;
    }
    ASSERT_TRUE(state.PersistIfChanged().ok());
  }
  // One flag per stage in the persisted form, none for an active member.
  ASSERT_TRUE(env.saved.has_value());
  for (const auto& pm : env.saved->members()) {
    EXPECT_LE(pm.finished() + pm.left() + pm.draining(), 1) << pm.id();
  }
  ClusterState again(&env, options);
  ASSERT_TRUE(again.Open().ok());
  for (int32_t id = 0; id < 8; ++id) {
    const Case& c = cases[id];
    const auto& group =
        c.role == wire::ROLE_SERVER ? again.servers : again.workers;
    ASSERT_EQ(group.count(id), 1u) << id;
    const Member& m = group.at(id);
    EXPECT_EQ(m.stage, c.stage) << id;
    EXPECT_EQ(m.dead, c.dead) << id;
    EXPECT_EQ(m.rejoining, c.rejoining) << id;
    EXPECT_EQ(m.awaiting_slots, c.awaiting_slots) << id;
  }
  EXPECT_EQ(again.LiveWorkers(), (std::set<int32_t>{0}));
  EXPECT_EQ(again.LiveServers(), (std::set<int32_t>{4, 5}));
}

// A state written before members had a stage (one flag each for finished,
// left and draining) reads as the stage those flags describe; a worker
// that was drained and then finished had both flags, and is finished.
TEST(ClusterState, AStateWrittenAsFlagsReadsAsStages) {
  StoreOnlyEnv env;
  const CoordinatorOptions options = Durable();
  wire::CoordinatorState old;
  auto add = [&](int32_t id, wire::Role role) {
    auto* pm = old.add_members();
    pm->set_id(id);
    pm->set_role(role);
    return pm;
  };
  add(0, wire::ROLE_WORKER);
  add(1, wire::ROLE_WORKER)->set_finished(true);
  add(2, wire::ROLE_WORKER)->set_left(true);
  auto* draining_dead = add(3, wire::ROLE_WORKER);
  draining_dead->set_draining(true);
  draining_dead->set_dead(true);
  auto* drained_finished = add(4, wire::ROLE_WORKER);
  drained_finished->set_draining(true);
  drained_finished->set_finished(true);
  auto* left_dead = add(5, wire::ROLE_SERVER);
  left_dead->set_left(true);
  left_dead->set_dead(true);
  auto* rejoining = add(6, wire::ROLE_SERVER);
  rejoining->set_rejoining(true);
  rejoining->set_awaiting_slots(true);
  env.saved = old;
  ClusterState state(&env, options);
  ASSERT_TRUE(state.Open().ok());
  using Stage = Member::Stage;
  EXPECT_EQ(state.workers.at(0).stage, Stage::kActive);
  EXPECT_EQ(state.workers.at(1).stage, Stage::kFinished);
  EXPECT_EQ(state.workers.at(2).stage, Stage::kLeft);
  EXPECT_EQ(state.workers.at(3).stage, Stage::kDraining);
  EXPECT_TRUE(state.workers.at(3).dead);
  EXPECT_EQ(state.workers.at(4).stage, Stage::kFinished);
  EXPECT_EQ(state.servers.at(5).stage, Stage::kLeft);
  EXPECT_TRUE(state.servers.at(5).dead);
  EXPECT_EQ(state.servers.at(6).stage, Stage::kActive);
  EXPECT_TRUE(state.servers.at(6).rejoining);
  EXPECT_TRUE(state.servers.at(6).awaiting_slots);
  EXPECT_EQ(state.LiveWorkers(), (std::set<int32_t>{0}));
  EXPECT_TRUE(state.LiveServers().empty());
}

// The job's noise scale adds up the shares of the servers alive with enough
// clocks; a share that is not a finite, non-negative number is left out.
TEST(ClusterState, TheJobsNoiseScaleSumsTheUsableShares) {
  StoreOnlyEnv env;
  const CoordinatorOptions options = Durable();  // outlives the state
  ClusterState state(&env, options);
  ASSERT_TRUE(state.Open().ok());
  EXPECT_EQ(state.JobNoiseScale(), 0.0);
  const auto share = [&](int32_t id, double sq, double trace, uint64_t clocks) {
    Member& m = state.servers[id];
    m.role = wire::ROLE_SERVER;
    m.counters.set_gns_batch_gradient_sq(sq);
    m.counters.set_gns_batch_noise_trace(trace);
    m.counters.set_gns_batch_clocks(clocks);
    return &m;
  };
  share(0, 2, 6, kAdaScaleMinClocks);
  share(1, 2, 2, kAdaScaleMinClocks + 10);
  share(2, 100, 1, kAdaScaleMinClocks - 1);  // too young
  share(3, std::nan(""), 5, 500);            // lies
  share(4, 1, -3, 500);                      // lies
  share(5, 1e308, 1e308, 500)->dead = true;  // gone
  EXPECT_DOUBLE_EQ(state.JobNoiseScale(), 8.0 / 4.0);
  share(6, 1e308, 1e308, 500);  // the sums overflow: no number
  share(7, 1e308, 1e308, 500);
  EXPECT_EQ(state.JobNoiseScale(), 0.0);
}

TEST(ClusterState, TheDataPlanIsWrittenApartAndReadBack) {
  StoreOnlyEnv env;
  const CoordinatorOptions options = Durable();
  {
    ClusterState state(&env, options);
    ASSERT_TRUE(state.Open().ok());
    state.workers[0].role = wire::ROLE_WORKER;
    ASSERT_TRUE(state.PersistIfChanged().ok());
    const int saves = env.saves, plan_saves = env.plan_saves;
    ASSERT_TRUE(state.data_plan.Configure(5, 2).ok());
    const DataPlan::Grant g = state.data_plan.Next(0);
    state.data_plan.Done(0, g.epoch, g.batch, 0);
    state.data_plan.Next(0);
    ASSERT_TRUE(state.PersistIfChanged().ok());
    // A step's change to the plan is not a rewrite of the synced record.
    EXPECT_EQ(env.saves, saves);
    EXPECT_EQ(env.plan_saves, plan_saves + 1);
    ASSERT_TRUE(state.PersistIfChanged().ok());
    EXPECT_EQ(env.plan_saves, plan_saves + 1) << "nothing changed";
  }
  ClusterState again(&env, options);
  ASSERT_TRUE(again.Open().ok());
  EXPECT_EQ(again.data_plan.batches_per_epoch(), 5);
  EXPECT_EQ(again.data_plan.batches_done_in_current(), 1);
  EXPECT_EQ(again.data_plan.holders(), 1u);
  EXPECT_EQ(again.data_plan.Next(0).batch, 1) << "the batch it held";
}

TEST(ClusterState, StateOfAClusterWithOtherSlotsIsRefused) {
  StoreOnlyEnv env;
  CoordinatorOptions options = Durable();
  {
    ClusterState state(&env, options);
    ASSERT_TRUE(state.Open().ok());
    wire::ServerEndpoint e;
    e.set_id(0);
    state.routing = RoutingTable::Initial(16, {e});
    ASSERT_TRUE(state.PersistIfChanged().ok());
  }
  options.num_slots = 32;
  ClusterState other(&env, options);
  EXPECT_EQ(other.Open().code(), StatusCode::kFailedPrecondition);
}

TEST(AckRound, CompletesWhenEveryAwaitedMemberHasAcked) {
  const auto now = std::chrono::steady_clock::now();
  wire::Header message;
  message.set_type(wire::TABLE_CREATE);
  AckRound round(message, {1, 2, 3}, now + std::chrono::seconds(1));
  EXPECT_FALSE(round.Ack(7)) << "not awaited";
  EXPECT_TRUE(round.Ack(1));
  EXPECT_FALSE(round.Ack(1)) << "acked already";
  EXPECT_EQ(round.Missing(), "2, 3");
  round.Forget(3);
  EXPECT_FALSE(round.complete());
  EXPECT_TRUE(round.Ack(2));
  EXPECT_TRUE(round.complete());
  EXPECT_FALSE(round.expired(now));
  EXPECT_TRUE(round.expired(now + std::chrono::seconds(1)));
  EXPECT_EQ(round.message().type(), wire::TABLE_CREATE);
}

}  // namespace
}  // namespace ductile
