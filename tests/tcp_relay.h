// A loopback TCP relay for tests: it forwards every connection it accepts
// to a target port, and can cut them all at once, as a broken network
// would, so that peers reconnect through it.
#ifndef DUCTILE_TESTS_TCP_RELAY_H_
#define DUCTILE_TESTS_TCP_RELAY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ductile::testing {

class TcpRelay {
 public:
  // Forwards to 127.0.0.1:`target_port`.
  explicit TcpRelay(int target_port) : target_port_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
              0)
        << std::strerror(errno);
    EXPECT_EQ(listen(listener_, 16), 0) << std::strerror(errno);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(pipe(wake_), 0);
    thread_ = std::thread([this] { Run(); });
  }

  ~TcpRelay() {
    stop_ = true;
    Wake();
    thread_.join();
    for (auto [a, b] : pairs_) {
      close(a);
      close(b);
    }
    close(listener_);
    close(wake_[0]);
    close(wake_[1]);
  }

  std::string address() const {
    return "tcp://127.0.0.1:" + std::to_string(port_);
  }

  // Closes every forwarded connection (both sides); later ones are
  // forwarded as before.
  void CutAll() {
    cut_ = true;
    Wake();
    while (cut_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // Connections accepted so far.
  int accepted() const { return accepted_; }

 private:
  void Wake() {
    const char c = 0;
    (void)!write(wake_[1], &c, 1);
  }

  void Run() {
    std::vector<pollfd> fds;
    while (!stop_) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listener_, POLLIN, 0});
      for (auto [a, b] : pairs_) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 1000) < 0) continue;
      if (fds[0].revents != 0) {
        char buf[64];
        (void)!read(wake_[0], buf, sizeof(buf));
      }
      if (cut_) {
        for (auto [a, b] : pairs_) {
          close(a);
          close(b);
        }
        pairs_.clear();
        cut_ = false;
        continue;
      }
      // Forward what the polled pairs have (a pair with a closed side is
      // closed whole), then take a new connection.
      std::vector<std::pair<int, int>> kept;
      for (size_t i = 0; i < pairs_.size(); ++i) {
        auto [a, b] = pairs_[i];
        const bool ok =
            Forward(fds[2 + 2 * i], a, b) && Forward(fds[3 + 2 * i], b, a);
        if (ok) {
          kept.push_back({a, b});
        } else {
          close(a);
          close(b);
        }
      }
      pairs_ = std::move(kept);
      if (fds[1].revents & POLLIN) Accept();
    }
  }

  void Accept() {
    const int in = accept(listener_, nullptr, nullptr);
    if (in < 0) return;
    const int out = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(in);
      close(out);
      return;
    }
    pairs_.push_back({in, out});
    ++accepted_;
  }

  // Copies what `from` has to `to`; false once `from` is closed or failed.
  static bool Forward(const pollfd& p, int from, int to) {
    if (p.revents == 0) return true;
    char buf[1 << 16];
    const ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) return false;
    for (ssize_t sent = 0; sent < n;) {
      const ssize_t w = write(to, buf + sent, n - sent);
      if (w <= 0) return false;
      sent += w;
    }
    return true;
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<int> accepted_{0};
  std::vector<std::pair<int, int>> pairs_;  // (accepted, to the target)
  std::thread thread_;
};

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_TCP_RELAY_H_
