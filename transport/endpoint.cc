#include "transport/endpoint.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>

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

std::string ChooseAddress(const std::string& tcp_address,
                          const std::string& ipc_address,
                          const std::string& host_id, bool prefer_ipc) {
  if (prefer_ipc && !ipc_address.empty() && host_id == HostId()) {
    return ipc_address;
  }
  return tcp_address;
}

}  // namespace ductile
