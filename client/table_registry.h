// What a client knows of each table: its configuration as last heard, the
// update rule's arithmetic (for the worker cache), the cache gate, and the
// widths of the variable-width keys this client has seen accepted.
//
// The cache gate: while a consistency change of a table is being agreed,
// the cache may not answer reads of it; once committed from clock B, it may
// again, for reads at clocks >= B (earlier clocks belong to the old model).
//
// Known widths let a push be refused before anything is sent when one of
// its keys has another width on the servers: a request split over several
// servers is then not half applied. A key whose width this client has never
// seen is checked by its server alone.
//
// Thread-safe: callers' threads look tables up; the client's I/O thread
// records replies and consistency changes.
#ifndef DUCTILE_CLIENT_TABLE_REGISTRY_H_
#define DUCTILE_CLIENT_TABLE_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"
#include "util/mutex.h"
#include "util/update_rule.h"

namespace ductile {

class TableRegistry {
 public:
  // What one call needs to know of its table, read under one lock.
  struct View {
    uint32_t width = 0;  // 0: variable
    ConsistencyMode mode = ConsistencyMode::kAsync;
    int32_t staleness = 0;
    bool reject_non_finite = true;
    // The cache may answer a read at the call's clock.
    bool cache_readable = false;
    std::shared_ptr<const UpdateRuleKernel> kernel;
  };

  // Adds or replaces a table's configuration.
  void Remember(const wire::TableConfig& config) EXCLUDES(mu_);
  // kNotFound for a table this client has not created or looked up.
  Result<View> Lookup(TableId table, int64_t clock) const EXCLUDES(mu_);
  // The table's name ("table <id>" if unknown), for messages.
  std::string Name(TableId table) const EXCLUDES(mu_);
  // The table's model as a server reported it with a pull reply; ignored
  // when older (by its from_clock) than the one held, as the reply of a
  // server that had not yet heard of a committed change is.
  void SetConsistency(TableId table, const wire::ConsistencyConfig& c)
      EXCLUDES(mu_);

  // The cache gate.
  void SuspendCache(TableId table) EXCLUDES(mu_);
  void ResumeCache(TableId table, int64_t from_clock,
                   const wire::ConsistencyConfig& c) EXCLUDES(mu_);
  bool CacheSuspended(TableId table) const EXCLUDES(mu_);

  // Variable-width tables: kInvalidArgument naming the first key whose
  // known width differs from `lengths`.
  Status CheckWidths(TableId table, std::span<const Key> keys,
                     std::span<const uint32_t> lengths) const EXCLUDES(mu_);
  // Records that the servers hold keys[i] with lengths[i] floats (a push or
  // pull of them succeeded). `index` picks the keys: key index(j) for j in
  // [0, count).
  template <typename Index>
  void LearnWidths(TableId table, std::span<const Key> keys,
                   std::span<const uint32_t> lengths, size_t count, Index index)
      EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = tables_.find(table);
    if (it == tables_.end()) return;
    for (size_t j = 0; j < count; ++j) {
      const size_t i = index(j);
      it->second.widths[keys[i]] = lengths[i];
    }
  }

 private:
  struct Entry {
    wire::TableConfig config;
    std::shared_ptr<const UpdateRuleKernel> kernel;
    bool cache_suspended = false;
    std::optional<int64_t> cache_from_clock;
    std::unordered_map<Key, uint32_t> widths;  // variable-width tables
  };

  mutable Mutex mu_;
  std::map<TableId, Entry> tables_ GUARDED_BY(mu_);
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_TABLE_REGISTRY_H_
