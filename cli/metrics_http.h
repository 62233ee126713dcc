// The coordinator's Prometheus endpoint: GET /metrics over plain HTTP
// (cpp-httplib), its text made by a callback at each request.
//
// What it serves is what `ductile status` shows: it has no authentication
// or encryption, so it listens on loopback unless told otherwise.
#ifndef DUCTILE_CLI_METRICS_HTTP_H_
#define DUCTILE_CLI_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "ductile/status.h"

namespace ductile::cli {

class MetricsHttpServer {
 public:
  // The text of /metrics, or an error (served as 503 with its message).
  using Render = std::function<Result<std::string>()>;

  // Listens on `host`:`port` (0 picks a free port) and serves from a
  // thread of its own until destroyed.
  static Result<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, Render render);

  virtual ~MetricsHttpServer() = default;
  // The port it listens on.
  virtual int port() const = 0;
};

}  // namespace ductile::cli

#endif  // DUCTILE_CLI_METRICS_HTTP_H_
