#include "launch/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

extern char** environ;

namespace ductile::launch {

using SteadyClock = std::chrono::steady_clock;

ExecImage MakeExecImage(const std::vector<std::string>& args,
                        bool own_slurm_job,
                        const std::vector<std::string>& extra_env) {
  ExecImage image;
  // Whether `var` ("NAME=VALUE") is given a new value by `extra_env`.
  const auto replaced = [&extra_env](std::string_view var) {
    const std::string_view name = var.substr(0, var.find('=') + 1);
    for (const std::string& e : extra_env) {
      if (std::string_view(e).substr(0, e.find('=') + 1) == name) return true;
    }
    return false;
  };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view var(*e);
    if (own_slurm_job && var.substr(0, 6) == "SLURM_" &&
        var.substr(0, 11) != "SLURM_CONF=") {
      continue;
    }
    if (replaced(var)) continue;
    env.emplace_back(var);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  image.strings = args;
  image.strings.insert(image.strings.end(), env.begin(), env.end());
  for (size_t i = 0; i < image.strings.size(); ++i) {
    (i < args.size() ? image.argv : image.envp)
        .push_back(image.strings[i].data());
  }
  image.argv.push_back(nullptr);
  image.envp.push_back(nullptr);
  return image;
}

[[noreturn]] void ExecOrDie(const ExecImage& image) {
  execvpe(image.argv[0], image.argv.data(), image.envp.data());
  const char prefix[] = "ductile: cannot run ";
  ssize_t ignored = write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  ignored = write(STDERR_FILENO, image.argv[0], strlen(image.argv[0]));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  _exit(127);
}

int RunToEnd(const std::vector<std::string>& args, const sigset_t& blocked,
             std::string* output, int64_t timeout_ms) {
  const ExecImage image = MakeExecImage(args, false);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
    ExecOrDie(image);
  }
  close(pipe_fds[1]);
  const auto deadline =
      SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  char buffer[512];
  while (true) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - SteadyClock::now())
                             .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0) {
      timed_out = true;
      break;
    }
    const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // its end of the pipe closed
    output->append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  // Its output is closed; it may still run (or hang) until the deadline.
  int status = 0;
  pid_t done = 0;
  while (!timed_out && (done = waitpid(pid, &status, WNOHANG)) == 0) {
    if (SteadyClock::now() >= deadline) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timed_out) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  if (done != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace ductile::launch
