#include "server/replica_store.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "glog/logging.h"
#include "storage/checkpoint_format.h"

namespace ductile {

void ReplicaStore::Apply(int32_t primary, RecordCodec::Records&& records) {
  // Evictions first: a key evicted and stored again is a row after them.
  for (const auto& [table, key] : records.deleted) {
    auto t = tables_.find(table);
    if (t == tables_.end()) continue;
    auto it = t->second.find(key);
    if (it == t->second.end()) continue;
    floats_ -= Floats(it->second);
    --rows_;
    t->second.erase(it);
  }
  // A row's latest record replaces it; `fill` sets its value, state and
  // steps.
  const auto store = [&](TableId table, Key key, const auto& fill) {
    auto [it, added] = tables_[table].try_emplace(key);
    Row& row = it->second;
    if (added) {
      ++rows_;
    } else {
      floats_ -= Floats(row);
    }
    fill(row);
    row.changed = ++records_;
    floats_ += Floats(row);
  };
  for (EntryRecord& e : records.entries) {
    store(e.table, e.key, [&](Row& row) {
      row.value = std::move(e.value);
      row.state = std::move(e.state);
      row.steps = e.steps;
    });
  }
  for (const RecordCodec::EntryView& e : records.entry_views) {
    // Decoded into the row's own vectors: a row of the same shape as
    // before takes no allocation.
    store(e.table, e.key, [&](Row& row) {
      EntryRecord decoded;
      decoded.value.swap(row.value);
      decoded.state.swap(row.state);
      decoded.steps = row.steps;
      // Checked by Parse; bytes in a primary's shared memory changed since
      // (by another process of its user) leave the row as it was.
      const std::string why =
          checkpoint_format::DecodeEntryValue(e.value, &decoded);
      LOG_IF(ERROR, !why.empty())
          << "a record of server " << primary << " changed after its check ("
          << why << "); table " << e.table << " key " << e.key << " kept";
      row.value.swap(decoded.value);
      row.state.swap(decoded.state);
      row.steps = decoded.steps;
    });
  }
  Pushes& pushes = buffered_[primary];
  for (RecordCodec::Buffered& b : records.buffered) {
    BspBuffer::Combined& held = pushes[{b.first, b.second.clock}][b.second.key];
    floats_ -= held.values.size();
    held = std::move(b.second.combined);
    floats_ += held.values.size();
  }
  if (records.combined_below) {
    TakePushes(
        pushes, [](TableId, Key) { return true; }, records.combined_below,
        nullptr);
  }
  for (FilterRecord& f : records.filters) {
    if (f.counts.empty()) {
      filters_.erase({f.table, f.slot});
    } else {
      filters_[{f.table, f.slot}] = std::move(f);
    }
  }
  if (!records.windows.empty()) {
    RequestDedup& windows = windows_[primary];
    for (const RequestDedup::Window& w : records.windows) windows.Merge(w);
  }
}

std::vector<FilterRecord> ReplicaStore::TakeFilters(
    const std::function<bool(int32_t)>& in) {
  std::vector<FilterRecord> taken;
  for (auto it = filters_.begin(); it != filters_.end();) {
    if (!in(it->first.second)) {
      ++it;
      continue;
    }
    taken.push_back(std::move(it->second));
    it = filters_.erase(it);
  }
  return taken;
}

size_t ReplicaStore::TakePushes(Pushes& pushes,
                                const std::function<bool(TableId, Key)>& in,
                                std::optional<int64_t> below,
                                std::vector<RecordCodec::Buffered>* out) {
  size_t taken = 0;
  for (auto it = pushes.begin(); it != pushes.end();) {
    const auto [table, clock] = it->first;
    if (below && clock >= *below) {
      ++it;
      continue;
    }
    BspBuffer::Clock& keys = it->second;
    for (auto k = keys.begin(); k != keys.end();) {
      if (!in(table, k->first)) {
        ++k;
        continue;
      }
      floats_ -= k->second.values.size();
      if (out != nullptr) {
        out->push_back({table, {clock, k->first, std::move(k->second)}});
      }
      k = keys.erase(k);
      ++taken;
    }
    it = keys.empty() ? pushes.erase(it) : std::next(it);
  }
  return taken;
}

ReplicaStore::Taken ReplicaStore::Take(
    const std::function<bool(TableId, Key)>& in) {
  Taken taken;
  std::vector<std::pair<uint64_t, EntryRecord>> rows;
  for (auto& [table, held] : tables_) {
    for (auto it = held.begin(); it != held.end();) {
      if (!in(table, it->first)) {
        ++it;
        continue;
      }
      Row& row = it->second;
      floats_ -= Floats(row);
      --rows_;
      rows.emplace_back(row.changed,
                        EntryRecord{table, it->first, std::move(row.value),
                                    std::move(row.state), row.steps});
      it = held.erase(it);
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  taken.rows.reserve(rows.size());
  for (auto& [order, record] : rows) taken.rows.push_back(std::move(record));
  // One entry per (table, clock, key): the one standing for most pushes.
  std::map<std::tuple<TableId, int64_t, Key>, RecordCodec::Buffered> best;
  for (auto& [primary, pushes] : buffered_) {
    std::vector<RecordCodec::Buffered> out;
    TakePushes(pushes, in, std::nullopt, &out);
    for (RecordCodec::Buffered& b : out) {
      auto [it, added] =
          best.try_emplace({b.first, b.second.clock, b.second.key}, b);
      if (!added &&
          b.second.combined.pushes > it->second.second.combined.pushes) {
        it->second = std::move(b);
      }
    }
  }
  for (auto& [at, b] : best) taken.buffered.push_back(std::move(b));
  return taken;
}

std::vector<RequestDedup::Window> ReplicaStore::Windows() const {
  std::vector<RequestDedup::Window> out;
  for (const auto& [primary, windows] : windows_) {
    for (RequestDedup::Window& w : windows.Snapshot()) {
      out.push_back(std::move(w));
    }
  }
  return out;
}

size_t ReplicaStore::Drop(const std::function<bool(TableId, Key)>& in,
                          Dropped* out) {
  size_t dropped = 0;
  for (auto& [table, held] : tables_) {
    for (auto it = held.begin(); it != held.end();) {
      if (!in(table, it->first)) {
        ++it;
        continue;
      }
      floats_ -= Floats(it->second);
      --rows_;
      ++dropped;
      it = out != nullptr ? out->Take(held, it) : held.erase(it);
    }
  }
  for (auto& [primary, pushes] : buffered_) {
    dropped += TakePushes(pushes, in, std::nullopt, nullptr);
  }
  return dropped;
}

void ReplicaStore::Clear() {
  tables_.clear();
  buffered_.clear();
  windows_.clear();
  filters_.clear();
  rows_ = floats_ = 0;
}

}  // namespace ductile
