#include "server/reply_sender.h"

#include <string>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

void ReplySender::Reply(ByteSpan identity, wire::Header& header,
                        std::vector<float>* values) {
  Send(identity, header, values, /*gated=*/true);
}

void ReplySender::Send(ByteSpan identity, wire::Header& header,
                       std::vector<float>* values, bool gated) {
  OutMessage out;
  out.AddCopy(identity);
  header.set_epoch(routing_->epoch());
  out.AddString(header.SerializeAsString());
  if (values != nullptr) out.AddOwned(std::move(*values));
  if (gated && gate_ != nullptr) {
    const uint64_t ticket = gate_->Ticket();
    if (!held_.empty() || !gate_->Passed(ticket)) {
      held_.push_back(
          {std::move(out),
           std::string(reinterpret_cast<const char*>(identity.data()),
                       identity.size()),
           header, ticket});
      return;
    }
  }
  Transmit(std::move(out), identity, header);
}

void ReplySender::Transmit(OutMessage out, ByteSpan identity,
                           const wire::Header& header) {
  const uint64_t bytes = out.bytes();
  Status s = router_->Send(std::move(out));
  if (s.ok()) {
    counters_->Add(&ServerCounters::bytes_out, bytes);
    return;
  }
  VLOG(1) << "reply dropped: " << s;
  if (s.code() == StatusCode::kResourceExhausted && header.status_code() == 0) {
    // Too much queued for a peer that does not read: its request is
    // answered with the refusal instead (a small reply, always queued).
    counters_->Add(&ServerCounters::refused_limits);
    Error(identity, header.seq(),
          ResourceExhaustedError("server " + std::to_string(server_id_) +
                                 " did not queue the reply: " + s.message()),
          header.duplicate());
  }
}

void ReplySender::SendHeld() {
  while (!held_.empty() && gate_ != nullptr &&
         gate_->Passed(held_.front().ticket)) {
    Held h = std::move(held_.front());
    held_.pop_front();
    Transmit(std::move(h.out),
             {reinterpret_cast<const uint8_t*>(h.identity.data()),
              h.identity.size()},
             h.header);
  }
}

size_t ReplySender::DropHeld() {
  const size_t n = held_.size();
  held_.clear();
  return n;
}

void ReplySender::Error(ByteSpan identity, uint64_t seq, const Status& s,
                        bool applied) {
  counters_->Add(&ServerCounters::errors);
  VLOG(1) << "server " << server_id_ << " refused request " << seq << ": " << s;
  wire::Header h;
  h.set_type(wire::DATA_REPLY);
  h.set_seq(seq);
  h.set_duplicate(applied);
  StatusToWire(s, &h);
  Reply(identity, h, nullptr);
}

void ReplySender::Moved(ByteSpan identity, uint64_t seq, bool duplicate) {
  counters_->Add(&ServerCounters::redirects);
  wire::Header h;
  h.set_type(wire::DATA_REPLY);
  h.set_seq(seq);
  h.set_moved(true);
  h.set_duplicate(duplicate);
  StatusToWire(
      UnavailableError("routing changed: server " + std::to_string(server_id_) +
                       " does not own every key's slot"),
      &h);
  routing_->ToWire(h.mutable_routing());
  Reply(identity, h, nullptr);
}

void ReplySender::FailAll(std::vector<InMessage> requests, const Status& s,
                          bool applied) {
  for (InMessage& m : requests) {
    if (m.empty()) continue;
    wire::Header header;
    const uint64_t seq = m.size() >= 2 && ParseHeader(m.frame(1), &header).ok()
                             ? header.seq()
                             : 0;
    Error(m.frame(0), seq, s, applied);
  }
}

}  // namespace ductile
