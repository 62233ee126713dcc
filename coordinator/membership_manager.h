// Members of the cluster: registration, heartbeats, failure detection, the
// live-worker set the servers are told of, and the end of the job.
//
// A member is known by its id and, in memory, by the socket identity it
// last spoke from; after a coordinator restart its first heartbeat says
// which member it is. A member silent past the heartbeat timeout is
// declared dead: a worker leaves every clock vector and barrier (and comes
// back when heard from again); a server's death is taken over by its
// slots' backups or rolls the job back (the caller's business:
// DetectDeadServers only reports it). A launcher that
// saw a member's process exit may say so (ReportExit): the member is then
// declared dead at once, the same way, and never heard from again.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_MEMBERSHIP_MANAGER_H_
#define DUCTILE_COORDINATOR_MEMBERSHIP_MANAGER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator_context.h"
#include "proto/ductile.pb.h"

namespace ductile {

class MembershipManager {
 public:
  explicit MembershipManager(CoordinatorContext* ctx) : ctx_(*ctx) {}

  // What a message's sender turned out to be.
  struct Touched {
    Member* member = nullptr;     // null: not a known member
    bool reconnected = false;     // first message after a coordinator restart
    bool back_from_dead = false;  // was declared dead
    // A connection with this keyed member's routing identity but without
    // its key (null: none): nothing it sends counts.
    const Member* impostor_of = nullptr;
    // A member whose process exited (ReportExit) (null: none): what comes
    // from its connection was sent before it died, and counts for nothing.
    const Member* from_exited = nullptr;
  };
  // Finds the sender of `h` (by identity, or by the id in a heartbeat after
  // a coordinator restart) and records that it is alive. A member bound to
  // a member key is found only by a connection that proved `key`.
  Touched Touch(const wire::Header& h, const std::string& identity,
                const std::string& key);

  struct Registered {
    Member* server = nullptr;  // a server registered (or again)
    bool restarted = false;    // with the id of a server process that is gone
    uint64_t seq = 0;          // its registration's, when not yet answered
  };
  // Registers a server, worker or observer and answers it (an answer that
  // needs the routing table waits for the slots to be assigned). A server
  // restarted under its id is not answered: the caller decides who holds
  // its predecessor's slots first, then answers (AnswerServer), so that
  // the new process never serves under a routing that gives it slots it
  // does not hold. `key` is
  // the member key the connection proved ("" for the cluster's shared
  // key): a member registered with one is bound to it, and its id is not
  // given to another key (kPermissionDenied). `key_name` is that key's
  // name in the members directory: one named for a role and id
  // (MemberKeyRole: "server-N", "worker-N") registers only as that member.
  // Live workers now (bounded by options.max_workers).
  int32_t CountLiveWorkers() const;

  Registered Register(const std::string& identity, const std::string& key,
                      const std::string& key_name, const wire::Header& h);
  // Answers the registrations that waited for the first routing table.
  void AnswerWaiting();
  // Answers server `server`'s registration (Registered::seq) with the
  // routing as it is now.
  void AnswerServer(const Member& server, uint64_t seq);

  // Records a heartbeat's counters, metrics and announced silence.
  // kNotFound reply to an unknown sender; returns the member or null.
  Member* Heartbeat(const std::string& identity, const wire::Header& h);

  // A worker finished; the reply is sent.
  void Finish(const std::string& identity, const wire::Header& h);
  // A worker leaves the job (LEAVE); answered once every live server has
  // dropped it from its clock vectors. True if the live set changed.
  bool Leave(const std::string& identity, const wire::Header& h);
  // `ductile drain worker:N` (DRAIN from an observer): the worker is told
  // to leave; the observer is answered at once.
  void Drain(const std::string& identity, const wire::Header& h);

  // Declares dead the workers silent past the timeout; true if any.
  // The coordinator did not run for `pause`: every member's last sign of
  // life moves that much later, so that silence is not held against it.
  void ForgivePause(std::chrono::steady_clock::duration pause);
  bool DetectDeadWorkers();
  // Declares dead the servers silent past the timeout (and not announced
  // busy); returns those whose death calls for a takeover or a rollback
  // (not the rejoining ones, which hold nothing).
  std::vector<int32_t> DetectDeadServers();

  // What a report of a member's exit changed.
  struct Exited {
    bool worker = false;  // a live worker is dead: the live set changed
    int32_t server = -1;  // a dead server whose death calls for a rollback
                          // or a takeover
  };
  // MEMBER_EXIT from an administrator (a launcher that saw the process
  // end): the member is declared dead at once, exactly as at the end of
  // its heartbeat timeout (DetectDeadWorkers, DetectDeadServers; a server
  // announced busy included: its process is gone), and the sender is
  // answered.
  //
  // The report names the process, by the pid it registered with and/or
  // the number of its registration (Member::pid, incarnation): it applies
  // only if the member's current registration is that process. A member
  // registers again under its id when its process is restarted (servers
  // are, with the same id): a report about the process it replaced is
  // stale and changes nothing (kFailedPrecondition), so a late or
  // repeated report never takes down the new process. kInvalidArgument
  // for no role or no process named; kNotFound for an id never
  // registered; OK for a member dead, left or finished already (one dead
  // of silence is then known not to come back: the end of the job does
  // not wait for it). A member reported exited is not heard from again:
  // messages under its connection's identity are ignored (they were sent
  // before it died); a new process registers anew.
  Exited ReportExit(const std::string& identity, const wire::Header& h);

  // Tells every server and live worker who the live workers are.
  void PublishWorkers();
  // WORKERS_ACK: a server installed a live-worker set.
  void HandleWorkersAck(const wire::Header& h);
  // Answers the workers' registrations every live server has acknowledged
  // (call when the live servers change). Joins wait while the job rolls
  // back: AdmitAfterRollback answers them.
  void ReleaseAdmissions();
  // Workers registered and not yet admitted (their registration waits).
  std::set<int32_t> Joining() const;
  // A rollback finished: publishes the live set again, and the joining
  // workers (and any registration from now on) are admitted once every
  // live server has installed it, at the servers' clock then (the
  // checkpoint's, or above), in the new generation. The joiners never
  // heard of the old one, so the rollback sent them no RESUME.
  void AdmitAfterRollback();
  // True when the job is over: every worker finished, or gone (dead for
  // three heartbeat timeouts: a worker declared dead may just be slow).
  bool JobOver() const;
  // Tells everyone the cluster is shutting down; answers the waiting
  // registrations with kUnavailable.
  void AnnounceShutdown();

  // The cluster's state for `ductile status`.
  wire::ClusterState Status(bool recovering) const;
  // Tells `server`, declared dead while it was alive, to rejoin the job
  // with no keys at the job's generation (REJOIN).
  void AskToRejoin(const Member& server) const;
  // Fills a registration reply for `member` (an observer: a default one).
  void FillRegistration(const Member& member, wire::Header* reply) const;

 private:
  Member* FindMember(const wire::Header& h, const std::string& identity,
                     const std::string& key, Touched* touched);
  // The member of `members` registered from `identity` (under `id`, or any
  // id when `id` < 0), or null: the same process asking to register again.
  Member* FindRegistration(std::map<int32_t, Member>& members,
                           const std::string& identity, int32_t id);
  // Refuses (and answers) a registration under `taken`'s id from a
  // connection without its member key.
  bool RefusedForItsKey(const Member& taken, const std::string& key,
                        const std::string& identity,
                        const wire::Header& h) const;

  // A worker's registration (or leave), answered once every live server
  // has installed a live-worker set with it (without it) (WORKERS_UPDATE
  // `round`).
  struct Admission {
    Waiter waiter;
    int32_t worker = -1;
    uint64_t round = 0;
    bool leave = false;
  };
  void Admit(const Waiter& waiter, const Member& worker);

  CoordinatorContext& ctx_;
  std::vector<Waiter> waiting_for_routing_;
  uint64_t workers_round_ = 0;  // the last WORKERS_UPDATE's
  // A server's latest WORKERS_ACK: its round, and the clock a worker
  // joining then starts at (its server clock).
  struct WorkersAck {
    uint64_t round = 0;
    int64_t clock = 0;
  };
  std::map<int32_t, WorkersAck> workers_acked_;  // by server
  std::vector<Admission> admissions_;
  // Registrations answered since the last rollback: the start clock, by
  // the worker's identity (a resend is answered again at once).
  std::map<std::string, int64_t> admitted_;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_MEMBERSHIP_MANAGER_H_
