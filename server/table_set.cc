#include "server/table_set.h"

#include "proto/table_config.h"
#include "util/malloc_policy.h"

namespace ductile {

Status TableSet::Create(const wire::TableConfig& config) {
  auto it = tables_.find(config.id());
  if (it != tables_.end()) {
    if (SameTable(ToWire(it->second->options(), config.id()), config)) {
      return Status::Ok();
    }
    return AlreadyExistsError("table id " + std::to_string(config.id()) +
                              " exists with other options");
  }
  TableOptions options = FromWire(config);
  DUCTILE_RETURN_IF_ERROR(ValidateTableOptions(options));
  if (options.value_width > max_key_floats_) {
    return InvalidArgumentError(
        "table '" + options.name + "' has " +
        std::to_string(options.value_width) + " floats per key, over server " +
        std::to_string(server_id_) + "'s limit of " +
        std::to_string(max_key_floats_) + " (--max_key_floats)");
  }
  const CustomRule* custom = nullptr;
  if (options.rule == UpdateRule::kCustom) {
    auto rule = custom_rules_->find(options.custom_rule);
    if (rule == custom_rules_->end() || !rule->second.apply) {
      return FailedPreconditionError("custom rule '" + options.custom_rule +
                                     "' is not registered on server " +
                                     std::to_string(server_id_));
    }
    if (rule->second.state_floats_per_value > 4) {
      return InvalidArgumentError("custom rule state_floats_per_value > 4");
    }
    custom = &rule->second;
  }
  auto table = std::make_unique<ParameterTable>(config.id(), options, custom);
  table->set_runner(runner_);
  table->set_num_slots(num_slots_);
  table->RestartClock(clock_);
  table->HoldEvictions(evictions_held_);
  table->set_keeps_evicted(keeps_evicted_);
  table->set_replicating(replicating_);
  tables_[config.id()] = std::move(table);
  return Status::Ok();
}

ParameterTable* TableSet::Find(TableId id) {
  auto it = tables_.find(id);
  return it == tables_.end() ? nullptr : it->second.get();
}

uint64_t TableSet::keys() const {
  uint64_t n = 0;
  for (const auto& [id, table] : tables_) n += table->size();
  return n;
}

uint64_t TableSet::stored_floats() const {
  uint64_t n = 0;
  for (const auto& [id, table] : tables_) n += table->stored_floats();
  return n;
}

void TableSet::SetClock(int64_t clock) {
  clock_ = clock;
  for (auto& [id, table] : tables_) table->SetClock(clock);
}

void TableSet::RestartClock(int64_t clock) {
  clock_ = clock;
  for (auto& [id, table] : tables_) table->RestartClock(clock);
}

void TableSet::set_num_slots(int32_t num_slots) {
  num_slots_ = num_slots;
  for (auto& [id, table] : tables_) table->set_num_slots(num_slots);
}

void TableSet::HoldEvictions(bool held) {
  evictions_held_ = held;
  for (auto& [id, table] : tables_) table->HoldEvictions(held);
}

void TableSet::set_keeps_evicted(bool keeps) {
  keeps_evicted_ = keeps;
  for (auto& [id, table] : tables_) table->set_keeps_evicted(keeps);
}

void TableSet::set_replicating(bool on) {
  if (on == replicating_) return;
  replicating_ = on;
  for (auto& [id, table] : tables_) table->set_replicating(on);
}

ParameterTable::RowCounts TableSet::row_counts() const {
  ParameterTable::RowCounts sum;
  for (const auto& [id, table] : tables_) {
    const ParameterTable::RowCounts& c = table->row_counts();
    sum.admitted += c.admitted;
    sum.dropped_pushes += c.dropped_pushes;
    sum.evicted_idle += c.evicted_idle;
    sum.evicted_budget += c.evicted_budget;
  }
  return sum;
}

void TableSet::ClearKeys() {
  for (auto& [id, table] : tables_) table->Clear();
  ReleaseFreedMemory();
}

}  // namespace ductile
