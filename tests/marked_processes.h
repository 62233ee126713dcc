// The processes of one test's cluster, found by a marker that every one of
// them carries in its command line (a flag unique to the test): to check
// that a test leaves none behind.
#ifndef DUCTILE_TESTS_MARKED_PROCESSES_H_
#define DUCTILE_TESTS_MARKED_PROCESSES_H_

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace ductile::testing {

// Processes (other than this one) whose command line contains `marker`;
// zombies still being reaped by their parent are left out.
inline std::vector<pid_t> ProcessesWith(const std::string& marker) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    if (cmd.find(marker) == std::string::npos) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string s;
    std::getline(stat, s);
    const auto close_paren = s.rfind(')');
    if (close_paren != std::string::npos && close_paren + 2 < s.size() &&
        s[close_paren + 2] == 'Z') {
      continue;
    }
    found.push_back(pid);
  }
  closedir(proc);
  return found;
}

// Waits (up to 5 s) until no process carries `marker`.
inline bool NoProcessesLeft(const std::string& marker) {
  for (int i = 0; i < 100; ++i) {
    if (ProcessesWith(marker).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_MARKED_PROCESSES_H_
