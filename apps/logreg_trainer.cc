#include "apps/logreg_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/fmnist_data.h"
#include "apps/logreg_model.h"

namespace ductile::apps {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

Status Validate(const TrainerOptions& o) {
  if (o.epochs < 1) return InvalidArgumentError("--epochs must be >= 1");
  if (o.batch_size < 1)
    return InvalidArgumentError("--batch_size must be >= 1");
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return InvalidArgumentError("--learning_rate must be a positive number");
  }
  if (o.log_every < 1) return InvalidArgumentError("--log_every must be >= 1");
  return Status::Ok();
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

std::string ConsistencyLabel(const Consistency& c) {
  switch (c.mode) {
    case ConsistencyMode::kSsp:
      return "ssp(" + std::to_string(c.staleness) + ")";
    case ConsistencyMode::kBsp:
      return c.combine == BspCombine::kSum ? "bsp(sum)" : "bsp(mean)";
    default:
      return "async";
  }
}

}  // namespace

Status RunLogRegWorker(Client& client, const TrainerOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  const int rank = client.worker_id();
  const int world = client.num_workers();
  if (rank < 0 || world < 1 || rank >= world) {
    return FailedPreconditionError("worker id " + std::to_string(rank) +
                                   " is outside the job's " +
                                   std::to_string(world) +
                                   " workers (start the coordinator with "
                                   "--workers)");
  }
  const bool lead = rank == 0;
  Result<Dataset> train = LoadFashionMnist(options.data_dir, /*train=*/true);
  RETURN_IF_ERROR(train.status());
  Result<Dataset> test = LoadFashionMnist(options.data_dir, /*train=*/false);
  RETURN_IF_ERROR(test.status());

  const LogRegModel model(train->num_features, train->num_classes, options.l2);
  TableOptions table;
  table.name = "logreg.params";
  table.rule = options.optimizer;
  table.learning_rate = options.learning_rate;
  table.init.kind = InitKind::kZeros;
  table.consistency = options.consistency;
  Result<Tensor> params_tensor =
      client.RegisterTensor(table, model.num_params(), /*chunk_floats=*/1024);
  RETURN_IF_ERROR(params_tensor.status());
  RETURN_IF_ERROR(client.Barrier());

  std::vector<float> params(model.num_params()), grad(model.num_params());
  const size_t per_worker = (train->num_samples + world - 1) / world;
  const size_t steps_per_epoch =
      (per_worker + options.batch_size - 1) / options.batch_size;
  const size_t total_steps = steps_per_epoch * options.epochs;
  if (lead) {
    std::printf(
        "training logistic regression on Fashion-MNIST: %zu train / "
        "%zu test samples, %d worker(s), %s, batch %d, %s lr %.3g, "
        "%d epoch(s)\n",
        train->num_samples, test->num_samples, world,
        ConsistencyLabel(options.consistency).c_str(), options.batch_size,
        RuleName(options.optimizer), options.learning_rate, options.epochs);
    std::fflush(stdout);
  }
  const auto start = SteadyClock::now();
  auto window_start = start;
  double window_loss = 0;
  int64_t window_batches = 0, window_samples = 0, samples_done = 0;
  size_t step = 0;
  bool stop = false;
  for (int epoch = 0; epoch < options.epochs && !stop; ++epoch) {
    const std::vector<size_t> indices =
        PartitionIndices(train->num_samples, rank, world, options.seed, epoch);
    for (size_t begin = 0; begin < indices.size() && !stop;
         begin += options.batch_size) {
      const size_t end = std::min(indices.size(), begin + options.batch_size);
      std::span<const size_t> batch(indices.data() + begin, end - begin);
      RETURN_IF_ERROR(client.PullTensor(*params_tensor, params));
      const float loss = model.LossAndGradient(params, *train, batch, grad);
      if (!std::isfinite(loss) || loss > 1e6f) {
        return FailedPreconditionError(
            "training diverged at epoch " + std::to_string(epoch + 1) +
            ", clock " + std::to_string(client.clock()) + " (loss " +
            std::to_string(loss) + "); lower --learning_rate");
      }
      RETURN_IF_ERROR(client.PushTensor(*params_tensor, grad));
      client.Clock();
      ++step;
      window_loss += loss;
      ++window_batches;
      window_samples += static_cast<int64_t>(batch.size());
      samples_done += static_cast<int64_t>(batch.size());
      if (options.max_samples > 0 && samples_done >= options.max_samples) {
        stop = true;
      }
      if (lead && (step % options.log_every == 0 || stop)) {
        const double window_s = SecondsSince(window_start);
        const double elapsed = SecondsSince(start);
        const double eta = elapsed / step * (total_steps - step);
        std::printf(
            "[epoch %d/%d] clock %lld  loss %.4f  samples/s %.0f "
            "(all workers ~%.0f)  ETA %.0fs\n",
            epoch + 1, options.epochs, static_cast<long long>(client.clock()),
            window_loss / window_batches, window_samples / window_s,
            world * window_samples / window_s, stop ? 0.0 : eta);
        std::fflush(stdout);
        window_start = SteadyClock::now();
        window_loss = 0;
        window_batches = window_samples = 0;
      }
    }
    if (lead && !stop) {
      RETURN_IF_ERROR(client.PullTensor(*params_tensor, params));
      std::printf("epoch %d done: test accuracy %.4f (%.1fs)\n", epoch + 1,
                  model.Accuracy(params, *test), SecondsSince(start));
      std::fflush(stdout);
    }
  }
  // Every worker's last push is in before the final evaluation.
  RETURN_IF_ERROR(client.Barrier());
  if (lead) {
    RETURN_IF_ERROR(client.PullTensor(*params_tensor, params));
    const double accuracy = model.Accuracy(params, *test);
    const ClientStats stats = client.stats();
    std::printf(
        "final test accuracy: %.4f after %zu steps per worker, %.1fs "
        "(worker 0: blocked %.1fs on the staleness bound, max "
        "staleness %lld)\n",
        accuracy, step, SecondsSince(start), stats.blocked_us / 1e6,
        static_cast<long long>(stats.max_staleness()));
    std::fflush(stdout);
    if (accuracy < options.min_accuracy) {
      return FailedPreconditionError(
          "test accuracy " + std::to_string(accuracy) + " is below " +
          "--min_accuracy " + std::to_string(options.min_accuracy));
    }
  }
  return Status::Ok();
}

}  // namespace ductile::apps
