// The client's I/O side: every socket, and every request in flight.
//
// Callers hand operations over with Submit(); Step() (on the I/O thread)
// dispatches them: a data call is split into one request per owning server
// and sent, its parts matched with replies, resent on silence (pushes,
// under the same sequence number, so a server applies each once),
// re-routed under fresh numbers when a server answers "moved" or
// "unavailable", and failed past their deadline; a CLOCK goes to every
// server of the routing table; control requests go to the coordinator,
// Barrier and Finish again while unanswered. Step() also takes the
// coordinator's notices (routing, consistency changes, rollbacks,
// checkpoints, live workers) and sends heartbeats.
//
// Thread-safe: Submit() from any thread; everything else on the thread
// that steps the engine (the client's I/O thread, or the simulation's).
//
// Its files: request_engine.cc (the step, splitting and sending data
// requests), request_engine_replies.cc (their replies),
// request_engine_timers.cc (deadlines, resends, re-routing),
// request_engine_control.cc (the coordinator's side).
#ifndef DUCTILE_CLIENT_REQUEST_ENGINE_H_
#define DUCTILE_CLIENT_REQUEST_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "client/operation.h"
#include "client/param_cache.h"
#include "client/recovery_state.h"
#include "client/routing_view.h"
#include "client/stats_recorder.h"
#include "client/table_registry.h"
#include "ductile/client.h"
#include "env/env.h"
#include "transport/message.h"
#include "transport/shm_value_area.h"
#include "transport/socket.h"
#include "transport/wakeup.h"
#include "util/mutex.h"

namespace ductile {

class RequestEngine {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // What the engine shares with the caller's side of the client; all of it
  // outlives the engine.
  struct Shared {
    const ClientOptions* options;
    Env* env;
    int64_t client_id;
    const std::atomic<int32_t>* worker_id;  // -1: not a worker
    const std::atomic<int64_t>* clock;      // the worker's clock
    TableRegistry* tables;
    ParamCache* cache;
    RecoveryState* recovery;
    StatsRecorder* stats;
    // Adds to a worker's checkpoint report at a clock what else it must
    // carry (the data plan's unacknowledged reports); may be empty.
    std::function<void(int64_t clock, wire::Header* report)> complete_report;
  };

  explicit RequestEngine(const Shared& shared);
  ~RequestEngine();

  // Connects to the coordinator.
  Status Start();
  // Any thread: queues `op` for the I/O thread (released with kCancelled
  // once the engine is shutting down).
  void Submit(AnyOperation op) EXCLUDES(queue_mu_);
  // I/O thread: dispatches what was submitted, handles what arrived and
  // the timers due.
  void Step();
  // I/O thread: fails everything in flight and queued with `status`,
  // closes the sockets; later submissions are cancelled.
  void Shutdown(const Status& status);

  // When Step() has timers to handle next.
  TimePoint NextWakeup() const;
  // The sockets Step() reads, to wait on.
  const std::vector<Socket*>& sockets() const { return sockets_; }
  Transport* transport() const { return transport_.get(); }
  // Signalled by Submit().
  Wakeup& wakeup() { return wakeup_; }

 private:
  // Barrier and Finish requests unanswered this long are sent again.
  static constexpr std::chrono::milliseconds kControlResendAfter{2000};
  // Back-off before re-routing a request a server could not take yet, and
  // between requests for the routing table.
  static constexpr std::chrono::milliseconds kRetryAfter{20};

  // One request to one server: the keys of `op` at `indices` (or the
  // contiguous range [begin, end) when indices is empty).
  struct Part {
    std::shared_ptr<DataOperation> op;
    int32_t server = -1;
    uint64_t seq = 0;
    size_t begin = 0, end = 0;
    std::vector<uint32_t> indices;
    // A push-pull whose push a server already applied: only pull.
    bool pull_only = false;
    // Sent under `seq` at least once (it may have been applied), and more
    // than once (a copy may arrive after an answer to another).
    bool sent = false;
    bool resent = false;
    // Earlier seqs of these values, sent to a server that left the job
    // before answering (they may have been applied there; its window
    // moved with its slots): the new owner checks them.
    std::vector<uint64_t> priors;
    // Where the part is: sent (or about to be) and awaiting its server's
    // answer; or answered "moved" or unavailable, or orphaned by its
    // server's leaving, and awaiting its re-route, at retry_at, under new
    // seqs (Step's timers).
    enum class State { kAwaitingAnswer, kAwaitingReroute };
    State state = State::kAwaitingAnswer;
    TimePoint retry_at{};  // kAwaitingReroute: when it is re-routed
    bool awaiting_reroute() const { return state == State::kAwaitingReroute; }
    TimePoint resend_at{};  // resend the same seq if silent until then
    size_t size() const {
      return indices.empty() ? end - begin : indices.size();
    }
    size_t index(size_t j) const {
      return indices.empty() ? begin + j : indices[j];
    }
    // Floats of values its keys hold.
    uint64_t floats() const {
      uint64_t n = 0;
      for (size_t j = 0; j < size(); ++j) n += op->length(index(j));
      return n;
    }
  };

  void Dispatch(const std::shared_ptr<DataOperation>& op);
  void Dispatch(const std::shared_ptr<ClockOperation>& op);
  void Dispatch(const std::shared_ptr<NoticeOperation>& op);
  void Dispatch(const std::shared_ptr<ControlOperation>& op);
  void SplitAndSend(const std::shared_ptr<DataOperation>& op,
                    const std::vector<uint32_t>* subset, bool pull_only,
                    const std::vector<uint64_t>& priors = {});
  // A push about to go to several servers: its values must all be
  // acceptable first (the servers check too, each its own part).
  Status CheckBeforeSplit(DataOperation& op);
  void AddPart(Part part);
  void SendPart(Part& part);
  // Marks `part` as awaiting its re-route at `at` (counted in
  // waiting_parts_ once, however often it is marked).
  void AwaitReroute(Part& part, TimePoint at);
  void FinishPart(uint64_t seq, const Status& status);
  // A part's server left the routing before answering: its keys are
  // re-routed, after `delay`, checked against its seq at the new owners.
  void Orphan(Part& part, std::chrono::milliseconds delay);
  // `bounced`, with values, was sent back (moved, unavailable): the parts
  // of later calls to the same server still unanswered go again after it,
  // re-routed after `delay` too (checked against their seqs), or one
  // answered before the push is sent again could miss it (a move aborted
  // between the two serves the later part where the push was refused).
  void RerouteLaterParts(const Part& bounced, std::chrono::milliseconds delay);
  // A push part about to be re-routed while a copy of it may still be
  // applied: its seq joins its priors (so the new owners check it). False
  // if it already had kMaxPriors: then it is finished, kAborted.
  bool KeepAsPrior(Part& part);
  // `status` for a part that fails before an answer, except that a push
  // of which a copy (or one under an earlier seq) went out fails kAborted
  // instead of kUnavailable: it may have been applied.
  static Status FailureOf(const Part& part, const Status& status);
  void ReleasePriors(const Part& part);
  uint64_t DoneBelow() const;
  // A reply from `server`.
  void HandleDataReply(InMessage& message, int32_t server);
  void ReadDataReply(InMessage& message, const wire::Header& header,
                     int32_t server);
  // When the part's server is on this host (ClientOptions::
  // shm_reply_bytes), names regions of the shared memory in `header`: one
  // for a pull's values (reply_shm), and one for a push's (push_shm; not
  // for a push sent again, nor before the server has shown it can use the
  // memory), returned for the values to be copied in; else empty.
  std::span<float> LendShmRegions(const Part& part, wire::MessageType type,
                                  wire::Header& header);
  void CopyPulledValues(Part& part, const wire::Header& header,
                        const float* values);
  void HandleControlMessage(InMessage& message);
  void HandleConsistencyChange(const wire::Header& header);
  void HandleResume(const wire::Header& header);
  void HandleShutdownNotice();
  void HandleCheckpointCommit(const wire::Header& header);
  void HandleTimers();
  void SendHeartbeat();
  void SendToCoordinator(const wire::Header& header);
  void RequestRouting();
  void InstallRouting(const wire::RoutingTable& routing);
  void RebuildSockets();
  void FailInFlight(const Status& status);
  // True when re-routing `moved` now would overtake an earlier call's part
  // to the same server that is unanswered or not re-routed yet.
  bool Overtakes(const Part& moved) const;
  // Sends the calls held behind parts waiting to be re-routed, once none
  // waits.
  void SendHeldOps();
  // Sends the CLOCKs whose pushes are all answered (oldest first).
  void SendDueClocks();
  void SendClock(const ClockOperation& op);
  // The last CLOCK sent, to `servers` (SendClock: every server of the
  // routing; again, at each heartbeat, to those a request of this
  // generation waits at: one that lost it, a message dropped or its state
  // reset by a rejoin, learns it, and a pull waiting there on this
  // worker's clock goes; a clock moves only forward there).
  void SendLastClock(const std::vector<int32_t>& servers);

  const Shared shared_;
  const ClientOptions& options_;
  Env* const env_;

  Wakeup wakeup_;
  Mutex queue_mu_;
  std::deque<AnyOperation> queue_ GUARDED_BY(queue_mu_);
  bool stopped_ GUARDED_BY(queue_mu_) = false;

  // Owned by the I/O thread.
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> coordinator_;
  std::unique_ptr<RoutingView> routing_;
  // Shared memory for values exchanged with servers on this host (made at
  // the first large request to one; null until then, or if it could not
  // be made).
  std::unique_ptr<ShmValueArea> shm_;
  bool shm_failed_ = false;
  // Servers that have written a pull's values into it, and not refused a
  // push in it since (wire::Header::shm_refused): pushed values go to them
  // through it.
  std::set<int32_t> shm_proven_;
  std::vector<Socket*> sockets_;  // the coordinator's, then each server's
  uint64_t next_seq_ = 1;
  std::unordered_map<uint64_t, Part> parts_;  // by seq, in flight or retrying
  std::set<uint64_t> open_seqs_;              // seqs that may still be (re)sent
  // The priors of parts in flight: they hold the done-below mark back
  // too, or servers would forget whether they were applied.
  std::multiset<uint64_t> prior_holds_;
  // CLOCKs waiting for this worker's earlier pushes to be answered: a
  // server counts a worker's clock only once every push of the clocks
  // before it is applied (or refused) wherever its keys now live, so a
  // push re-routed after a slot moved is never late (docs/elasticity.md).
  std::deque<std::shared_ptr<ClockOperation>> deferred_clocks_;
  // Parts awaiting their re-route (Part::State::kAwaitingReroute), and
  // the calls held behind them (in order).
  size_t waiting_parts_ = 0;
  uint64_t next_order_ = 0;  // DataOperation::order of the last call
  std::deque<std::shared_ptr<DataOperation>> held_ops_;
  bool reroute_now_ = false;  // a new routing table: re-route them now
  // The last CLOCK sent, for servers that join the job later.
  struct SentClock {
    int64_t clock = 0;
    uint64_t generation = 0;
  };
  std::optional<SentClock> last_clock_;
  std::unordered_map<uint64_t, std::shared_ptr<ControlOperation>> controls_;
  TimePoint routing_requested_at_{};
  TimePoint next_timers_{};
  TimePoint next_heartbeat_{};
  InMessage message_;  // reused by Step()
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_REQUEST_ENGINE_H_
