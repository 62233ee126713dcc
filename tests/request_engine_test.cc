// The client's request engine against a scripted coordinator and server on
// the simulated network (fake clock): what it sends when a server answers
// one copy of a request that went out twice, or sends a push back; what a
// shutdown notice does to the calls in flight and after it.
#include "client/request_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "ductile/table.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

constexpr char kCoordinatorAddress[] = "tcp://coordinator:1";
constexpr char kServerAddress[] = "tcp://server-0:1";
constexpr TableId kTable = 0;
constexpr int kWidth = 4;

// A message a scripted peer took from its router: who sent it, its header,
// and its frames after the header.
struct Taken {
  std::string identity;
  wire::Header header;
  std::vector<std::string> data;
};

// One client (not a worker) whose coordinator and only server are scripted
// by the test: the coordinator admits it with one table and a routing table
// that gives every slot to server 0; the server answers only what the test
// tells it to.
class ScriptedPeers {
 public:
  ScriptedPeers() {
    sim::NetworkFaults faults;
    faults.min_latency_us = faults.max_latency_us = 100;
    net_ = std::make_unique<sim::SimNetwork>(/*seed=*/1, faults);
    coordinator_transport_ = net_->NewTransport("coordinator");
    coordinator_ = *coordinator_transport_->NewRouter(kMaxBytes);
    EXPECT_TRUE(coordinator_->Bind(kCoordinatorAddress).ok());
    server_transport_ = net_->NewTransport("server-0");
    server_ = *server_transport_->NewRouter(kMaxBytes);
    EXPECT_TRUE(server_->Bind(kServerAddress).ok());

    env_ = std::make_unique<sim::SimEnv>(net_.get(), &disk_, "client");
    ClientOptions options;
    options.coordinator_address = kCoordinatorAddress;
    options.prefer_ipc = false;
    options.register_as_worker = false;
    options.request_timeout_ms = 60000;
    client_ = std::make_unique<ClientImpl>(options, env_.get(),
                                           /*own_thread=*/false);
    EXPECT_TRUE(client_->Start().ok());
  }

  ClientImpl& client() { return *client_; }

  // Registers the client, answering its coordinator's requests.
  void Admit() {
    std::shared_ptr<ControlOperation> reg = client_->StartRegister();
    for (int i = 0; i < 100 && !reg->done(); ++i) Run(milliseconds(1));
    ASSERT_TRUE(reg->done());
    ASSERT_TRUE(reg->Wait().ok()) << reg->Wait();
  }

  // Runs the network and the client for `duration` of simulated time; the
  // coordinator answers as it goes, the server only collects.
  void Run(milliseconds duration) {
    const auto end = net_->now() + duration;
    while (true) {
      net_->DeliverDue();
      client_->Step();
      AnswerCoordinator();
      CollectAtServer();
      client_->Step();
      auto next = std::min(client_->NextWakeup(), end);
      if (auto due = net_->NextDelivery(); due) next = std::min(next, *due);
      if (net_->now() >= end) break;
      net_->AdvanceTo(
          std::max(next, net_->now() + std::chrono::microseconds(1)));
    }
  }

  // The coordinator tells the client that the job is shutting down.
  void AnnounceShutdown() {
    wire::Header notice;
    notice.set_type(wire::SHUTDOWN_NOTICE);
    OutMessage out;
    out.AddString(client_identity_);
    out.AddString(notice.SerializeAsString());
    ASSERT_TRUE(coordinator_->Send(std::move(out)).ok());
  }

  // The data requests the server received, oldest first, taken.
  std::vector<Taken> TakeRequests() { return std::move(at_server_); }

  // The server answers request `to` with `status` (and `values`, if
  // given: a pull's).
  void Answer(const Taken& to, const Status& status,
              const std::vector<float>* values = nullptr) {
    wire::Header reply;
    reply.set_type(wire::DATA_REPLY);
    reply.set_seq(to.header.seq());
    reply.set_epoch(kEpoch);
    StatusToWire(status, &reply);
    OutMessage out;
    out.AddString(to.identity);
    out.AddString(reply.SerializeAsString());
    if (values != nullptr) {
      out.AddString(std::string(reinterpret_cast<const char*>(values->data()),
                                values->size() * sizeof(float)));
    }
    ASSERT_TRUE(server_->Send(std::move(out)).ok());
  }

 private:
  static constexpr int64_t kMaxBytes = int64_t{1} << 24;
  static constexpr uint64_t kEpoch = 1;

  static std::optional<Taken> Take(Socket& router) {
    InMessage message;
    bool got = false;
    if (!router.Receive(&message, &got).ok() || !got) return std::nullopt;
    Taken taken;
    taken.identity = std::string(message.frame_view(0));
    EXPECT_TRUE(ParseHeader(message.frame(1), &taken.header).ok());
    for (size_t i = 2; i < message.size(); ++i) {
      taken.data.emplace_back(message.frame_view(i));
    }
    return taken;
  }

  wire::RoutingTable Routing() const {
    wire::RoutingTable routing;
    routing.set_epoch(kEpoch);
    routing.set_num_slots(16);
    for (int i = 0; i < 16; ++i) routing.add_slot_owner(0);
    wire::ServerEndpoint* server = routing.add_servers();
    server->set_id(0);
    server->set_tcp_address(kServerAddress);
    return routing;
  }

  void AnswerCoordinator() {
    while (std::optional<Taken> taken = Take(*coordinator_)) {
      const wire::MessageType type = taken->header.type();
      if (type == wire::REGISTER) client_identity_ = taken->identity;
      if (type != wire::REGISTER && type != wire::GET_ROUTING) continue;
      wire::Header reply;
      reply.set_type(wire::CONTROL_REPLY);
      reply.set_seq(taken->header.seq());
      *reply.mutable_routing() = Routing();
      if (type == wire::REGISTER) {
        TableOptions table;
        table.name = "t";
        table.value_width = kWidth;
        table.rule = UpdateRule::kAdd;
        *reply.add_tables() = ToWire(table, kTable);
      }
      OutMessage out;
      out.AddString(taken->identity);
      out.AddString(reply.SerializeAsString());
      ASSERT_TRUE(coordinator_->Send(std::move(out)).ok());
    }
  }

  void CollectAtServer() {
    while (std::optional<Taken> taken = Take(*server_)) {
      if (taken->header.type() == wire::PUSH ||
          taken->header.type() == wire::PULL ||
          taken->header.type() == wire::PUSH_PULL) {
        at_server_.push_back(std::move(*taken));
      }
    }
  }

  std::unique_ptr<sim::SimNetwork> net_;
  sim::MemDisk disk_;
  std::unique_ptr<Transport> coordinator_transport_, server_transport_;
  std::unique_ptr<Socket> coordinator_, server_;
  std::unique_ptr<sim::SimEnv> env_;
  std::unique_ptr<ClientImpl> client_;
  std::vector<Taken> at_server_;
  std::string client_identity_;  // at the coordinator
};

std::vector<uint64_t> Priors(const Taken& request) {
  return {request.header.prior_seqs().begin(),
          request.header.prior_seqs().end()};
}

const std::vector<Key> kKeys = {7};
const std::vector<float> kValues(kWidth, 1.0f);

// Runs the network for `duration`; the one data request the server got
// meanwhile (a test failure if it got none or several).
Taken OnlyRequest(ScriptedPeers& peers, milliseconds duration) {
  peers.Run(duration);
  std::vector<Taken> taken = peers.TakeRequests();
  EXPECT_EQ(taken.size(), 1u);
  return taken.empty() ? Taken{} : std::move(taken.front());
}

// The server applies `request`: the call `handle` is done, and succeeded.
void AnswerOk(ScriptedPeers& peers, const Taken& request,
              const Handle& handle) {
  peers.Answer(request, Status::Ok());
  peers.Run(milliseconds(10));
  ASSERT_TRUE(handle.done());
  EXPECT_TRUE(handle.Wait().ok()) << handle.Wait();
}

// A push sent once and answered "unavailable" was not applied anywhere:
// it goes out again under a new seq and names no earlier one.
TEST(RequestEngine, APushRefusedBeforeItWasSentAgainNamesNoEarlierCopy) {
  ScriptedPeers peers;
  peers.Admit();
  Handle push = peers.client().PushAsync(kTable, kKeys, kValues, {});
  const Taken first = OnlyRequest(peers, milliseconds(10));
  peers.Answer(first, UnavailableError("scripted: not now"));
  const Taken again = OnlyRequest(peers, milliseconds(200));
  EXPECT_NE(again.header.seq(), first.header.seq());
  EXPECT_TRUE(Priors(again).empty());
  AnswerOk(peers, again, push);
}

// A push the server did not answer for a while went out twice under one
// seq. The server then answers the first copy "unavailable" (not
// applied), but the second may still be applied after that answer: the
// request the client sends instead names the first seq, so that a server
// that applied the second copy takes it as a duplicate.
TEST(RequestEngine, APushSentTwiceAndRefusedOnceNamesItsSeqWhenSentAnew) {
  ScriptedPeers peers;
  peers.Admit();
  Handle push = peers.client().PushAsync(kTable, kKeys, kValues, {});
  const Taken first = OnlyRequest(peers, milliseconds(10));
  const uint64_t seq = first.header.seq();
  // Silence: the push is sent again under its seq.
  const Taken copy = OnlyRequest(peers, milliseconds(6000));
  EXPECT_EQ(copy.header.seq(), seq);
  EXPECT_EQ(copy.data, first.data);

  peers.Answer(first, UnavailableError("scripted: not this copy"));
  const Taken anew = OnlyRequest(peers, milliseconds(200));
  EXPECT_NE(anew.header.seq(), seq);
  EXPECT_EQ(Priors(anew), std::vector<uint64_t>{seq});
  // The first seq stays above the done-below mark while the new request
  // is in flight, so a server can still tell that it was applied.
  EXPECT_LE(anew.header.done_below(), seq);
  EXPECT_FALSE(push.done());
  AnswerOk(peers, anew, push);

  // Done now: nothing holds the mark back any more.
  Handle next = peers.client().PushAsync(kTable, kKeys, kValues, {});
  const Taken after = OnlyRequest(peers, milliseconds(10));
  EXPECT_GT(after.header.done_below(), anew.header.seq());
  EXPECT_TRUE(Priors(after).empty());
  AnswerOk(peers, after, next);
}

// A push and then a pull of the same key go to the server; the push is
// sent back (its slot was moving), then the move is called off and the
// server serves the pull. Answered, the pull would miss the push, which is
// only sent again now: so the pull goes again too, once the push is
// applied, and the answer to its first copy is ignored.
TEST(RequestEngine, APullAfterAPushSentBackGoesAgainAfterThePush) {
  ScriptedPeers peers;
  peers.Admit();
  Handle push = peers.client().PushAsync(kTable, kKeys, kValues, {});
  std::vector<float> out(kWidth);
  Handle pull = peers.client().PullAsync(kTable, kKeys, out, {});
  peers.Run(milliseconds(10));
  std::vector<Taken> first = peers.TakeRequests();
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(first[0].header.type(), wire::PUSH);
  ASSERT_EQ(first[1].header.type(), wire::PULL);
  peers.Answer(first[0], UnavailableError("scripted: its slot is moving"));
  const std::vector<float> stale(kWidth, 0.0f);
  peers.Answer(first[1], Status::Ok(), &stale);
  peers.Run(milliseconds(200));
  EXPECT_FALSE(pull.done()) << "the first copy's answer counts for nothing";
  const Taken push_again = OnlyRequest(peers, milliseconds(0));
  EXPECT_EQ(push_again.header.type(), wire::PUSH) << "the push first";
  AnswerOk(peers, push_again, push);
  const Taken pull_again = OnlyRequest(peers, milliseconds(200));
  EXPECT_EQ(pull_again.header.type(), wire::PULL);
  EXPECT_NE(pull_again.header.seq(), first[1].header.seq());
  const std::vector<float> fresh(kWidth, 1.0f);
  peers.Answer(pull_again, Status::Ok(), &fresh);
  peers.Run(milliseconds(10));
  ASSERT_TRUE(pull.done());
  ASSERT_TRUE(pull.Wait().ok()) << pull.Wait();
  EXPECT_EQ(out, fresh);
}

// The coordinator says the job is shutting down while a pull and a push
// wait for a server that will not answer (it stops too): both fail at once
// with kUnavailable, not at their deadline a minute later, and every call
// after that fails the same way without being sent.
TEST(RequestEngine, AShutdownNoticeFailsEveryCallAtOnceAndForGood) {
  ScriptedPeers peers;
  peers.Admit();
  std::vector<float> out(kWidth);
  Handle pull = peers.client().PullAsync(kTable, kKeys, out, {});
  Handle push = peers.client().PushAsync(kTable, kKeys, kValues, {});
  peers.Run(milliseconds(10));
  EXPECT_EQ(peers.TakeRequests().size(), 2u);
  EXPECT_FALSE(peers.client().shutting_down());
  peers.AnnounceShutdown();
  peers.Run(milliseconds(10));
  EXPECT_TRUE(peers.client().shutting_down());
  for (const Handle* h : {&pull, &push}) {
    ASSERT_TRUE(h->done());
    EXPECT_EQ(h->Wait().code(), StatusCode::kUnavailable) << h->Wait();
    EXPECT_EQ(h->Wait().message(), "cluster is shutting down");
  }
  Handle later = peers.client().PushAsync(kTable, kKeys, kValues, {});
  peers.Run(milliseconds(10));
  ASSERT_TRUE(later.done());
  EXPECT_EQ(later.Wait().code(), StatusCode::kUnavailable) << later.Wait();
  EXPECT_TRUE(peers.TakeRequests().empty());
}

}  // namespace
}  // namespace ductile
