// WorkerPolicyRunner: runs the worker policies of the training apps
// (TrainerOptions::worker_policies, ductile/policy.h) between one worker's
// steps, and carries out what they ask: a worker's own batches a step
// (through its DataPosition), a table's consistency model, leaving the job.
//
// Example (one worker's loop):
//   WorkerPolicyRunner policies(client, data, options.worker_policies);
//   while (...) {
//     if (policies.leave()) { ... client.Leave() ...; break; }
//     policies.BeforeStep(data.epochs_done());
//     ... the step, which trained `in_step` of the plan's batches ...
//     policies.AfterStep(epoch, in_step, loss, data.epochs_done());
//   }
//
// Thread safety: not thread-safe; the hooks run on the worker's training
// thread, the one that calls BeforeStep and AfterStep.
#ifndef DUCTILE_TRAIN_WORKER_POLICY_RUNNER_H_
#define DUCTILE_TRAIN_WORKER_POLICY_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ductile/client.h"
#include "ductile/policy.h"
#include "ductile/status.h"
#include "train/data_position.h"

namespace ductile::train {

class WorkerPolicyRunner final : public WorkerPolicyActions {
 public:
  // `client` and `data` must outlive this.
  WorkerPolicyRunner(Client& client, DataPosition& data,
                     std::vector<std::shared_ptr<WorkerPolicy>> policies)
      : client_(client), data_(data), policies_(std::move(policies)) {}

  bool empty() const { return policies_.empty(); }
  // A policy asked this worker to leave.
  bool leave() const { return leave_; }

  // Before a step of epoch `epoch`: OnMembershipChange when the live
  // workers changed since the last call, then BeforeStep, for each policy.
  void BeforeStep(int64_t epoch);
  // After a step. `batches`: the plan's batches the step took. Also runs
  // AfterEpoch when the plan's `epochs_done` passed an epoch's end.
  void AfterStep(int64_t epoch, int32_t batches, double loss,
                 int64_t epochs_done);

  Status SetBatchesPerStep(int32_t batches) override;
  Status SetConsistency(const std::string& table,
                        const Consistency& consistency) override;
  Status Leave() override;

 private:
  WorkerPolicyEvent Event(int64_t epoch) const;

  Client& client_;
  DataPosition& data_;
  const std::vector<std::shared_ptr<WorkerPolicy>> policies_;
  std::vector<int32_t> live_;
  int64_t epochs_seen_ = 0;
  bool leave_ = false;
};

}  // namespace ductile::train

#endif  // DUCTILE_TRAIN_WORKER_POLICY_RUNNER_H_
