// A coordinator, servers and one Client per worker, all in this process:
// what the benchmarks measure against. Each part is configured by the
// caller; the coordinator's address and the server and worker counts are
// filled in here. Torn down in the order that lets each part leave
// cleanly: clients, then servers, then the coordinator.
#ifndef DUCTILE_BENCH_IN_PROCESS_CLUSTER_H_
#define DUCTILE_BENCH_IN_PROCESS_CLUSTER_H_

#include <memory>
#include <vector>

#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/server.h"
#include "ductile/status.h"

namespace ductile::bench {

struct InProcessClusterOptions {
  int servers = 1;
  int workers = 1;
  // Templates: coordinator_address, num_servers and num_workers are set by
  // Start().
  CoordinatorOptions coordinator;
  ServerOptions server;
  ClientOptions client;
};

class InProcessCluster {
 public:
  // Starts the coordinator, then the servers, then the clients (every
  // worker is registered before any call returns to the caller).
  static Result<std::unique_ptr<InProcessCluster>> Start(
      InProcessClusterOptions options) {
    std::unique_ptr<InProcessCluster> cluster(new InProcessCluster());
    options.coordinator.num_servers = options.servers;
    options.coordinator.num_workers = options.workers;
    if (options.coordinator.bind_address.empty()) {
      options.coordinator.bind_address = "tcp://127.0.0.1:0";
    }
    auto coordinator = Coordinator::Start(options.coordinator);
    DUCTILE_RETURN_IF_ERROR(coordinator.status());
    cluster->coordinator_ = std::move(*coordinator);
    for (int i = 0; i < options.servers; ++i) {
      ServerOptions s = options.server;
      s.coordinator_address = cluster->coordinator_->address();
      auto server = Server::Start(s);
      DUCTILE_RETURN_IF_ERROR(server.status());
      cluster->servers_.push_back(std::move(*server));
    }
    for (int i = 0; i < options.workers; ++i) {
      ClientOptions o = options.client;
      o.coordinator_address = cluster->coordinator_->address();
      auto client = Client::Connect(o);
      DUCTILE_RETURN_IF_ERROR(client.status());
      cluster->clients_.push_back(std::move(*client));
    }
    return cluster;
  }

  ~InProcessCluster() {
    clients_.clear();
    servers_.clear();
    coordinator_.reset();
  }
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  int num_servers() const { return static_cast<int>(servers_.size()); }
  int num_workers() const { return static_cast<int>(clients_.size()); }
  Server& server(int i) { return *servers_[i]; }
  Client& client(int i) { return *clients_[i]; }

 private:
  InProcessCluster() = default;

  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace ductile::bench

#endif  // DUCTILE_BENCH_IN_PROCESS_CLUSTER_H_
