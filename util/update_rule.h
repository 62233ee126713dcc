// The arithmetic of each update rule, on one key's vector: applied by the
// servers, and mirrored for the stateless rules by a worker's cache.
#ifndef DUCTILE_UTIL_UPDATE_RULE_H_
#define DUCTILE_UTIL_UPDATE_RULE_H_

#include <cstdint>
#include <span>

#include "ductile/table.h"

namespace ductile {

class UpdateRuleKernel {
 public:
  // `custom` is required for UpdateRule::kCustom and ignored otherwise; it
  // must outlive the kernel.
  UpdateRuleKernel(const TableOptions& options, const CustomRule* custom);

  // Optimizer state floats kept per value float (momentum 1, AdaGrad 1,
  // Adam 2, custom as registered).
  uint32_t state_per_value() const { return state_per_value_; }
  // True for the rules whose result depends on the value and the pushed
  // vector alone (assign, add, SGD): what a worker's cache can mirror.
  bool stateless() const {
    return options_.rule == UpdateRule::kAssign ||
           options_.rule == UpdateRule::kAdd ||
           options_.rule == UpdateRule::kSgd;
  }

  // w <- rule(w, g), with the learning rate times `lr_factor`. `state`
  // has state_per_value() * w.size() floats; `steps` counts updates of
  // this key (Adam's bias correction).
  void Apply(std::span<float> w, std::span<const float> g,
             std::span<float> state, int64_t* steps,
             float lr_factor = 1.0f) const;
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
