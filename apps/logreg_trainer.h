// The built-in training app: multinomial logistic regression on
// Fashion-MNIST, data-parallel over the job's workers.
//
// Each worker takes its share of every epoch's shuffled training set, and
// per mini-batch pulls the parameters, computes the gradient and pushes it;
// the servers apply SGD. Worker 0 reports progress and test accuracy.
#ifndef DUCTILE_APPS_LOGREG_TRAINER_H_
#define DUCTILE_APPS_LOGREG_TRAINER_H_

#include <cstdint>
#include <string>

#include "ductile/client.h"
#include "ductile/status.h"

namespace ductile::apps {

struct TrainerOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 10;      // passes over the training set, >= 1
  int batch_size = 64;  // samples per worker per step, >= 1
  // Server-side update rule: kSgd, kMomentum, kAdaGrad or kAdam.
  UpdateRule optimizer = UpdateRule::kAdam;
  float learning_rate = 0.001;  // step size of `optimizer` on the mean gradient
  float l2 = 0.0f;              // L2 weight decay
  Consistency consistency;      // of the parameter table
  uint64_t seed = 1;            // data shuffling
  int log_every = 100;          // clocks between progress lines (worker 0)
  // Stop after this many samples per worker (0 = no limit): short runs.
  int64_t max_samples = 0;
  // Fail (non-zero exit) when the final test accuracy is below this.
  double min_accuracy = 0.0;
};

// Runs the app as one worker of the job; returns when training is done.
Status RunLogRegWorker(Client& client, const TrainerOptions& options);

}  // namespace ductile::apps

#endif  // DUCTILE_APPS_LOGREG_TRAINER_H_
