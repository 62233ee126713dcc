#include "proto/counters.h"

#include <type_traits>

#include "glog/logging.h"

namespace ductile {
namespace {

using google::protobuf::FieldDescriptor;

const FieldDescriptor* FieldNamed(const char* name) {
  const FieldDescriptor* field =
      wire::Counters::descriptor()->FindFieldByName(name);
  // A broken build, not input: the list and the message are checked
  // against each other by codec_test.
  CHECK(field != nullptr) << "wire::Counters has no field " << name;
  return field;
}

}  // namespace

void CountersToWire(const ServerCounters& counters, wire::Counters* out) {
  const auto* reflection = out->GetReflection();
  ForEachCounter(
      [&](const char* name, const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_floating_point_v<T>) {
          reflection->SetDouble(out, FieldNamed(name), value);
        } else if constexpr (std::is_signed_v<T>) {
          reflection->SetInt64(out, FieldNamed(name), value);
        } else {
          reflection->SetUInt64(out, FieldNamed(name), value);
        }
      },
      counters);
}

ServerCounters CountersFromWire(const wire::Counters& counters) {
  ServerCounters c;
  const auto* reflection = counters.GetReflection();
  ForEachCounter(
      [&](const char* name, auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_floating_point_v<T>) {
          value = reflection->GetDouble(counters, FieldNamed(name));
        } else if constexpr (std::is_signed_v<T>) {
          value = reflection->GetInt64(counters, FieldNamed(name));
        } else {
          value = reflection->GetUInt64(counters, FieldNamed(name));
        }
      },
      c);
  return c;
}

}  // namespace ductile
