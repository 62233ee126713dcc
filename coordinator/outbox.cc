#include "coordinator/coordinator_context.h"
#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

void Outbox::Send(const std::string& identity, const wire::Header& header) {
  std::string bytes = header.SerializeAsString();
  // While messages are held (the state cannot be saved), members' resends
  // and heartbeats ask for the same messages again and again: one copy
  // each is enough.
  for (const auto& [to, pending] : pending_) {
    if (to == identity && pending == bytes) return;
  }
  pending_.emplace_back(identity, std::move(bytes));
}

void Outbox::Reply(const std::string& identity, uint64_t seq,
                   const Status& status) {
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(seq);
  StatusToWire(status, &reply);
  Send(identity, reply);
}

void Outbox::SendStateless(const std::string& identity,
                           const wire::Header& header) {
  stateless_.emplace_back(identity, header.SerializeAsString());
}

void Outbox::SendAll(Queue* queue, Socket* socket) {
  for (auto& [identity, bytes] : *queue) {
    OutMessage out;
    out.AddString(std::move(identity));
    out.AddString(std::move(bytes));
    Status s = socket->Send(std::move(out));
    if (!s.ok()) VLOG(1) << "coordinator: send failed: " << s;
  }
  queue->clear();
}

void Outbox::Flush(Socket* socket) {
  SendAll(&stateless_, socket);
  SendAll(&pending_, socket);
}

void Outbox::FlushStateless(Socket* socket) { SendAll(&stateless_, socket); }

}  // namespace ductile
