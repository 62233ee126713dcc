// ductile.Client and ductile.Handle: a Client and its asynchronous calls
// as Python objects.
//
// Lifetimes. An asynchronous call borrows the caller's arrays until it is
// done (include/ductile/client.h). Its Handle holds references to them (and
// to the client), so a caller may drop its own; a Handle dropped before its
// call is done hands them to its client, which lets them go once the call
// is done (checked at each new call) or the client is closed.
//
// Processes. A client belongs to the process that connected it. In a child
// forked from it (a DataLoader worker, say) the client's I/O thread does
// not exist and its sockets are the parent's: every call there raises
// ductile.FailedPrecondition, and neither the client nor its handles are
// torn down there (no ZeroMQ call runs in the child).
//
// Threads. All members are read and written with the GIL held. Blocking
// calls release it while they wait; close() from another thread lets a
// control call (a barrier, say) finish first (the client is destroyed by
// whichever of them lets it go last), while a push or pull waiting then
// fails with Cancelled (its wait touches only its operation and the
// statistics that operation keeps alive).
#ifndef DUCTILE_PYTHON_PY_CLIENT_H_
#define DUCTILE_PYTHON_PY_CLIENT_H_

#include <pybind11/pybind11.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "ductile/client.h"

namespace ductile::python {

// What a data call does.
enum class DataCall { kPush, kPull, kPushPull };

// A data call submitted: its handle, the references that keep what it
// borrows alive, and what wait() returns (the output array, or None).
struct Submitted {
  Handle handle;
  pybind11::object keepalive;
  pybind11::object result;
};

class PyClient {
 public:
  PyClient(std::unique_ptr<Client> client, std::string address);
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // The client for one call. Raises FailedPrecondition when it is closed
  // or when called in a process forked from the one that connected it.
  std::shared_ptr<Client> Get() const;
  // Destroys the client (once no call on another thread uses it): pending
  // calls fail with Cancelled.
  void Close();
  bool closed() const { return client_ == nullptr; }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // A data call on `table` (a ductile.Table) or `tensor` (a ductile.Tensor;
  // then keys and lengths are its own). Refuses bad arrays before
  // anything is sent; errors the client finds at once are raised by the
  // caller from the handle.
  Submitted Submit(DataCall call, pybind11::handle target,
                   pybind11::handle keys, pybind11::handle values,
                   pybind11::handle out, pybind11::handle lengths);

  // A call on rows by id (kPull or kPush) of `table` (a ductile.Table):
  // `ids` of any shape; a pull's result has shape ids.shape + (width,).
  Submitted SubmitRows(DataCall call, pybind11::handle table,
                       pybind11::handle ids, pybind11::handle grads,
                       pybind11::handle out);

  // A handle dropped before its call was done leaves its references here.
  void Adopt(Handle handle, pybind11::object keepalive);

 private:
  // Lets go of the references of adopted calls that are done.
  void Sweep();

  struct Adopted {
    Handle handle;
    pybind11::object keepalive;
  };

  const pid_t pid_;
  const std::string address_;
  std::shared_ptr<Client> client_;  // null once closed
  std::vector<Adopted> adopted_;
};

// ductile.Handle.
class PyHandle {
 public:
  PyHandle(Submitted submitted, pybind11::object client, DataCall call);
  ~PyHandle();
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;

  // Waits (without the GIL) and returns the result, or raises the call's
  // error.
  pybind11::object Wait();
  bool done() const;
  std::string Repr() const;

 private:
  void CheckProcess() const;

  Submitted submitted_;
  pybind11::object client_;  // the PyClient
  const DataCall call_;
  const pid_t pid_;
};

// Raises the handle's error now if the call already failed (an error
// found before anything was sent), so an asynchronous call reports bad
// arguments where it is made.
void RaiseIfFailedAtOnce(const Handle& handle);

}  // namespace ductile::python

#endif  // DUCTILE_PYTHON_PY_CLIENT_H_
