// Policy specs ("name:key=value:..."): their parsing, and the factory of
// the built-in policies (MakeBuiltinPolicy, ductile/policy.h).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "glog/logging.h"
#include "policy/builtin_policies.h"

namespace ductile {

Result<std::map<std::string, std::string>> ParsePolicyParameters(
    const std::string& text) {
  std::map<std::string, std::string> params;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t end = text.find(':', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError("policy parameter '" + item +
                                  "' is not KEY=VALUE");
    }
    if (!params.emplace(item.substr(0, eq), item.substr(eq + 1)).second) {
      return InvalidArgumentError("policy parameter '" + item.substr(0, eq) +
                                  "' given twice");
    }
    start = end + 1;
    if (end == text.size()) break;
  }
  return params;
}

Result<double> PolicyNumber(const std::string& policy, const std::string& key,
                            const std::string& text, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 ||
      !std::isfinite(v) || v < lo || v > hi) {
    char range[64];
    std::snprintf(range, sizeof(range), "[%g, %g]", lo, hi);
    return InvalidArgumentError(policy + ": " + key + "=" + text +
                                " must be a number in " + range);
  }
  return v;
}

Result<int64_t> PolicyInteger(const std::string& policy, const std::string& key,
                              const std::string& text, int64_t lo, int64_t hi) {
  DUCTILE_ASSIGN_OR_RETURN(double v, PolicyNumber(policy, key, text, lo, hi));
  if (v != std::floor(v)) {
    return InvalidArgumentError(policy + ": " + key + "=" + text +
                                " must be a whole number");
  }
  return static_cast<int64_t>(v);
}

namespace {

Result<std::shared_ptr<Policy>> MakeAutoscale(
    const std::map<std::string, std::string>& params) {
  AutoscaleOptions o;
  const std::string name = "autoscale";
  constexpr double kDayS = 86400;
  for (const auto& [key, value] : params) {
    if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(o.step,
                               PolicyInteger(name, key, value, 1, 1024));
    } else if (key == "threshold") {
      DUCTILE_ASSIGN_OR_RETURN(o.threshold,
                               PolicyNumber(name, key, value, 0, 1));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(o.max_workers,
                               PolicyInteger(name, key, value, 1, 1 << 20));
    } else if (key == "settle_s" || key == "measure_s" || key == "wait_s") {
      DUCTILE_ASSIGN_OR_RETURN(double s,
                               PolicyNumber(name, key, value, 0, kDayS));
      const int64_t ms = static_cast<int64_t>(s * 1000);
      (key == "settle_s"    ? o.settle_ms
       : key == "measure_s" ? o.measure_ms
                            : o.wait_ms) = ms;
    } else {
      return InvalidArgumentError(
          "autoscale has no parameter '" + key +
          "' (step, threshold, max, settle_s, measure_s, wait_s)");
    }
  }
  return std::shared_ptr<Policy>(std::make_shared<AutoscalePolicy>(o));
}

Result<std::shared_ptr<Policy>> MakeStragglers(
    const std::map<std::string, std::string>& params) {
  StragglerOptions o;
  const std::string name = "stragglers";
  for (const auto& [key, value] : params) {
    if (key == "ratio") {
      DUCTILE_ASSIGN_OR_RETURN(o.ratio, PolicyNumber(name, key, value, 0, 1));
      if (o.ratio <= 0 || o.ratio >= 1) {
        return InvalidArgumentError("stragglers: ratio must be in (0, 1)");
      }
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "warmup_steps") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.warmup_steps, PolicyInteger(name, key, value, 0,
                                        static_cast<double>(int64_t{1} << 40)));
    } else {
      return InvalidArgumentError("stragglers has no parameter '" + key +
                                  "' (ratio, window, warmup_steps)");
    }
  }
  return std::shared_ptr<Policy>(std::make_shared<StragglerPolicy>(o));
}

Result<std::shared_ptr<Policy>> MakeStaleness(
    const std::map<std::string, std::string>& params) {
  StalenessOptions o;
  const std::string name = "staleness";
  for (const auto& [key, value] : params) {
    if (key == "raise_above") {
      DUCTILE_ASSIGN_OR_RETURN(o.raise_above,
                               PolicyNumber(name, key, value, 0, 1));
    } else if (key == "lower_below") {
      DUCTILE_ASSIGN_OR_RETURN(o.lower_below,
                               PolicyNumber(name, key, value, 0, 1));
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(o.step,
                               PolicyInteger(name, key, value, 1, 1000));
    } else if (key == "min") {
      DUCTILE_ASSIGN_OR_RETURN(o.min_bound,
                               PolicyInteger(name, key, value, 0, 1000000));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(o.max_bound,
                               PolicyInteger(name, key, value, 0, 1000000));
    } else if (key == "loss_rise") {
      DUCTILE_ASSIGN_OR_RETURN(o.loss_rise,
                               PolicyNumber(name, key, value, 0, 10));
    } else {
      return InvalidArgumentError(
          "staleness has no parameter '" + key +
          "' (raise_above, lower_below, window, step, min, max, loss_rise)");
    }
  }
  if (o.raise_above <= 0) {
    return InvalidArgumentError("staleness: raise_above must be in (0, 1]");
  }
  if (o.lower_below >= o.raise_above) {
    return InvalidArgumentError(
        "staleness: lower_below must be below raise_above");
  }
  if (o.max_bound < o.min_bound) {
    return InvalidArgumentError("staleness: max must be at least min");
  }
  if (o.loss_rise <= 0) {
    return InvalidArgumentError("staleness: loss_rise must be in (0, 10]");
  }
  return std::shared_ptr<Policy>(std::make_shared<StalenessPolicy>(o));
}

Result<std::shared_ptr<Policy>> MakeGnsBatch(
    const std::map<std::string, std::string>& params) {
  GnsBatchOptions o;
  const std::string name = "gns-batch";
  for (const auto& [key, value] : params) {
    if (key == "grow_above") {
      DUCTILE_ASSIGN_OR_RETURN(o.grow_above,
                               PolicyNumber(name, key, value, 0, 1000));
      if (o.grow_above <= 0) {
        return InvalidArgumentError(
            "gns-batch: grow_above must be in (0, 1000]");
      }
    } else if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(o.step,
                               PolicyInteger(name, key, value, 1, 1024));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(o.max,
                               PolicyInteger(name, key, value, 1, 1 << 20));
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "by") {
      if (value != "workers" && value != "batch") {
        return InvalidArgumentError(
            "gns-batch: by must be workers or batch, "
            "not '" +
            value + "'");
      }
      o.by = value == "batch" ? GnsBatchOptions::By::kBatch
                              : GnsBatchOptions::By::kWorkers;
    } else if (key == "settle_clocks") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.settle_clocks,
          PolicyInteger(name, key, value, 0,
                        static_cast<double>(int64_t{1} << 40)));
    } else if (key == "min_clocks") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.min_clocks, PolicyInteger(name, key, value, 0,
                                      static_cast<double>(int64_t{1} << 40)));
    } else if (key == "wait_s") {
      DUCTILE_ASSIGN_OR_RETURN(double s,
                               PolicyNumber(name, key, value, 0, 86400));
      o.wait_ms = static_cast<int64_t>(s * 1000);
    } else {
      return InvalidArgumentError("gns-batch has no parameter '" + key +
                                  "' (by, grow_above, step, max, window, "
                                  "min_clocks, settle_clocks, wait_s)");
    }
  }
  if (o.by == GnsBatchOptions::By::kBatch) {
    if (!params.contains("max")) o.max = 8;
    if (o.max > 64) {
      return InvalidArgumentError(
          "gns-batch: by=batch takes max up to 64 batches a step");
    }
  }
  return std::shared_ptr<Policy>(std::make_shared<GnsBatchPolicy>(o));
}

}  // namespace

Status SplitPolicySpec(const std::string& spec, std::string* name,
                       std::map<std::string, std::string>* params) {
  const size_t colon = spec.find(':');
  *name = spec.substr(0, colon);
  params->clear();
  if (colon == std::string::npos) return Status::Ok();
  DUCTILE_ASSIGN_OR_RETURN(*params,
                           ParsePolicyParameters(spec.substr(colon + 1)));
  return Status::Ok();
}

std::vector<std::string> SplitPolicySpecs(const std::string& specs) {
  std::vector<std::string> out;
  if (specs.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t end = specs.find(',', start);
    if (end == std::string::npos) end = specs.size();
    out.push_back(specs.substr(start, end - start));
    if (end == specs.size()) return out;
    start = end + 1;  // "a," names an empty policy last
  }
}

Result<std::shared_ptr<Policy>> MakeBuiltinPolicy(const std::string& spec) {
  std::string name;
  std::map<std::string, std::string> params;
  DUCTILE_RETURN_IF_ERROR(SplitPolicySpec(spec, &name, &params));
  if (name == "autoscale") return MakeAutoscale(params);
  if (name == "stragglers") return MakeStragglers(params);
  if (name == "staleness") return MakeStaleness(params);
  if (name == "gns-batch") return MakeGnsBatch(params);
  return InvalidArgumentError(
      "unknown policy '" + name +
      "' (built-in: autoscale, stragglers, staleness, gns-batch)");
}

Result<std::vector<std::shared_ptr<Policy>>> MakeBuiltinPolicies(
    const std::string& specs) {
  std::vector<std::shared_ptr<Policy>> policies;
  for (const std::string& spec : SplitPolicySpecs(specs)) {
    DUCTILE_ASSIGN_OR_RETURN(std::shared_ptr<Policy> p,
                             MakeBuiltinPolicy(spec));
    policies.push_back(std::move(p));
  }
  return policies;
}

}  // namespace ductile
