// ductile._ductile: the C++ client (include/ductile/client.h) for Python.
// The package ductile (ductile/__init__.py) re-exports it with the
// exception classes and connect_from_env().
#include <pybind11/pybind11.h>

#include "python/py_bind.h"
#include "python/py_connect.h"
#include "python/py_tables.h"

PYBIND11_MODULE(_ductile, m) {
  m.doc() =
      "ductile's client library, bound for Python (use the ductile "
      "package).";
  ductile::python::BindTableTypes(m);
  ductile::python::BindClient(m);
  ductile::python::BindConnect(m);
}
