#include "launch/schedules.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "launch/trim.h"

namespace ductile::launch {
namespace {

using Role = KillEvent::Role;

// Random kills without an explicit range start here: the cluster is
// registered and training by then.
constexpr int64_t kFirstRandomClock = 10;

// A decimal number made of digits only (no sign, no spaces).
bool ParseCount(std::string_view text, int64_t* out) {
  if (text.empty() || text.find_first_not_of("0123456789") != text.npos) {
    return false;
  }
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Uniform in [lo, hi]. The modulo's bias is below (hi - lo) / 2^64, and
// unlike std::uniform_int_distribution it draws the same numbers with
// every standard library, so a seed names the same schedule everywhere.
int64_t Draw(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng() % span);
}

}  // namespace

Result<std::vector<ResizeEvent>> ParseResizeSchedule(const std::string& spec) {
  std::vector<ResizeEvent> events;
  std::string_view rest = spec;
  while (!Trim(rest).empty()) {
    const size_t comma = rest.find(',');
    const std::string item(Trim(rest.substr(0, comma)));
    rest = comma == std::string_view::npos ? std::string_view()
                                           : rest.substr(comma + 1);
    const auto bad = [&](const std::string& why) {
      return InvalidArgumentError("--resize_schedule: '" + item + "': " + why +
                                  " (e.g. workers=4@clock=300,servers=3@"
                                  "clock=600)");
    };
    const size_t eq = item.find('=');
    const size_t at = item.find("@clock=");
    if (eq == std::string::npos || at == std::string::npos || at < eq) {
      return bad("expected ROLE=COUNT@clock=N");
    }
    const std::string role = item.substr(0, eq);
    if (role != "workers" && role != "servers") {
      return bad("the role is workers or servers");
    }
    int64_t count = 0, clock = 0;
    if (!ParseCount(std::string_view(item).substr(eq + 1, at - eq - 1),
                    &count) ||
        count < 1 || count > 1024) {
      return bad("the count is a number from 1 to 1024");
    }
    if (!ParseCount(std::string_view(item).substr(at + 7), &clock) ||
        clock < 1) {
      return bad("the clock is a number >= 1");
    }
    events.push_back({role == "servers", static_cast<int>(count), clock});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const ResizeEvent& a, const ResizeEvent& b) {
                     return a.clock < b.clock;
                   });
  return events;
}

std::string KillTargetName(const KillEvent& event) {
  switch (event.role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kServer:
      return "server " + std::to_string(event.id);
    case Role::kWorker:
      return "worker " + std::to_string(event.id);
  }
  return "?";
}

Result<std::vector<KillEvent>> ParseKillSchedule(
    const std::string& spec, const KillScheduleContext& context) {
  if (context.num_servers < 1 || context.num_workers < 1) {
    return InvalidArgumentError(
        "--kill_schedule: the cluster needs a server and a worker");
  }
  std::vector<KillEvent> events;
  if (Trim(spec).empty()) return events;

  struct RandomKills {
    int64_t count = 0;
    int64_t first_clock = 0;
    int64_t last_clock = 0;
  };
  std::vector<RandomKills> random_kills;
  std::vector<bool> worker_killed(context.num_workers, false);
  int workers_killed = 0;

  std::string_view rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string item(Trim(rest.substr(0, comma)));
    auto bad = [&item](const std::string& why) {
      return InvalidArgumentError("--kill_schedule: item '" + item +
                                  "': " + why);
    };
    if (item.empty()) {
      return InvalidArgumentError(
          "--kill_schedule: empty item (a stray comma?) in '" + spec + "'");
    }
    const size_t at = item.find('@');
    const std::string_view target = std::string_view(item).substr(0, at);
    const std::string_view when = at == std::string::npos
                                      ? std::string_view()
                                      : std::string_view(item).substr(at + 1);
    constexpr std::string_view kClockPrefix = "clock=";
    if (at != std::string::npos &&
        when.substr(0, kClockPrefix.size()) != kClockPrefix) {
      return bad("expected '@clock=' after the target");
    }
    const std::string_view clock_text = at == std::string::npos
                                            ? std::string_view()
                                            : when.substr(kClockPrefix.size());

    const size_t colon = target.find(':');
    const std::string_view role = target.substr(0, colon);
    const std::string_view id_text = colon == std::string_view::npos
                                         ? std::string_view()
                                         : target.substr(colon + 1);
    if (role == "random") {
      RandomKills r;
      if (!ParseCount(id_text, &r.count) || r.count < 1 || r.count > 1000) {
        return bad("expected random:K with K kills, 1 <= K <= 1000");
      }
      if (at == std::string::npos) {
        if (context.estimated_clocks <= 0) {
          return bad(
              "the job's length is not known; give the clocks: "
              "random:K@clock=A-B");
        }
        // The last fifth stays free of kills: the estimate is only one,
        // and kills drawn past the job's real end would all fire at once
        // at its final barrier.
        const int64_t last = context.estimated_clocks * 4 / 5;
        if (last < kFirstRandomClock) {
          return bad("the job is expected to last only " +
                     std::to_string(context.estimated_clocks) +
                     " clocks, too few for random kills from clock " +
                     std::to_string(kFirstRandomClock) +
                     "; give the clocks: random:K@clock=A-B");
        }
        r.first_clock = kFirstRandomClock;
        r.last_clock = last;
      } else {
        const size_t dash = clock_text.find('-');
        if (dash == std::string_view::npos ||
            !ParseCount(clock_text.substr(0, dash), &r.first_clock) ||
            !ParseCount(clock_text.substr(dash + 1), &r.last_clock) ||
            r.first_clock < 1 || r.first_clock > r.last_clock) {
          return bad("expected a clock range A-B with 1 <= A <= B");
        }
      }
      random_kills.push_back(r);
    } else {
      KillEvent event;
      if (role == "coordinator") {
        if (colon != std::string_view::npos) {
          return bad("the coordinator takes no id: coordinator@clock=N");
        }
        event.role = Role::kCoordinator;
      } else if (role == "server" || role == "worker") {
        event.role = role == "server" ? Role::kServer : Role::kWorker;
        const int count =
            role == "server" ? context.num_servers : context.num_workers;
        int64_t id = 0;
        if (colon == std::string_view::npos) {
          return bad("missing id: " + std::string(role) + ":ID@clock=N");
        }
        if (!ParseCount(id_text, &id)) {
          return bad("bad id '" + std::string(id_text) + "'");
        }
        if (id >= count) {
          return bad(std::string(role) + " " + std::to_string(id) +
                     " does not exist: there are " + std::to_string(count) +
                     " " + std::string(role) + "s (ids 0-" +
                     std::to_string(count - 1) + ")");
        }
        event.id = static_cast<int>(id);
      } else {
        return bad("unknown role '" + std::string(role) +
                   "' (server:ID, worker:ID, coordinator or random:K)");
      }
      if (at == std::string::npos) return bad("missing '@clock=N'");
      if (!ParseCount(clock_text, &event.clock) || event.clock < 1) {
        return bad("expected a clock N >= 1 after '@clock='");
      }
      if (event.role == Role::kWorker) {
        if (worker_killed[event.id]) {
          return bad("worker " + std::to_string(event.id) +
                     " is already killed earlier in the schedule (killed "
                     "workers are not restarted)");
        }
        worker_killed[event.id] = true;
        ++workers_killed;
      }
      events.push_back(event);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (workers_killed == context.num_workers) {
    return InvalidArgumentError(
        "--kill_schedule kills every worker; at least one must be left to "
        "finish the job");
  }

  // Random kills: first every clock, then the targets in clock order, so
  // that "2 workers remain" is judged against the kills before each one.
  std::mt19937_64 rng(context.seed);
  std::vector<int64_t> random_clocks;
  for (const RandomKills& r : random_kills) {
    for (int64_t k = 0; k < r.count; ++k) {
      random_clocks.push_back(Draw(rng, r.first_clock, r.last_clock));
    }
  }
  std::sort(random_clocks.begin(), random_clocks.end());
  for (int64_t clock : random_clocks) {
    std::vector<KillEvent> candidates;
    for (int i = 0; i < context.num_servers; ++i) {
      candidates.push_back({Role::kServer, i, clock});
    }
    candidates.push_back({Role::kCoordinator, 0, clock});
    if (context.num_workers - workers_killed - 1 >= 2) {
      for (int i = 0; i < context.num_workers; ++i) {
        if (!worker_killed[i]) candidates.push_back({Role::kWorker, i, clock});
      }
    }
    const KillEvent chosen = candidates[static_cast<size_t>(
        Draw(rng, 0, static_cast<int64_t>(candidates.size()) - 1))];
    if (chosen.role == Role::kWorker) {
      worker_killed[chosen.id] = true;
      ++workers_killed;
    }
    events.push_back(chosen);
  }
  std::stable_sort(
      events.begin(), events.end(),
      [](const KillEvent& a, const KillEvent& b) { return a.clock < b.clock; });
  return events;
}

}  // namespace ductile::launch
