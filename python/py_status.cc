#include "python/py_status.h"

#include <string>

namespace py = pybind11;

namespace ductile::python {

void ThrowStatus(const Status& status) {
  // The classes live in Python (errors.py) so that they can also derive
  // from the built-in exceptions (InvalidArgument is a ValueError).
  py::object errors = py::module_::import("ductile.errors");
  py::object cls =
      errors.attr("class_for_code")(static_cast<int>(status.code()));
  PyErr_SetString(cls.ptr(), status.message().c_str());
  throw py::error_already_set();
}

void ThrowTypeError(const std::string& message) {
  PyErr_SetString(PyExc_TypeError, message.c_str());
  throw py::error_already_set();
}

void ThrowValueError(const std::string& message) {
  PyErr_SetString(PyExc_ValueError, message.c_str());
  throw py::error_already_set();
}

}  // namespace ductile::python
