// `ductile coordinator`, `ductile server` and `ductile worker`: one member
// of a cluster each, running until the job ends.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/metrics_http.h"
#include "cli/options_from_flags.h"
#include "ductile/ductile.h"
#include "glog/logging.h"
#include "train/trainer.h"

namespace ductile::cli {

int RunCoordinator(const std::string&) {
  Result<CoordinatorOptions> o = CoordinatorOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  auto security = SecurityFromFlags(false);
  if (!security.ok()) return Fail(security.status());
  o->security = *security;
  auto coordinator = Coordinator::Start(*o);
  if (!coordinator.ok()) return Fail(coordinator.status());
  if (!FLAGS_address_file.empty()) {
    const std::string tmp = FLAGS_address_file + ".tmp";
    std::ofstream(tmp) << (*coordinator)->address() << "\n";
    if (std::rename(tmp.c_str(), FLAGS_address_file.c_str()) != 0) {
      return Fail(UnavailableError("cannot write " + FLAGS_address_file));
    }
  }
  std::fprintf(stderr, "coordinator listening on %s\n",
               (*coordinator)->address().c_str());
  // Destroyed before the coordinator it asks.
  std::unique_ptr<MetricsHttpServer> metrics;
  if (FLAGS_metrics_port >= 0) {
    Coordinator* c = coordinator->get();
    auto started = MetricsHttpServer::Start(
        FLAGS_metrics_host, FLAGS_metrics_port, [c]() -> Result<std::string> {
          auto status = c->QueryStatus(5000);
          if (!status.ok()) return status.status();
          return FormatPrometheus(*status);
        });
    if (!started.ok()) return Fail(started.status());
    metrics = std::move(*started);
    const std::string& host = FLAGS_metrics_host;
    if (host.rfind("127.", 0) != 0 && host != "localhost" && host != "::1") {
      LOG(WARNING) << "/metrics on " << FLAGS_metrics_host
                   << " is plain HTTP: anyone who reaches it reads the "
                      "cluster's status";
    }
    std::fprintf(stderr, "coordinator metrics on http://%s:%d/metrics\n",
                 FLAGS_metrics_host.c_str(), metrics->port());
  }
  Status s = (*coordinator)->Wait();
  return s.ok() ? 0 : Fail(s);
}

int RunServer(const std::string&) {
  auto id = IdOrRank(FLAGS_server_id, "server");
  if (!id.ok()) return Fail(id.status());
  Result<ServerOptions> o = ServerOptionsFromFlags(*id);
  if (!o.ok()) return Fail(o.status());
  auto security =
      SecurityFromFlags(false, *id >= 0 ? "server-" + std::to_string(*id) : "");
  if (!security.ok()) return Fail(security.status());
  o->security = *security;
  auto server = Server::Start(*o);
  if (!server.ok()) return Fail(server.status());
  Status s = (*server)->Wait();
  return s.ok() ? 0 : Fail(s);
}

int RunWorker(const std::string&) {
  Result<ClientOptions> o = WorkerClientOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  Result<train::TrainerOptions> t = TrainerOptionsFromFlags();
  if (!t.ok()) return Fail(t.status());
  auto id = IdOrRank(FLAGS_worker_id, "worker");
  if (!id.ok()) return Fail(id.status());
  o->requested_worker_id = *id;
  auto security =
      SecurityFromFlags(false, *id >= 0 ? "worker-" + std::to_string(*id) : "");
  if (!security.ok()) return Fail(security.status());
  o->security = *security;
  // The app's data first: the worker joins the job once it can train.
  Result<train::WorkerData> data = train::LoadWorkerData(*t);
  if (!data.ok()) return Fail(data.status());
  auto client = Client::Connect(*o);
  if (!client.ok() && client.status().code() == StatusCode::kUnavailable &&
      client.status().message() == "cluster is shutting down") {
    // Started as the job ended (a resize or a replacement late in it):
    // there is nothing left to train, which is no failure.
    std::fprintf(stderr,
                 "worker: the job ended before this worker joined; nothing "
                 "to do\n");
    return 0;
  }
  if (!client.ok()) return Fail(client.status());
  Status s = train::RunTrainingWorker(**client, *t, std::move(*data));
  if (!s.ok() && (*client)->shutting_down()) {
    // Shut down while it started, or while it waited for a rollback
    // (the step loop stops by itself otherwise): nothing is left to do.
    std::fprintf(stderr, "worker %d: the job was shut down (%s); stopping\n",
                 (*client)->worker_id(), s.message().c_str());
    s = Status::Ok();
  }
  // Tell the coordinator either way, so the cluster can shut down.
  Status finish = (*client)->Finish();
  if (!s.ok()) return Fail(s);
  return finish.ok() ? 0 : Fail(finish);
}

}  // namespace ductile::cli
