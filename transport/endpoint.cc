#include "transport/endpoint.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace ductile {

const std::string& HostId() {
  static const std::string id = [] {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    std::string boot;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::getline(in, boot);
    // ipc sockets are files: only peers that see the same files (the same
    // mount namespace: not two containers of one kernel and host name)
    // can reach each other's.
    char mounts[128] = {};
    const ssize_t n = readlink("/proc/self/ns/mnt", mounts, sizeof(mounts) - 1);
    if (n > 0) mounts[n] = '\0';
    return std::string(name) + "/" + boot + "/" + mounts;
  }();
  return id;
}

std::string MakeIpcAddress(const std::string& dir, const std::string& role) {
  static std::atomic<int> counter{0};
  return "ipc://" + dir + "/ductile-" + role + "-" + std::to_string(getpid()) +
         "-" + std::to_string(counter.fetch_add(1)) + ".sock";
}

void RemoveIpcFile(const std::string& address) {
  const std::string prefix = "ipc://";
  if (address.rfind(prefix, 0) == 0) {
    std::remove(address.substr(prefix.size()).c_str());
  }
}

namespace {

// The pid in "ductile-<role>-<pid>-<n>.sock", or -1.
pid_t PidOfIpcFile(const std::string& name) {
  const std::string prefix = "ductile-", suffix = ".sock";
  if (name.size() <= prefix.size() + suffix.size() ||
      name.rfind(prefix, 0) != 0 || !name.ends_with(suffix)) {
    return -1;
  }
  const std::string stem = name.substr(0, name.size() - suffix.size());
  const size_t last = stem.rfind('-');
  if (last == std::string::npos || last == 0) return -1;
  const size_t before = stem.rfind('-', last - 1);
  if (before == std::string::npos || before < prefix.size() - 1) return -1;
  const std::string digits = stem.substr(before + 1, last - before - 1);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return static_cast<pid_t>(std::stol(digits));
}

// Whether something accepts connections on the unix socket at `path`.
bool Listening(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return true;  // cannot tell
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  const bool connected =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return connected;
}

}  // namespace

int RemoveStaleIpcFiles(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = PidOfIpcFile(name);
    if (pid <= 0 || pid == getpid()) continue;
    std::error_code type_ec;
    if (!it->is_socket(type_ec)) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // running
    // (A process of another pid namespace sharing the directory may still
    // listen on it.)
    if (Listening(it->path().string())) continue;
    std::error_code rm_ec;
    if (std::filesystem::remove(it->path(), rm_ec)) ++removed;
  }
  return removed;
}

Status CheckTcpPort(const std::string& address) {
  if (!address.starts_with("tcp://")) return Status::Ok();
  const size_t colon = address.rfind(':');
  const std::string port =
      colon == std::string::npos || colon < 6 ? "" : address.substr(colon + 1);
  if (port == "*") return Status::Ok();
  const bool digits = !port.empty() && port.size() <= 5 &&
                      port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(port) > 65535) {
    return InvalidArgumentError("address '" + address +
                                "' needs a port in [0, 65535] or '*' after "
                                "its last ':'");
  }
  return Status::Ok();
}

bool IsLocalOnlyAddress(const std::string& address) {
  if (address.starts_with("ipc://") || address.starts_with("inproc://")) {
    return true;
  }
  if (!address.starts_with("tcp://")) return false;
  const std::string rest = address.substr(6);
  const size_t colon = rest.rfind(':');
  const std::string host =
      colon == std::string::npos ? rest : rest.substr(0, colon);
  const bool dotted_127 =
      host.starts_with("127.") &&
      host.find_first_not_of("0123456789.") == std::string::npos;
  return dotted_127 || host == "localhost" || host == "[::1]";
}

int32_t IpcPeerPid(std::string_view peer_address) {
  // libzmq writes a Unix-domain peer as "localhost" and ":UID:GID:PID";
  // a tcp:// peer's address is numeric, never "localhost".
  constexpr std::string_view kUnixPeer = "localhost:";
  if (!peer_address.starts_with(kUnixPeer)) return 0;
  std::string_view rest = peer_address.substr(kUnixPeer.size());
  int64_t fields[3] = {};
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? rest.find(':') : rest.size();
    if (end == std::string_view::npos || end == 0 || end > 10) return 0;
    for (char c : rest.substr(0, end)) {
      if (c < '0' || c > '9') return 0;
      fields[i] = fields[i] * 10 + (c - '0');
    }
    rest.remove_prefix(i < 2 ? end + 1 : end);
  }
  const int64_t pid = fields[2];
  return pid > 0 && pid <= INT32_MAX ? static_cast<int32_t>(pid) : 0;
}

std::string ChooseAddress(const std::string& tcp_address,
                          const std::string& ipc_address,
                          const std::string& host_id, bool prefer_ipc) {
  if (prefer_ipc && !ipc_address.empty() && host_id == HostId()) {
    return ipc_address;
  }
  return tcp_address;
}

std::string NewMemberIdentity(const std::string& role) {
  std::random_device random;
  char hex[33] = {};
  for (int i = 0; i < 4; ++i) {
    std::snprintf(hex + 8 * i, 9, "%08x", static_cast<unsigned>(random()));
  }
  return role + "-" + std::to_string(getpid()) + "-" + hex;
}

}  // namespace ductile
