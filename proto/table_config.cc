#include "proto/table_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "google/protobuf/util/message_differencer.h"

namespace ductile {

wire::TableConfig ToWire(const TableOptions& o, TableId id) {
  wire::TableConfig c;
  c.set_id(id);
  c.set_name(o.name);
  c.set_value_width(o.value_width);
  c.set_rule(static_cast<int>(o.rule));
  c.set_learning_rate(o.learning_rate);
  c.set_momentum(o.momentum);
  c.set_beta1(o.beta1);
  c.set_beta2(o.beta2);
  c.set_epsilon(o.epsilon);
  c.set_custom_rule(o.custom_rule);
  c.set_reject_non_finite(o.reject_non_finite);
  *c.mutable_consistency() = ToWire(o.consistency);
  auto* lr = c.mutable_lr_schedule();
  lr->set_warmup_clocks(o.lr_schedule.warmup_clocks);
  lr->set_decay(static_cast<int>(o.lr_schedule.decay));
  lr->set_step_clocks(o.lr_schedule.step_clocks);
  lr->set_gamma(o.lr_schedule.gamma);
  lr->set_total_clocks(o.lr_schedule.total_clocks);
  lr->set_min_factor(o.lr_schedule.min_factor);
  auto* scaling = c.mutable_batch_scaling();
  scaling->set_rule(static_cast<int>(o.batch_scaling.rule));
  scaling->set_base_pushes(o.batch_scaling.base_pushes);
  scaling->set_ramp_clocks(o.batch_scaling.ramp_clocks);
  const RowPolicy& rows = o.rows;
  // Written only when set: a table without a policy keeps the config it
  // had before the field existed.
  if (rows.admit_after_pushes != 0 || rows.admission_counters != 0 ||
      rows.evict_idle_clocks != 0 || rows.max_rows != 0 ||
      rows.eviction != RowPolicy::Eviction::kLeastRecent) {
    auto* r = c.mutable_rows();
    r->set_admit_after_pushes(rows.admit_after_pushes);
    r->set_admission_counters(rows.admission_counters);
    r->set_evict_idle_clocks(rows.evict_idle_clocks);
    r->set_max_rows(rows.max_rows);
    r->set_eviction(static_cast<uint32_t>(rows.eviction));
  }
  auto* init = c.mutable_init();
  init->set_kind(static_cast<int>(o.init.kind));
  init->set_value(o.init.value);
  init->set_low(o.init.low);
  init->set_high(o.init.high);
  init->set_mean(o.init.mean);
  init->set_stddev(o.init.stddev);
  init->set_seed(o.init.seed);
  return c;
}

TableOptions FromWire(const wire::TableConfig& c) {
  TableOptions o;
  o.name = c.name();
  o.value_width = c.value_width();
  o.rule = static_cast<UpdateRule>(c.rule());
  o.learning_rate = c.learning_rate();
  o.momentum = c.momentum();
  o.beta1 = c.beta1();
  o.beta2 = c.beta2();
  o.epsilon = c.epsilon();
  o.custom_rule = c.custom_rule();
  o.reject_non_finite = c.reject_non_finite();
  o.consistency = FromWire(c.consistency());
  const wire::LearningRateSchedule& lr = c.lr_schedule();
  o.lr_schedule.warmup_clocks = lr.warmup_clocks();
  o.lr_schedule.decay = static_cast<LearningRateSchedule::Decay>(lr.decay());
  o.lr_schedule.step_clocks = lr.step_clocks();
  o.lr_schedule.gamma = c.has_lr_schedule() ? lr.gamma() : 0.1f;
  o.lr_schedule.total_clocks = lr.total_clocks();
  o.lr_schedule.min_factor = lr.min_factor();
  const wire::BatchScaling& scaling = c.batch_scaling();
  o.batch_scaling.rule = static_cast<BatchScaling::Rule>(scaling.rule());
  // A table made before the field existed has none: base 1, unused.
  o.batch_scaling.base_pushes =
      c.has_batch_scaling() ? scaling.base_pushes() : 1;
  o.batch_scaling.ramp_clocks = scaling.ramp_clocks();
  o.rows.admit_after_pushes = c.rows().admit_after_pushes();
  o.rows.admission_counters = c.rows().admission_counters();
  o.rows.evict_idle_clocks = c.rows().evict_idle_clocks();
  o.rows.max_rows = c.rows().max_rows();
  // Out of range (a peer's lie) is refused by ValidateRowPolicy.
  o.rows.eviction = static_cast<RowPolicy::Eviction>(
      std::min<uint32_t>(c.rows().eviction(), 255));
  o.init.kind = static_cast<InitKind>(c.init().kind());
  o.init.value = c.init().value();
  o.init.low = c.init().low();
  o.init.high = c.init().high();
  o.init.mean = c.init().mean();
  o.init.stddev = c.init().stddev();
  o.init.seed = c.init().seed();
  return o;
}

wire::ConsistencyConfig ToWire(const Consistency& c) {
  wire::ConsistencyConfig w;
  w.set_mode(static_cast<int>(c.mode));
  w.set_staleness(c.staleness);
  w.set_combine(static_cast<int>(c.combine));
  return w;
}

Consistency FromWire(const wire::ConsistencyConfig& w) {
  Consistency c;
  c.mode = static_cast<ConsistencyMode>(w.mode());
  c.staleness = w.staleness();
  c.combine = static_cast<BspCombine>(w.combine());
  return c;
}

Status ValidateConsistency(const Consistency& c) {
  const int mode = static_cast<int>(c.mode);
  if (mode < 0 || mode > static_cast<int>(ConsistencyMode::kBsp)) {
    return InvalidArgumentError("unknown consistency mode " +
                                std::to_string(mode));
  }
  if (c.staleness < 0 || c.staleness > 1000000) {
    return InvalidArgumentError("staleness must be in [0, 1000000], got " +
                                std::to_string(c.staleness));
  }
  const int combine = static_cast<int>(c.combine);
  if (combine < 0 || combine > static_cast<int>(BspCombine::kSum)) {
    return InvalidArgumentError("unknown BSP combine " +
                                std::to_string(combine));
  }
  return Status::Ok();
}

std::string ToString(const Consistency& c) {
  switch (c.mode) {
    case ConsistencyMode::kAsync:
      return "async";
    case ConsistencyMode::kSsp:
      return "ssp(" + std::to_string(c.staleness) + ")";
    case ConsistencyMode::kBsp:
      return c.combine == BspCombine::kSum ? "bsp(sum)" : "bsp(mean)";
  }
  return "unknown";
}

namespace {

Status ValidateSchedule(const LearningRateSchedule& s) {
  constexpr int64_t kMaxClocks = int64_t{1} << 40;
  if (s.warmup_clocks < 0 || s.warmup_clocks > kMaxClocks) {
    return InvalidArgumentError(
        "lr_schedule.warmup_clocks must be in [0, 2^40], not " +
        std::to_string(s.warmup_clocks));
  }
  // Every parameter checked, used by the decay or not (see SameTable).
  if (!std::isfinite(s.gamma) || !(s.gamma > 0) || s.gamma > 1) {
    return InvalidArgumentError("lr_schedule.gamma must be in (0, 1]");
  }
  if (!std::isfinite(s.min_factor) || s.min_factor < 0 || s.min_factor > 1) {
    return InvalidArgumentError("lr_schedule.min_factor must be in [0, 1]");
  }
  if (s.step_clocks < 0 || s.step_clocks > kMaxClocks || s.total_clocks < 0 ||
      s.total_clocks > kMaxClocks) {
    return InvalidArgumentError(
        "lr_schedule.step_clocks and total_clocks must be in [0, 2^40]");
  }
  switch (s.decay) {
    case LearningRateSchedule::Decay::kNone:
      return Status::Ok();
    case LearningRateSchedule::Decay::kStep:
      if (s.step_clocks < 1) {
        return InvalidArgumentError(
            "lr_schedule: step decay needs step_clocks >= 1");
      }
      return Status::Ok();
    case LearningRateSchedule::Decay::kCosine:
      if (s.total_clocks <= s.warmup_clocks) {
        return InvalidArgumentError(
            "lr_schedule: cosine decay needs total_clocks (" +
            std::to_string(s.total_clocks) + ") > warmup_clocks (" +
            std::to_string(s.warmup_clocks) + ")");
      }
      return Status::Ok();
  }
  return InvalidArgumentError("lr_schedule: unknown decay " +
                              std::to_string(static_cast<int>(s.decay)));
}

Status ValidateBatchScaling(const BatchScaling& b) {
  const int rule = static_cast<int>(b.rule);
  if (rule < 0 || rule > static_cast<int>(BatchScaling::Rule::kAdaScale)) {
    return InvalidArgumentError("batch_scaling: unknown rule " +
                                std::to_string(rule));
  }
  if (b.base_pushes < 1 || b.base_pushes > 1000000) {
    return InvalidArgumentError(
        "batch_scaling.base_pushes must be in [1, 1000000], not " +
        std::to_string(b.base_pushes));
  }
  if (b.ramp_clocks < 0 || b.ramp_clocks > (int64_t{1} << 40)) {
    return InvalidArgumentError(
        "batch_scaling.ramp_clocks must be in [0, 2^40], not " +
        std::to_string(b.ramp_clocks));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateRowPolicy(const RowPolicy& r) {
  constexpr int64_t kMax = int64_t{1} << 40;
  if (r.admit_after_pushes > 65535) {
    return InvalidArgumentError(
        "rows.admit_after_pushes must be in [0, 65535], not " +
        std::to_string(r.admit_after_pushes));
  }
  if (r.admission_counters != 0 &&
      (r.admission_counters < 1024 ||
       r.admission_counters > (uint64_t{1} << 24))) {
    return InvalidArgumentError(
        "rows.admission_counters must be 0 (the default, 2^20) or in "
        "[1024, 2^24], not " +
        std::to_string(r.admission_counters));
  }
  if (r.evict_idle_clocks < 0 || r.evict_idle_clocks > kMax) {
    return InvalidArgumentError(
        "rows.evict_idle_clocks must be in [0, 2^40] (0: never), not " +
        std::to_string(r.evict_idle_clocks));
  }
  if (r.max_rows > static_cast<uint64_t>(kMax)) {
    return InvalidArgumentError(
        "rows.max_rows must be in [0, 2^40] (0: unbounded), not " +
        std::to_string(r.max_rows));
  }
  if (r.eviction != RowPolicy::Eviction::kLeastRecent &&
      r.eviction != RowPolicy::Eviction::kLeastUsed) {
    return InvalidArgumentError(
        "rows.eviction must be 0 (least recent) or 1 (least used), not " +
        std::to_string(static_cast<int>(r.eviction)));
  }
  return Status::Ok();
}

Status ValidateTableOptions(const TableOptions& o) {
  if (o.name.empty() || o.name.size() > 128) {
    return InvalidArgumentError("table name must have 1-128 characters");
  }
  for (char ch : o.name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
                    ch == '-';
    if (!ok) {
      return InvalidArgumentError("table name '" + o.name +
                                  "' may hold only [A-Za-z0-9_.-]");
    }
  }
  if (o.value_width > (1u << 28)) {
    return InvalidArgumentError("value_width " + std::to_string(o.value_width) +
                                " is over the limit of 2^28 floats");
  }
  const int rule = static_cast<int>(o.rule);
  if (rule < 0 || rule > static_cast<int>(UpdateRule::kCustom)) {
    return InvalidArgumentError("unknown update rule " + std::to_string(rule));
  }
  if (o.rule == UpdateRule::kCustom && o.custom_rule.empty()) {
    return InvalidArgumentError("rule kCustom needs custom_rule (a name)");
  }
  auto finite = [](float x) { return std::isfinite(x); };
  if (!finite(o.learning_rate) || o.learning_rate < 0) {
    return InvalidArgumentError("learning_rate must be finite and >= 0");
  }
  if (!finite(o.momentum) || o.momentum < 0 || o.momentum >= 1) {
    return InvalidArgumentError("momentum must be in [0, 1)");
  }
  if (!finite(o.beta1) || o.beta1 < 0 || o.beta1 >= 1 || !finite(o.beta2) ||
      o.beta2 < 0 || o.beta2 >= 1) {
    return InvalidArgumentError("beta1 and beta2 must be in [0, 1)");
  }
  if (!finite(o.epsilon) || o.epsilon <= 0) {
    return InvalidArgumentError("epsilon must be finite and > 0");
  }
  DUCTILE_RETURN_IF_ERROR(ValidateConsistency(o.consistency));
  DUCTILE_RETURN_IF_ERROR(ValidateSchedule(o.lr_schedule));
  DUCTILE_RETURN_IF_ERROR(ValidateBatchScaling(o.batch_scaling));
  DUCTILE_RETURN_IF_ERROR(ValidateRowPolicy(o.rows));
  const int init = static_cast<int>(o.init.kind);
  if (init < 0 || init > static_cast<int>(InitKind::kNormal)) {
    return InvalidArgumentError("unknown initializer " + std::to_string(init));
  }
  // Every parameter finite, used by the kind or not: a NaN makes NaN
  // weights where it is used, and where it is not, a table that differs
  // from itself (SameTable), so that a resent creation is refused.
  for (float x :
       {o.init.value, o.init.low, o.init.high, o.init.mean, o.init.stddev}) {
    if (!finite(x)) {
      return InvalidArgumentError(
          "initializer parameters (value, low, high, mean, stddev) must be "
          "finite");
    }
  }
  if (o.init.kind == InitKind::kUniform && !(o.init.low < o.init.high)) {
    return InvalidArgumentError("uniform initializer needs low < high");
  }
  if (o.init.kind == InitKind::kNormal && !(o.init.stddev >= 0)) {
    return InvalidArgumentError("normal initializer needs stddev >= 0");
  }
  return Status::Ok();
}

bool SameTable(const wire::TableConfig& a, const wire::TableConfig& b) {
  // Compared as options: a field one config leaves out (written before the
  // field existed) equals its default in the other.
  const wire::TableConfig x = ToWire(FromWire(a), 0);
  const wire::TableConfig y = ToWire(FromWire(b), 0);
  return google::protobuf::util::MessageDifferencer::Equals(x, y);
}

}  // namespace ductile
