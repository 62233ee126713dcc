// backend_bench: how much of a compute backend's matrix throughput the
// MLP's steps reach, without a network. For each device it measures:
//   peak   a square n x n x n Gemm, the backend's own best rate;
//   step   MlpModel::LossAndGradient on a batch, as a worker calls it: the
//          parameters and the batch uploaded, forward and backward, the
//          gradient and the losses downloaded; with the parameters and the
//          gradient in ordinary host memory (plain) and in the backend's
//          own (host: ComputeBackend::AllocateHost, page-locked on CUDA);
//   gemms  the step's matrix products alone, on backend memory, with no
//          copies to or from the host.
// GFLOP/s counts the products' floating-point operations (2 m n k each:
// the forward product and dW of every layer, and d loss / d a of every
// layer but the first); "of peak" divides by the peak measured in the same
// run. samples/s, step GF/s and gemm % (the products' share of a step) are
// of the faster step. Every figure is the median of --repeats timed runs of
// --iters calls.
//
//   backend_bench                                   # cpu, and cuda if any
//   backend_bench --devices=cuda --layers=784,2048,2048,10 --batches=64,1024
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gflags/gflags.h"
#include "models/compute_backend.h"
#include "models/fmnist_data.h"
#include "models/mlp_model.h"

DEFINE_string(devices, "cpu,cuda",
              "Backends to measure, comma-separated (cpu, cuda); one that "
              "cannot be made here is reported and skipped.");
DEFINE_string(layers, "784,256,128,10", "The MLP's layer widths.");
DEFINE_string(batches, "64,256,1024,4096", "Batch sizes, comma-separated.");
DEFINE_int32(square, 4096, "n of the n x n x n product that gives the peak.");
DEFINE_int32(iters, 20, "Calls per timed run.");
DEFINE_int32(repeats, 5, "Timed runs per figure; the median is shown.");
DEFINE_int32(cpu_threads, 1, "OpenBLAS threads for the cpu backend.");

namespace ductile::bench {
namespace {

using models::ComputeBackend;
using models::DeviceBuffer;
using models::Transpose;
using SteadyClock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<std::vector<size_t>> ParseList(const std::string& text,
                                      const char* flag) {
  std::vector<size_t> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > (1u << 20)) {
      return InvalidArgumentError(std::string("--") + flag + ": '" + item +
                                  "' is not a count in [1, 2^20]");
    }
    values.push_back(static_cast<size_t>(v));
  }
  if (values.empty()) {
    return InvalidArgumentError(std::string("--") + flag + " is empty");
  }
  return values;
}

// Median seconds of one call of `body`, over --repeats runs of --iters
// calls each; `sync` waits for queued work at the end of a run.
template <typename Body, typename Sync>
Result<double> TimeCalls(Body body, Sync sync) {
  for (int i = 0; i < 3; ++i) DUCTILE_RETURN_IF_ERROR(body());  // warm-up
  DUCTILE_RETURN_IF_ERROR(sync());
  std::vector<double> runs;
  for (int r = 0; r < FLAGS_repeats; ++r) {
    const SteadyClock::time_point start = SteadyClock::now();
    for (int i = 0; i < FLAGS_iters; ++i) DUCTILE_RETURN_IF_ERROR(body());
    DUCTILE_RETURN_IF_ERROR(sync());
    runs.push_back(
        std::chrono::duration<double>(SteadyClock::now() - start).count() /
        FLAGS_iters);
  }
  return Median(std::move(runs));
}

Result<DeviceBuffer> RandomBuffer(ComputeBackend& backend, size_t count,
                                  uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> host(count);
  for (float& v : host) v = uniform(rng);
  Result<DeviceBuffer> buffer = backend.Allocate(count);
  if (!buffer.ok()) return buffer.status();
  DUCTILE_RETURN_IF_ERROR(backend.Upload(host, *buffer));
  return buffer;
}

Status MeasureDevice(const std::string& device,
                     const std::vector<size_t>& layers,
                     const std::vector<size_t>& batches) {
  models::ComputeBackendOptions options;
  options.device = device;
  options.cpu_threads = FLAGS_cpu_threads;
  Result<std::unique_ptr<ComputeBackend>> made =
      models::MakeComputeBackend(options);
  if (!made.ok()) {
    std::printf("%s: skipped: %s\n", device.c_str(),
                made.status().ToString().c_str());
    return Status::Ok();
  }
  ComputeBackend& backend = **made;
  std::printf("%s: %s\n", device.c_str(), backend.name().c_str());
  float probe = 0.0f;
  Result<DeviceBuffer> sync_buffer = backend.Allocate(1);
  if (!sync_buffer.ok()) return sync_buffer.status();
  auto sync = [&]() -> Status {
    return backend.Download(*sync_buffer, std::span<float>(&probe, 1));
  };

  // Peak: one large square product.
  const size_t n = static_cast<size_t>(FLAGS_square);
  double peak_gflops = 0.0;
  {
    Result<DeviceBuffer> a = RandomBuffer(backend, n * n, 1);
    Result<DeviceBuffer> b = RandomBuffer(backend, n * n, 2);
    Result<DeviceBuffer> c = backend.Allocate(n * n);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (!c.ok()) return c.status();
    Result<double> seconds = TimeCalls(
        [&] {
          return backend.Gemm(Transpose::kNo, Transpose::kNo, n, n, n, 1.0f, *a,
                              *b, 0.0f, *c);
        },
        sync);
    if (!seconds.ok()) return seconds.status();
    peak_gflops = 2.0 * n * n * n / *seconds / 1e9;
    std::printf("  peak: %zu^3 product %.3f ms, %.0f GFLOP/s\n", n,
                *seconds * 1e3, peak_gflops);
  }

  models::MlpOptions mlp_options;
  mlp_options.layer_sizes = layers;
  Result<models::MlpModel> model =
      models::MlpModel::Create(&backend, mlp_options);
  if (!model.ok()) return model.status();
  const std::vector<float> params = model->InitParams(1);
  std::vector<float> grad(model->num_params());
  Result<models::HostBuffer> host_params = backend.AllocateHost(params.size());
  Result<models::HostBuffer> host_grad = backend.AllocateHost(params.size());
  if (!host_params.ok()) return host_params.status();
  if (!host_grad.ok()) return host_grad.status();
  std::copy(params.begin(), params.end(), host_params->data());

  std::printf("  %6s %10s %10s %10s %10s %9s %10s %9s %8s\n", "batch",
              "plain ms", "host ms", "samples/s", "step GF/s", "gemms ms",
              "gemm GF/s", "of peak", "gemm %");
  for (const size_t batch : batches) {
    // Step: a synthetic batch of `batch` samples through LossAndGradient.
    models::Dataset data;
    data.num_samples = batch;
    data.num_features = layers.front();
    data.num_classes = static_cast<int>(layers.back());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    data.images.resize(batch * layers.front());
    for (float& v : data.images) v = pixel(rng);
    data.labels.resize(batch);
    for (size_t i = 0; i < batch; ++i) {
      data.labels[i] = static_cast<uint8_t>(rng() % layers.back());
    }
    std::vector<size_t> indices(batch);
    for (size_t i = 0; i < batch; ++i) indices[i] = i;
    Result<double> step = TimeCalls(
        [&]() -> Status {
          Result<float> loss =
              model->LossAndGradient(params, data, indices, grad);
          return loss.ok() ? Status::Ok() : loss.status();
        },
        [] { return Status::Ok(); });  // LossAndGradient downloads: synced
    if (!step.ok()) return step.status();
    Result<double> host_step = TimeCalls(
        [&]() -> Status {
          Result<float> loss =
              model->LossAndGradient(*host_params, data, indices, *host_grad);
          return loss.ok() ? Status::Ok() : loss.status();
        },
        [] { return Status::Ok(); });
    if (!host_step.ok()) return host_step.status();
    const double best = std::min(*step, *host_step);

    // Gemms: the same products on backend memory alone.
    double flops = 0.0;
    std::vector<DeviceBuffer> acts, weights, grads, deltas;
    for (size_t l = 0; l < layers.size(); ++l) {
      Result<DeviceBuffer> a = RandomBuffer(backend, batch * layers[l], 10 + l);
      Result<DeviceBuffer> d = RandomBuffer(backend, batch * layers[l], 20 + l);
      if (!a.ok()) return a.status();
      if (!d.ok()) return d.status();
      acts.push_back(std::move(*a));
      deltas.push_back(std::move(*d));
      if (l == 0) continue;
      const size_t count = layers[l] * layers[l - 1];
      Result<DeviceBuffer> w = RandomBuffer(backend, count, 30 + l);
      Result<DeviceBuffer> g = backend.Allocate(count);
      if (!w.ok()) return w.status();
      if (!g.ok()) return g.status();
      weights.push_back(std::move(*w));
      grads.push_back(std::move(*g));
      flops += 2.0 * batch * count * (l == 1 ? 2 : 3);
    }
    Result<double> gemms = TimeCalls(
        [&]() -> Status {
          const size_t last = layers.size() - 1;
          for (size_t l = 1; l <= last; ++l) {
            DUCTILE_RETURN_IF_ERROR(
                backend.Gemm(Transpose::kNo, Transpose::kYes, batch, layers[l],
                             layers[l - 1], 1.0f, acts[l - 1], weights[l - 1],
                             0.0f, acts[l]));
          }
          for (size_t l = last; l >= 1; --l) {
            DUCTILE_RETURN_IF_ERROR(backend.Gemm(
                Transpose::kYes, Transpose::kNo, layers[l], layers[l - 1],
                batch, 1.0f, deltas[l], acts[l - 1], 0.0f, grads[l - 1]));
            if (l > 1) {
              DUCTILE_RETURN_IF_ERROR(
                  backend.Gemm(Transpose::kNo, Transpose::kNo, batch,
                               layers[l - 1], layers[l], 1.0f, deltas[l],
                               weights[l - 1], 0.0f, deltas[l - 1]));
            }
          }
          return Status::Ok();
        },
        sync);
    if (!gemms.ok()) return gemms.status();
    const double gemm_gflops = flops / *gemms / 1e9;
    std::printf(
        "  %6zu %10.3f %10.3f %10.0f %10.1f %9.3f %10.1f %8.2f%% %7.0f%%\n",
        batch, *step * 1e3, *host_step * 1e3, batch / best, flops / best / 1e9,
        *gemms * 1e3, gemm_gflops, 100.0 * gemm_gflops / peak_gflops,
        100.0 * *gemms / best);
  }
  return Status::Ok();
}

int Main() {
  if (FLAGS_iters < 1 || FLAGS_repeats < 1 || FLAGS_square < 16 ||
      FLAGS_square > 16384 || FLAGS_cpu_threads < 1) {
    std::fprintf(stderr,
                 "--iters and --repeats must be >= 1, --square in [16, "
                 "16384], --cpu_threads >= 1\n");
    return 1;
  }
  Result<std::vector<size_t>> layers = ParseList(FLAGS_layers, "layers");
  Result<std::vector<size_t>> batches = ParseList(FLAGS_batches, "batches");
  if (!layers.ok() || !batches.ok()) {
    std::fprintf(
        stderr, "%s\n",
        (!layers.ok() ? layers.status() : batches.status()).ToString().c_str());
    return 1;
  }
  std::stringstream devices(FLAGS_devices);
  for (std::string device; std::getline(devices, device, ',');) {
    const Status status = MeasureDevice(device, *layers, *batches);
    if (!status.ok()) {
      std::fprintf(stderr, "%s: %s\n", device.c_str(),
                   status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "The MLP's step and its matrix products on each compute backend, "
      "against the backend's peak product rate.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return ductile::bench::Main();
}
