#include "python/py_connect.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "ductile/client.h"
#include "ductile/security.h"
#include "python/py_client.h"
#include "python/py_status.h"

namespace py = pybind11;

namespace ductile::python {
namespace {

// A str or os.PathLike as a string; None as "".
std::string PathArg(py::handle path, const char* what) {
  if (path.is_none()) return "";
  try {
    return py::str(py::module_::import("os").attr("fspath")(path));
  } catch (const py::error_already_set&) {
    ThrowTypeError(std::string(what) + " must be a path (str or os.PathLike)");
  }
}

// The keys a worker proves, as `ductile worker --keys=DIR` finds them
// (cli/options_from_flags.cc): the cluster's (or the admin's), and the
// member key given or, for a worker id N, DIR/members/worker-N.key.
Result<Security> SecurityFor(const std::string& keys,
                             const std::string& member_key, bool as_admin,
                             bool require_member_keys, int32_t worker_id) {
  if (keys.empty()) {
    if (!member_key.empty()) {
      return InvalidArgumentError(
          "member_key goes with the cluster's keys (keys=DIR)");
    }
    return Security();
  }
  DUCTILE_ASSIGN_OR_RETURN(Security security, LoadClusterKeys(keys, as_admin));
  security.require_member_keys = require_member_keys;
  std::string key_file = member_key;
  if (key_file.empty() && !security.admin()) {
    const std::string own =
        keys + "/members/worker-" + std::to_string(worker_id) + ".key";
    if (worker_id >= 0 && access(own.c_str(), F_OK) == 0) {
      key_file = own;
    } else if (require_member_keys) {
      return FailedPreconditionError(
          "with keys and require_member_keys, a worker proves a key of its "
          "own: give member_key=FILE, or worker_id=N with " +
          keys + "/members/worker-N.key there (`ductile keygen --out=" + keys +
          " --member=worker-N`), or as_admin=True with admin.key");
    }
  }
  if (!key_file.empty()) {
    DUCTILE_RETURN_IF_ERROR(LoadMemberKey(key_file, &security));
  }
  return security;
}

std::unique_ptr<PyClient> Connect(const std::string& address,
                                  int64_t connect_timeout_ms,
                                  int64_t request_timeout_ms, bool worker,
                                  int32_t worker_id, py::handle keys,
                                  py::handle member_key, bool as_admin,
                                  bool require_member_keys, bool prefer_ipc,
                                  int io_threads, uint64_t shm_reply_bytes,
                                  uint64_t max_message_bytes, bool enable_cache,
                                  int64_t heartbeat_interval_ms) {
  ClientOptions options;
  options.coordinator_address = address;
  options.connect_timeout_ms = connect_timeout_ms;
  options.request_timeout_ms = request_timeout_ms;
  options.register_as_worker = worker;
  options.requested_worker_id = worker_id;
  options.prefer_ipc = prefer_ipc;
  options.io_threads = io_threads;
  options.shm_reply_bytes = shm_reply_bytes;
  options.max_message_bytes = max_message_bytes;
  options.enable_cache = enable_cache;
  options.heartbeat_interval_ms = heartbeat_interval_ms;
  options.security = ValueOrThrow(
      SecurityFor(PathArg(keys, "keys"), PathArg(member_key, "member_key"),
                  as_admin, require_member_keys, worker_id));
  Result<std::unique_ptr<Client>> client = InvalidArgumentError("unset");
  {
    py::gil_scoped_release release;
    client = Client::Connect(options);
  }
  return std::make_unique<PyClient>(ValueOrThrow(std::move(client)), address);
}

}  // namespace

void BindConnect(py::module_& m) {
  using py::arg;
  m.def("connect", &Connect, arg("address") = "tcp://127.0.0.1:7000",
        py::kw_only(), arg("connect_timeout_ms") = kDefaultTimeoutMs,
        arg("request_timeout_ms") = kDefaultTimeoutMs, arg("worker") = true,
        arg("worker_id") = -1, arg("keys") = py::none(),
        arg("member_key") = py::none(), arg("as_admin") = false,
        arg("require_member_keys") = true, arg("prefer_ipc") = true,
        arg("io_threads") = 0,
        arg("shm_reply_bytes") = ClientOptions().shm_reply_bytes,
        arg("max_message_bytes") = ClientOptions().max_message_bytes,
        arg("enable_cache") = false, arg("heartbeat_interval_ms") = 1000,
        R"doc(
Connects to the coordinator at `address` and returns a Client, once the
coordinator has admitted it and every server has registered.

    client = ductile.connect("tcp://127.0.0.1:7000", connect_timeout_ms=10000)

Options (those of ductile::ClientOptions, include/ductile/client.h):
  connect_timeout_ms   how long to wait for the coordinator and a complete
                       routing table (DeadlineExceeded after it)
  request_timeout_ms   how long one call waits for its replies
  worker               register as a worker (counts in barriers, clocks and
                       the data plan); False for an observer
  worker_id            ask for this worker id (-1: the coordinator chooses)
  keys                 directory of the cluster's keys (`ductile keygen`);
                       None: plain mode, loopback only
  member_key           this worker's own key file (default, with keys and a
                       worker_id N: keys/members/worker-N.key if there)
  as_admin             prove the admin key (keys/admin.key)
  require_member_keys  with keys, refuse to connect without a key of one's
                       own or the admin's (as `ductile worker` does)
  prefer_ipc, io_threads, shm_reply_bytes, max_message_bytes, enable_cache,
  heartbeat_interval_ms: as in ClientOptions.

The blocking wait releases the GIL. ductile.connect_from_env() reads these
from the environment a launcher sets.)doc");
}

}  // namespace ductile::python
