// Tables and tensors as Python objects, and table options from keyword
// arguments.
//
// Options are given as keywords named after TableOptions' fields
// (include/ductile/table.h), with strings for its enums and dicts for its
// structs:
//
//   client.create_table("w", width=4, rule="adam", learning_rate=1e-3,
//                       consistency="ssp:2",
//                       init={"kind": "normal", "stddev": 0.01},
//                       lr_schedule={"warmup_clocks": 100,
//                                    "decay": "cosine",
//                                    "total_clocks": 10000})
#ifndef DUCTILE_PYTHON_PY_TABLES_H_
#define DUCTILE_PYTHON_PY_TABLES_H_

#include <pybind11/pybind11.h>

#include <string>

#include "ductile/client.h"
#include "ductile/table.h"

namespace ductile::python {

// ductile.Table is a TableInfo; ductile.Tensor is this.
struct PyTensor {
  Tensor tensor;
  std::string name;
};

// Options named `name` from keywords (a TypeError names an unknown one, a
// ValueError a bad value). `what` names the call in errors.
TableOptions TableOptionsFromKwargs(const std::string& name,
                                    const pybind11::kwargs& kwargs);
// The same keywords as a dict (Table.options).
pybind11::dict TableOptionsToDict(const TableOptions& options);

// "async", "ssp:K" (or "ssp(K)"), "bsp" (= "bsp(mean)") or "bsp(sum)".
Consistency ParseConsistency(pybind11::handle spec);

// Registers Table, Tensor, Stats, Batch, BatchKind and Recovery.
void BindTableTypes(pybind11::module_& m);

}  // namespace ductile::python

#endif  // DUCTILE_PYTHON_PY_TABLES_H_
