// ClientImpl's data path: a push or pull checked (its table, shape, size
// and values), served from the cache when it can be, or handed to the
// RequestEngine. The rest of the client (registration, tables, clocks,
// barriers, the data plan, rollbacks) is in client_impl.cc.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "client/client_impl.h"
#include "client/row_batch.h"
#include "proto/codec.h"

namespace ductile {

using std::chrono::milliseconds;

namespace {

std::shared_ptr<DataOperation> NewData(wire::MessageType type, TableId table,
                                       std::span<const Key> keys,
                                       std::span<const float> values,
                                       std::span<float> out,
                                       std::span<const uint32_t> lengths) {
  auto op = std::make_shared<DataOperation>();
  op->type = type;
  op->table = table;
  op->keys = keys;
  op->values = values;
  op->out = out;
  op->lengths = lengths;
  return op;
}

// A call refused before anything was sent.
Handle Refused(const Status& status) {
  auto op = std::make_shared<DataOperation>();
  op->Hold();
  op->Refuse(status);
  return Handle(op);
}

}  // namespace

Handle ClientImpl::PushAsync(TableId table, std::span<const Key> keys,
                             std::span<const float> values,
                             std::span<const uint32_t> lengths) {
  return SubmitData(NewData(wire::PUSH, table, keys, values, {}, lengths));
}

Handle ClientImpl::PullAsync(TableId table, std::span<const Key> keys,
                             std::span<float> out,
                             std::span<const uint32_t> lengths) {
  return SubmitData(NewData(wire::PULL, table, keys, {}, out, lengths));
}

Handle ClientImpl::PushPullAsync(TableId table, std::span<const Key> keys,
                                 std::span<const float> values,
                                 std::span<float> out,
                                 std::span<const uint32_t> lengths) {
  return SubmitData(
      NewData(wire::PUSH_PULL, table, keys, values, out, lengths));
}

Handle ClientImpl::PullRowsAsync(TableId table, std::span<const Key> ids,
                                 std::span<float> out) {
  return SubmitRows(wire::PULL, table, ids, {}, out);
}

Handle ClientImpl::PushRowsAsync(TableId table, std::span<const Key> ids,
                                 std::span<const float> grads) {
  return SubmitRows(wire::PUSH, table, ids, grads, {});
}

Handle ClientImpl::SubmitRows(wire::MessageType type, TableId table,
                              std::span<const Key> ids,
                              std::span<const float> grads,
                              std::span<float> out) {
  const bool push = type == wire::PUSH;
  Result<TableRegistry::View> view = tables_.Lookup(table, clock_.load());
  if (!view.ok()) return Refused(view.status());
  const uint32_t width = view->width;
  if (width == 0) {
    return Refused(InvalidArgumentError(
        tables_.Name(table) +
        " has variable-width values; rows by id need a fixed-width table"));
  }
  const uint64_t floats = push ? grads.size() : out.size();
  if (floats != ids.size() * uint64_t{width}) {
    return Refused(InvalidArgumentError(
        std::string(push ? "grads" : "out") + " has " + std::to_string(floats) +
        " floats for " + std::to_string(ids.size()) + " ids of width " +
        std::to_string(width) + " (needs " +
        std::to_string(ids.size() * uint64_t{width}) + ") in " +
        tables_.Name(table) + "; nothing was sent"));
  }
  if (ids.size() > UINT32_MAX) {
    return Refused(InvalidArgumentError(std::to_string(ids.size()) +
                                        " ids in one call (at most " +
                                        std::to_string(UINT32_MAX) + ")"));
  }
  if (RowBatch::IsStrictlyIncreasing(ids)) {
    return SubmitData(NewData(type, table, ids, grads, out, {}));
  }
  auto op = std::make_shared<RowsOperation>();
  op->type = type;
  op->table = table;
  op->batch = RowBatch(ids);
  op->keys = op->batch.keys();
  op->rows.resize(op->keys.size() * width);
  if (push) {
    op->batch.Sum(grads, width, op->rows);
    op->values = op->rows;
  } else {
    op->out = op->rows;
    op->expand_into = out;
  }
  return SubmitData(std::move(op));
}

Handle ClientImpl::SubmitData(std::shared_ptr<DataOperation> op) {
  const wire::MessageType type = op->type;
  op->SetWaitStats(stats_owner_, type != wire::PUSH);
  op->Hold();  // the dispatcher's hold, dropped once every part is out
  if (worker_id_.load() >= 0) {
    if (Status s = recovery_.RefuseIfPending(); !s.ok()) {
      op->Refuse(s);
      return Handle(op);
    }
  }
  op->clock = clock_.load();
  op->generation = recovery_.generation();
  op->batch_weight = push_weight_.load();
  if (type != wire::PULL) op->rate_factor = RateFactor(op->table);
  Result<TableRegistry::View> view = tables_.Lookup(op->table, op->clock);
  if (!view.ok()) {
    op->Refuse(view.status());
    return Handle(op);
  }
  op->width = view->width;
  const bool push = type != wire::PULL;
  const bool pull = type != wire::PUSH;
  Result<uint64_t> total = CheckRequestShape(
      op->keys, op->lengths, op->width,
      push ? op->values.size() : op->out.size(), push ? "values" : "out");
  if (total.ok() && push && pull && op->out.size() != op->values.size()) {
    total = InvalidArgumentError("out has " + std::to_string(op->out.size()) +
                                 " floats, values has " +
                                 std::to_string(op->values.size()));
  }
  if (total.ok() && *total * sizeof(float) > options_.max_message_bytes) {
    total = InvalidArgumentError(
        "request of " + std::to_string(*total * sizeof(float)) +
        " bytes of values is over max_message_bytes (" +
        std::to_string(options_.max_message_bytes) + ")");
  }
  if (!total.ok()) {
    op->Refuse(total.status());
    return Handle(op);
  }
  if (op->width == 0) {
    op->offsets.resize(op->keys.size());
    uint64_t offset = 0;
    for (size_t i = 0; i < op->keys.size(); ++i) {
      op->offsets[i] = offset;
      offset += op->lengths[i];
    }
  } else if (!op->lengths.empty()) {
    op->lengths = {};  // equal to the width: no need to send them
  }
  const bool cached = options_.enable_cache && worker_id_.load() >= 0 &&
                      view->mode == ConsistencyMode::kSsp;
  if (push) {
    if (Status s = CheckPushValues(*op, *view, cached); !s.ok()) {
      op->Refuse(s);
      return Handle(op);
    }
  }
  op->deadline = env_->Now() + milliseconds(options_.request_timeout_ms);
  if (cached && UseCache(*op, *view)) return Handle(op);  // a cache hit
  engine_.Submit(op);
  return Handle(op);
}

Status ClientImpl::CheckPushValues(DataOperation& op,
                                   const TableRegistry::View& table,
                                   bool cached) const {
  if (op.width == 0) {
    DUCTILE_RETURN_IF_ERROR(tables_.CheckWidths(op.table, op.keys, op.lengths));
  }
  op.reject_non_finite = table.reject_non_finite;
  // Finiteness is checked here only for a push the cache mirrors (it must
  // not take refused values); otherwise where the push is split, and only
  // when it goes to several servers (RequestEngine): a push to one server
  // is refused whole by that server, which checks it anyway.
  if (!cached || !table.reject_non_finite) return Status::Ok();
  return CheckFiniteValues(op, tables_.Name(op.table));
}

bool ClientImpl::UseCache(DataOperation& op, const TableRegistry::View& table) {
  const DataOperation* o = &op;
  auto offset = [o](size_t i) { return o->offset(i); };
  auto length = [o](size_t i) { return o->length(i); };
  if (op.type != wire::PULL) {
    cache_.Write(op.table, op.keys, offset, length, op.values, *table.kernel,
                 table.kernel->Factor(op.clock) * op.rate_factor);
  }
  if (op.type == wire::PUSH || !table.cache_readable) return false;
  if (op.type == wire::PULL &&
      cache_.TryRead(op.table, op.keys, offset, length,
                     op.clock - table.staleness, op.out)) {
    stats_.RecordCacheHit();
    op.Release();  // the dispatcher's hold: done
    return true;
  }
  stats_.RecordCacheMiss();
  op.cache_install = true;
  op.cache_mark = cache_.Mark();
  return false;
}

}  // namespace ductile
