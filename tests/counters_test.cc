// The one list of a server's counters against their wire message, and the
// conversions written by name.
#include "proto/counters.h"

#include <set>
#include <string>
#include <type_traits>

#include "gtest/gtest.h"
#include "server/live_counters.h"

namespace ductile {
namespace {

TEST(Counters, TheListAndTheWireMessageNameTheSameFields) {
  std::set<std::string> listed;
  ServerCounters c;
  ForEachCounter([&](const char* name, auto&) { listed.insert(name); }, c);
  std::set<std::string> wired;
  const auto* descriptor = wire::Counters::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    wired.insert(descriptor->field(i)->name());
  }
  EXPECT_EQ(listed, wired);
  // Every field of the struct is listed: its size is the listed fields'.
  size_t bytes = 0;
  ForEachCounter([&](const char*, auto& value) { bytes += sizeof(value); }, c);
  EXPECT_EQ(bytes, sizeof(ServerCounters));
}

TEST(Counters, EveryFieldSurvivesTheWire) {
  ServerCounters c;
  int64_t next = 1;
  ForEachCounter(
      [&](const char*, auto& value) {
        using T = std::decay_t<decltype(value)>;
        value = static_cast<T>(std::is_signed_v<T> ? -next : next * 1000);
        ++next;
      },
      c);
  wire::Counters w;
  CountersToWire(c, &w);
  const ServerCounters back = CountersFromWire(w);
  ForEachCounter([](const char* name, const auto& a,
                    const auto& b) { EXPECT_EQ(a, b) << name; },
                 c, back);
}

TEST(LiveCounters, ASnapshotHoldsWhatWasAddedAndSet) {
  LiveCounters live;
  live.Add(&ServerCounters::requests, 3);
  live.Add(&ServerCounters::requests);
  live.Set(&ServerCounters::min_clock, -7);
  live.Set(&ServerCounters::parked_pulls, 9);
  const ServerCounters c = live.Snapshot();
  EXPECT_EQ(c.requests, 4u);
  EXPECT_EQ(c.min_clock, -7);
  EXPECT_EQ(c.parked_pulls, 9u);
  EXPECT_EQ(c.pushes, 0u);
  EXPECT_EQ(c.checkpoint_clock, -1);
}

}  // namespace
}  // namespace ductile
