// A parameter server: owns a share of the slots, stores their keys'
// values and optimizer state, and applies pushes.
//
// A Server runs one request thread of its own: requests are validated and
// applied there, in arrival order, so no lock is taken on the hot path.
// Start() returns once the server has registered with the coordinator.
// All methods are thread-safe.
//
// Example (embedding a server with a user update rule):
//
//   ductile::ServerOptions options;
//   options.coordinator_address = "tcp://127.0.0.1:7000";
//   options.custom_rules["clipped_add"] = {
//       [](std::span<float> w, std::span<const float> g, std::span<float>) {
//         for (size_t i = 0; i < w.size(); ++i)
//           w[i] += std::clamp(g[i], -1.0f, 1.0f);
//       }};
//   auto server = ductile::Server::Start(options);
//   if (!server.ok()) return 1;
//   (*server)->Wait().IgnoreError();  // until the cluster shuts down
#ifndef DUCTILE_SERVER_H_
#define DUCTILE_SERVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ductile/limits.h"
#include "ductile/security.h"
#include "ductile/status.h"
#include "ductile/table.h"

namespace ductile {

struct ServerOptions {
  // Coordinator's address, "tcp://host:port" or "ipc:///path".
  std::string coordinator_address = "tcp://127.0.0.1:7000";
  // Interface to listen on and to advertise to peers.
  std::string host = "127.0.0.1";
  // TCP port to listen on; 0 picks a free one.
  int port = 0;
  // Also listen on an ipc:// socket in `ipc_dir`, which clients on the same
  // host use instead of tcp.
  bool enable_ipc = true;
  std::string ipc_dir = "/tmp";
  // Ask the coordinator for this server id (-1: let it choose).
  int32_t requested_id = -1;
  // Largest request accepted, in bytes (header + keys + values + lengths).
  // Larger ones get a kInvalidArgument reply; ones far larger (over 2x) are
  // dropped by the transport and the connection reset.
  uint64_t max_message_bytes = 1ull << 30;
  // Widest value one key may have here, in floats (16M floats, 64 MiB; 1 to
  // 2^28). A push or pull that names a wider key of a variable-width table
  // gets a kInvalidArgument reply (one small request must not make the
  // server initialise gigabytes and fall silent meanwhile), and a
  // fixed-width table wider than this cannot be created. A pull of a key
  // never pushed reads its initial value and stores nothing.
  uint64_t max_key_floats = 1ull << 24;
  // Memory this server's tables may hold, values and optimizer state
  // together, in MB (0: three quarters of the machine's physical memory).
  // A push that would store new keys beyond it gets kResourceExhausted and
  // changes nothing; pushes to keys already held, and pulls, go on.
  // Checked when a push arrives, against what the tables hold then: BSP
  // pushes waiting for their clock's end are not counted, so one clock's
  // new keys can pass it together. Restores and slot moves are never
  // refused. 0 - 2^30.
  uint64_t max_stored_mb = 0;
  // Replies this server queues for one client that does not read them
  // (stopped, or reading slower than it asks), 1 - 10^7. Beyond it, its
  // replies are dropped: the client's deadline and resends take over,
  // while the server's memory stays bounded by about this many replies
  // per connection (each at most max_message_bytes).
  int64_t max_queued_replies = 10000;
  // The bytes of replies queued for one connection that does not read
  // them, in MiB (1 - 2^20): a reply of more than 4 KiB that would pass it
  // is not queued, and its request is answered kResourceExhausted instead
  // (naming --max_queued_reply_mb). A connection then holds at most this
  // plus one reply (a reply larger than the limit goes to a connection
  // with nothing queued) plus small ones. When such a peer goes, its
  // replies are dropped and their memory goes back to the system.
  int64_t max_queued_reply_mb = 256;
  // Requests of one connection that wait to be read, 1 - 10^7: past it the
  // server reads nothing more from that connection until it has taken some
  // (TCP's flow control then holds the peer's further requests at the
  // peer). No request is lost; a peer sending faster than the server
  // works keeps its backlog in its own memory rather than the server's.
  // Each waiting request is at most about 2x max_message_bytes.
  int64_t max_queued_requests = 1000;
  // The exactly-once window (server/request_dedup.h) keeps, per client,
  // the sequence numbers it applied above the client's done-below mark. A
  // client that holds this many there (1 - 2^30; an honest one holds about
  // its requests in flight) has a push refused with kResourceExhausted
  // until its mark moves up. A client is forgotten once
  // `client_idle_expiry_s` (60 s - 30 days) has passed since its requests'
  // timeout (ClientOptions::request_timeout_ms, which they carry) ran out
  // after the last one arrived: it resends nothing after that timeout, and
  // the expiry covers what may still be on its way. (Windows that came
  // with moved slots, of clients not heard from since, are kept 30 days.)
  uint64_t max_window_per_client = uint64_t{1} << 22;
  int64_t client_idle_expiry_s = 600;
  // Pulls waiting on a staleness bound (SSP, BSP) for the slowest worker:
  // at most `max_parked_pulls_per_worker` of one worker (1 - 2^20; an
  // honest one has one per table it pulls at once) and `max_parked_pulls`
  // in all (1 - 2^24) wait at once; a pull beyond either is refused with
  // kResourceExhausted, naming the limit. Only a live worker's pull waits
  // (one naming another worker id is answered kUnavailable), and a
  // worker's waiting pulls are answered kUnavailable as soon as it leaves
  // or is declared dead. Each holds its request (keys) until answered.
  uint64_t max_parked_pulls_per_worker = 1024;
  uint64_t max_parked_pulls = 65536;
  // One key in this many feeds the gradient noise scale this server
  // estimates from the pushes it receives (ServerCounters::gns_*): 1 takes
  // every key, 0 turns it off, at most 2^20. It keeps the sampled keys'
  // gradients, summed over workers, for each clock not every worker has
  // finished yet: 4 bytes per sampled float per such clock, at most 256 MB
  // (older clocks are then left out).
  uint32_t noise_scale_sample = 8;
  // Threads that apply a large push (or a BSP clock's combined pushes)
  // together, the request thread among them: a push of 32K floats or more
  // is cut into pieces that run at once. Smaller pushes, custom rules and
  // everything else stay on the request thread, and requests are still
  // applied one after another, so ordering, exactly-once and checkpoints
  // are as with one thread. 0: the machine's cores, at most 8; 1 - 256.
  int apply_threads = 0;
  // Threads that move its bytes to and from the network (ZeroMQ's I/O
  // threads), 1 - 64; each connection is served by one, so more may help a
  // server of several busy workers on a machine with cores to spare. 0:
  // with keys (CURVE, whose encryption runs on these threads) a quarter of
  // the machine's cores, 1 to 4; in plain mode 1 (docs/benchmarks.md).
  int io_threads = 0;
  // Put a pull's values into the worker's shared memory, and read a push's
  // from it, when the worker names a region of it (a worker on this host
  // that reaches the server over ipc://: ClientOptions::shm_reply_bytes),
  // rather than their going through the socket: two copies at memory speed
  // (docs/wire.md, docs/benchmarks.md). false: replies carry the values,
  // and pushes naming a region are refused (the worker then sends them in
  // frames). The same holds between servers on one host for the records a
  // primary sends its backup (--replicas=2): in the primary's shared
  // memory (512 MiB of address space, its pages used as records need
  // them) when both have this on, in frames otherwise.
  bool shm_values = true;
  // Interval between heartbeats to the coordinator, 10 ms - 60 s; shorter
  // (a third of it) if the coordinator's heartbeat timeout asks for that.
  int64_t heartbeat_interval_ms = 500;
  // How long Start() waits for the coordinator to answer.
  int64_t connect_timeout_ms = kDefaultTimeoutMs;
  // With replicas (CoordinatorOptions::replicas = 2): a backup new to some
  // of this server's slots gets their rows whole in pieces of about this
  // many bytes, one per step of the request thread and at most two
  // unacknowledged at once, beside the records of the requests (whose
  // replies wait for the pieces sent before them). 1 - 2^30.
  uint64_t replica_copy_chunk_bytes = 4 << 20;
  // A slot move from this server fails when its target acknowledges no
  // chunk for this long; the coordinator then aborts it and this server
  // serves the slots again (docs/elasticity.md). 100 ms - 1 day.
  int64_t move_timeout_ms = 30000;
  // The server stops, and Wait() returns kUnavailable, when it has heard
  // nothing from the coordinator (which answers every heartbeat) for this
  // long: a coordinator gone for good, or a job that ended while this
  // server was cut off, leaves no server running on forever. A restarted
  // coordinator is back well within it. 0 (never) or 1 s - 7 days.
  int64_t coordinator_timeout_ms = 600000;
  // Base directory of checkpoint stores: this server keeps its RocksDB in
  // <state_dir>/server-<id>. It must be readable by the other servers (the
  // same machine or a shared file system): when a server dies, the
  // survivors restore its slots from its store. "" = no checkpoints (a
  // failure then rolls the job back to its start).
  std::string state_dir;
  // Checkpoint versions kept (the newest K). >= 1.
  int keep_checkpoints = 3;
  // Space the checkpoint store leaves free on its disk: a checkpoint (or a
  // rollback's copy) that would leave less fails with ResourceExhausted
  // and a message naming the space needed and free, and writes nothing.
  // RocksDB can abort the process on a write that fails on a full disk.
  // 0 - 1048576 (0: no check).
  int64_t disk_reserve_mb = 64;
  // User update rules, usable by tables created with UpdateRule::kCustom.
  std::map<std::string, CustomRule> custom_rules;
  // The cluster's keys (ductile/security.h); plain mode without them, and
  // then `host` must be a loopback address unless allow_plain_network.
  Security security;
};

// Request counters of one server, as reported by `ductile status`.
struct ServerCounters {
  uint64_t requests = 0;    // data requests received
  uint64_t pushes = 0;      // push and push-pull requests applied
  uint64_t pulls = 0;       // pull and push-pull requests answered
  uint64_t duplicates = 0;  // resent requests recognised, not re-applied
  uint64_t redirects = 0;   // "routing changed" answers
  uint64_t errors = 0;      // malformed or refused requests
  // Of those: refused by a limit (--max_message_bytes, --max_key_floats,
  // the reply limit, --max_stored_mb, --max_window_per_client) and naming a
  // worker from another connection.
  uint64_t refused_limits = 0;
  uint64_t refused_permission = 0;
  // Bytes of requests received and of replies sent, values read from and
  // put in a worker's shared memory included (shm_pushes, shm_replies).
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t keys_stored = 0;
  uint64_t parked_pulls = 0;      // pulls now waiting on a staleness bound
  int64_t min_clock = 0;          // server clock: minimum over live workers
  int64_t checkpoint_clock = -1;  // clock of the last checkpoint written
  uint64_t checkpoints_written = 0;
  uint64_t held_pushes = 0;      // pushes waiting for a checkpoint's cut
  uint64_t slots_moving = 0;     // slots being moved away to another server
  uint64_t move_bytes_left = 0;  // of those moves: bytes not acknowledged yet
  // This server's share of the gradient noise scale's two averages
  // (server/noise_monitor.h): |G|^2 and tr(Sigma)/b, over its sampled
  // keys, and the clocks folded into them. Summed over servers, their
  // ratio is the noise scale in worker batches (ClusterStatus).
  double gns_gradient_sq = 0;
  double gns_noise_trace = 0;
  uint64_t gns_clocks = 0;
  // Clients the exactly-once window holds now, and those forgotten so far
  // for being idle.
  uint64_t window_clients = 0;
  uint64_t window_expired = 0;
  // Time the request thread spent on data requests (receipt to reply or
  // parking), and of it applying pushes' values (update rules included).
  // Their growth over wall time is how busy the server is.
  uint64_t busy_us = 0;
  uint64_t apply_us = 0;
  // Time the request thread spent on the gradient noise scale (reading
  // pushed gradients, and folding each finished clock in).
  uint64_t gns_us = 0;
  // Waiting requests. ZeroMQ does not say how many requests wait in a
  // socket (the workers count them: MemberStatus::in_flight_requests in
  // ductile/admin.h); the request thread counts
  // those it reads back to back, each found waiting as it finished the one
  // before. `queued_requests`: all such requests so far; its growth over
  // that of `requests` is the share of requests that found the server busy.
  // `busy_run_peak`: the longest run of back-to-back requests, less its
  // first, in the current heartbeat interval (a run under way carries over
  // with its length so far): how long the server went without finding its
  // socket empty, in requests, not how many waited at once.
  uint64_t queued_requests = 0;
  uint64_t busy_run_peak = 0;
  // This server's share of the noise scale's averages in data-plan
  // batches, whatever batches a push stood for (AdaScale's units), and the
  // clocks folded into them; summed over servers by the coordinator into
  // the job's noise scale, which it sends back to every server.
  double gns_batch_gradient_sq = 0;
  double gns_batch_noise_trace = 0;
  uint64_t gns_batch_clocks = 0;
  // The noise scale (data-plan batches) its AdaScale tables scale by: the
  // job's, once the coordinator has sent one, else this server's own
  // estimate once it has kAdaScaleMinClocks clocks; 0: none (factor 1).
  double adascale_noise_scale = 0;
  // Of `pulls`: those whose values went into the worker's shared memory
  // rather than a reply frame (ServerOptions::shm_values).
  uint64_t shm_replies = 0;
  // Push and push-pull requests whose values came in the worker's shared
  // memory rather than a frame (copied out on arrival).
  uint64_t shm_pushes = 0;
  // As a backup (--replicas=2): messages of records from a primary on this
  // host that came in the primary's shared memory rather than a frame.
  uint64_t shm_records = 0;
  // Rows (TableOptions::rows), over every table: rows created by a push
  // that admitted them, pushes of ids not admitted yet (dropped, counted
  // per id), and rows removed for being idle (evict_idle_clocks) or beyond
  // the row budget (max_rows). Rows stored now: keys_stored.
  uint64_t rows_admitted = 0;
  uint64_t row_pushes_dropped = 0;
  uint64_t rows_evicted_idle = 0;
  uint64_t rows_evicted_budget = 0;
  // What the server refused or dropped, since it started, to bound what a
  // peer costs it (docs/security.md, "Counts of refusals"); all but
  // refused_parked_pulls as of its last heartbeat. Connections
  // closed as soon as accepted (--reserved_descriptors,
  // --max_connections_per_source), accepts that found no descriptor, and
  // connections closed before their handshake was done (timed out,
  // --handshake_timeout_ms; a key not admitted; the peer gone):
  uint64_t refused_connections = 0;
  uint64_t failed_accepts = 0;
  uint64_t failed_handshakes = 0;
  // Replies for peers that do not read them: refused past
  // --max_queued_reply_mb (the request answered ResourceExhausted
  // instead), and dropped past --max_queued_replies.
  uint64_t refused_replies = 0;
  uint64_t dropped_replies = 0;
  // Pulls refused past --max_parked_pulls_per_worker or --max_parked_pulls
  // (also in refused_limits).
  uint64_t refused_parked_pulls = 0;
};

// Checks every field of `options` against the range its comment gives;
// an InvalidArgument error names the field. Server::Start calls it first,
// and a program that builds ServerOptions from flags or a file can call it
// before it starts anything.
[[nodiscard]] Status Validate(const ServerOptions& options);

class Server {
 public:
  // Validate(options), then starts the server and registers it with the
  // coordinator.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options);

  virtual ~Server() = default;  // stops the server if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Blocks until the server stops (coordinator's shutdown or Stop()).
  virtual Status Wait() = 0;
  // Asks the request thread to stop; returns at once.
  virtual void Stop() = 0;

  virtual int32_t id() const = 0;
  // The tcp address peers reach this server at.
  virtual std::string address() const = 0;
  // The ipc:// address processes on this host reach it at ("" with
  // ServerOptions::enable_ipc off). Values go through a worker's shared
  // memory only over it.
  virtual std::string ipc_address() const = 0;
  virtual ServerCounters counters() const = 0;

 protected:
  Server() = default;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_H_
