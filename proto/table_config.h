// TableOptions <-> wire::TableConfig, and validation of a table's options.
#ifndef DUCTILE_PROTO_TABLE_CONFIG_H_
#define DUCTILE_PROTO_TABLE_CONFIG_H_

#include <string>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"

namespace ductile {

wire::TableConfig ToWire(const TableOptions& options, TableId id);
wire::ConsistencyConfig ToWire(const Consistency& consistency);
Consistency FromWire(const wire::ConsistencyConfig& config);
Status ValidateConsistency(const Consistency& consistency);
TableOptions FromWire(const wire::TableConfig& config);

// Checks names, widths, rule and hyper-parameters: a clear InvalidArgument
// for anything a server could not honour.
Status ValidateTableOptions(const TableOptions& options);
// The row policy's part of it (RowPolicy's ranges); the message names the
// field as `rows.<field>`.
Status ValidateRowPolicy(const RowPolicy& rows);

// True when two configs describe the same table (ids aside).
bool SameTable(const wire::TableConfig& a, const wire::TableConfig& b);

}  // namespace ductile

#endif  // DUCTILE_PROTO_TABLE_CONFIG_H_
