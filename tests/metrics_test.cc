// The cluster's signals from outside: the Prometheus text of a status
// (FormatPrometheus), the coordinator's own view of it (QueryStatus) and
// the /metrics endpoint that serves it over HTTP.
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/metrics_http.h"
#include "ductile/admin.h"
#include "ductile/coordinator.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

// Sample lines "name{labels} value" -> value; also checks that every
// family's HELP and TYPE come once, before its samples.
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> samples;
  std::map<std::string, int> typed;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_EQ(++typed[name], 1) << "TYPE twice for " << name;
      continue;
    }
    if (line.rfind("#", 0) == 0 || line.empty()) continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    const std::string series = line.substr(0, space);
    std::string family = series.substr(0, series.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (family.size() > s.size() &&
          family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          typed.count(family.substr(0, family.size() - s.size()))) {
        family.resize(family.size() - s.size());
      }
    }
    EXPECT_EQ(typed.count(family), 1u) << "no TYPE before " << line;
    EXPECT_EQ(samples.count(series), 0u) << "twice: " << series;
    samples[series] = line.substr(space + 1);
  }
  return samples;
}

ClusterStatus AStatus() {
  ClusterStatus s;
  s.epoch = 3;
  s.generation = 1;
  s.last_checkpoint_clock = 40;
  s.checkpoints = 2;
  s.noise_scale = 2.5;
  s.noise_scale_clocks = 17;
  s.staleness = {5, 3, 0, 2};
  MemberStatus server;
  server.id = 0;
  server.role = "server";
  server.state = "active";
  server.alive = true;
  server.slots = 64;
  server.counters.pushes = 12;
  server.counters.parked_pulls = 4;
  server.counters.gns_noise_trace = 0.25;
  server.counters.queued_requests = 9;
  server.counters.busy_run_peak = 3;
  server.in_flight_requests = 5;
  MemberStatus worker;
  worker.id = 7;
  worker.role = "worker";
  worker.state = "active";
  worker.alive = true;
  worker.last_heartbeat_ms_ago = 250;
  worker.clock = 41;
  worker.blocked_ms = 1500;
  worker.recent_loss = 0.75;
  worker.losses = 30;
  s.loss = 0.75;
  s.members = {server, worker};
  return s;
}

TEST(Prometheus, AStatusReadsBackSampleBySample) {
  const std::map<std::string, std::string> m =
      Samples(FormatPrometheus(AStatus()));
  EXPECT_EQ(m.at("ductile_routing_epoch"), "3");
  EXPECT_EQ(m.at("ductile_generation"), "1");
  EXPECT_EQ(m.at("ductile_last_checkpoint_clock"), "40");
  EXPECT_EQ(m.at("ductile_gradient_noise_scale"), "2.5");
  EXPECT_EQ(m.at("ductile_gradient_noise_scale_clocks"), "17");
  EXPECT_EQ(
      m.at("ductile_member_up{role=\"server\",id=\"0\",state=\"active\"}"),
      "1");
  EXPECT_EQ(
      m.at("ductile_member_heartbeat_age_seconds{role=\"worker\",id=\"7\"}"),
      "0.25");
  EXPECT_EQ(m.at("ductile_server_slots{server=\"0\"}"), "64");
  // Counters that only grow are _total; the rest are gauges.
  EXPECT_EQ(m.at("ductile_server_pushes_total{server=\"0\"}"), "12");
  EXPECT_EQ(m.at("ductile_server_parked_pulls{server=\"0\"}"), "4");
  EXPECT_EQ(m.at("ductile_server_gns_noise_trace{server=\"0\"}"), "0.25");
  EXPECT_EQ(m.count("ductile_server_parked_pulls_total{server=\"0\"}"), 0u);
  EXPECT_EQ(m.at("ductile_server_queued_requests_total{server=\"0\"}"), "9");
  EXPECT_EQ(m.at("ductile_server_busy_run_peak{server=\"0\"}"), "3");
  EXPECT_EQ(m.at("ductile_server_in_flight_requests{server=\"0\"}"), "5");
  EXPECT_EQ(m.at("ductile_worker_clock{worker=\"7\"}"), "41");
  EXPECT_EQ(m.at("ductile_worker_blocked_seconds_total{worker=\"7\"}"), "1.5");
  EXPECT_EQ(m.at("ductile_training_loss"), "0.75");
  EXPECT_EQ(m.at("ductile_worker_training_loss{worker=\"7\"}"), "0.75");
  EXPECT_EQ(m.at("ductile_worker_losses_total{worker=\"7\"}"), "30");
  // Cumulative buckets.
  EXPECT_EQ(m.at("ductile_staleness_bucket{le=\"0\"}"), "5");
  EXPECT_EQ(m.at("ductile_staleness_bucket{le=\"1\"}"), "8");
  EXPECT_EQ(m.at("ductile_staleness_bucket{le=\"2\"}"), "8");
  EXPECT_EQ(m.at("ductile_staleness_bucket{le=\"3\"}"), "10");
  EXPECT_EQ(m.at("ductile_staleness_bucket{le=\"+Inf\"}"), "10");
  EXPECT_EQ(m.at("ductile_staleness_count"), "10");
  EXPECT_EQ(m.at("ductile_staleness_sum"), "9");  // 3*1 + 2*3
  // The histogram's last bucket, "63 or more", is in +Inf only.
  ClusterStatus full = AStatus();
  full.staleness.assign(kStalenessBuckets, 0);
  full.staleness[0] = 1;
  full.staleness[kStalenessBuckets - 1] = 4;
  const std::map<std::string, std::string> f = Samples(FormatPrometheus(full));
  EXPECT_EQ(f.at("ductile_staleness_bucket{le=\"62\"}"), "1");
  EXPECT_EQ(f.count("ductile_staleness_bucket{le=\"63\"}"), 0u);
  EXPECT_EQ(f.at("ductile_staleness_bucket{le=\"+Inf\"}"), "5");
  EXPECT_NE(FormatClusterStatus(full).find(">=63: 80.0%"), std::string::npos)
      << FormatClusterStatus(full);
}

TEST(Prometheus, AnEmptyStatusIsStillValidText) {
  const std::map<std::string, std::string> m =
      Samples(FormatPrometheus(ClusterStatus()));
  EXPECT_EQ(m.at("ductile_last_checkpoint_clock"), "-1");
  EXPECT_EQ(m.at("ductile_staleness_count"), "0");
  EXPECT_EQ(m.count("ductile_server_slots{server=\"0\"}"), 0u);
}

TEST(Prometheus, TheStatusTableShowsEachServersQueue) {
  const std::string table = FormatClusterStatus(AStatus());
  // parked, run, queue (then the process's pid and incarnation)
  EXPECT_TRUE(std::regex_search(
      table, std::regex(" parked +run +queue +pid +inc +address\n")))
      << table;
  EXPECT_TRUE(std::regex_search(table, std::regex(" 4 +3 +5 +0 +0  \n")))
      << table;
}

TEST(Prometheus, RefusalsShowInTheStatusAndInTheMetrics) {
  ClusterStatus s = AStatus();
  // None yet: no line about them.
  EXPECT_EQ(FormatClusterStatus(s).find("refused to bound"), std::string::npos)
      << FormatClusterStatus(s);
  s.coordinator_refusals.refused_connections = 1100;
  s.coordinator_refusals.dropped_replies = 12;
  s.members[0].counters.failed_handshakes = 7;
  s.members[0].counters.refused_parked_pulls = 3;
  const std::string table = FormatClusterStatus(s);
  EXPECT_NE(table.find("refused to bound what peers cost"), std::string::npos)
      << table;
  EXPECT_NE(
      table.find(
          "  coordinator: 1100 connections refused, 12 replies dropped\n"),
      std::string::npos)
      << table;
  EXPECT_NE(
      table.find("  server 0: 7 handshakes failed, 3 parked pulls refused\n"),
      std::string::npos)
      << table;
  const std::map<std::string, std::string> m = Samples(FormatPrometheus(s));
  EXPECT_EQ(m.at("ductile_coordinator_refused_connections_total"), "1100");
  EXPECT_EQ(m.at("ductile_coordinator_dropped_replies_total"), "12");
  EXPECT_EQ(m.at("ductile_coordinator_refused_replies_total"), "0");
  EXPECT_EQ(m.at("ductile_server_failed_handshakes_total{server=\"0\"}"), "7");
  EXPECT_EQ(m.at("ductile_server_refused_parked_pulls_total{server=\"0\"}"),
            "3");
}

TEST(Prometheus, StatusShowsTheJobsStalenessHistogram) {
  const std::string table = FormatClusterStatus(AStatus());
  EXPECT_NE(table.find("staleness of reads: 0: 50.0% 1: 30.0% 3: 20.0% "
                       "(10 pulls)"),
            std::string::npos)
      << table;
}

// The status's server of `id`, polled until `done` holds of it or 10 s
// have passed (a worker's requests reach the status with its heartbeats).
MemberStatus ServerUntil(Coordinator& coordinator, int32_t id,
                         const std::function<bool(const MemberStatus&)>& done) {
  MemberStatus last;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    Result<ClusterStatus> status = coordinator.QueryStatus(5000);
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) break;
    for (const MemberStatus& m : status->members) {
      if (m.role == "server" && m.id == id) last = m;
    }
    if (done(last)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return last;
}

// A pull parked on the BSP bound is in flight at its server until the
// other worker's clock lets it through, and the status counts it there.
TEST(MetricsEndpoint, APullWaitingAtItsServerIsCountedInItsQueue) {
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> ahead = cluster.Connect();
  std::unique_ptr<Client> behind = cluster.Connect();
  ASSERT_NE(ahead, nullptr);
  ASSERT_NE(behind, nullptr);
  TableOptions t;
  t.name = "w";
  t.value_width = 1;
  t.consistency.mode = ConsistencyMode::kBsp;
  Result<TableId> table = ahead->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(behind->CreateTable(t).ok());
  const std::vector<Key> keys = {1};
  std::vector<float> out(1);
  const MemberStatus idle =
      ServerUntil(cluster.coordinator(), 0,
                  [](const MemberStatus& m) { return m.id == 0; });
  EXPECT_EQ(idle.in_flight_requests, 0u);
  ahead->Clock();  // at clock 1: its pull needs the other's clock 0 too
  Handle pull = ahead->PullAsync(*table, keys, out);
  const MemberStatus waiting =
      ServerUntil(cluster.coordinator(), 0, [](const MemberStatus& m) {
        return m.in_flight_requests == 1 && m.counters.parked_pulls == 1;
      });
  EXPECT_EQ(waiting.in_flight_requests, 1u);
  EXPECT_EQ(waiting.counters.parked_pulls, 1u);
  behind->Clock();
  ASSERT_TRUE(pull.Wait().ok());
  const MemberStatus answered = ServerUntil(
      cluster.coordinator(), 0,
      [](const MemberStatus& m) { return m.in_flight_requests == 0; });
  EXPECT_EQ(answered.in_flight_requests, 0u);
}

// The coordinator's own view, and the endpoint serving it.
TEST(MetricsEndpoint, ServesTheCoordinatorsStatusOverHttp) {
  testing::TestClusterOptions options;
  options.num_servers = 1;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions t;
  t.name = "w";
  t.value_width = 2;
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = {1, 2};
  // Two steps: the first Clock() starts the first timed step, which has a
  // push and 8 samples; the second ends it.
  client->Clock();
  ASSERT_TRUE(client->Push(*table, keys, std::vector<float>(4, 1.0f)).ok());
  client->RecordSamples(8);
  client->Clock();
  const ClientStats own = client->stats();
  EXPECT_EQ(own.steps, 1u);
  EXPECT_EQ(own.samples, 8u);
  // (The push's reply may be in before the caller waits for it, on a busy
  // machine: then it did not wait, and none is counted.)
  EXPECT_LE(own.push_wait_us, own.step_us);
  EXPECT_GT(own.recent_samples_per_s, 0);

  Coordinator* coordinator = &cluster.coordinator();
  Result<ClusterStatus> status = coordinator->QueryStatus(5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->tables, std::vector<std::string>{"w"});
  int servers = 0, workers = 0;
  for (const MemberStatus& m : status->members) {
    (m.role == "server" ? servers : workers) += 1;
  }
  EXPECT_EQ(servers, 1);
  EXPECT_EQ(workers, 1);
  // The worker's steps reach the coordinator with its next heartbeat.
  const auto heard_by =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const MemberStatus* worker = nullptr;
  while (std::chrono::steady_clock::now() < heard_by) {
    status = coordinator->QueryStatus(5000);
    ASSERT_TRUE(status.ok()) << status.status();
    worker = nullptr;
    for (const MemberStatus& m : status->members) {
      if (m.role == "worker") worker = &m;
    }
    ASSERT_NE(worker, nullptr);
    if (worker->steps == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(worker->steps, 1u);
  EXPECT_EQ(worker->samples, 8u);
  EXPECT_DOUBLE_EQ(worker->push_wait_seconds,
                   static_cast<double>(own.push_wait_us) / 1e6);
  EXPECT_DOUBLE_EQ(worker->samples_per_s, own.recent_samples_per_s);
  EXPECT_DOUBLE_EQ(status->samples_per_s, own.recent_samples_per_s);

  auto endpoint = cli::MetricsHttpServer::Start(
      "127.0.0.1", 0, [coordinator]() -> Result<std::string> {
        Result<ClusterStatus> s = coordinator->QueryStatus(5000);
        if (!s.ok()) return s.status();
        return FormatPrometheus(*s);
      });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  httplib::Client http("127.0.0.1", (*endpoint)->port());
  http.set_read_timeout(10, 0);
  // The server's heartbeat brings its counters: wait for the push.
  std::string pushes;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pushes != "1" && std::chrono::steady_clock::now() < deadline) {
    auto response = http.Get("/metrics");
    ASSERT_TRUE(response) << httplib::to_string(response.error());
    ASSERT_EQ(response->status, 200);
    EXPECT_EQ(response->get_header_value("Content-Type"),
              "text/plain; version=0.0.4; charset=utf-8");
    const auto samples = Samples(response->body);
    auto it = samples.find("ductile_server_pushes_total{server=\"0\"}");
    ASSERT_NE(it, samples.end()) << response->body;
    pushes = it->second;
    if (pushes != "1") {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_EQ(pushes, "1");
  auto missing = http.Get("/other");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  // A coordinator that stopped answers at once that it has.
  coordinator->Stop();
  coordinator->Wait().IgnoreError();  // the loop has ended
  EXPECT_EQ(coordinator->QueryStatus(600000).status().code(),
            StatusCode::kCancelled);
}

TEST(MetricsEndpoint, AStatusThatCannotBeReadIsA503WithTheReason) {
  auto endpoint = cli::MetricsHttpServer::Start(
      "127.0.0.1", 0, []() -> Result<std::string> {
        return UnavailableError("coordinator stopped");
      });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  httplib::Client http("127.0.0.1", (*endpoint)->port());
  auto response = http.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
  EXPECT_NE(response->body.find("coordinator stopped"), std::string::npos);
  EXPECT_EQ(cli::MetricsHttpServer::Start("127.0.0.1", 70000, nullptr)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ductile
