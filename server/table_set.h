// The tables one server holds, by id: created with the server's custom
// rules, applied to by pushes, read by pulls, written by checkpoints and
// refilled by restores.
//
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_TABLE_SET_H_
#define DUCTILE_SERVER_TABLE_SET_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"
#include "server/parameter_table.h"

namespace ductile {

class TableSet {
 public:
  // `custom_rules` (the server's, ServerOptions::custom_rules) must outlive
  // the set; `server_id` names the server in messages. `runner`, if not
  // null, applies large pushes in pieces (ParameterTable::set_runner) and
  // must outlive the set.
  TableSet(const std::map<std::string, CustomRule>* custom_rules,
           int32_t server_id, ParallelRunner* runner = nullptr)
      : custom_rules_(custom_rules), server_id_(server_id), runner_(runner) {}

  void set_server_id(int32_t id) { server_id_ = id; }
  // Tables wider than this many floats per key are refused (the server's
  // --max_key_floats).
  void set_max_key_floats(uint64_t floats) { max_key_floats_ = floats; }

  // Creates the table of `config`; OK if an equal one exists.
  // kAlreadyExists if one with the id differs; kFailedPrecondition if it
  // names a custom rule this server lacks; kInvalidArgument if invalid or
  // wider than max_key_floats.
  Status Create(const wire::TableConfig& config);
  // Null if there is no such table.
  ParameterTable* Find(TableId id);
  bool Has(TableId id) const { return tables_.count(id) > 0; }

  // Keys held, over every table.
  uint64_t keys() const;
  // Floats held (values and optimizer state), over every table.
  uint64_t stored_floats() const;
  // Removes every key of every table (the tables stay).
  void ClearKeys();

  // ---- Rows (RowPolicy), for every table and those created later.
  // The server clock is `clock` (ParameterTable::SetClock).
  void SetClock(int64_t clock);
  // The server clock is `clock` after a rollback or a rejoin
  // (ParameterTable::RestartClock).
  void RestartClock(int64_t clock);
  // The routing's number of slots (ParameterTable::set_num_slots).
  void set_num_slots(int32_t num_slots);
  // ParameterTable::HoldEvictions.
  void HoldEvictions(bool held);
  // ParameterTable::set_keeps_evicted: true with a checkpoint store.
  void set_keeps_evicted(bool keeps);
  // ParameterTable::set_replicating: true while a slot has a backup.
  void set_replicating(bool on);
  // Rows admitted and evicted, over every table.
  ParameterTable::RowCounts row_counts() const;

  // Calls f(id, table) for every table, ascending by id.
  template <typename F>
  void ForEach(F&& f) {
    for (auto& [id, table] : tables_) f(id, *table);
  }

 private:
  const std::map<std::string, CustomRule>* custom_rules_;
  int32_t server_id_;
  ParallelRunner* const runner_;
  uint64_t max_key_floats_ = uint64_t{1} << 28;
  int64_t clock_ = 0;
  int32_t num_slots_ = 1;
  bool evictions_held_ = false;
  bool keeps_evicted_ = false;
  bool replicating_ = false;
  std::map<TableId, std::unique_ptr<ParameterTable>> tables_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_TABLE_SET_H_
