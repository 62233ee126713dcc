#include "python/py_tables.h"

#include <pybind11/stl.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "python/py_status.h"

namespace py = pybind11;

namespace ductile::python {
namespace {

// A name of an enum value, each with its string.
template <typename E>
using Names = std::vector<std::pair<const char*, E>>;

const Names<UpdateRule> kRules = {
    {"assign", UpdateRule::kAssign},   {"add", UpdateRule::kAdd},
    {"sgd", UpdateRule::kSgd},         {"momentum", UpdateRule::kMomentum},
    {"adagrad", UpdateRule::kAdaGrad}, {"adam", UpdateRule::kAdam},
    {"custom", UpdateRule::kCustom}};
const Names<InitKind> kInits = {{"zeros", InitKind::kZeros},
                                {"constant", InitKind::kConstant},
                                {"uniform", InitKind::kUniform},
                                {"normal", InitKind::kNormal}};
const Names<LearningRateSchedule::Decay> kDecays = {
    {"none", LearningRateSchedule::Decay::kNone},
    {"step", LearningRateSchedule::Decay::kStep},
    {"cosine", LearningRateSchedule::Decay::kCosine}};
const Names<BatchScaling::Rule> kScalings = {
    {"none", BatchScaling::Rule::kNone},
    {"linear", BatchScaling::Rule::kLinear},
    {"sqrt", BatchScaling::Rule::kSqrt},
    {"adascale", BatchScaling::Rule::kAdaScale}};
const Names<RowPolicy::Eviction> kEvictions = {
    {"least_recent", RowPolicy::Eviction::kLeastRecent},
    {"least_used", RowPolicy::Eviction::kLeastUsed}};

template <typename E>
E FromName(py::handle value, const Names<E>& names, const std::string& what) {
  std::string name;
  if (py::isinstance<py::str>(value)) {
    name = value.cast<std::string>();
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    for (const auto& [n, e] : names) {
      if (name == n) return e;
    }
  }
  std::string known;
  for (const auto& [n, e] : names)
    known += std::string(known.empty() ? "" : ", ") + n;
  ThrowValueError(what + " must be one of " + known + ", not " +
                  std::string(py::repr(value)));
}

template <typename E>
const char* NameOf(E e, const Names<E>& names) {
  for (const auto& [n, v] : names) {
    if (v == e) return n;
  }
  return "unknown";
}

template <typename T>
T Number(py::handle value, const std::string& what) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  bool ok = false;
  const char* expected = "an integer";
  if constexpr (std::is_same_v<T, bool>) {
    ok = is_bool;
    expected = "True or False";
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = !is_bool && py::hasattr(value, "__float__");
    expected = "a number";
  } else {
    ok = !is_bool && py::hasattr(value, "__index__");
  }
  if (!ok) {
    ThrowTypeError(what + " must be " + expected + ", not " +
                   std::string(py::repr(value)));
  }
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    ThrowValueError(what + " is out of range: " + std::string(py::repr(value)));
  }
}

// Calls `set(key, value)` for each item of `spec` (a dict); a TypeError
// names a key `set` does not know (it returns false).
template <typename F>
void ForEachField(py::handle spec, const std::string& what, F set) {
  if (!py::isinstance<py::dict>(spec)) {
    ThrowTypeError(what + " must be a dict, not " +
                   std::string(py::repr(spec)));
  }
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(spec)) {
    const std::string k = py::str(key);
    if (!set(k, value)) ThrowTypeError(what + " has no field '" + k + "'");
  }
}

Initializer InitFrom(py::handle spec) {
  Initializer init;
  if (spec.is_none()) return init;
  if (py::isinstance<py::str>(spec)) {
    init.kind = FromName(spec, kInits, "init");
    return init;
  }
  if (py::isinstance<py::float_>(spec) || py::isinstance<py::int_>(spec)) {
    init.kind = InitKind::kConstant;
    init.value = Number<float>(spec, "init");
    return init;
  }
  ForEachField(spec, "init", [&](const std::string& k, py::handle v) {
    if (k == "kind")
      init.kind = FromName(v, kInits, "init kind");
    else if (k == "value")
      init.value = Number<float>(v, "init value");
    else if (k == "low")
      init.low = Number<float>(v, "init low");
    else if (k == "high")
      init.high = Number<float>(v, "init high");
    else if (k == "mean")
      init.mean = Number<float>(v, "init mean");
    else if (k == "stddev")
      init.stddev = Number<float>(v, "init stddev");
    else if (k == "seed")
      init.seed = Number<uint64_t>(v, "init seed");
    else
      return false;
    return true;
  });
  return init;
}

LearningRateSchedule ScheduleFrom(py::handle spec) {
  LearningRateSchedule s;
  if (spec.is_none()) return s;
  ForEachField(spec, "lr_schedule", [&](const std::string& k, py::handle v) {
    if (k == "warmup_clocks")
      s.warmup_clocks = Number<int64_t>(v, k);
    else if (k == "decay")
      s.decay = FromName(v, kDecays, "lr_schedule decay");
    else if (k == "step_clocks")
      s.step_clocks = Number<int64_t>(v, k);
    else if (k == "gamma")
      s.gamma = Number<float>(v, k);
    else if (k == "total_clocks")
      s.total_clocks = Number<int64_t>(v, k);
    else if (k == "min_factor")
      s.min_factor = Number<float>(v, k);
    else
      return false;
    return true;
  });
  return s;
}

BatchScaling ScalingFrom(py::handle spec) {
  BatchScaling s;
  if (spec.is_none()) return s;
  ForEachField(spec, "batch_scaling", [&](const std::string& k, py::handle v) {
    if (k == "rule")
      s.rule = FromName(v, kScalings, "batch_scaling rule");
    else if (k == "base_pushes")
      s.base_pushes = Number<int32_t>(v, k);
    else if (k == "ramp_clocks")
      s.ramp_clocks = Number<int64_t>(v, k);
    else
      return false;
    return true;
  });
  return s;
}

// The row policy (TableOptions::rows) from a dict of its fields; each a
// non-negative integer (the ranges are checked with the other options) but
// eviction, "least_recent" or "least_used".
RowPolicy RowPolicyFrom(py::handle spec) {
  RowPolicy r;
  if (spec.is_none()) return r;
  auto count = [](py::handle v, const std::string& k) {
    const auto n = Number<int64_t>(v, "rows " + k);
    if (n < 0) {
      ThrowValueError("rows " + k + " must be >= 0, not " + std::to_string(n));
    }
    return n;
  };
  ForEachField(spec, "rows", [&](const std::string& k, py::handle v) {
    if (k == "admit_after_pushes") {
      // Its range is checked with the other options (InvalidArgument);
      // here only that it fits the field.
      const int64_t n = count(v, k);
      if (n > int64_t{std::numeric_limits<uint32_t>::max()}) {
        ThrowValueError("rows admit_after_pushes must be in [0, 65535], not " +
                        std::to_string(n));
      }
      r.admit_after_pushes = static_cast<uint32_t>(n);
    } else if (k == "admission_counters") {
      r.admission_counters = static_cast<uint64_t>(count(v, k));
    } else if (k == "evict_idle_clocks") {
      r.evict_idle_clocks = count(v, k);
    } else if (k == "max_rows") {
      r.max_rows = static_cast<uint64_t>(count(v, k));
    } else if (k == "eviction") {
      r.eviction = FromName(v, kEvictions, "rows eviction");
    } else {
      return false;
    }
    return true;
  });
  return r;
}

// A float option as the double that prints as it does ("0.1", not
// "0.10000000149011612").
double Shortest(float f) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), f);
  return error == std::errc()
             ? std::strtod(std::string(text, end).c_str(), nullptr)
             : f;
}

std::string TensorRepr(const PyTensor& t) {
  return "<ductile.Tensor '" + t.name + "' table " +
         std::to_string(t.tensor.table) + ", " +
         std::to_string(t.tensor.num_floats) + " floats in " +
         std::to_string(t.tensor.keys.size()) + " chunks>";
}

}  // namespace

Consistency ParseConsistency(py::handle spec) {
  if (!py::isinstance<py::str>(spec)) {
    ThrowTypeError(
        "consistency must be a string (\"async\", \"ssp:K\", "
        "\"bsp\", \"bsp(sum)\"), not " +
        std::string(py::repr(spec)));
  }
  std::string s = spec.cast<std::string>();
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  Consistency c;
  if (s == "async") return c;
  if (s == "bsp" || s == "bsp(mean)") {
    c.mode = ConsistencyMode::kBsp;
    return c;
  }
  if (s == "bsp(sum)") {
    c.mode = ConsistencyMode::kBsp;
    c.combine = BspCombine::kSum;
    return c;
  }
  std::string bound;
  if (s.starts_with("ssp:")) bound = s.substr(4);
  if (s.starts_with("ssp(") && s.ends_with(")"))
    bound = s.substr(4, s.size() - 5);
  int32_t staleness = -1;
  const auto [end, error] =
      std::from_chars(bound.data(), bound.data() + bound.size(), staleness);
  if (bound.empty() || error != std::errc() ||
      end != bound.data() + bound.size() || staleness < 0) {
    ThrowValueError(
        "consistency must be \"async\", \"ssp:K\" (K >= 0), "
        "\"bsp\" or \"bsp(sum)\", not '" +
        spec.cast<std::string>() + "'");
  }
  c.mode = ConsistencyMode::kSsp;
  c.staleness = staleness;
  return c;
}

TableOptions TableOptionsFromKwargs(const std::string& name,
                                    const py::kwargs& kwargs) {
  TableOptions o;
  o.name = name;
  for (auto [key, value] : kwargs) {
    const std::string k = py::str(key);
    if (k == "width")
      o.value_width = Number<uint32_t>(value, k);
    else if (k == "rule")
      o.rule = FromName(value, kRules, "rule");
    else if (k == "learning_rate")
      o.learning_rate = Number<float>(value, k);
    else if (k == "momentum")
      o.momentum = Number<float>(value, k);
    else if (k == "beta1")
      o.beta1 = Number<float>(value, k);
    else if (k == "beta2")
      o.beta2 = Number<float>(value, k);
    else if (k == "epsilon")
      o.epsilon = Number<float>(value, k);
    else if (k == "init")
      o.init = InitFrom(value);
    else if (k == "consistency")
      o.consistency = ParseConsistency(value);
    else if (k == "reject_non_finite")
      o.reject_non_finite = Number<bool>(value, k);
    else if (k == "custom_rule")
      o.custom_rule = py::str(value);
    else if (k == "lr_schedule")
      o.lr_schedule = ScheduleFrom(value);
    else if (k == "batch_scaling")
      o.batch_scaling = ScalingFrom(value);
    else if (k == "rows")
      o.rows = RowPolicyFrom(value);
    else
      ThrowTypeError("unknown table option '" + k + "'");
  }
  return o;
}

py::dict TableOptionsToDict(const TableOptions& o) {
  py::dict init;
  init["kind"] = NameOf(o.init.kind, kInits);
  init["value"] = Shortest(o.init.value);
  init["low"] = Shortest(o.init.low);
  init["high"] = Shortest(o.init.high);
  init["mean"] = Shortest(o.init.mean);
  init["stddev"] = Shortest(o.init.stddev);
  init["seed"] = o.init.seed;
  py::dict schedule;
  schedule["warmup_clocks"] = o.lr_schedule.warmup_clocks;
  schedule["decay"] = NameOf(o.lr_schedule.decay, kDecays);
  schedule["step_clocks"] = o.lr_schedule.step_clocks;
  schedule["gamma"] = Shortest(o.lr_schedule.gamma);
  schedule["total_clocks"] = o.lr_schedule.total_clocks;
  schedule["min_factor"] = Shortest(o.lr_schedule.min_factor);
  py::dict scaling;
  scaling["rule"] = NameOf(o.batch_scaling.rule, kScalings);
  scaling["base_pushes"] = o.batch_scaling.base_pushes;
  scaling["ramp_clocks"] = o.batch_scaling.ramp_clocks;
  py::dict rows;
  rows["admit_after_pushes"] = o.rows.admit_after_pushes;
  rows["admission_counters"] = o.rows.admission_counters;
  rows["evict_idle_clocks"] = o.rows.evict_idle_clocks;
  rows["max_rows"] = o.rows.max_rows;
  rows["eviction"] = NameOf(o.rows.eviction, kEvictions);
  py::dict d;
  d["width"] = o.value_width;
  d["rule"] = NameOf(o.rule, kRules);
  d["learning_rate"] = Shortest(o.learning_rate);
  d["momentum"] = Shortest(o.momentum);
  d["beta1"] = Shortest(o.beta1);
  d["beta2"] = Shortest(o.beta2);
  d["epsilon"] = Shortest(o.epsilon);
  d["init"] = init;
  d["consistency"] = ToString(o.consistency);
  d["reject_non_finite"] = o.reject_non_finite;
  d["custom_rule"] = o.custom_rule;
  d["lr_schedule"] = schedule;
  d["batch_scaling"] = scaling;
  d["rows"] = rows;
  return d;
}

void BindTableTypes(py::module_& m) {
  py::class_<TableInfo>(m, "Table", R"doc(
A table on the servers: a map from 64-bit keys to float vectors, made by
Client.create_table() or found by Client.get_table(). Pass it to push(),
pull() and push_pull().)doc")
      .def_property_readonly("id", [](const TableInfo& t) { return t.id; })
      .def_property_readonly("name",
                             [](const TableInfo& t) { return t.options.name; })
      .def_property_readonly(
          "width", [](const TableInfo& t) { return t.options.value_width; },
          "Floats per key (0: variable, set by each key's first push).")
      .def_property_readonly(
          "consistency",
          [](const TableInfo& t) { return ToString(t.options.consistency); })
      .def_property_readonly(
          "options",
          [](const TableInfo& t) { return TableOptionsToDict(t.options); },
          "The table's options, as the keywords create_table() takes.")
      .def("__repr__", [](const TableInfo& t) {
        return "<ductile.Table '" + t.options.name + "' id " +
               std::to_string(t.id) + ", width " +
               std::to_string(t.options.value_width) + ", " +
               NameOf(t.options.rule, kRules) + ", " +
               ToString(t.options.consistency) + ">";
      });

  py::class_<PyTensor>(m, "Tensor", R"doc(
A dense tensor of `num_floats` floats on the servers, stored in chunks of
`chunk_floats` (one key each) spread over them. Made by
Client.register_tensor(); pass it to push_tensor(), pull_tensor() and
push_pull_tensor().)doc")
      .def_property_readonly("name", [](const PyTensor& t) { return t.name; })
      .def_property_readonly("table",
                             [](const PyTensor& t) { return t.tensor.table; })
      .def_property_readonly(
          "num_floats", [](const PyTensor& t) { return t.tensor.num_floats; })
      .def_property_readonly(
          "chunk_floats",
          [](const PyTensor& t) { return t.tensor.chunk_floats; })
      .def_property_readonly(
          "num_chunks", [](const PyTensor& t) { return t.tensor.keys.size(); })
      .def("__len__", [](const PyTensor& t) { return t.tensor.num_floats; })
      .def("__repr__", &TensorRepr);

  py::class_<ClientStats>(m, "Stats", R"doc(
What a client has observed (Client.stats()): pulls and their staleness, time
blocked at the staleness bound, cache use, and per-step times. Field meanings
are those of ductile::ClientStats (include/ductile/client.h).)doc")
      .def_readonly("pulls", &ClientStats::pulls)
      .def_readonly("blocked_us", &ClientStats::blocked_us)
      .def_readonly("staleness", &ClientStats::staleness,
                    "staleness[i]: pulls of staleness i (the last: i or more)")
      .def_readonly("cache_hits", &ClientStats::cache_hits)
      .def_readonly("cache_misses", &ClientStats::cache_misses)
      .def_readonly("steps", &ClientStats::steps)
      .def_readonly("step_us", &ClientStats::step_us)
      .def_readonly("push_wait_us", &ClientStats::push_wait_us)
      .def_readonly("pull_wait_us", &ClientStats::pull_wait_us)
      .def_readonly("samples", &ClientStats::samples)
      .def_readonly("recent_step_us", &ClientStats::recent_step_us)
      .def_readonly("recent_push_wait_us", &ClientStats::recent_push_wait_us)
      .def_readonly("recent_pull_wait_us", &ClientStats::recent_pull_wait_us)
      .def_readonly("recent_samples_per_s", &ClientStats::recent_samples_per_s)
      .def_readonly("recent_loss", &ClientStats::recent_loss)
      .def_readonly("losses", &ClientStats::losses)
      .def_property_readonly("max_staleness", &ClientStats::max_staleness,
                             "Largest staleness seen (-1: no pull yet).")
      .def("__repr__", [](const ClientStats& s) {
        return "<ductile.Stats pulls=" + std::to_string(s.pulls) +
               " steps=" + std::to_string(s.steps) +
               " samples=" + std::to_string(s.samples) +
               " max_staleness=" + std::to_string(s.max_staleness()) + ">";
      });

  using Batch = Client::Batch;
  py::enum_<Batch::Kind>(m, "BatchKind", "What Client.next_batch() answered.")
      .value("TRAIN", Batch::kTrain, "train on batch `index` of `epoch`")
      .value("WAIT", Batch::kWait, "none free now: ask again soon")
      .value("END", Batch::kEnd, "every batch of every epoch is done");
  py::class_<Batch>(m, "Batch", R"doc(
A batch of the job's data plan (Client.next_batch()): `kind` says whether to
train on batch `index` of `epoch`, wait, or stop. Pass it back as `trained`
once its gradient is pushed.)doc")
      .def_readonly("kind", &Batch::kind)
      .def_readonly("epoch", &Batch::epoch)
      .def_readonly("index", &Batch::index)
      .def_readonly("epochs_done", &Batch::epochs_done)
      .def_readonly("batches_per_step", &Batch::batches_per_step)
      .def("__repr__", [](const Batch& b) {
        const char* kind = b.kind == Batch::kTrain  ? "TRAIN"
                           : b.kind == Batch::kWait ? "WAIT"
                                                    : "END";
        return std::string("<ductile.Batch ") + kind + " epoch " +
               std::to_string(b.epoch) + " index " + std::to_string(b.index) +
               ">";
      });

  using Recovery = Client::Recovery;
  py::class_<Recovery>(m, "Recovery", R"doc(
A rollback taken by Client.await_recovery(): resume at `clock`, with the
`resume_state` (bytes) this worker recorded there with set_resume_state().)doc")
      .def_readonly("clock", &Recovery::clock)
      .def_readonly("generation", &Recovery::generation)
      .def_property_readonly(
          "resume_state",
          [](const Recovery& r) { return py::bytes(r.resume_state); })
      .def("__repr__", [](const Recovery& r) {
        return "<ductile.Recovery clock " + std::to_string(r.clock) +
               " generation " + std::to_string(r.generation) + ">";
      });
}

}  // namespace ductile::python
