// The arithmetic of each update rule, on one key's vector: applied by the
// servers, and mirrored for the stateless rules by a worker's cache.
#ifndef DUCTILE_UTIL_UPDATE_RULE_H_
#define DUCTILE_UTIL_UPDATE_RULE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ductile/table.h"

namespace ductile {

// The batch-scaling factor of one table's BSP clocks on one server, ramped
// (BatchScaling): Next(c, target) is the factor of clock c, whose pushes ask
// for `target`. A target other than the last starts a ramp from the factor
// the clock before had to it, over `ramp_clocks` clocks (the last of which
// has the target). A clock not above the newest one seen (a moved-in key's
// late clock) starts no ramp: it gets the factor the ramp in force gives
// it (that ramp's first factor, if it started later).
class BatchScaleRamp {
 public:
  explicit BatchScaleRamp(int64_t ramp_clocks) : ramp_clocks_(ramp_clocks) {}
  float Next(int64_t clock, float target);

 private:
  float At(int64_t clock) const;

  int64_t ramp_clocks_;
  bool started_ = false;
  float from_ = 1.0f;
  float to_ = 1.0f;
  int64_t start_ = 0;  // the ramp's first clock
  int64_t last_ = 0;   // the newest clock seen
};

class UpdateRuleKernel {
 public:
  // `custom` is required for UpdateRule::kCustom and ignored otherwise; it
  // must outlive the kernel.
  UpdateRuleKernel(const TableOptions& options, const CustomRule* custom);

  // Optimizer state floats kept per value float (momentum 1, AdaGrad 1,
  // Adam 2, custom as registered).
  uint32_t state_per_value() const { return state_per_value_; }
  // Floats of the `state` that Apply takes for a key of `n` floats:
  // state_per_value() * n, and for Adam a gap of AdamGap(n) more.
  size_t state_floats(size_t n) const {
    return size_t{state_per_value_} * n +
           (options_.rule == UpdateRule::kAdam ? AdamGap(n) : 0);
  }
  // Adam keeps m in state[0, n) and v in state[n + AdamGap(n), ...). With
  // n a multiple of 1024, m[i] and v[i] would share the low 12 bits of
  // their addresses, and an Intel core then ran Adam 4.7x slower (4K
  // aliasing; bench/update_rule_bench, 16M floats, one thread). The gap
  // (none below 4096 floats, at most 1023 above) puts v half a page away.
  static size_t AdamGap(size_t n) {
    if (n < 4096) return 0;
    return (512 + 1024 - n % 1024) % 1024;
  }
  // The state in the layout checkpoints and slot moves carry:
  // state_per_value() * n floats, Adam's m then v with no gap.
  std::vector<float> ExportState(std::span<const float> state, size_t n) const;
  // The same layout as two pieces of `state` in place, to be laid end to
  // end (the second is empty unless Adam's gap splits the state).
  std::pair<std::span<const float>, std::span<const float>> ExportedParts(
      std::span<const float> state, size_t n) const;
  // Back from that layout. A state of another size than state_per_value()
  // * n cannot be this key's: it becomes zeros.
  std::vector<float> ImportState(std::vector<float>&& exported, size_t n) const;
  // True for the rules whose result depends on the value and the pushed
  // vector alone (assign, add, SGD): what a worker's cache can mirror.
  bool stateless() const {
    return options_.rule == UpdateRule::kAssign ||
           options_.rule == UpdateRule::kAdd ||
           options_.rule == UpdateRule::kSgd;
  }

  // w <- rule(w, g), with the learning rate times `lr_factor`. `state`
  // has state_floats(w.size()) floats; `steps` counts updates of
  // this key (Adam's bias correction).
  void Apply(std::span<float> w, std::span<const float> g,
             std::span<float> state, int64_t* steps,
             float lr_factor = 1.0f) const;
  // True for the rules that treat each float on its own (every one but
  // custom rules): ApplyRange can then split a vector into pieces.
  bool splittable() const { return options_.rule != UpdateRule::kCustom; }
  // Floats [begin, end) of the update Apply makes, for a key of
  // `w.size()` floats whose update count is already `steps` (this update
  // included; Apply counts it, a caller of ApplyRange must). Pieces of one
  // vector may run at once on different threads. Not for custom rules.
  void ApplyRange(std::span<float> w, std::span<const float> g,
                  std::span<float> state, int64_t steps, float lr_factor,
                  size_t begin, size_t end) const;
  // The learning-rate factor of a push at `clock` (the table's schedule).
  float Factor(int64_t clock) const {
    return LearningRateFactor(options_.lr_schedule, clock);
  }

 private:
  TableOptions options_;
  const CustomRule* custom_;
  uint32_t state_per_value_;
};

}  // namespace ductile

#endif  // DUCTILE_UTIL_UPDATE_RULE_H_
