// A child process for process-level tests, with stdout and stderr on one
// pipe read line by line. Killed (and reaped) by the destructor if it has
// not exited, so a failing test leaves no process behind.
#ifndef DUCTILE_TESTS_CHILD_PROCESS_H_
#define DUCTILE_TESTS_CHILD_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ductile::testing {

// A child process with stdout and stderr on one pipe, read line by line.
// Killed (and reaped) by the destructor if it has not exited.
class ChildProcess {
 public:
  // `open_files`: if not 0, the child's soft and hard limits of open files
  // (set before it starts its program).
  explicit ChildProcess(const std::vector<std::string>& args,
                        rlim_t open_files = 0) {
    // Everything the child needs is built before fork(): between fork and
    // exec it only calls async-signal-safe functions.
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2 failed";
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      if (open_files != 0) {
        const rlimit limit{open_files, open_files};
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(126);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    fcntl(fd_, F_SETFL, O_NONBLOCK);
    EXPECT_GT(pid_, 0) << "fork failed";
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

  // Reads whatever output is waiting (for at most `timeout_ms`).
  void Pump(int timeout_ms = 0) {
    if (fd_ < 0) return;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof(buf))) > 0) output_.append(buf, n);
  }

  bool HasLine(const std::string& line) const {
    return ("\n" + output_).find("\n" + line + "\n") != std::string::npos;
  }
  // The value of "<prefix> <value>" on the latest such line, or -1.
  int64_t Latest(const std::string& prefix) const {
    int64_t value = -1;
    std::istringstream in(output_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(prefix + " ", 0) == 0) {
        value = std::stoll(line.substr(prefix.size() + 1));
      }
    }
    return value;
  }

  // Waits until the process has stopped on a signal.
  bool WaitStopped(int64_t limit_ms) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      Pump(5);
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG | WUNTRACED);
      if (r == pid_ && WIFSTOPPED(status)) return true;
      if (r == pid_) {  // it exited instead
        exited_ = true;
        exit_status_ = status;
        return false;
      }
    }
    return false;
  }

  // Whether it is still running (not exited or killed).
  bool Running() {
    Pump(0);
    if (exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = status;
    }
    return !exited_;
  }

  // Waits for exit; returns the exit code, or -1 (killed, or out of time).
  int WaitExit(int64_t limit_ms) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
    while (!exited_) {
      Pump(5);
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        exit_status_ = status;
      } else if (std::chrono::steady_clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        exited_ = true;
        exit_status_ = -1;
      }
    }
    Pump(0);
    return exit_status_ >= 0 && WIFEXITED(exit_status_)
               ? WEXITSTATUS(exit_status_)
               : -1;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  int exit_status_ = -1;
  std::string output_;
};

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_CHILD_PROCESS_H_
