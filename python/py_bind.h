// The pieces of the _ductile module's definition, one per file.
#ifndef DUCTILE_PYTHON_PY_BIND_H_
#define DUCTILE_PYTHON_PY_BIND_H_

#include <pybind11/pybind11.h>

#include <memory>

#include "ductile/client.h"
#include "python/py_client.h"

namespace ductile::python {

// ductile.Client's and ductile.Handle's data methods (py_bind_client.cc),
// and the client's other methods: clocks, barriers, membership, the data
// plan, recovery and statistics (py_bind_control.cc).
void BindClient(pybind11::module_& m);
void BindClientControl(pybind11::class_<PyClient>& c);

// Runs `f(client)` without the GIL and returns what it returns; the
// client stays alive meanwhile whatever other threads do. The reference is
// let go before the GIL is taken back: when it is the last one (close()
// was called meanwhile), destroying the client joins its I/O thread, which
// must not happen with the GIL held.
template <typename F>
auto Unlocked(const PyClient& c, F f) {
  std::shared_ptr<Client> client = c.Get();
  pybind11::gil_scoped_release release;
  struct Drop {
    std::shared_ptr<Client>& client;
    ~Drop() { client.reset(); }
  } drop{client};
  return f(*client);
}

}  // namespace ductile::python

#endif  // DUCTILE_PYTHON_PY_BIND_H_
