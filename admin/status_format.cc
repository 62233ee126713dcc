// FormatClusterStatus and FormatPrometheus: a ClusterStatus as the table
// `ductile status` prints and as Prometheus' text format for /metrics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "ductile/admin.h"
#include "proto/counters.h"

namespace ductile {
namespace {

// "1100 connections refused, 12 replies dropped": the counts that are not
// 0, or "" when none is.
std::string Refusals(uint64_t connections, uint64_t accepts,
                     uint64_t handshakes, uint64_t replies_refused,
                     uint64_t replies_dropped, uint64_t parked_pulls) {
  std::string out;
  const auto add = [&](uint64_t n, const char* what) {
    if (n == 0) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(n) + " " + what;
  };
  add(connections, "connections refused");
  add(accepts, "accepts failed");
  add(handshakes, "handshakes failed");
  add(replies_refused, "replies refused");
  add(replies_dropped, "replies dropped");
  add(parked_pulls, "parked pulls refused");
  return out;
}

}  // namespace

std::string FormatClusterStatus(const ClusterStatus& status) {
  std::ostringstream os;
  os << "epoch " << status.epoch << ", " << status.num_slots << " slots, "
     << status.expected_servers << " servers expected\n";
  os << "generation " << status.generation << ", last checkpoint at clock ";
  if (status.last_checkpoint_clock >= 0) {
    os << status.last_checkpoint_clock;
  } else {
    os << "none";
  }
  os << ", " << status.checkpoints << " checkpoint(s) kept";
  if (status.recovering) os << ", recovering";
  if (status.slots_moving > 0) {
    char left[64];
    std::snprintf(left, sizeof(left), "%.1f MB", status.move_bytes_left / 1e6);
    os << ", " << status.slots_moving << " slot(s) moving between servers ("
       << left << " left)";
  }
  os << "\n";
  if (status.replicas >= 2) {
    os << "replicas " << status.replicas << ": ";
    if (status.slots_without_copy > 0) {
      os << status.slots_without_copy
         << " slot(s) without a whole backup copy yet";
    } else {
      os << "every slot has a whole backup copy";
    }
    os << ", " << status.takeovers << " takeover(s) so far\n";
  }
  if (!status.problem.empty()) os << "problem: " << status.problem << "\n";
  if (status.target_workers > 0 || status.target_servers > 0) {
    os << "target size:";
    if (status.target_workers > 0) {
      os << " " << status.target_workers << " worker(s)";
    }
    if (status.target_servers > 0) {
      os << " " << status.target_servers << " server(s)";
    }
    os << "\n";
  }
  if (!status.replace_workers.empty()) {
    os << "replacing (a policy asked):";
    for (int32_t id : status.replace_workers) os << " worker " << id;
    os << "\n";
  }
  if (status.noise_scale_clocks > 0) {
    char noise[160];
    if (status.noise_scale > 0) {
      std::snprintf(
          noise, sizeof(noise),
          "gradient noise scale: %.3g worker batches (averaged over %llu "
          "clocks; %.0f us of server time a clock)\n",
          status.noise_scale,
          static_cast<unsigned long long>(status.noise_scale_clocks),
          static_cast<double>(status.noise_scale_us) /
              static_cast<double>(status.noise_scale_clocks));
    } else {
      std::snprintf(noise, sizeof(noise),
                    "gradient noise scale: not estimable yet (%llu clocks)\n",
                    static_cast<unsigned long long>(status.noise_scale_clocks));
    }
    os << noise;
  }
  if (status.data_epochs > 0) {
    if (status.data_epoch >= status.data_epochs) {
      os << "data: all " << status.data_epochs << " epoch(s) done\n";
    } else {
      os << "data: epoch " << status.data_epoch + 1 << "/" << status.data_epochs
         << ", " << status.data_batches_done << "/"
         << status.data_batches_per_epoch << " batches done";
      if (status.data_batches_per_step > 1) {
        os << "; " << status.data_batches_per_step
           << " batches a worker's step";
      }
      os << "\n";
    }
  }
  if (status.samples_per_s > 0) {
    char rate[96];
    std::snprintf(rate, sizeof(rate),
                  "throughput: %.0f samples/s (the active workers' recent "
                  "steps)\n",
                  status.samples_per_s);
    os << rate;
  }
  if (status.loss != 0) {
    char loss[96];
    std::snprintf(loss, sizeof(loss),
                  "training loss: %.4g (the active workers' recent steps)\n",
                  status.loss);
    os << loss;
  }
  uint64_t reads = 0;
  for (uint64_t n : status.staleness) reads += n;
  if (reads > 0) {
    os << "staleness of reads:";
    for (size_t i = 0; i < status.staleness.size(); ++i) {
      if (status.staleness[i] == 0) continue;
      char bucket[64];
      std::snprintf(bucket, sizeof(bucket), " %s%zu: %.1f%%",
                    i + 1 == kStalenessBuckets ? ">=" : "", i,
                    100.0 * static_cast<double>(status.staleness[i]) /
                        static_cast<double>(reads));
      os << bucket;
    }
    os << " (" << reads << " pulls)\n";
  }
  os << "tables:";
  for (size_t i = 0; i < status.tables.size(); ++i) {
    os << " " << status.tables[i];
    if (i < status.table_consistency.size()) {
      os << " (" << ToString(status.table_consistency[i]) << ")";
    }
  }
  if (status.tables.empty()) os << " (none)";
  os << "\n";
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "%-4s %-7s %-8s %9s %6s %10s %10s %10s %6s %6s %6s %6s %8s %7s %6s %6s "
      "%6s %7s %4s  %s\n",
      "id", "role", "state", "hb_ago", "slots", "requests", "pushes", "pulls",
      "dups", "errors", "limit", "denied", "keys", "clock", "parked", "run",
      "queue", "pid", "inc", "address");
  os << line;
  for (const auto& m : status.members) {
    if (m.role != "server") continue;
    std::snprintf(
        line, sizeof(line),
        "%-4d %-7s %-8s %7lldms %6d %10llu %10llu %10llu %6llu %6llu %6llu "
        "%6llu %8llu %7lld %6llu %6llu %6llu %7d %4llu  %s\n",
        m.id, m.role.c_str(), m.state.c_str(),
        static_cast<long long>(m.last_heartbeat_ms_ago), m.slots,
        static_cast<unsigned long long>(m.counters.requests),
        static_cast<unsigned long long>(m.counters.pushes),
        static_cast<unsigned long long>(m.counters.pulls),
        static_cast<unsigned long long>(m.counters.duplicates),
        static_cast<unsigned long long>(m.counters.errors),
        static_cast<unsigned long long>(m.counters.refused_limits),
        static_cast<unsigned long long>(m.counters.refused_permission),
        static_cast<unsigned long long>(m.counters.keys_stored),
        static_cast<long long>(m.counters.min_clock),
        static_cast<unsigned long long>(m.counters.parked_pulls),
        static_cast<unsigned long long>(m.counters.busy_run_peak),
        static_cast<unsigned long long>(m.in_flight_requests), m.pid,
        static_cast<unsigned long long>(m.incarnation), m.address.c_str());
    os << line;
  }
  // Admission and eviction (TableOptions::rows), for servers that had any.
  for (const auto& m : status.members) {
    const ServerCounters& c = m.counters;
    const uint64_t activity = c.rows_admitted + c.row_pushes_dropped +
                              c.rows_evicted_idle + c.rows_evicted_budget;
    if (m.role != "server" || activity == 0) continue;
    std::snprintf(line, sizeof(line),
                  "rows of server %d: %llu stored, %llu admitted, %llu "
                  "pushes not admitted, %llu evicted idle, %llu beyond the "
                  "budget\n",
                  m.id, static_cast<unsigned long long>(c.keys_stored),
                  static_cast<unsigned long long>(c.rows_admitted),
                  static_cast<unsigned long long>(c.row_pushes_dropped),
                  static_cast<unsigned long long>(c.rows_evicted_idle),
                  static_cast<unsigned long long>(c.rows_evicted_budget));
    os << line;
  }
  std::snprintf(line, sizeof(line),
                "%-4s %-7s %-8s %9s %7s %10s %11s %9s %9s %9s %8s %8s %6s %6s "
                "%9s %7s %4s\n",
                "id", "role", "state", "hb_ago", "clock", "pulls", "blocked_ms",
                "max_stale", "mean_stale", "cache_hit", "step_ms", "compute",
                "push", "pull", "samples/s", "pid", "inc");
  os << line;
  for (const auto& m : status.members) {
    if (m.role == "server") continue;
    const uint64_t lookups = m.cache_hits + m.cache_misses;
    const std::string hit =
        lookups ? std::to_string(100 * m.cache_hits / lookups) + "%" : "-";
    // The recent step's split, in percent of the step.
    const auto share = [&](double ms) {
      if (m.recent_step_ms <= 0) return std::string("-");
      char pct[16];
      std::snprintf(pct, sizeof(pct), "%.0f%%",
                    100.0 * std::clamp(ms / m.recent_step_ms, 0.0, 1.0));
      return std::string(pct);
    };
    const std::string compute =
        share(m.recent_step_ms - m.recent_push_wait_ms - m.recent_pull_wait_ms);
    std::snprintf(
        line, sizeof(line),
        "%-4d %-7s %-8s %7lldms %7lld %10llu %11llu %9lld %9.2f %9s %8.2f %8s "
        "%6s %6s %9.0f %7d %4llu\n",
        m.id, m.role.c_str(), m.state.c_str(),
        static_cast<long long>(m.last_heartbeat_ms_ago),
        static_cast<long long>(m.clock),
        static_cast<unsigned long long>(m.pulls),
        static_cast<unsigned long long>(m.blocked_ms),
        static_cast<long long>(m.max_staleness), m.mean_staleness, hit.c_str(),
        m.recent_step_ms, compute.c_str(), share(m.recent_push_wait_ms).c_str(),
        share(m.recent_pull_wait_ms).c_str(), m.samples_per_s, m.pid,
        static_cast<unsigned long long>(m.incarnation));
    os << line;
  }
  // What peers were refused, by process (docs/security.md).
  std::string refused;
  const CoordinatorRefusals& c = status.coordinator_refusals;
  if (std::string r =
          Refusals(c.refused_connections, c.failed_accepts, c.failed_handshakes,
                   c.refused_replies, c.dropped_replies, 0);
      !r.empty()) {
    refused += "  coordinator: " + r + "\n";
  }
  for (const auto& m : status.members) {
    if (m.role != "server") continue;
    const ServerCounters& s = m.counters;
    if (std::string r = Refusals(s.refused_connections, s.failed_accepts,
                                 s.failed_handshakes, s.refused_replies,
                                 s.dropped_replies, s.refused_parked_pulls);
        !r.empty()) {
      refused += "  server " + std::to_string(m.id) + ": " + r + "\n";
    }
  }
  if (!refused.empty()) {
    os << "refused to bound what peers cost (since each process started):\n"
       << refused;
  }
  return os.str();
}

namespace {

// One metric family of the text format: HELP and TYPE, then its samples.
class Family {
 public:
  Family(std::ostringstream* os, const std::string& name, const char* type,
         const std::string& help)
      : os_(os), name_(name) {
    *os_ << "# HELP " << name << " " << help << "\n"
         << "# TYPE " << name << " " << type << "\n";
  }
  template <typename T>
  void Sample(const std::string& labels, T value) {
    *os_ << name_;
    if (!labels.empty()) *os_ << "{" << labels << "}";
    *os_ << " " << Text(value) << "\n";
  }

 private:
  template <typename T>
  static std::string Text(T value) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(value)) return "NaN";
      if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.10g", static_cast<double>(value));
      return buf;
    } else if constexpr (std::is_same_v<T, bool>) {
      return value ? "1" : "0";
    } else {
      return std::to_string(value);
    }
  }
  std::ostringstream* os_;
  std::string name_;
};

// Server counters that only grow (the rest are gauges).
bool Monotonic(std::string_view counter) {
  for (const char* name : {"requests",
                           "pushes",
                           "pulls",
                           "duplicates",
                           "redirects",
                           "errors",
                           "refused_limits",
                           "refused_permission",
                           "bytes_in",
                           "bytes_out",
                           "checkpoints_written",
                           "window_expired",
                           "busy_us",
                           "apply_us",
                           "gns_us",
                           "queued_requests",
                           "shm_replies",
                           "shm_pushes",
                           "shm_records",
                           "refused_connections",
                           "failed_accepts",
                           "failed_handshakes",
                           "refused_replies",
                           "dropped_replies",
                           "refused_parked_pulls"}) {
    if (counter == name) return true;
  }
  for (const char* name : {"rows_admitted", "row_pushes_dropped",
                           "rows_evicted_idle", "rows_evicted_budget"}) {
    if (counter == name) return true;
  }
  return false;
}

std::string Label(const char* name, int32_t id) {
  return std::string(name) + "=\"" + std::to_string(id) + "\"";
}

}  // namespace

std::string FormatPrometheus(const ClusterStatus& status) {
  std::ostringstream os;
  Family(&os, "ductile_routing_epoch", "gauge",
         "Epoch of the coordinator's routing table.")
      .Sample("", status.epoch);
  Family(&os, "ductile_generation", "gauge", "Rollbacks after failures so far.")
      .Sample("", status.generation);
  Family(&os, "ductile_recovering", "gauge", "1 while a rollback is under way.")
      .Sample("", status.recovering);
  Family(&os, "ductile_problem", "gauge",
         "1 while something holds the job up or fails its checkpoints "
         "(`ductile status` says what).")
      .Sample("", !status.problem.empty());
  Family(&os, "ductile_checkpoints", "gauge", "Complete checkpoints kept.")
      .Sample("", status.checkpoints);
  Family(&os, "ductile_last_checkpoint_clock", "gauge",
         "Clock of the newest complete checkpoint (-1: none).")
      .Sample("", status.last_checkpoint_clock);
  Family(&os, "ductile_slots_moving", "gauge",
         "Slots moving between servers now.")
      .Sample("", status.slots_moving);
  Family(&os, "ductile_slots_without_copy", "gauge",
         "With --replicas=2: slots whose backup is missing or has no whole "
         "copy yet.")
      .Sample("", status.slots_without_copy);
  Family(&os, "ductile_takeovers_total", "counter",
         "Server deaths whose slots backups took over with no rollback.")
      .Sample("", status.takeovers);
  Family(&os, "ductile_move_bytes_left", "gauge",
         "Bytes of slot moves not acknowledged yet.")
      .Sample("", status.move_bytes_left);
  Family(&os, "ductile_target_workers", "gauge",
         "Workers `ductile resize` asked for (0: none asked).")
      .Sample("", status.target_workers);
  Family(&os, "ductile_target_servers", "gauge",
         "Servers `ductile resize` asked for (0: none asked).")
      .Sample("", status.target_servers);
  Family(&os, "ductile_workers_to_replace", "gauge",
         "Workers a policy asked to replace that are still live.")
      .Sample("", status.replace_workers.size());
  Family(&os, "ductile_data_epoch", "gauge",
         "Lowest epoch of the shared data plan not done in full.")
      .Sample("", status.data_epoch);
  Family(&os, "ductile_data_batches_done", "gauge",
         "Batches of that epoch done.")
      .Sample("", status.data_batches_done);
  Family(&os, "ductile_data_batches_per_step", "gauge",
         "Batches of the plan each worker trains in one step.")
      .Sample("", status.data_batches_per_step);
  Family(&os, "ductile_gradient_noise_scale", "gauge",
         "Gradient noise scale B_simple estimated on the servers, in worker "
         "batches (0: not known yet).")
      .Sample("", status.noise_scale);
  Family(&os, "ductile_gradient_noise_scale_clocks", "gauge",
         "Clocks the noise scale's averages have folded in.")
      .Sample("", status.noise_scale_clocks);
  Family(&os, "ductile_samples_per_second", "gauge",
         "The active workers' recent throughput, summed.")
      .Sample("", status.samples_per_s);
  {
    const CoordinatorRefusals& c = status.coordinator_refusals;
    for (const auto& [name, value, help] :
         {std::tuple<const char*, uint64_t, const char*>{
              "refused_connections", c.refused_connections,
              "Connections the coordinator closed as soon as accepted."},
          {"failed_accepts", c.failed_accepts,
           "Accepts of the coordinator that found no descriptor."},
          {"failed_handshakes", c.failed_handshakes,
           "Connections to the coordinator closed before their handshake "
           "was done."},
          {"refused_replies", c.refused_replies,
           "Answers refused past --max_queued_reply_mb for peers that do "
           "not read."},
          {"dropped_replies", c.dropped_replies,
           "Answers dropped past --max_queued_replies for peers that do "
           "not read."}}) {
      Family(&os, std::string("ductile_coordinator_") + name + "_total",
             "counter", help)
          .Sample("", value);
    }
  }
  Family(&os, "ductile_training_loss", "gauge",
         "The active workers' smoothed training loss, averaged over those "
         "that report one (0: none does).")
      .Sample("", status.loss);
  {
    Family members(&os, "ductile_member_up", "gauge",
                   "1 for a member the coordinator counts alive, by role, id "
                   "and state.");
    for (const MemberStatus& m : status.members) {
      members.Sample("role=\"" + m.role + "\",id=\"" + std::to_string(m.id) +
                         "\",state=\"" + m.state + "\"",
                     m.alive);
    }
  }
  {
    Family age(&os, "ductile_member_heartbeat_age_seconds", "gauge",
               "Time since the member's last heartbeat.");
    for (const MemberStatus& m : status.members) {
      age.Sample("role=\"" + m.role + "\",id=\"" + std::to_string(m.id) + "\"",
                 static_cast<double>(m.last_heartbeat_ms_ago) / 1000.0);
    }
  }
  std::vector<const MemberStatus*> servers, workers;
  for (const MemberStatus& m : status.members) {
    (m.role == "server" ? servers : workers).push_back(&m);
  }
  if (!servers.empty()) {
    Family slots(&os, "ductile_server_slots", "gauge", "Slots owned.");
    for (const MemberStatus* m : servers) {
      slots.Sample(Label("server", m->id), m->slots);
    }
    Family queue(&os, "ductile_server_in_flight_requests", "gauge",
                 "The live workers' requests to the server sent and not "
                 "answered yet, as of their last heartbeats "
                 "(MemberStatus::in_flight_requests).");
    for (const MemberStatus* m : servers) {
      queue.Sample(Label("server", m->id), m->in_flight_requests);
    }
    // One family per counter, a sample per server.
    std::vector<std::vector<std::pair<std::string, std::string>>> rows;
    std::vector<std::string> names;
    ForEachCounter(
        [&](const char* name, const auto&) { names.push_back(name); },
        servers[0]->counters);
    for (size_t i = 0; i < names.size(); ++i) {
      const bool total = Monotonic(names[i]);
      Family f(&os, "ductile_server_" + names[i] + (total ? "_total" : ""),
               total ? "counter" : "gauge",
               "ServerCounters::" + names[i] + " (ductile/server.h).");
      for (const MemberStatus* m : servers) {
        size_t k = 0;
        ForEachCounter(
            [&](const char*, const auto& value) {
              if (k++ == i) f.Sample(Label("server", m->id), value);
            },
            m->counters);
      }
    }
  }
  if (!workers.empty()) {
    // One family per signal, a sample per worker.
    const auto each = [&](const char* name, const char* type, const char* help,
                          auto value) {
      Family f(&os, name, type, help);
      for (const MemberStatus* m : workers) {
        f.Sample(Label("worker", m->id), value(*m));
      }
    };
    using M = const MemberStatus&;
    each("ductile_worker_clock", "gauge", "The worker's clock (steps done).",
         [](M m) { return m.clock; });
    each("ductile_worker_pulls_total", "counter",
         "Pull replies the worker received.", [](M m) { return m.pulls; });
    each("ductile_worker_blocked_seconds_total", "counter",
         "Time the worker's pulls waited on the staleness bound.",
         [](M m) { return static_cast<double>(m.blocked_ms) / 1000.0; });
    each("ductile_worker_cache_hits_total", "counter",
         "Reads served by the worker's cache.",
         [](M m) { return m.cache_hits; });
    each("ductile_worker_cache_misses_total", "counter",
         "Reads the worker's cache could not serve.",
         [](M m) { return m.cache_misses; });
    each("ductile_worker_steps_total", "counter",
         "Steps (Clock() calls) the worker has timed.",
         [](M m) { return m.steps; });
    each("ductile_worker_samples_total", "counter",
         "Samples the worker reported (Client::RecordSamples).",
         [](M m) { return m.samples; });
    each("ductile_worker_step_seconds_total", "counter", "Time of those steps.",
         [](M m) { return m.step_seconds; });
    each("ductile_worker_push_wait_seconds_total", "counter",
         "Of it, time the worker waited for pushes.",
         [](M m) { return m.push_wait_seconds; });
    each("ductile_worker_pull_wait_seconds_total", "counter",
         "Of it, time the worker waited for pulls.",
         [](M m) { return m.pull_wait_seconds; });
    each("ductile_worker_samples_per_second", "gauge",
         "The worker's throughput over about its last ten steps.",
         [](M m) { return m.samples_per_s; });
    each("ductile_worker_training_loss", "gauge",
         "The worker's smoothed training loss (Client::RecordLoss; 0: none "
         "reported).",
         [](M m) { return m.recent_loss; });
    each("ductile_worker_losses_total", "counter",
         "Losses the worker reported.", [](M m) { return m.losses; });
  }
  // Buckets are cumulative; the last of kStalenessBuckets (that staleness
  // or more) counts in +Inf only.
  Family hist(&os, "ductile_staleness", "histogram",
              "Staleness of the workers' pulls, in clocks.");
  uint64_t cumulative = 0, sum = 0;
  for (size_t i = 0; i < status.staleness.size(); ++i) {
    cumulative += status.staleness[i];
    sum += i * status.staleness[i];
    if (i + 1 < kStalenessBuckets) {
      os << "ductile_staleness_bucket{le=\"" << i << "\"} " << cumulative
         << "\n";
    }
  }
  os << "ductile_staleness_bucket{le=\"+Inf\"} " << cumulative << "\n"
     << "ductile_staleness_sum " << sum << "\n"
     << "ductile_staleness_count " << cumulative << "\n";
  return os.str();
}

}  // namespace ductile
