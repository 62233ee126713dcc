// An in-process cluster for tests: a coordinator and servers in this
// process, on loopback tcp and ipc, torn down by the destructor.
#ifndef DUCTILE_TESTS_TEST_CLUSTER_H_
#define DUCTILE_TESTS_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/server.h"
#include "gtest/gtest.h"

namespace ductile::testing {

struct TestClusterOptions {
  int num_servers = 2;
  int num_workers = 0;  // 0: any
  int max_workers = 0;  // 0: no bound
  int num_slots = 64;
  int64_t heartbeat_timeout_ms = 5000;
  int replicas = 1;                        // CoordinatorOptions::replicas
  std::string coordinator_state_dir = "";  // "" = no checkpoints
  ServerOptions server = {};               // coordinator_address is filled in
  // Every member's keys (the coordinator's, the servers' and Connect()'s).
  Security security = {};
  // The coordinator's policies, read every policy_interval_ms.
  std::vector<std::shared_ptr<Policy>> policies = {};
  int64_t policy_interval_ms = 1000;
};

class TestCluster {
 public:
  explicit TestCluster(const TestClusterOptions& options = {})
      : server_options_(options.server), security_(options.security) {
    server_options_.security = options.security;
    CoordinatorOptions c;
    c.bind_address = "tcp://127.0.0.1:0";
    c.num_servers = options.num_servers;
    c.num_workers = options.num_workers;
    c.max_workers = options.max_workers;
    c.num_slots = options.num_slots;
    c.heartbeat_timeout_ms = options.heartbeat_timeout_ms;
    c.replicas = options.replicas;
    c.state_dir = options.coordinator_state_dir;
    c.security = options.security;
    c.policies = options.policies;
    c.policy_interval_ms = options.policy_interval_ms;
    auto coordinator = Coordinator::Start(c);
    EXPECT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
    for (int i = 0; i < options.num_servers; ++i) {
      ServerOptions s = server_options_;
      s.coordinator_address = coordinator_->address();
      auto server = Server::Start(s);
      EXPECT_TRUE(server.ok()) << server.status();
      servers_.push_back(std::move(*server));
    }
  }

  std::string address() const { return coordinator_->address(); }
  Coordinator& coordinator() { return *coordinator_; }
  Server& server(int i) { return *servers_[i]; }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  // Stops server i and frees it, releasing its files (a server "killed";
  // server(i) must not be used after this).
  void DestroyServer(int i) { servers_[i].reset(); }
  // Starts one more server against the running cluster; returns its index.
  int AddServer() {
    ServerOptions s = server_options_;
    s.coordinator_address = coordinator_->address();
    auto server = Server::Start(s);
    EXPECT_TRUE(server.ok()) << server.status();
    servers_.push_back(server.ok() ? std::move(*server) : nullptr);
    return static_cast<int>(servers_.size()) - 1;
  }

  // With `security`, the client's keys instead of the cluster's.
  std::unique_ptr<Client> Connect(bool as_worker = true,
                                  int64_t request_timeout_ms = 20000,
                                  const Security* security = nullptr) {
    ClientOptions o;
    o.coordinator_address = address();
    o.register_as_worker = as_worker;
    o.request_timeout_ms = request_timeout_ms;
    o.connect_timeout_ms = 20000;
    o.security = security != nullptr ? *security : security_;
    return ConnectWith(o);
  }
  // With `options`, their coordinator address replaced by this cluster's.
  std::unique_ptr<Client> ConnectWith(ClientOptions options) {
    options.coordinator_address = address();
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

 private:
  ServerOptions server_options_;
  const Security security_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<Server>> servers_;
};

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_TEST_CLUSTER_H_
