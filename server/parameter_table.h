// One table's keys on one server: values, optimizer state, update rule.
//
// Push is all-or-nothing: CheckPush validates every key of a request before
// ApplyPush changes anything, so a refused request leaves the table as it
// was. Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_PARAMETER_TABLE_H_
#define DUCTILE_SERVER_PARAMETER_TABLE_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/codec.h"
#include "server/update_rule.h"

namespace ductile {

class ParameterTable {
 public:
  ParameterTable(TableId id, const TableOptions& options,
                 const CustomRule* custom);

  TableId id() const { return id_; }
  const TableOptions& options() const { return options_; }

  // Refuses non-finite values (when the table asks for it) and widths that
  // differ from an existing key's (variable-width tables).
  Status CheckPush(const DataFrames& request) const;
  // Applies a checked push.
  void ApplyPush(const DataFrames& request);
  // Applies one vector to one key (a BSP clock's combined pushes).
  void ApplyOne(Key key, std::span<const float> update);
  // Checks a pull's widths against stored keys (variable-width tables).
  Status CheckPull(const DataFrames& request) const;
  // Appends the requested keys' values to `out` (creating missing keys with
  // the initializer).
  void Pull(const DataFrames& request, std::vector<float>* out);

  // Reads one key (tests, debugging); false if absent.
  bool Get(Key key, std::vector<float>* value) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<float> value;
    std::vector<float> state;
    int64_t steps = 0;
  };
  Entry& FindOrCreate(Key key, uint32_t width);
  Status CheckWidths(const DataFrames& request) const;

  const TableId id_;
  const TableOptions options_;
  const UpdateRuleKernel kernel_;
  std::unordered_map<Key, Entry> entries_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_PARAMETER_TABLE_H_
