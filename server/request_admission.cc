#include "server/request_admission.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

namespace ductile {

void RequestAdmission::BindWorkers(const wire::Header& from_coordinator,
                                   bool overwrite) {
  const int n = from_coordinator.worker_ids_size();
  for (int i = 0; i < n; ++i) {
    Binding binding;
    if (i < from_coordinator.worker_keys_size()) {
      binding.key = from_coordinator.worker_keys(i);
    }
    if (binding.key.empty() && i < from_coordinator.worker_identities_size()) {
      binding.identity = from_coordinator.worker_identities(i);
    }
    if (binding.key.empty() && binding.identity.empty()) continue;
    if (overwrite) {
      worker_binding_[from_coordinator.worker_ids(i)] = std::move(binding);
    } else {
      worker_binding_.emplace(from_coordinator.worker_ids(i),
                              std::move(binding));
    }
  }
}

Status RequestAdmission::Check(const InMessage& message,
                               const RoutingTable& routing, uint64_t generation,
                               int32_t server_id, TableSet& tables,
                               Request* out, uint64_t* seq) {
  *seq = 0;
  if (message.size() < 2) {
    return InvalidArgumentError("message has no header frame");
  }
  wire::Header& header = out->header;
  // A header that parses but fails a check is answered under its seq.
  const Status parsed = ParseHeader(message.frame(1), &header);
  *seq = header.seq();
  DUCTILE_RETURN_IF_ERROR(parsed);
  const auto type = header.type();
  out->is_worker = header.has_worker_id() && header.worker_id() >= 0;
  if (out->is_worker) {
    auto bound = worker_binding_.find(header.worker_id());
    if (bound != worker_binding_.end()) {
      const Binding& b = bound->second;
      if (!b.key.empty() && b.key != message.member_key()) {
        counters_->Add(&ServerCounters::refused_permission);
        return PermissionDeniedError(
            "a request names worker " + std::to_string(header.worker_id()) +
            ", but does not come with its member key: a worker acts for "
            "itself only");
      }
      if (!b.identity.empty() && b.identity != message.frame_view(0)) {
        counters_->Add(&ServerCounters::refused_permission);
        return PermissionDeniedError(
            "a request names worker " + std::to_string(header.worker_id()) +
            ", which is connected elsewhere: a worker acts for itself only");
      }
    }
  }
  if (type == wire::CLOCK && message.size() == 2) {
    out->is_clock = true;
    return Status::Ok();
  }
  if (type != wire::PUSH && type != wire::PULL && type != wire::PUSH_PULL) {
    return InvalidArgumentError(
        "servers take push, pull, push-pull and clock messages, not type " +
        std::to_string(type));
  }
  if (header.prior_seqs_size() > kMaxPriorSeqs) {
    return InvalidArgumentError(
        "a request lists " + std::to_string(header.prior_seqs_size()) +
        " earlier sequence numbers; at most " + std::to_string(kMaxPriorSeqs));
  }
  if (message.bytes() > max_message_bytes_) {
    counters_->Add(&ServerCounters::refused_limits);
    return InvalidArgumentError("request of " +
                                std::to_string(message.bytes()) +
                                " bytes is over the server's limit of " +
                                std::to_string(max_message_bytes_));
  }
  if (routing.empty()) {
    return UnavailableError("server " + std::to_string(server_id) +
                            " has no routing table yet");
  }
  if (header.epoch() > routing.epoch()) {
    // The sender has heard of a newer routing table than this server.
    if (requested_epoch_ < header.epoch()) {
      requested_epoch_ = header.epoch();
      newer_epoch_ = header.epoch();
    }
    return UnavailableError(
        "server " + std::to_string(server_id) + " is at routing epoch " +
        std::to_string(routing.epoch()) + ", behind the request's " +
        std::to_string(header.epoch()));
  }
  out->table = tables.Find(header.table_id());
  if (out->table == nullptr) {
    return NotFoundError("unknown table id " +
                         std::to_string(header.table_id()));
  }
  // Frames 0 and 1 are the sender's identity and the header. Requests
  // rarely have more than a few frames: keep their views on the stack.
  const size_t n_data = message.size() - 2;
  ByteSpan on_stack[16];
  std::vector<ByteSpan> on_heap;
  ByteSpan* frames = on_stack;
  if (n_data > std::size(on_stack)) {
    on_heap.resize(n_data);
    frames = on_heap.data();
  }
  for (size_t i = 0; i < n_data; ++i) frames[i] = message.frame(i + 2);
  DUCTILE_RETURN_IF_ERROR(out->data.Parse(header, {frames, n_data},
                                          out->table->options().value_width,
                                          type != wire::PULL));
  // On a variable-width table a request decides a new key's width (a
  // fixed-width table's was checked when the table was made).
  const bool variable = out->table->options().value_width == 0;
  for (size_t i = 0; variable && i < out->data.keys().size(); ++i) {
    if (out->data.length(i) > max_key_floats_) {
      counters_->Add(&ServerCounters::refused_limits);
      return InvalidArgumentError(
          "key " + std::to_string(out->data.keys()[i]) + " of " +
          std::to_string(out->data.length(i)) +
          " floats is wider than this server's limit of " +
          std::to_string(max_key_floats_) + " (--max_key_floats)");
    }
  }
  if (out->is_worker && header.generation() != generation) {
    // A request from before a rollback belongs to the abandoned timeline;
    // one from after a rollback this server has not heard of yet is
    // retried.
    if (header.generation() < generation) {
      return AbortedError("the job rolled back (generation " +
                          std::to_string(generation) + "); request of " +
                          "generation " + std::to_string(header.generation()) +
                          " refused");
    }
    return UnavailableError("server " + std::to_string(server_id) +
                            " is still at generation " +
                            std::to_string(generation));
  }
  return Status::Ok();
}

Result<RequestAdmission::Route> RequestAdmission::Decide(
    const Request& request, const RoutingTable& routing, int32_t server_id,
    bool* duplicate) {
  const wire::Header& header = request.header;
  *duplicate = false;
  if (request.has_values()) {
    dedup_.Advance(header.client_id(), header.done_below());
    *duplicate = dedup_.IsDuplicate(header.client_id(), header.seq());
    // The same values sent before under other sequence numbers, to a
    // server that stopped before answering: its window came here with its
    // slots.
    for (uint64_t prior : header.prior_seqs()) {
      if (*duplicate) break;
      *duplicate = dedup_.IsDuplicate(header.client_id(), prior);
    }
  }
  if (*duplicate && !request.has_pull()) return Route::kDuplicate;
  if (!*duplicate && request.has_values() && dedup_.Full(header.client_id())) {
    counters_->Add(&ServerCounters::refused_limits);
    return ResourceExhaustedError(
        "client " + std::to_string(header.client_id()) + " has " +
        std::to_string(max_window_per_client_) +
        " requests applied above its done-below mark " +
        std::to_string(header.done_below()) +
        " (--max_window_per_client): refused until its earlier requests "
        "complete");
  }
  const TableId table = request.table->id();
  for (Key key : request.data.keys()) {
    if (!routing.Serves(server_id, routing.SlotOf(table, key))) {
      // For a duplicate push-pull the reply says so: the client then only
      // pulls from the new owner.
      return Route::kMoved;
    }
  }
  if (request.has_pull() &&
      request.data.total_floats() * sizeof(float) > max_message_bytes_) {
    counters_->Add(&ServerCounters::refused_limits);
    return InvalidArgumentError("pull of " +
                                std::to_string(request.data.total_floats()) +
                                " floats is over the server's reply limit of " +
                                std::to_string(max_message_bytes_) + " bytes");
  }
  return Route::kServe;
}

}  // namespace ductile
