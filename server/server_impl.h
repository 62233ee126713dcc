// The parameter server process role (implements ductile::Server).
//
// Threads: one request thread (Run) owns both sockets and every table; it
// validates and applies requests in arrival order, answers the coordinator
// and sends heartbeats. Other threads only read atomics (counters) or signal
// `wakeup_` to stop.
#ifndef DUCTILE_SERVER_SERVER_IMPL_H_
#define DUCTILE_SERVER_SERVER_IMPL_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "ductile/server.h"
#include "proto/ductile.pb.h"
#include "server/parameter_table.h"
#include "server/request_dedup.h"
#include "transport/message.h"
#include "transport/wakeup.h"

namespace ductile {

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(const ServerOptions& options);
  ~ServerImpl() override;

  // Binds, registers with the coordinator, starts the request thread.
  Status Init();

  Status Wait() override;
  void Stop() override;
  int32_t id() const override { return id_; }
  std::string address() const override { return tcp_address_; }
  ServerCounters counters() const override;

  // Test access: a copy of one key's value, read on the request thread's
  // behalf (call only while the server is idle or stopped).
  bool DebugGet(TableId table, Key key, std::vector<float>* value);

 private:
  struct AtomicCounters {
    std::atomic<uint64_t> requests{0}, pushes{0}, pulls{0}, duplicates{0},
        redirects{0}, errors{0}, bytes_in{0}, bytes_out{0}, keys_stored{0};
  };

  void Run();
  void HandleRequest(InMessage& message);
  void HandleCoordinator(InMessage& message);
  void SendHeartbeat();
  void ReplyError(const zmq::message_t& identity, uint64_t seq,
                  const Status& s);
  void ReplyMoved(const zmq::message_t& identity, uint64_t seq, bool duplicate);
  void Reply(const zmq::message_t& identity, const wire::Header& header,
             std::vector<float>* values);
  void InstallRouting(const wire::RoutingTable& routing);
  Status CreateTable(const wire::TableConfig& config);
  Status SendToCoordinator(const wire::Header& header);

  // Constant after construction.
  const ServerOptions options_;

  // Set by Init(), then constant.
  zmq::context_t context_{1};
  zmq::socket_t router_;
  zmq::socket_t coordinator_;
  int32_t id_ = -1;
  std::string tcp_address_;
  std::string ipc_address_;
  std::thread thread_;

  // Owned by the request thread.
  wire::RoutingTable routing_;
  std::vector<uint8_t> owned_slots_;  // 1 if this server owns the slot
  std::map<TableId, std::unique_ptr<ParameterTable>> tables_;
  RequestDedup dedup_;
  uint64_t routing_requested_epoch_ = 0;
  std::chrono::steady_clock::time_point next_heartbeat_;

  // Shared.
  Wakeup wakeup_;
  std::atomic<bool> stop_{false};
  AtomicCounters counters_;
  std::mutex wait_mu_;
  Status exit_status_;  // written by the request thread before it ends
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SERVER_IMPL_H_
