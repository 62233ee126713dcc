// RequestEngine's handling of the servers' replies to data requests:
// matching them with parts, re-routing what was not applied, and copying
// pulled values into the caller's buffers (from a frame or the worker's
// shared memory). Sending is in request_engine.cc.
#include <chrono>
#include <cstring>

#include "client/request_engine.h"
#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

using std::chrono::milliseconds;

void RequestEngine::HandleDataReply(InMessage& message, int32_t server) {
  wire::Header header;
  if (message.empty() || !ParseHeader(message.frame(0), &header).ok()) {
    LOG(WARNING) << "client: unreadable reply from a server, dropped";
    return;
  }
  ReadDataReply(message, header, server);
  // Answered: the regions of shared memory lent for the request, read by
  // now, may go out again (late and re-routed answers included).
  if (shm_ != nullptr) {
    shm_->Return(ShmValueArea::ReplyTicket(header.seq()), server);
    shm_->Return(ShmValueArea::PushTicket(header.seq()), server);
  }
}

void RequestEngine::ReadDataReply(InMessage& message,
                                  const wire::Header& header, int32_t server) {
  // Every reply carries its server's routing epoch: act on a newer one.
  if (header.epoch() > routing_->table().epoch() && !header.has_routing()) {
    RequestRouting();
  }
  auto it = parts_.find(header.seq());
  if (it == parts_.end() || it->second.awaiting_reroute()) {
    return;  // late reply to a request that already finished or was re-routed
  }
  Part& part = it->second;
  const Status status = StatusFromWire(header);
  if (header.shm_refused() && shm_proven_.erase(server) > 0) {
    LOG(WARNING) << "client: " << routing_->Describe(server)
                 << " could not use this worker's shared memory; pushed "
                    "values go to it in frames until a pull's come back "
                    "through it: "
                 << status;
  }
  if (header.moved() || status.code() == StatusCode::kUnavailable) {
    // Not applied: re-route the keys (under the newer table if the server
    // sent one) with fresh sequence numbers.
    const bool newer = header.has_routing() &&
                       header.routing().epoch() > routing_->table().epoch();
    open_seqs_.erase(part.seq);
    // A duplicate push-pull was applied here before its slot moved: the
    // new owner is only asked for the values.
    if (header.duplicate()) part.pull_only = true;
    // This copy was not applied, but one sent again on silence may still
    // be on its way, to be applied after this answer: the new requests
    // name this seq, so that a server that applied that copy takes them as
    // duplicates.
    if (part.resent && !KeepAsPrior(part)) return;
    VLOG(1) << "client " << shared_.worker_id->load() << ": part " << part.seq
            << " (" << wire::MessageType_Name(part.op->type) << " clock "
            << part.op->clock << ") moved by server " << part.server
            << (newer ? ", new routing" : "");
    // Waiting before the routing is installed: the answer is in, so the
    // part is not orphaned if the new table no longer lists its server.
    const milliseconds delay = newer ? milliseconds(0) : kRetryAfter;
    AwaitReroute(part, env_->Now() + delay);
    RerouteLaterParts(part, delay);
    if (newer) {
      InstallRouting(header.routing());
      HandleTimers();
    } else {
      RequestRouting();
    }
    return;
  }
  if (!status.ok()) {
    return FinishPart(
        header.seq(),
        Status(status.code(),
               "server " + std::to_string(part.server) + ": " +
                   status.message() +
                   (header.duplicate() ? " (the pushed values were applied)"
                                       : "")));
  }
  DataOperation& op = *part.op;
  if (op.type != wire::PUSH) {
    const uint64_t bytes = part.floats() * sizeof(float);
    const float* values = nullptr;
    if (header.values_in_shm()) {
      if (message.size() == 1 && shm_ != nullptr) {
        values =
            shm_->Data(ShmValueArea::ReplyTicket(header.seq()), server, bytes);
      }
      if (values != nullptr) shm_proven_.insert(server);
    } else if (message.size() == 2 && message.frame(1).size() == bytes) {
      values = reinterpret_cast<const float*>(message.frame(1).data());
    }
    if (values == nullptr) {
      return FinishPart(header.seq(),
                        InternalError("server " + std::to_string(part.server) +
                                      " sent a pull reply of the wrong size"));
    }
    CopyPulledValues(part, header, values);
  }
  if (op.width == 0) {
    shared_.tables->LearnWidths(op.table, op.keys, op.lengths, part.size(),
                                [&part](size_t j) { return part.index(j); });
  }
  FinishPart(header.seq(), Status::Ok());
}

void RequestEngine::CopyPulledValues(Part& part, const wire::Header& header,
                                     const float* values) {
  DataOperation& op = *part.op;
  uint64_t waited_us = 0;
  if (header.blocked_us() > op.blocked_us) {
    waited_us = header.blocked_us() - op.blocked_us;
    op.blocked_us = header.blocked_us();
  }
  shared_.stats->RecordPull(op.clock, header.data_clock(), waited_us);
  if (op.cache_install && !shared_.tables->CacheSuspended(op.table)) {
    if (header.has_consistency()) {
      shared_.tables->SetConsistency(op.table, header.consistency());
    }
    const float* v = values;
    for (size_t j = 0; j < part.size(); ++j) {
      const size_t i = part.index(j);
      shared_.cache->Install(op.table, op.keys[i], {v, op.length(i)},
                             header.data_clock(), op.cache_mark);
      v += op.length(i);
    }
  }
  if (part.indices.empty()) {
    std::memcpy(op.out.data() + op.offset(part.begin), values,
                part.floats() * sizeof(float));
    return;
  }
  for (size_t j = 0; j < part.size(); ++j) {
    const size_t i = part.index(j);
    std::memcpy(op.out.data() + op.offset(i), values,
                op.length(i) * sizeof(float));
    values += op.length(i);
  }
}

}  // namespace ductile
