// RequestEngine's timers: requests past their deadline fail, pushes with
// no reply are resent under their seq, parts sent back (moved, or their
// server unavailable) are re-routed in call order once due, calls held
// behind them expire, and control requests are resent or expire. Sending
// is in request_engine.cc, replies in request_engine_replies.cc.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "client/request_engine.h"
#include "glog/logging.h"

namespace ductile {

bool RequestEngine::Overtakes(const Part& moved) const {
  for (const auto& [seq, part] : parts_) {
    // An earlier call's push to the same server, not re-routed yet:
    // either unanswered (it may have been sent back too, its answer lost)
    // or waiting itself. This one goes after it, or a read could miss it.
    // (An earlier pull is no reason to wait: it may be parked a while.)
    if (&part != &moved && part.server == moved.server &&
        part.op->order < moved.op->order && part.op->type != wire::PULL &&
        !part.pull_only) {
      return true;
    }
  }
  return false;
}

void RequestEngine::HandleTimers() {
  const TimePoint now = env_->Now();
  if (shm_ != nullptr) shm_->Expire();
  std::vector<uint64_t> expired, resend, reroute;
  bool reroute_due = false;
  for (auto& [seq, part] : parts_) {
    if (part.awaiting_reroute() && now >= part.retry_at &&
        now < part.op->deadline) {
      reroute_due = true;
    }
  }
  for (auto& [seq, part] : parts_) {
    if (now >= part.op->deadline) {
      expired.push_back(seq);
    } else if (part.awaiting_reroute()) {
      // When one is due every waiting part is re-routed, in call order.
      if (reroute_due) reroute.push_back(seq);
    } else if (now >= part.resend_at && part.op->type == wire::PUSH &&
               !part.pull_only) {
      // Only pushes are resent on silence: a pull may be waiting at the
      // server on a staleness bound, and its deadline covers a lost one.
      resend.push_back(seq);
    }
  }
  for (uint64_t seq : expired) {
    const Part& part = parts_.at(seq);
    FinishPart(seq, DeadlineExceededError(
                        "no reply from " + routing_->Describe(part.server) +
                        " within " +
                        std::to_string(options_.request_timeout_ms) + " ms"));
  }
  // Oldest first: parts go out again in the order of their calls (a part
  // re-routed before has a newer seq than its call's place says).
  auto by_call = [this](uint64_t a, uint64_t b) {
    const uint64_t oa = parts_.at(a).op->order, ob = parts_.at(b).op->order;
    return oa != ob ? oa < ob : a < b;
  };
  std::sort(resend.begin(), resend.end(), by_call);
  std::sort(reroute.begin(), reroute.end(), by_call);
  for (uint64_t seq : resend) {
    VLOG(1) << "client: resending request " << seq;
    SendPart(parts_.at(seq));
  }
  for (uint64_t seq : reroute) {
    auto it = parts_.find(seq);
    if (Overtakes(it->second)) continue;  // after the earlier one
    Part part = std::move(it->second);
    parts_.erase(it);
    --waiting_parts_;
    std::vector<uint32_t> indices(part.size());
    for (size_t j = 0; j < part.size(); ++j) indices[j] = part.index(j);
    SplitAndSend(part.op, &indices, part.pull_only, part.priors);
    // The old part's holds, after the new parts took theirs.
    ReleasePriors(part);
    part.op->Release();
  }
  // A call held behind earlier ones past its own deadline fails: it was
  // never sent, so nothing of it was applied.
  for (auto it = held_ops_.begin(); it != held_ops_.end();) {
    if (now < (*it)->deadline) {
      ++it;
      continue;
    }
    std::shared_ptr<DataOperation> op = std::move(*it);
    it = held_ops_.erase(it);
    op->Release(DeadlineExceededError(
        "not sent within " + std::to_string(options_.request_timeout_ms) +
        " ms: it waited behind earlier calls whose requests were being "
        "re-routed (nothing of it was applied)"));
  }
  SendDueClocks();  // one may have waited for an expired push
  SendHeldOps();
  for (auto it = controls_.begin(); it != controls_.end();) {
    ControlOperation& c = *it->second;
    if (c.resend && now >= c.resend_at && now < c.deadline) {
      c.resend_at = now + kControlResendAfter;
      SendToCoordinator(c.request);
    }
    if (now >= c.deadline) {
      c.Release(DeadlineExceededError("no answer from the coordinator at " +
                                      options_.coordinator_address));
      it = controls_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ductile
