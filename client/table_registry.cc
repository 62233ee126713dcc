#include "client/table_registry.h"

#include "proto/table_config.h"

namespace ductile {

void TableRegistry::Remember(const wire::TableConfig& config) {
  MutexLock lock(&mu_);
  Entry& e = tables_[config.id()];
  e.config = config;
  // Custom rules run on the servers only; the cache drops what it cannot
  // compute (UpdateRuleKernel::stateless()).
  e.kernel = std::make_shared<const UpdateRuleKernel>(FromWire(config),
                                                      /*custom=*/nullptr);
}

Result<TableRegistry::View> TableRegistry::Lookup(TableId table,
                                                  int64_t clock) const {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return NotFoundError("unknown table id " + std::to_string(table) +
                         " (create it with CreateTable or look it up with "
                         "GetTable first)");
  }
  const Entry& e = it->second;
  View view;
  view.width = e.config.value_width();
  view.mode = static_cast<ConsistencyMode>(e.config.consistency().mode());
  view.staleness = e.config.consistency().staleness();
  view.reject_non_finite = e.config.reject_non_finite();
  view.cache_readable = !e.cache_suspended &&
                        (!e.cache_from_clock || clock >= *e.cache_from_clock);
  view.kernel = e.kernel;
  return view;
}

std::string TableRegistry::Name(TableId table) const {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  return it == tables_.end() ? "table " + std::to_string(table)
                             : "table '" + it->second.config.name() + "'";
}

void TableRegistry::SetConsistency(TableId table,
                                   const wire::ConsistencyConfig& c) {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return;
  wire::ConsistencyConfig& held = *it->second.config.mutable_consistency();
  if (c.from_clock() >= held.from_clock()) held = c;
}

void TableRegistry::SuspendCache(TableId table) {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it != tables_.end()) it->second.cache_suspended = true;
}

void TableRegistry::ResumeCache(TableId table, int64_t from_clock,
                                const wire::ConsistencyConfig& c) {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return;
  it->second.cache_suspended = false;
  it->second.cache_from_clock = from_clock;
  *it->second.config.mutable_consistency() = c;
}

bool TableRegistry::CacheSuspended(TableId table) const {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  return it != tables_.end() && it->second.cache_suspended;
}

Status TableRegistry::CheckWidths(TableId table, std::span<const Key> keys,
                                  std::span<const uint32_t> lengths) const {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end() || it->second.widths.empty()) return Status::Ok();
  const auto& widths = it->second.widths;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto w = widths.find(keys[i]);
    if (w != widths.end() && w->second != lengths[i]) {
      return InvalidArgumentError("key " + std::to_string(keys[i]) +
                                  " of table '" + it->second.config.name() +
                                  "' has width " + std::to_string(w->second) +
                                  ", request says " +
                                  std::to_string(lengths[i]) +
                                  "; nothing was sent, table left "
                                  "unchanged");
    }
  }
  return Status::Ok();
}

}  // namespace ductile
