// Where a job's servers and workers run, as the reconcile loop
// (launch/reconciler.h) sees it: a Provider starts members and says which
// it counts; a Drainer asks the coordinator to take members out.
// Implementations: local child processes and Slurm jobs
// (launch/local_launcher.cc), a Kubernetes Job's pods
// (launch/k8s_controller.cc).
//
// Thread safety: a Provider is used from the launcher's thread only; a
// Drainer's requests run on threads of its own, and its methods are
// called from the launcher's thread.
#ifndef DUCTILE_LAUNCH_PROVIDER_H_
#define DUCTILE_LAUNCH_PROVIDER_H_

#include <cstdint>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "ductile/admin.h"
#include "ductile/security.h"
#include "ductile/status.h"

namespace ductile::launch {

enum class MemberRole { kWorker = 0, kServer = 1 };

// "worker" or "server", as ClusterStatus names them.
const char* RoleName(MemberRole role);

class Provider {
 public:
  virtual ~Provider() = default;

  // Starts `count` new members of `role`, with ids past any it started;
  // returns their ids, fewer than `count` where a bound stops it (logged).
  // An error leaves the job as it was, to be tried again.
  virtual Result<std::vector<int32_t>> Grow(MemberRole role, int32_t count) = 0;

  // The members of `role` that count toward the job's size: started and
  // neither gone nor being drained. Ascending.
  virtual std::vector<int32_t> Members(MemberRole role,
                                       const ClusterStatus& status) = 0;

  // Whether member `id` is gone for good (exited, and not to be started
  // again), so that waiting for it is pointless.
  virtual bool Gone(MemberRole role, int32_t id) = 0;

  // A shrink is under way: `leaving` are being drained, `staying` stay.
  virtual void Shrink(MemberRole role, const std::vector<int32_t>& staying,
                      const std::vector<int32_t>& leaving) = 0;
  // Member `id` is being drained for another reason (it was replaced).
  virtual void Retire(MemberRole role, int32_t id) = 0;
  // The coordinator refused to drain `id`: it stays in the job.
  virtual void Keep(MemberRole role, int32_t id) = 0;

  // What the provider itself does once per step (a Kubernetes Job is
  // lowered once the members past its new size are gone). `keep` are
  // members it must not take away (replacements under way); members it
  // wants drained go in `drain`. While it returns true for a role, no new
  // target or replacement of that role starts.
  virtual bool Settle(MemberRole role, const ClusterStatus& status,
                      const std::vector<int32_t>& keep,
                      std::vector<int32_t>* drain) {
    return false;
  }
};

// Asks the coordinator to drain members; the answers come back later, so
// that a server's drain (its slots moving, for seconds) does not hold up
// the launcher.
class Drainer {
 public:
  struct Outcome {
    MemberRole role;
    int32_t id;
    Status status;
  };
  virtual ~Drainer() = default;
  // Asks for the drain of member `id` of `role`.
  virtual void Drain(MemberRole role, int32_t id) = 0;
  // The drains answered since the last call.
  virtual std::vector<Outcome> Answered() = 0;
};

// A Drainer that sends RequestDrainWorker / RequestDrainServer to the
// coordinator at `address` as the admin, each on a thread of its own.
class CoordinatorDrainer final : public Drainer {
 public:
  CoordinatorDrainer(std::string address, Security security,
                     int64_t worker_timeout_ms, int64_t server_timeout_ms);
  ~CoordinatorDrainer() override;  // waits for the drains under way

  void Drain(MemberRole role, int32_t id) override;
  std::vector<Outcome> Answered() override;

 private:
  struct Running {
    MemberRole role;
    int32_t id;
    std::future<Status> answer;
  };
  const std::string address_;
  const Security security_;
  const int64_t worker_timeout_ms_;
  const int64_t server_timeout_ms_;
  std::vector<Running> running_;
};

// Tells the coordinator at `address`, as the admin, that a member's
// process has exited (ReportMemberExit), each report on a thread of its
// own, so that the job goes on at once instead of after the heartbeat
// timeout. A report the coordinator takes as stale (the member was
// restarted first) is no error; others are logged.
class ExitReporter {
 public:
  ExitReporter(std::string address, Security security, int64_t timeout_ms);
  ~ExitReporter();  // waits for the reports under way

  void Report(const MemberProcess& process);
  // Collects the reports answered; logs the failed ones.
  void Collect();

 private:
  const std::string address_;
  const Security security_;
  const int64_t timeout_ms_;
  std::vector<std::pair<MemberProcess, std::future<Status>>> running_;
};

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_PROVIDER_H_
