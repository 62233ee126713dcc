#include "launch/stderr_tail.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace ductile::launch {

Result<std::unique_ptr<StderrTail>> StderrTail::Open(int copy_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return UnavailableError(std::string("cannot make a pipe: ") +
                            std::strerror(errno));
  }
  return std::unique_ptr<StderrTail>(new StderrTail(fds[0], fds[1], copy_fd));
}

StderrTail::StderrTail(int read_fd, int write_fd, int copy_fd)
    : read_fd_(read_fd), write_fd_(write_fd), copy_fd_(copy_fd) {
  reader_ = std::thread([this] { Read(); });
}

StderrTail::~StderrTail() {
  stop_ = true;
  reader_.join();
  CloseWriteEnd();
  close(read_fd_);
}

void StderrTail::CloseWriteEnd() {
  if (write_fd_ >= 0) close(write_fd_);
  write_fd_ = -1;
}

void StderrTail::Read() {
  char buffer[4096];
  while (!stop_) {
    pollfd p{read_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, 50);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(read_fd_, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // every write end is closed
    if (copy_fd_ >= 0) {
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = write(copy_fd_, buffer + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += w;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    tail_.append(buffer, static_cast<size_t>(n));
    if (tail_.size() > kMaxTailBytes) {
      tail_.erase(0, tail_.size() - kMaxTailBytes);
      // Whole lines only, unless one line is all there is.
      const size_t newline = tail_.find('\n');
      if (newline != std::string::npos && newline + 1 < tail_.size()) {
        tail_.erase(0, newline + 1);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  ended_cv_.notify_all();
}

std::string StderrTail::Tail(int wait_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  ended_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                     [this] { return ended_; });
  return tail_;
}

}  // namespace ductile::launch
