#include "cli/metrics_http.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "glog/logging.h"
#include "httplib.h"

namespace ductile::cli {
namespace {

class HttplibMetricsServer final : public MetricsHttpServer {
 public:
  explicit HttplibMetricsServer(Render render) : render_(std::move(render)) {
    // Scrapes are small and rare: a request's read may not hold a thread
    // for long, and nobody sends a body.
    server_.set_read_timeout(5, 0);
    server_.set_write_timeout(5, 0);
    server_.set_payload_max_length(4096);
    server_.Get("/metrics", [this](const httplib::Request&,
                                   httplib::Response& response) {
      Result<std::string> text = render_();
      if (!text.ok()) {
        response.status = 503;
        response.set_content(text.status().ToString() + "\n", "text/plain");
        return;
      }
      response.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
    });
  }

  ~HttplibMetricsServer() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  // stop() does nothing until the listening loop runs: Listen() returns
  // only once it does (or has ended).

  Status Listen(const std::string& host, int port) {
    if (port == 0) {
      port_ = server_.bind_to_any_port(host);
    } else if (server_.bind_to_port(host, port)) {
      port_ = port;
    }
    if (port_ <= 0) {
      return UnavailableError("cannot listen for /metrics on " + host + ":" +
                              std::to_string(port));
    }
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      ended_.store(true);
    });
    while (!server_.is_running() && !ended_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::Ok();
  }

  int port() const override { return port_; }

 private:
  Render render_;
  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> ended_{false};
  int port_ = -1;
};

}  // namespace

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, Render render) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(
        "the /metrics port must be in [0, 65535], not " + std::to_string(port));
  }
  auto server = std::make_unique<HttplibMetricsServer>(std::move(render));
  DUCTILE_RETURN_IF_ERROR(server->Listen(host, port));
  LOG(INFO) << "serving /metrics on http://" << host << ":" << server->port()
            << "/metrics";
  return std::unique_ptr<MetricsHttpServer>(std::move(server));
}

}  // namespace ductile::cli
