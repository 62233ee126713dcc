#include "sim/sim_cluster.h"

#include "sim/sim_cluster_parts.h"

namespace ductile::sim {
namespace internal {

void Cluster::StartServer(int i) {
  ServerOptions s;
  s.coordinator_address = kCoordinatorAddress;
  s.host = "server-" + std::to_string(i);
  s.enable_ipc = false;
  s.requested_id = i;
  s.heartbeat_interval_ms = 500;
  s.client_idle_expiry_s = options_.client_idle_expiry_s;
  s.replica_copy_chunk_bytes = 1;  // a backup's copy in many pieces
  if (options_.checkpoint_every > 0) s.state_dir = kServerStateDir;
  server_envs_[i] =
      std::make_unique<SimEnv>(&net_, &disk_, "server-" + std::to_string(i));
  servers_[i] = std::make_unique<ServerNode>(s, server_envs_[i].get());
  Status st = servers_[i]->Start();
  if (!st.ok()) Fail("server " + std::to_string(i) + ": " + st.ToString());
}

void Cluster::NoteProgress() {
  progress_.resize(workers_.size(), {-1, net_.now()});
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = *workers_[i];
    auto& [clock, since] = progress_[i];
    result_.longest_stall_ms = std::max<int64_t>(
        result_.longest_stall_ms,
        std::chrono::duration_cast<milliseconds>(net_.now() - since).count());
    if (w.clock() != clock || w.done()) {
      clock = w.clock();
      since = net_.now();
    }
  }
}

void Cluster::HandleCrashes() {
  for (size_t k = 0; k < options_.crashes.size(); ++k) {
    const SimOptions::Crash& crash = options_.crashes[k];
    if (crashed_[k]) {
      if (restart_at_[k] && net_.now() >= *restart_at_[k]) {
        restart_at_[k].reset();
        if (crash.pause) {
          paused_[crash.server] = false;
        } else {
          StartServer(crash.server);
        }
      }
      continue;
    }
    if (crash.trigger != SimOptions::Trigger::kAtClock) continue;
    bool passed = true;
    for (const auto& w : workers_) {
      passed = passed && (w->registering() || w->clock() > crash.at_clock);
    }
    if (crash.after_rebuilt_backups) {
      passed = passed && coordinator_ != nullptr &&
               coordinator_->state().takeovers > 0 &&
               coordinator_->state().SlotsWithoutCopy() == 0;
    }
    if (passed) Crash(k);
  }
}

void Cluster::Crash(size_t k) {
  const SimOptions::Crash& crash = options_.crashes[k];
  crashed_[k] = true;
  ++result_.server_crashes;
  if (crash.pause) {
    paused_[crash.server] = true;
  } else {
    net_.Crash("server-" + std::to_string(crash.server));
    servers_[crash.server].reset();
  }
  restart_at_[k] = net_.now() + milliseconds(crash.down_ms);
}

void Cluster::HandleTriggeredCrashes() {
  for (size_t k = 0; k < options_.crashes.size(); ++k) {
    const SimOptions::Crash& crash = options_.crashes[k];
    if (crashed_[k]) continue;
    const bool due =
        (crash.trigger == SimOptions::Trigger::kTableCreateArrives &&
         table_create_arrived_.count(crash.server) > 0) ||
        (crash.trigger == SimOptions::Trigger::kTableAckArrives &&
         table_ack_arrived_.count(crash.server) > 0);
    if (due) Crash(k);
  }
}

void Cluster::Observe(const std::string& node,
                      const std::vector<std::string>& frames, bool router) {
  const size_t header = router ? 1 : 0;
  if (frames.size() <= header) return;
  wire::Header h;
  if (!h.ParseFromString(frames[header])) return;
  if (h.type() == wire::TABLE_CREATE && node.starts_with("server-")) {
    table_create_arrived_.insert(std::stoi(node.substr(7)));
  } else if (h.type() == wire::TABLE_CREATE_ACK && node == "coordinator") {
    table_ack_arrived_.insert(h.member_id());
  }
}

void Cluster::HandleDiskFaults() {
  for (size_t k = 0; k < options_.disk_faults.size(); ++k) {
    const SimOptions::DiskFault& f = options_.disk_faults[k];
    const std::string dir = f.server < 0
                                ? std::string(kCoordinatorStateDir)
                                : std::string(kServerStateDir) + "/server-" +
                                      std::to_string(f.server);
    if (disk_fault_started_[k]) {
      if (disk_fault_end_[k] && net_.now() >= *disk_fault_end_[k]) {
        disk_fault_end_[k].reset();
        disk_.SetFault(dir, DiskFault::kNone);
      }
      continue;
    }
    bool passed = true;
    for (const auto& w : workers_) {
      passed = passed && (w->registering() || w->clock() > f.at_clock);
    }
    if (!passed) continue;
    disk_fault_started_[k] = true;
    disk_.SetFault(dir, f.full ? DiskFault::kFull : DiskFault::kReadOnly);
    disk_fault_end_[k] = net_.now() + milliseconds(f.for_ms);
  }
}

void Cluster::StartCoordinator() {
  CoordinatorOptions c;
  c.bind_address = kCoordinatorAddress;
  c.num_servers = options_.servers;
  c.num_workers = options_.workers;
  c.num_slots = 64;
  c.heartbeat_timeout_ms = 5000;
  c.drain_linger_ms = options_.drain_linger_ms;
  c.replicas = options_.replicas;
  if (options_.checkpoint_every > 0) {
    c.state_dir = kCoordinatorStateDir;
    c.checkpoint_every_clocks = options_.checkpoint_every;
  }
  coordinator_env_ = std::make_unique<SimEnv>(&net_, &disk_, "coordinator");
  coordinator_ = std::make_unique<CoordinatorNode>(c, coordinator_env_.get());
  if (Status s = coordinator_->Start(); !s.ok()) {
    Fail("coordinator: " + s.ToString());
  }
}

void Cluster::HandleCoordinatorCrashes() {
  for (size_t k = 0; k < options_.coordinator_crashes.size(); ++k) {
    const SimOptions::CoordinatorCrash& crash = options_.coordinator_crashes[k];
    if (coordinator_crash_done_[k]) continue;
    if (coordinator_up_at_[k]) {
      if (net_.now() >= *coordinator_up_at_[k]) {
        coordinator_up_at_[k].reset();
        coordinator_crash_done_[k] = true;
        StartCoordinator();
      }
      continue;
    }
    if (coordinator_down_at_[k]) {
      if (net_.now() >= *coordinator_down_at_[k] && coordinator_) {
        net_.Crash("coordinator");
        coordinator_.reset();
        coordinator_env_.reset();
        coordinator_up_at_[k] = net_.now() + milliseconds(crash.down_ms);
      }
      continue;
    }
    bool passed = true;
    for (const auto& w : workers_) {
      passed = passed && (w->registering() || w->clock() > crash.at_clock);
    }
    if (passed) {
      coordinator_down_at_[k] = net_.now() + milliseconds(crash.delay_ms);
    }
  }
}

void Cluster::CheckServerClocks() {
  server_clock_.resize(servers_.size(), 0);
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (!servers_[i]) continue;
    const int64_t now = servers_[i]->counters().min_clock;
    if (now < server_clock_[i]) {
      return Fail("server " + std::to_string(i) + "'s clock moved back from " +
                  std::to_string(server_clock_[i]) + " to " +
                  std::to_string(now) + " with no rollback");
    }
    server_clock_[i] = now;
  }
}

bool AllPassed(const std::vector<std::unique_ptr<Worker>>& workers,
               int64_t clock) {
  for (const auto& w : workers) {
    if (!w->done() && w->clock() <= clock) return false;
  }
  return true;
}

void Cluster::HandleServerChanges() {
  const size_t joined = servers_.size() - options_.servers;
  if (joined < options_.server_joins.size() &&
      AllPassed(workers_, options_.server_joins[joined].after_clock)) {
    server_envs_.emplace_back();
    servers_.emplace_back();
    paused_.push_back(false);
    StartServer(static_cast<int>(servers_.size()) - 1);
    ++result_.servers_joined;
  }
  if (drains_started_ < options_.server_drains.size() &&
      net_.now() >= drain_retry_at_ &&
      AllPassed(workers_,
                options_.server_drains[drains_started_].after_clock)) {
    const int server = options_.server_drains[drains_started_].server;
    ++drains_started_;
    if (coordinator_->finishing()) {
      ++drains_ended_;  // the job ended first: nothing left to drain
      return;
    }
    draining_call_ = true;
    drain_refused_ = false;
    coordinator_->DrainServer(server, [this, server](const Status& s) {
      if (draining_call_ && s.code() == StatusCode::kUnavailable &&
          !coordinator_->finishing()) {
        // Refused at once while other slots move (a server's join): asked
        // again a little later, as an operator would.
        drain_refused_ = true;
        return;
      }
      ++drains_ended_;
      // The job may end first (every worker finished): the drain then
      // ends unfinished, which is no failure of the protocol.
      if (s.code() == StatusCode::kUnavailable && coordinator_->finishing()) {
        return;
      }
      if (!s.ok()) {
        return Fail("drain of server " + std::to_string(server) + ": " +
                    s.ToString());
      }
      ++result_.servers_drained;
    });
    draining_call_ = false;
    if (drain_refused_) {
      --drains_started_;
      drain_retry_at_ = net_.now() + milliseconds(50);
    }
  }
}

void Cluster::HandleIdle() {
  if (options_.idle_after_ms <= 0 || idle_over_) return;
  if (!idle_until_) {
    if (workers_.size() < static_cast<size_t>(total_workers())) return;
    for (const auto& w : workers_) {
      if (!w->idle() && !w->done()) return;
    }
    idle_until_ = net_.now() + milliseconds(options_.idle_after_ms);
  }
  if (net_.now() < *idle_until_) return;
  for (const auto& server : servers_) {
    const ServerCounters c = server ? server->counters() : ServerCounters();
    result_.window_clients.push_back(c.window_clients);
    result_.window_expired.push_back(c.window_expired);
    result_.queued_requests.push_back(c.queued_requests);
  }
  idle_over_ = true;
}

void Cluster::HandleWorkerKills() {
  if (launcher_) {
    while (true) {
      InMessage message;
      bool got = false;
      if (!launcher_->Receive(&message, &got).ok() || !got) break;
      wire::Header reply;
      if (ParseHeader(message.frame(0), &reply).ok() &&
          reply.type() == wire::CONTROL_REPLY) {
        result_.exit_reports.push_back(reply.status_code());
      }
    }
  }
  for (size_t k = 0; k < options_.worker_kills.size(); ++k) {
    const SimOptions::WorkerKill& kill = options_.worker_kills[k];
    if (kill_done_[k] || kill.worker < 0 ||
        kill.worker >= static_cast<int>(workers_.size())) {
      continue;
    }
    Worker& w = *workers_[kill.worker];
    if (!w.stopped()) continue;
    if (!kill_at_[k]) kill_at_[k] = net_.now() + milliseconds(kill.after_ms);
    if (net_.now() < *kill_at_[k]) continue;
    kill_done_[k] = true;
    net_.Crash("worker-" + std::to_string(w.index()));
    w.Kill();
    ++result_.killed;
    if (!kill.reported || !coordinator_) continue;
    if (!launcher_) {
      launcher_transport_ = net_.NewTransport("launcher");
      launcher_ = *launcher_transport_->NewDealer("", kControlMessageBytes);
      if (!launcher_->Connect(kCoordinatorAddress).ok()) {
        return Fail("the launcher cannot connect to the coordinator");
      }
    }
    wire::Header exit;
    exit.set_type(wire::MEMBER_EXIT);
    exit.set_seq(k + 1);
    exit.set_role(wire::ROLE_WORKER);
    exit.set_member_id(w.index());
    exit.set_pid(w.pid());
    OutMessage out;
    out.AddString(exit.SerializeAsString());
    if (!launcher_->Send(std::move(out)).ok()) {
      return Fail("the launcher cannot send its report");
    }
  }
}

void Cluster::HandleJoins() {
  const size_t joined = workers_.size() - options_.workers;
  if (joined >= options_.joins.size()) return;
  const int64_t after = options_.joins[joined].after_clock;
  for (const auto& w : workers_) {
    if (!w->done() && w->clock() <= after) return;
  }
  workers_.push_back(
      std::make_unique<Worker>(this, static_cast<int>(workers_.size())));
}

TimePoint Cluster::NextEvent() {
  TimePoint next = coordinator_ ? coordinator_->NextWakeup()
                                : net_.now() + milliseconds(100);
  for (size_t k = 0; k < coordinator_down_at_.size(); ++k) {
    if (coordinator_crash_done_[k]) continue;
    if (coordinator_up_at_[k]) next = std::min(next, *coordinator_up_at_[k]);
    if (coordinator_down_at_[k] && coordinator_) {
      next = std::min(next, *coordinator_down_at_[k]);
    }
  }
  if (auto d = net_.NextDelivery()) next = std::min(next, *d);
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i] && !paused_[i]) {
      next = std::min(next, servers_[i]->NextWakeup());
    }
  }
  for (const auto& w : workers_) {
    if (!w->killed()) next = std::min(next, w->client().NextWakeup());
  }
  for (size_t k = 0; k < kill_at_.size(); ++k) {
    if (kill_at_[k] && !kill_done_[k]) next = std::min(next, *kill_at_[k]);
  }
  for (const auto& r : restart_at_) {
    if (r) next = std::min(next, *r);
  }
  for (const auto& e : disk_fault_end_) {
    if (e) next = std::min(next, *e);
  }
  if (drains_started_ < options_.server_drains.size() &&
      drain_retry_at_ > net_.now()) {
    next = std::min(next, drain_retry_at_);
  }
  return next;
}

// The messages whose loss the protocol repairs without breaking the
// contract: a push's reply (the push is resent under its sequence number
// and acknowledged as a duplicate; but not a "moved" answer), heartbeats,
// and registrations, barriers and finishes (sent again while unanswered). A
// lost request is not among them: the contract relies on each connection's
// order (a worker's push before its next pull and its CLOCK), which only a
// broken connection breaks.
bool Droppable(const std::vector<std::string>& frames, bool to_router) {
  const size_t header = to_router ? 1 : 0;
  if (frames.size() <= header) return false;
  wire::Header h;
  if (!h.ParseFromString(frames[header])) return false;
  switch (h.type()) {
    case wire::REGISTER:
    case wire::HEARTBEAT:
    case wire::BARRIER:
    case wire::FINISH:
      return true;
    case wire::DATA_REPLY:
      // No values: a push's reply. Not a "moved" answer: a pull's is not
      // sent again (a pull is not resent on silence).
      return frames.size() == header + 1 && !h.moved();
    default:
      return false;
  }
}

SimResult Cluster::Run() {
  net_.set_droppable(&Droppable);
  net_.set_observer([this](const std::string& node,
                           const std::vector<std::string>& frames,
                           bool router) { Observe(node, frames, router); });
  const TimePoint start = net_.now();
  const TimePoint limit = start + milliseconds(options_.time_limit_ms) +
                          milliseconds(options_.idle_after_ms);
  StartCoordinator();
  if (!options_.coordinator_crashes.empty() &&
      !options_.server_drains.empty()) {
    Fail("coordinator crashes together with server drains are not simulated");
  }
  server_envs_.resize(options_.servers);
  servers_.resize(options_.servers);
  paused_.assign(options_.servers, false);
  for (int i = 0; i < options_.servers; ++i) StartServer(i);
  if (!options_.crashes.empty() &&
      (!options_.leaves.empty() || !options_.server_joins.empty() ||
       !options_.server_drains.empty())) {
    // The oracle's rollback (every counter back to the checkpoint's clock)
    // assumes every worker took part to the end.
    Fail(
        "server crashes together with leaves or server changes are not "
        "simulated");
  }
  start_.assign(total_workers(), -1);
  starts(0, 0);
  end_.assign(total_workers(), options_.clocks);
  for (const SimOptions::Leave& l : options_.leaves) {
    if (l.worker >= 0 && l.worker < total_workers()) {
      end_[l.worker] = std::min<int64_t>(end_[l.worker], l.at_clock);
    }
  }
  if (!options_.worker_kills.empty() && !options_.crashes.empty()) {
    // The oracle's rollback assumes every worker took part to the end.
    Fail("worker kills together with server crashes are not simulated");
  }
  for (const SimOptions::WorkerKill& k : options_.worker_kills) {
    if (k.worker >= 0 && k.worker < total_workers()) {
      end_[k.worker] = std::min<int64_t>(end_[k.worker], k.at_clock);
    }
  }
  kill_at_.assign(options_.worker_kills.size(), std::nullopt);
  kill_done_.assign(options_.worker_kills.size(), false);
  sent(0);
  for (int i = 0; i < options_.workers; ++i) {
    workers_.push_back(std::make_unique<Worker>(this, i));
  }
  crashed_.assign(options_.crashes.size(), false);
  restart_at_.assign(options_.crashes.size(), std::nullopt);
  disk_fault_started_.assign(options_.disk_faults.size(), false);
  disk_fault_end_.assign(options_.disk_faults.size(), std::nullopt);
  coordinator_down_at_.assign(options_.coordinator_crashes.size(),
                              std::nullopt);
  coordinator_up_at_.assign(options_.coordinator_crashes.size(), std::nullopt);
  coordinator_crash_done_.assign(options_.coordinator_crashes.size(), false);

  std::vector<int> order;
  while (!failed()) {
    order.resize(1 + servers_.size() + workers_.size());
    std::iota(order.begin(), order.end(), 0);
    net_.DeliverDue();
    HandleTriggeredCrashes();
    // Nodes take turns in an order drawn from the seed.
    std::shuffle(order.begin(), order.end(), net_.rng());
    for (int n : order) {
      if (n == 0) {
        if (coordinator_) coordinator_->Step();
      } else if (n <= static_cast<int>(servers_.size())) {
        if (servers_[n - 1] && !paused_[n - 1]) servers_[n - 1]->Step();
      } else {
        Worker& w = *workers_[n - 1 - servers_.size()];
        if (w.killed()) continue;
        w.client().Step();
        w.Advance();
        w.client().Step();
      }
    }
    // A server told to stop (a drained one) exits, as its process would:
    // what was on its way to it is lost.
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (servers_[i] && !servers_[i]->failure().ok()) {
        Fail("server " + std::to_string(i) +
             " stopped: " + servers_[i]->failure().ToString());
      }
      if (servers_[i] && servers_[i]->shut_down()) {
        net_.Crash("server-" + std::to_string(i));
        servers_[i].reset();
      }
    }
    NoteProgress();
    for (const auto& server : servers_) {
      if (server) {
        result_.busy_run_peak =
            std::max(result_.busy_run_peak, server->counters().busy_run_peak);
      }
    }
    if (coordinator_ && !coordinator_->state().recovering) {
      resume_clocks_[coordinator_->state().generation] =
          coordinator_->state().resume_clock;
    }
    HandleCrashes();
    HandleDiskFaults();
    HandleCoordinatorCrashes();
    if (options_.crashes.empty()) CheckServerClocks();
    HandleJoins();
    HandleWorkerKills();
    HandleServerChanges();
    // Done when every worker is, and every drain has ended.
    bool all_done = workers_.size() == static_cast<size_t>(total_workers()) &&
                    drains_ended_ == options_.server_drains.size();
    for (const auto& w : workers_) all_done = all_done && w->done();
    if (all_done) break;
    HandleIdle();
    // Time always moves on: a node that wants to run again at once would
    // spin in a real process too.
    net_.AdvanceTo(
        std::max(NextEvent(), net_.now() + std::chrono::microseconds(1)));
    if (net_.now() > limit) {
      std::string where;
      for (const auto& w : workers_) where += "; " + w->Where();
      Fail("no progress within " + std::to_string(options_.time_limit_ms) +
           " ms of simulated time" + where);
    }
  }
  result_.ok = !failed();
  result_.trace = net_.trace();
  result_.simulated_ms =
      std::chrono::duration_cast<milliseconds>(net_.now() - start).count();
  result_.messages = net_.sent();
  result_.dropped = net_.dropped();
  result_.duplicated = net_.duplicated();
  if (coordinator_) {
    const RoutingTable& routing = coordinator_->state().routing;
    for (size_t i = 0; i < servers_.size(); ++i) {
      result_.slots_at_end.push_back(
          routing.empty()
              ? 0
              : static_cast<int>(
                    routing.SlotsOf(static_cast<int32_t>(i)).size()));
    }
  }
  // Nodes go before the network they use.
  launcher_.reset();
  launcher_transport_.reset();
  workers_.clear();
  servers_.clear();
  coordinator_.reset();
  return result_;
}

}  // namespace internal

SimResult RunSimulation(const SimOptions& options) {
  internal::Cluster cluster(options);
  return cluster.Run();
}

std::string Describe(const SimOptions& o) {
  std::ostringstream out;
  out << "seed=" << o.seed << " servers=" << o.servers
      << " workers=" << o.workers << " clocks=" << o.clocks << " "
      << ToString(o.consistency) << " cache=" << o.cache
      << " push_pull=" << o.push_pull
      << " latency_us=" << o.faults.min_latency_us << "-"
      << o.faults.max_latency_us << " delay=" << o.faults.delay
      << " duplicate=" << o.faults.duplicate << " drop=" << o.faults.drop
      << " checkpoint_every=" << o.checkpoint_every
      << " replicas=" << o.replicas;
  for (const auto& c : o.crashes) {
    out << (c.pause ? " pause" : " crash") << "=server:" << c.server;
    switch (c.trigger) {
      case SimOptions::Trigger::kAtClock:
        out << "@clock=" << c.at_clock
            << (c.after_rebuilt_backups ? ",backups_rebuilt" : "");
        break;
      case SimOptions::Trigger::kTableCreateArrives:
        out << "@table_create";
        break;
      case SimOptions::Trigger::kTableAckArrives:
        out << "@table_ack";
        break;
    }
    out << "+" << c.down_ms << "ms";
  }
  for (const auto& f : o.disk_faults) {
    out << " disk_" << (f.full ? "full" : "read_only") << "="
        << (f.server < 0 ? std::string("coordinator")
                         : "server:" + std::to_string(f.server))
        << "@clock>" << f.at_clock << "+" << f.for_ms << "ms";
  }
  for (const auto& c : o.coordinator_crashes) {
    out << " crash=coordinator@clock>" << c.at_clock << "+" << c.delay_ms
        << "ms+" << c.down_ms << "ms";
  }
  for (const auto& j : o.joins) out << " join@clock>" << j.after_clock;
  for (const auto& j : o.server_joins) {
    out << " server_join@clock>" << j.after_clock;
  }
  for (const auto& d : o.server_drains) {
    out << " drain=server:" << d.server << "@clock>" << d.after_clock;
  }
  if (!o.server_drains.empty()) {
    out << " linger=" << o.drain_linger_ms << "ms";
  }
  for (const auto& l : o.leaves) {
    out << " leave=worker:" << l.worker << "@clock=" << l.at_clock;
  }
  for (const auto& k : o.worker_kills) {
    out << " kill=worker:" << k.worker << "@clock=" << k.at_clock << "+"
        << k.after_ms << "ms" << (k.reported ? "+reported" : "");
  }
  return out.str();
}

}  // namespace ductile::sim
