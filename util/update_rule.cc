#include "util/update_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ductile {

float LearningRateFactor(const LearningRateSchedule& s, int64_t clock) {
  const int64_t c = std::max<int64_t>(clock, 0);
  if (c < s.warmup_clocks) {
    return static_cast<float>(static_cast<double>(c + 1) /
                              static_cast<double>(s.warmup_clocks));
  }
  const int64_t t = c - s.warmup_clocks;  // clocks since the warm-up
  switch (s.decay) {
    case LearningRateSchedule::Decay::kStep:
      if (s.step_clocks < 1) return 1.0f;
      return static_cast<float>(
          std::pow(static_cast<double>(s.gamma),
                   static_cast<double>(t / s.step_clocks)));
    case LearningRateSchedule::Decay::kCosine: {
      const int64_t span = s.total_clocks - s.warmup_clocks;
      if (span <= 0) return 1.0f;
      const double done =
          static_cast<double>(std::min(t, span)) / static_cast<double>(span);
      const double floor = s.min_factor;
      return static_cast<float>(floor + (1.0 - floor) * 0.5 *
                                            (1.0 + std::cos(M_PI * done)));
    }
    case LearningRateSchedule::Decay::kNone:
      break;
  }
  return 1.0f;
}

float BatchScalingFactor(const BatchScaling& b, int32_t pushes,
                         double noise_scale) {
  if (pushes < 1 || b.base_pushes < 1) return 1.0f;
  const double ratio =
      static_cast<double>(pushes) / static_cast<double>(b.base_pushes);
  switch (b.rule) {
    case BatchScaling::Rule::kAdaScale: {
      if (!(noise_scale > 0) || !std::isfinite(noise_scale)) return 1.0f;
      const double phi = noise_scale / static_cast<double>(b.base_pushes);
      return static_cast<float>((phi + 1.0) / (phi / ratio + 1.0));
    }
    case BatchScaling::Rule::kLinear:
      return static_cast<float>(ratio);
    case BatchScaling::Rule::kSqrt:
      return static_cast<float>(std::sqrt(ratio));
    case BatchScaling::Rule::kNone:
      break;
  }
  return 1.0f;
}

float BatchScaleRamp::At(int64_t clock) const {
  if (ramp_clocks_ <= 0 || clock >= start_ + ramp_clocks_ - 1) return to_;
  if (clock < start_) return from_;
  const double done = static_cast<double>(clock - start_ + 1) /
                      static_cast<double>(ramp_clocks_);
  return static_cast<float>(from_ + (to_ - from_) * done);
}

float BatchScaleRamp::Next(int64_t clock, float target) {
  if (!started_) {
    started_ = true;
    from_ = to_ = target;
    start_ = last_ = clock;
    return target;
  }
  if (clock <= last_) return At(clock);  // a late clock: no new ramp
  if (target != to_) {
    from_ = At(clock - 1);
    to_ = target;
    start_ = clock;
  }
  last_ = clock;
  return At(clock);
}

UpdateRuleKernel::UpdateRuleKernel(const TableOptions& options,
                                   const CustomRule* custom)
    : options_(options), custom_(custom) {
  switch (options.rule) {
    case UpdateRule::kMomentum:
    case UpdateRule::kAdaGrad:
      state_per_value_ = 1;
      break;
    case UpdateRule::kAdam:
      state_per_value_ = 2;
      break;
    case UpdateRule::kCustom:
      state_per_value_ = custom ? custom->state_floats_per_value : 0;
      break;
    default:
      state_per_value_ = 0;
  }
}

std::pair<std::span<const float>, std::span<const float>>
UpdateRuleKernel::ExportedParts(std::span<const float> state, size_t n) const {
  const size_t gap =
      options_.rule == UpdateRule::kAdam && state.size() == state_floats(n)
          ? AdamGap(n)
          : 0;
  if (gap == 0) return {state, {}};
  return {state.first(n), state.subspan(n + gap)};
}

std::vector<float> UpdateRuleKernel::ExportState(std::span<const float> state,
                                                 size_t n) const {
  const auto [first, second] = ExportedParts(state, n);
  std::vector<float> out;
  out.reserve(first.size() + second.size());
  out.insert(out.end(), first.begin(), first.end());
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

std::vector<float> UpdateRuleKernel::ImportState(std::vector<float>&& exported,
                                                 size_t n) const {
  if (exported.size() != size_t{state_per_value_} * n) {
    return std::vector<float>(state_floats(n), 0.0f);
  }
  const size_t gap = options_.rule == UpdateRule::kAdam ? AdamGap(n) : 0;
  if (gap == 0) return std::move(exported);
  std::vector<float> state(state_floats(n), 0.0f);
  std::copy(exported.begin(), exported.begin() + n, state.begin());
  std::copy(exported.begin() + n, exported.end(), state.begin() + n + gap);
  return state;
}

void UpdateRuleKernel::Apply(std::span<float> w, std::span<const float> g,
                             std::span<float> state, int64_t* steps,
                             float lr_factor) const {
  ++*steps;
  if (options_.rule == UpdateRule::kCustom) {
    custom_->apply(w, g, state);
    return;
  }
  ApplyRange(w, g, state, *steps, lr_factor, 0, w.size());
}

void UpdateRuleKernel::ApplyRange(std::span<float> w, std::span<const float> g,
                                  std::span<float> state, int64_t steps,
                                  float lr_factor, size_t begin,
                                  size_t end) const {
  const size_t n = w.size();  // the state's layout depends on the whole width
  const size_t count = end - begin;
  float* __restrict wp = w.data() + begin;
  const float* __restrict gp = g.data() + begin;
  const float lr = options_.learning_rate * lr_factor;
  switch (options_.rule) {
    case UpdateRule::kAssign:
      std::memcpy(wp, gp, count * sizeof(float));
      break;
    case UpdateRule::kAdd:
      for (size_t i = 0; i < count; ++i) wp[i] += gp[i];
      break;
    case UpdateRule::kSgd:
      for (size_t i = 0; i < count; ++i) wp[i] -= lr * gp[i];
      break;
    case UpdateRule::kMomentum: {
      float* __restrict v = state.data() + begin;
      const float mu = options_.momentum;
      for (size_t i = 0; i < count; ++i) {
        v[i] = mu * v[i] + gp[i];
        wp[i] -= lr * v[i];
      }
      break;
    }
    case UpdateRule::kAdaGrad: {
      float* __restrict h = state.data() + begin;
      const float eps = options_.epsilon;
      for (size_t i = 0; i < count; ++i) {
        h[i] += gp[i] * gp[i];
        wp[i] -= lr * gp[i] / (std::sqrt(h[i]) + eps);
      }
      break;
    }
    case UpdateRule::kAdam: {
      float* __restrict m = state.data() + begin;
      float* __restrict v = state.data() + n + AdamGap(n) + begin;
      const float b1 = options_.beta1, b2 = options_.beta2;
      const float eps = options_.epsilon;
      const double t = static_cast<double>(steps);
      const float c1 = static_cast<float>(1.0 - std::pow(b1, t));
      const float c2 = static_cast<float>(1.0 - std::pow(b2, t));
      for (size_t i = 0; i < count; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * gp[i];
        v[i] = b2 * v[i] + (1 - b2) * gp[i] * gp[i];
        const float m_hat = m[i] / c1;
        const float v_hat = v[i] / c2;
        wp[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      break;
    }
    case UpdateRule::kCustom:
      break;  // not splittable: Apply runs it whole
  }
}

}  // namespace ductile
