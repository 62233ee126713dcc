// The parameter server process role (implements ductile::Server): a
// ServerNode stepped by a request thread of its own.
//
// Threads: the request thread (Run) waits on the node's sockets and steps
// it; it alone touches the node's state. Other threads read counters
// (relaxed atomics) or signal `wakeup_`: to stop, or (the node's checkpoint
// writer) to have a finished write taken.
#ifndef DUCTILE_SERVER_SERVER_IMPL_H_
#define DUCTILE_SERVER_SERVER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ductile/server.h"
#include "env/env.h"
#include "server/server_node.h"
#include "transport/wakeup.h"
#include "util/mutex.h"

namespace ductile {

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(const ServerOptions& options);
  ~ServerImpl() override;

  // Binds, registers with the coordinator, starts the request thread.
  Status Init();

  Status Wait() override;
  void Stop() override;
  int32_t id() const override { return node_.id(); }
  std::string address() const override { return node_.address(); }
  std::string ipc_address() const override { return node_.ipc_address(); }
  ServerCounters counters() const override { return node_.counters(); }

  // For tests only: a copy of one key's value (call only while the server
  // is idle or stopped).
  bool GetForTesting(TableId table, Key key, std::vector<float>* value) {
    return node_.GetForTesting(table, key, value);
  }

 private:
  void Run();

  const ServerOptions options_;
  Env* const env_;
  // Before node_: the node's checkpoint writer and slot moves signal it
  // until the node is destroyed.
  Wakeup wakeup_;
  ServerNode node_;  // stepped by the request thread only, once started
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Mutex wait_mu_;       // serializes Wait()
  Status exit_status_;  // written by the request thread before it ends
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SERVER_IMPL_H_
