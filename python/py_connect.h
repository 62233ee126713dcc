// ductile.connect(): a Client from explicit options.
#ifndef DUCTILE_PYTHON_PY_CONNECT_H_
#define DUCTILE_PYTHON_PY_CONNECT_H_

#include <pybind11/pybind11.h>

namespace ductile::python {

// Registers connect().
void BindConnect(pybind11::module_& m);

}  // namespace ductile::python

#endif  // DUCTILE_PYTHON_PY_CONNECT_H_
