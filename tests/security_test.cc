// Cluster keys, CURVE connections and admin rights (ductile/security.h).
#include "ductile/security.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "proto/ductile.pb.h"
#include "tests/tcp_relay.h"
#include "tests/test_cluster.h"
#include "transport/message.h"
#include "transport/socket.h"
#include "transport/zmq_transport.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A fresh directory under the test's temporary directory.
std::string NewDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") +
                    "/ductile-security-" + std::to_string(getpid()) + "-" +
                    name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Keys made once per name.
Security Keys(const std::string& name, bool as_admin) {
  const std::string dir = NewDir("keys-" + name);
  EXPECT_TRUE(GenerateClusterKeys(dir).ok());
  Result<Security> keys = LoadClusterKeys(dir, as_admin);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys.ok() ? *keys : Security();
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(ClusterKeys, KeygenWritesSecretFilesForTheOwnerOnlyAndNeverOverwrites) {
  const std::string dir = NewDir("keygen");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_EQ(ModeOf(dir + "/cluster.key"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/admin.key"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/admin.pub"), 0644u);
  std::ifstream before(dir + "/cluster.key");
  const std::string text((std::istreambuf_iterator<char>(before)), {});

  Status again = GenerateClusterKeys(dir);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again;
  std::ifstream after(dir + "/cluster.key");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after)), {}), text);
}

TEST(ClusterKeys, AMemberLoadsNoAdminSecretAndAnAdminDoes) {
  const std::string dir = NewDir("load");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  Result<Security> member = LoadClusterKeys(dir, false);
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_TRUE(member->curve());
  EXPECT_FALSE(member->admin());
  EXPECT_EQ(member->cluster_public.size(), 40u);
  EXPECT_EQ(member->admin_public.size(), 40u);
  EXPECT_NE(member->admin_public, member->cluster_public);

  Result<Security> admin = LoadClusterKeys(dir, true);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_TRUE(admin->admin());
  EXPECT_EQ(admin->admin_public, member->admin_public);
  EXPECT_EQ(admin->cluster_secret, member->cluster_secret);

  // Two keygens make different keys.
  const std::string other = NewDir("load-other");
  ASSERT_TRUE(GenerateClusterKeys(other).ok());
  EXPECT_NE(LoadClusterKeys(other, false)->cluster_secret,
            member->cluster_secret);
}

TEST(ClusterKeys, BadKeyFilesAreRefusedWithTheReason) {
  const std::string dir = NewDir("bad");
  EXPECT_EQ(LoadClusterKeys(dir, false).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  // Without admin.key, an admin cannot load; a member can.
  std::filesystem::remove(dir + "/admin.key");
  EXPECT_EQ(LoadClusterKeys(dir, true).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(LoadClusterKeys(dir, false).ok());

  // A secret others can read.
  chmod((dir + "/cluster.key").c_str(), 0644);
  Status readable = LoadClusterKeys(dir, false).status();
  EXPECT_EQ(readable.code(), StatusCode::kPermissionDenied) << readable;
  EXPECT_NE(readable.message().find("chmod 600"), std::string::npos);
  chmod((dir + "/cluster.key").c_str(), 0600);

  // A public key that is not the secret's (another key pair's public).
  const std::string other = NewDir("bad-other");
  ASSERT_TRUE(GenerateClusterKeys(other).ok());
  const Security theirs = *LoadClusterKeys(other, false);
  std::ifstream in(dir + "/cluster.key");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  in.close();
  const std::string mine = LoadClusterKeys(dir, false)->cluster_public;
  const std::string swapped =
      text.replace(text.find(mine), mine.size(), theirs.cluster_public);
  std::ofstream(dir + "/cluster.key") << swapped;
  Status mismatch = LoadClusterKeys(dir, false).status();
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument) << mismatch;
  EXPECT_NE(mismatch.message().find("not the secret key's"), std::string::npos);

  // Not a key at all.
  std::ofstream(dir + "/cluster.key") << "public short\n";
  Status garbage = LoadClusterKeys(dir, false).status();
  EXPECT_EQ(garbage.code(), StatusCode::kInvalidArgument) << garbage;
  EXPECT_NE(garbage.message().find("cluster.key:1"), std::string::npos);
}

// One router and dealers, each on its own transport, as in separate
// processes.
class CurveLink : public ::testing::Test {
 protected:
  // Binds a router of `security` on loopback tcp.
  void StartRouter(const Security& security) {
    router_transport_ = NewZmqTransport(security);
    auto router = router_transport_->NewRouter(0);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = std::move(*router);
    auto bound = router_->Bind("tcp://127.0.0.1:*");
    ASSERT_TRUE(bound.ok()) << bound.status();
    address_ = *bound;
  }

  // A dealer of `security`, on a transport of its own, that sends `text`.
  void SendFrom(const Security& security, const std::string& text) {
    dealer_transports_.push_back(NewZmqTransport(security));
    auto dealer = dealer_transports_.back()->NewDealer("");
    ASSERT_TRUE(dealer.ok()) << dealer.status();
    ASSERT_TRUE((*dealer)->Connect(address_).ok());
    OutMessage out;
    out.AddString(text);
    // Queued until the handshake completes (or forever if it fails).
    ASSERT_TRUE((*dealer)->Send(std::move(out)).ok());
    dealers_.push_back(std::move(*dealer));
  }

  // The payloads the router receives until `until` arrives (or 10 s
  // pass), with whether their senders hold the admin key.
  std::vector<std::pair<std::string, bool>> ReceiveUntil(
      const std::string& until) {
    std::vector<std::pair<std::string, bool>> got;
    const auto deadline = steady_clock::now() + std::chrono::seconds(10);
    Socket* const sockets[] = {router_.get()};
    while (steady_clock::now() < deadline) {
      EXPECT_TRUE(router_transport_->Wait(sockets, -1, deadline).ok());
      InMessage m;
      bool any = false;
      EXPECT_TRUE(router_->Receive(&m, &any).ok());
      if (!any) continue;
      got.emplace_back(std::string(m.frame_view(1)), m.from_admin());
      if (got.back().first == until) break;
    }
    return got;
  }

  std::unique_ptr<Transport> router_transport_;
  std::unique_ptr<Socket> router_;
  std::string address_;
  std::vector<std::unique_ptr<Transport>> dealer_transports_;
  std::vector<std::unique_ptr<Socket>> dealers_;
};

TEST_F(CurveLink, OnlyPeersHoldingTheClusterKeysGetThrough) {
  const Security admin = Keys("link", true);
  Security member = admin;
  member.admin_secret.clear();
  const Security stranger = Keys("link-stranger", true);
  ASSERT_NO_FATAL_FAILURE(StartRouter(member));
  // Sent first: a plain peer, and one holding another cluster's keys.
  ASSERT_NO_FATAL_FAILURE(SendFrom(Security(), "plain"));
  ASSERT_NO_FATAL_FAILURE(SendFrom(stranger, "stranger"));
  // One knowing the cluster's public keys but not its secret: it claims
  // the cluster's public key with a secret of its own.
  Security impostor = stranger;
  impostor.cluster_public = member.cluster_public;
  impostor.admin_secret.clear();
  ASSERT_NO_FATAL_FAILURE(SendFrom(impostor, "impostor"));
  // One knowing the cluster's public key, with a key pair of its own: the
  // handshake works, and only the ZAP handler can refuse it.
  Security outsider = stranger;
  outsider.cluster_public = member.cluster_public;
  ASSERT_TRUE(outsider.admin());  // its client key: its own admin pair
  ASSERT_NO_FATAL_FAILURE(SendFrom(outsider, "outsider"));
  ASSERT_NO_FATAL_FAILURE(SendFrom(member, "member"));
  ASSERT_NO_FATAL_FAILURE(SendFrom(admin, "admin"));

  std::vector<std::pair<std::string, bool>> got = ReceiveUntil("admin");
  if (got.size() == 1) {  // the admin's came first: wait for the member's
    for (auto& m : ReceiveUntil("member")) got.push_back(m);
  }
  ASSERT_EQ(got.size(), 2u);
  for (const auto& [text, from_admin] : got) {
    ASSERT_TRUE(text == "member" || text == "admin") << text;
    EXPECT_EQ(from_admin, text == "admin") << text;
  }
}

TEST(PlainMode, ListeningBeyondLoopbackNeedsKeysOrConsent) {
  std::unique_ptr<Transport> plain = NewZmqTransport(Security());
  auto router = plain->NewRouter(0);
  ASSERT_TRUE(router.ok());
  for (const char* address : {"tcp://0.0.0.0:*", "tcp://*:*"}) {
    Result<std::string> bound = (*router)->Bind(address);
    EXPECT_EQ(bound.status().code(), StatusCode::kPermissionDenied)
        << address << ": " << bound.status();
  }
  EXPECT_TRUE((*router)->Bind("tcp://127.0.0.1:*").ok());

  Security consent;
  consent.allow_plain_network = true;
  std::unique_ptr<Transport> allowed = NewZmqTransport(consent);
  auto open = allowed->NewRouter(0);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE((*open)->Bind("tcp://0.0.0.0:*").ok());

  std::unique_ptr<Transport> curve = NewZmqTransport(Keys("plain", false));
  auto secure = curve->NewRouter(0);
  ASSERT_TRUE(secure.ok());
  EXPECT_TRUE((*secure)->Bind("tcp://0.0.0.0:*").ok());
}

// A whole cluster with keys: members work, strangers get nothing, and
// only the admin may do an admin's work.
TEST(SecureCluster, MembersTrainOnlyTheAdminMayStopItAndStrangersGetNothing) {
  const Security admin = Keys("cluster", true);
  Security member = admin;
  member.admin_secret.clear();
  testing::TestClusterOptions options;
  options.security = member;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions table;
  table.name = "w";
  table.value_width = 2;
  auto id = client->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::vector<Key> keys = {1, 2, 3};
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(client->Push(*id, keys, grad).ok());
  std::vector<float> out(6);
  ASSERT_TRUE(client->Pull(*id, keys, out).ok());
  EXPECT_EQ(out, grad);

  // A member may read the status, not change the job.
  Result<ClusterStatus> status =
      QueryClusterStatus(cluster.address(), 10000, member);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->members.size(), 3u);
  for (Status refused :
       {RequestShutdown(cluster.address(), 10000, member),
        RequestCheckpoint(cluster.address(), 10000, member).status(),
        RequestResize(cluster.address(), 2, 0, 10000, member),
        RequestDrainWorker(cluster.address(), 0, 10000, member),
        RequestDrainServer(cluster.address(), 0, 10000, member)}) {
    EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  }
  Consistency bsp;
  bsp.mode = ConsistencyMode::kBsp;
  EXPECT_EQ(client->SetConsistency(*id, bsp).status().code(),
            StatusCode::kPermissionDenied);

  // Strangers: no answer at all.
  EXPECT_EQ(
      QueryClusterStatus(cluster.address(), 1000, Security()).status().code(),
      StatusCode::kDeadlineExceeded);
  EXPECT_EQ(
      QueryClusterStatus(cluster.address(), 1000, Keys("cluster-other", true))
          .status()
          .code(),
      StatusCode::kDeadlineExceeded);

  // Nothing of the above changed the job; the admin may stop it.
  ASSERT_TRUE(client->Pull(*id, keys, out).ok());
  EXPECT_EQ(out, grad);
  ASSERT_TRUE(RequestShutdown(cluster.address(), 10000, admin).ok());
  EXPECT_TRUE(cluster.coordinator().Wait().ok());
}

// A raw peer's request to the coordinator and its reply's header.
wire::Header AskRaw(const std::string& address, const wire::Header& request) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(address);
  const std::string bytes = request.SerializeAsString();
  socket.send(zmq::buffer(bytes), zmq::send_flags::none);
  zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::poll(items, 1, std::chrono::seconds(10));
  wire::Header reply;
  zmq::message_t frame;
  if ((items[0].revents & ZMQ_POLLIN) &&
      socket.recv(frame, zmq::recv_flags::none)) {
    reply.ParseFromArray(frame.data(), static_cast<int>(frame.size()));
  }
  return reply;
}

// Sends `spoofed` from a peer of its own to `address`: it must be refused
// as naming a member connected elsewhere.
void ExpectRefusedAsConnectedElsewhere(const std::string& address,
                                       const wire::Header& spoofed) {
  const wire::Header reply = AskRaw(address, spoofed);
  EXPECT_EQ(reply.status_code(),
            static_cast<int>(StatusCode::kPermissionDenied))
      << wire::MessageType_Name(spoofed.type()) << ": "
      << reply.status_message();
  EXPECT_NE(reply.status_message().find("connected elsewhere"),
            std::string::npos)
      << reply.status_message();
}

// Messages that name their sender (acks, heartbeats, a worker's finish,
// clocks and pushes) are taken only from that member's own connection:
// another peer cannot finish a worker, take over a server's heartbeat,
// forge its acks or advance a worker's clock.
TEST(MemberIdentity, NoPeerActsForAMemberConnectedElsewhere) {
  testing::TestClusterOptions options;
  options.num_servers = 1;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  ASSERT_EQ(worker->worker_id(), 0);

  wire::Header finish;
  finish.set_type(wire::FINISH);
  finish.set_seq(1);
  finish.set_member_id(0);
  wire::Header heartbeat;
  heartbeat.set_type(wire::HEARTBEAT);
  heartbeat.set_seq(2);
  heartbeat.set_member_id(0);
  heartbeat.mutable_counters();  // a server's heartbeat
  wire::Header ack;
  ack.set_type(wire::RECOVER_ACK);
  ack.set_seq(3);
  ack.set_member_id(0);
  for (const wire::Header& spoofed : {finish, heartbeat, ack}) {
    ExpectRefusedAsConnectedElsewhere(cluster.address(), spoofed);
  }
  // Nor can another peer send the server a clock or a push in worker 0's
  // name (the coordinator told the server worker 0's connection).
  wire::Header clock;
  clock.set_type(wire::CLOCK);
  clock.set_seq(4);
  clock.set_worker_id(0);
  clock.set_clock(5);
  wire::Header push;
  push.set_type(wire::PUSH);
  push.set_seq(5);
  push.set_worker_id(0);
  for (const wire::Header& spoofed : {clock, push}) {
    ExpectRefusedAsConnectedElsewhere(cluster.server(0).address(), spoofed);
  }
  EXPECT_EQ(cluster.server(0).counters().refused_permission, 2u);
  // Worker 0 is still in the job and server 0 still its own.
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 10000);
  ASSERT_TRUE(status.ok()) << status.status();
  for (const MemberStatus& m : status->members) {
    EXPECT_EQ(m.state, "active") << m.role << " " << m.id;
  }
  TableOptions table;
  table.name = "still";
  auto id = worker->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::vector<Key> keys = {4};
  ASSERT_TRUE(worker->Push(*id, keys, std::vector<float>{2.0f}).ok());
  std::vector<float> out(1);
  ASSERT_TRUE(worker->Pull(*id, keys, out).ok());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_TRUE(worker->Finish().ok());
}

// A worker whose connection to the coordinator breaks reconnects under the
// same identity: the coordinator still takes its barriers and its finish
// (a fresh identity would be refused as another connection naming it).
TEST(MemberIdentity, AWorkerIsStillItselfAfterItsConnectionBreaks) {
  const Security admin = Keys("reconnect", true);
  Security member = admin;
  member.admin_secret.clear();
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.security = member;
  testing::TestCluster cluster(options);
  const std::string address = cluster.address();
  testing::TcpRelay relay(std::stoi(address.substr(address.rfind(':') + 1)));

  ClientOptions o;
  o.coordinator_address = relay.address();
  o.connect_timeout_ms = 20000;
  o.request_timeout_ms = 20000;
  o.security = member;
  auto worker = Client::Connect(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE((*worker)->Barrier(20000).ok());
  ASSERT_EQ(relay.accepted(), 1);

  relay.CutAll();
  Status barrier = (*worker)->Barrier(20000);
  EXPECT_TRUE(barrier.ok()) << barrier;
  EXPECT_GE(relay.accepted(), 2) << "the worker did not reconnect";
  Result<ClusterStatus> status = QueryClusterStatus(address, 10000, member);
  ASSERT_TRUE(status.ok()) << status.status();
  for (const MemberStatus& m : status->members) {
    EXPECT_EQ(m.state, "active") << m.role << " " << m.id;
  }
  EXPECT_TRUE((*worker)->Finish().ok());
}

}  // namespace
}  // namespace ductile
