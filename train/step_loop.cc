#include "train/step_loop.h"

#include <utility>

#include "train/worker_policy_runner.h"

namespace ductile::train {

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

const char* RuleName(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kSgd:
      return "sgd";
    case UpdateRule::kMomentum:
      return "momentum";
    case UpdateRule::kAdaGrad:
      return "adagrad";
    case UpdateRule::kAdam:
      return "adam";
    default:
      return "other";
  }
}

// The schedule of the tables `o` makes, for `world` workers that take
// `batches_per_epoch` batches an epoch between them; a table that exists
// already (made before this worker joined) keeps its own.
LearningRateSchedule TableSchedule(Client& client, const std::string& table,
                                   const TrainerOptions& o,
                                   int64_t batches_per_epoch, int world) {
  if (Result<TableInfo> existing = client.GetTable(table); existing.ok()) {
    return existing->options.lr_schedule;
  }
  return ScheduleInClocks(
      o, static_cast<double>(batches_per_epoch) / std::max(1, world));
}

Status CheckLoss(double loss, int epoch, int64_t clock) {
  if (std::isfinite(loss) && loss < 1e6) return Status::Ok();
  return FailedPreconditionError(
      "training diverged at epoch " + std::to_string(epoch + 1) + ", clock " +
      std::to_string(clock) + " (loss " + std::to_string(loss) +
      "); lower --learning_rate");
}

// --------------------------------------------------------- fault tolerance

// A step failed: if it is because the job rolls back (a server died),
// waits for the rollback and restores the data position; otherwise, or if
// no rollback comes, returns the step's error.
// How long to wait for a rollback after a call failed with `code` (0: the
// failure is not one a rollback explains).
int64_t RecoveryWaitMs(StatusCode code) {
  if (code == StatusCode::kAborted) {
    return 300000;  // a rollback was announced: restoring may be slow
  }
  if (code == StatusCode::kDeadlineExceeded ||
      code == StatusCode::kUnavailable) {
    return 10000;  // maybe a server died and nobody has said so yet
  }
  return 0;
}

Status RecoverOrFail(Client& client, const Status& failed, DataPosition& data,
                     bool lead) {
  const int64_t wait_ms = RecoveryWaitMs(failed.code());
  if (wait_ms == 0) return failed;
  Result<Client::Recovery> r = client.AwaitRecovery(wait_ms);
  if (!r.ok()) return failed;
  DUCTILE_RETURN_IF_ERROR(data.Restore(r->resume_state));
  if (lead) {
    std::printf(
        "rolled back to the checkpoint at clock %lld after a "
        "failure (%s); resuming\n",
        static_cast<long long>(r->clock), failed.message().c_str());
    std::fflush(stdout);
  }
  return Status::Ok();
}

// A worker's start: `create_tables`, then, unless it joins a running job,
// the barrier where every worker starts together. A server dying meanwhile
// aborts these calls as it would a step's: the worker waits for the
// rollback and starts again (tables are created idempotently).
Status StartUp(Client& client, const std::function<Status()>& create_tables) {
  constexpr int kAttempts = 10;
  for (int attempt = 1;; ++attempt) {
    Status s = create_tables();
    if (s.ok() && client.clock() == 0) s = client.Barrier();
    if (s.ok() || client.shutting_down()) return s;
    const int64_t wait_ms = RecoveryWaitMs(s.code());
    if (wait_ms == 0 || attempt == kAttempts) return s;
    Result<Client::Recovery> r = client.AwaitRecovery(wait_ms);
    if (!r.ok()) return s;
    std::printf(
        "worker %d: the job rolled back while it started (%s); starting "
        "again\n",
        client.worker_id(), s.message().c_str());
    std::fflush(stdout);
  }
}

bool IsLead(const Client& client) {
  const std::vector<int32_t> live = client.live_workers();
  return live.empty() ? client.worker_id() == 0
                      : live.front() == client.worker_id();
}

// The barrier after a worker's last step. Workers do not all end at one
// clock (one joined late, shares differ by a batch): one that waits here
// keeps its clock moving, pushing nothing, so that it never holds back the
// others' staleness bound or BSP clocks while they finish.
Status FinalBarrier(Client& client, DataPosition& data) {
  std::atomic<bool> passed{false};
  Status s;
  std::thread barrier([&] {
    s = client.Barrier();
    passed.store(true);
  });
  while (!passed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (passed.load()) break;
    client.Clock();
    data.Record();  // where it is (done) at every clock
  }
  barrier.join();
  return s;
}

// Runs one worker's training. Per step: records the data position (the
// resume state), takes the plan's next batch, runs `step`, reports the
// batch trained and clocks, and reports progress. The lead worker reports
// `metric` (`evaluate`) for each epoch once it learns the epoch is done
// (a step later, when another worker's batch completed it). When the plan has
// no free batch but others still hold some, the worker keeps its clock moving
// and asks again. Ends after the final barrier, once every worker's last
// push is in. A step failed by a rollback resumes from the checkpoint,
// after `abandon` drops what the step left in flight; a job shut down
// (`ductile shutdown`) ends the worker's part, as a drain does; any other
// error is returned.
Status RunSteps(Client& client, const TrainerOptions& o, DataPosition& data,
                Progress& progress, const StepFn& step, const char* metric,
                const std::function<Result<double>()>& evaluate,
                const std::function<void()>& abandon) {
  WorkerPolicyRunner policies(client, data, o.worker_policies);
  std::vector<size_t> batch;
  // Epochs done whose metric was reported (or that ended before this
  // worker led).
  int64_t reported = 0;
  auto report_epochs = [&]() -> Status {
    if (data.epochs_done() <= reported) return Status::Ok();
    progress.set_lead(IsLead(client));
    if (!progress.lead()) {
      reported = data.epochs_done();
      return Status::Ok();
    }
    Result<double> value = evaluate();
    DUCTILE_RETURN_IF_ERROR(value.status());
    for (; reported < data.epochs_done(); ++reported) {
      progress.Epoch(static_cast<int>(reported), client.clock(), metric,
                     *value);
    }
    return Status::Ok();
  };
  bool waited = false;  // the last attempt found no batch
  auto one_step = [&]() -> Status {
    data.Record();
    // Once per step, not at every attempt while waiting for a batch.
    if (!waited) policies.BeforeStep(data.epochs_done());
    int epoch = 0;
    DUCTILE_ASSIGN_OR_RETURN(const bool have, data.Current(&batch, &epoch));
    waited = !have;
    if (!have) {
      if (data.done()) return report_epochs();
      // The last batches are in others' hands (one may die and free its).
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      client.Clock();
      return Status::Ok();
    }
    client.SetPushWeight(data.batches_in_step()).IgnoreError();  // 1 - 64
    Result<float> loss = step(batch, epoch);
    DUCTILE_RETURN_IF_ERROR(loss.status());
    ++data.steps;
    const int32_t in_step = data.batches_in_step();  // Trained() clears it
    data.batches += static_cast<uint64_t>(in_step);
    data.samples += static_cast<int64_t>(batch.size());
    const bool stop = o.max_samples > 0 && data.samples >= o.max_samples;
    DUCTILE_RETURN_IF_ERROR(data.Trained(stop));
    client.RecordSamples(batch.size());
    client.RecordLoss(*loss);
    client.Clock();
    progress.set_lead(IsLead(client));
    progress.Step(client, epoch, client.clock(), *loss, batch.size(),
                  data.steps, data.batches, o.log_every, stop);
    policies.AfterStep(epoch, in_step, *loss, data.epochs_done());
    return report_epochs();
  };
  // The job shut down under this worker (`ductile shutdown`): out of it,
  // with nothing left to do; true when that explains `s`.
  auto shut_down = [&](const Status& s) {
    if (s.ok() || !client.shutting_down()) return false;
    if (!data.left) {
      std::printf("worker %d: the job was shut down at clock %lld; stopping\n",
                  client.worker_id(), static_cast<long long>(client.clock()));
      std::fflush(stdout);
      data.left = true;
    }
    return true;
  };
  // Takes the rollback that explains `s`; Ok with data.left set when the
  // job was shut down instead (before the wait for a rollback, or during).
  auto recover = [&](const Status& s) -> Status {
    if (shut_down(s)) return Status::Ok();
    Status r = RecoverOrFail(client, s, data, progress.lead());
    return shut_down(r) ? Status::Ok() : r;
  };
  while (true) {
    const bool training = !data.done();
    if (training && (client.leave_requested() || policies.leave())) {
      // Drained: out of the job at this clock, its pushes so far kept and
      // the batch it held back in the plan.
      Status s = client.Leave();
      if (s.ok()) {
        std::printf("worker %d left the job at clock %lld (%s)\n",
                    client.worker_id(), static_cast<long long>(client.clock()),
                    policies.leave() ? "a worker policy asked" : "drained");
        std::fflush(stdout);
        data.left = true;
        return Status::Ok();
      }
      DUCTILE_RETURN_IF_ERROR(recover(s));
      if (data.left) return Status::Ok();
      continue;
    }
    // After the last step, every worker's last push is in before the final
    // evaluation. A checkpoint may be taken at the final clock meanwhile:
    // it needs this worker's position there.
    if (!training) data.Record();
    Status s = training ? one_step() : FinalBarrier(client, data);
    if (s.ok() && !training) return Status::Ok();
    if (s.ok()) continue;
    abandon();
    DUCTILE_RETURN_IF_ERROR(recover(s));
    if (data.left) return Status::Ok();
  }
}

}  // namespace ductile::train
