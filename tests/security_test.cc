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
  EXPECT_EQ(ModeOf(dir + "/cluster.pub"), 0644u);
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

// A member key pair for `name` made in `dir` (which holds the cluster's
// keys), loaded over `cluster`.
Security WithMemberKey(const std::string& dir, Security cluster,
                       const std::string& name) {
  EXPECT_TRUE(GenerateMemberKey(dir, name).ok());
  Status loaded = LoadMemberKey(dir + "/members/" + name + ".key", &cluster);
  EXPECT_TRUE(loaded.ok()) << loaded;
  return cluster;
}

TEST(ClusterKeys, AMemberKeyIsForItsMemberOnly) {
  const std::string dir = NewDir("member");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  ASSERT_TRUE(GenerateMemberKey(dir, "worker-0").ok());
  EXPECT_EQ(ModeOf(dir + "/members"), 0700u);
  EXPECT_EQ(ModeOf(dir + "/members/worker-0.key"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/members/worker-0.pub"), 0644u);
  EXPECT_EQ(GenerateMemberKey(dir, "worker-0").code(),
            StatusCode::kAlreadyExists);
  for (const char* bad :
       {"", "..", "a/b", "x y", "worker-01", "server-1x", "worker-"}) {
    EXPECT_EQ(GenerateMemberKey(dir, bad).code(), StatusCode::kInvalidArgument)
        << bad;
  }

  Result<Security> member = LoadClusterKeys(dir, false);
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_FALSE(member->own_key());
  EXPECT_EQ(member->members_dir, dir + "/members");
  Security own = *member;
  ASSERT_TRUE(LoadMemberKey(dir + "/members/worker-0.key", &own).ok());
  EXPECT_TRUE(own.own_key());
  EXPECT_NE(own.member_public, own.cluster_public);
  Result<std::vector<MemberPublicKey>> listed =
      ReadMemberPublicKeys(dir + "/members");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "worker-0");
  EXPECT_EQ((*listed)[0].key, own.member_public);
  // The cluster's key is no member key, and a public file is no pair.
  Security again = *member;
  EXPECT_EQ(LoadMemberKey(dir + "/cluster.key", &again).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadMemberKey(dir + "/members/worker-0.pub", &again).code(),
            StatusCode::kInvalidArgument);
  Security plain;
  EXPECT_EQ(LoadMemberKey(dir + "/members/worker-0.key", &plain).code(),
            StatusCode::kInvalidArgument);

  // Without cluster.key, cluster.pub does for a member with its own key,
  // which connects but cannot listen.
  const std::string bare = NewDir("member-bare");
  std::filesystem::create_directories(bare);
  for (const char* name : {"cluster.pub", "admin.pub"}) {
    std::filesystem::copy_file(dir + "/" + name, bare + "/" + name);
  }
  Result<Security> public_only = LoadClusterKeys(bare, false);
  ASSERT_TRUE(public_only.ok()) << public_only.status();
  EXPECT_TRUE(public_only->curve());
  EXPECT_TRUE(public_only->cluster_secret.empty());
  std::unique_ptr<Transport> keyless = NewZmqTransport(*public_only);
  EXPECT_EQ(keyless->NewDealer("", 0).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(LoadMemberKey(dir + "/members/worker-0.key", &*public_only).ok());
  std::unique_ptr<Transport> connects = NewZmqTransport(*public_only);
  EXPECT_TRUE(connects->NewDealer("", 0).ok());
  EXPECT_EQ(connects->NewRouter(0).status().code(),
            StatusCode::kFailedPrecondition);
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
    auto dealer = dealer_transports_.back()->NewDealer("", 0);
    ASSERT_TRUE(dealer.ok()) << dealer.status();
    ASSERT_TRUE((*dealer)->Connect(address_).ok());
    OutMessage out;
    out.AddString(text);
    // Queued until the handshake completes (or forever if it fails).
    ASSERT_TRUE((*dealer)->Send(std::move(out)).ok());
    dealers_.push_back(std::move(*dealer));
  }

  struct Received {
    std::string text;
    bool from_admin = false;
    std::string member_key;
  };
  // The payloads the router receives until `until` arrives (or `wait`
  // pass), with what their senders proved.
  std::vector<Received> ReceiveUntil(
      const std::string& until,
      std::chrono::seconds wait = std::chrono::seconds(10)) {
    std::vector<Received> got;
    const auto deadline = steady_clock::now() + wait;
    Socket* const sockets[] = {router_.get()};
    while (steady_clock::now() < deadline) {
      EXPECT_TRUE(router_transport_->Wait(sockets, -1, deadline).ok());
      InMessage m;
      bool any = false;
      EXPECT_TRUE(router_->Receive(&m, &any).ok());
      if (!any) continue;
      got.push_back(
          {std::string(m.frame_view(1)), m.from_admin(), m.member_key()});
      if (got.back().text == until) break;
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

  std::vector<Received> got = ReceiveUntil("admin");
  if (got.size() == 1) {  // the admin's came first: wait for the member's
    for (auto& m : ReceiveUntil("member")) got.push_back(m);
  }
  ASSERT_EQ(got.size(), 2u);
  for (const Received& m : got) {
    ASSERT_TRUE(m.text == "member" || m.text == "admin") << m.text;
    EXPECT_EQ(m.from_admin, m.text == "admin") << m.text;
    EXPECT_EQ(m.member_key, "") << m.text;
  }
}

// Members with keys of their own are admitted when their public key is in
// the members directory, even one added after the router started, and
// every message they send names their key; a key pair of one's own that
// is not there gets nothing through.
TEST_F(CurveLink, MembersWithKeysOfTheirOwnAreKnownByThem) {
  const std::string dir = NewDir("link-own");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  Result<Security> member = LoadClusterKeys(dir, false);
  ASSERT_TRUE(member.ok()) << member.status();
  const Security early = WithMemberKey(dir, *member, "early");
  ASSERT_NO_FATAL_FAILURE(StartRouter(*member));
  // A pair of its own, listed in another directory only.
  const std::string elsewhere = NewDir("link-own-elsewhere");
  const Security unlisted = WithMemberKey(elsewhere, *member, "unlisted");
  ASSERT_NO_FATAL_FAILURE(SendFrom(unlisted, "unlisted"));
  ASSERT_NO_FATAL_FAILURE(SendFrom(early, "early"));
  std::vector<Received> got = ReceiveUntil("early");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].member_key, early.member_public);
  EXPECT_FALSE(got[0].from_admin);

  const Security late = WithMemberKey(dir, *member, "late");
  ASSERT_NO_FATAL_FAILURE(SendFrom(late, "late"));
  got = ReceiveUntil("late");
  ASSERT_EQ(got.size(), 1u) << "the unlisted key got through";
  EXPECT_EQ(got[0].member_key, late.member_public);
}

// With require_member_keys, holding cluster.key makes no one a member:
// routers admit only members' own keys and the admin's, and a process with
// neither cannot even connect.
TEST_F(CurveLink, WhenMembersNeedKeysOfTheirOwnTheSharedKeyAdmitsNobody) {
  const std::string dir = NewDir("link-require");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  Result<Security> shared = LoadClusterKeys(dir, false);
  ASSERT_TRUE(shared.ok()) << shared.status();
  Result<Security> admin = LoadClusterKeys(dir, true);
  ASSERT_TRUE(admin.ok()) << admin.status();
  Security router = *shared;
  router.require_member_keys = true;
  ASSERT_NO_FATAL_FAILURE(StartRouter(router));

  Security refuses_itself = *shared;
  refuses_itself.require_member_keys = true;
  std::unique_ptr<Transport> t = NewZmqTransport(refuses_itself);
  Result<std::unique_ptr<Socket>> dealer = t->NewDealer("", 0);
  EXPECT_EQ(dealer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(dealer.status().message().find("--require_member_keys"),
            std::string::npos)
      << dealer.status();

  // One that does not know the rule tries with the shared key anyway.
  ASSERT_NO_FATAL_FAILURE(SendFrom(*shared, "shared"));
  Security own = WithMemberKey(dir, *shared, "own");
  own.require_member_keys = true;
  ASSERT_NO_FATAL_FAILURE(SendFrom(own, "own"));
  Security boss = *admin;
  boss.require_member_keys = true;
  ASSERT_NO_FATAL_FAILURE(SendFrom(boss, "admin"));
  std::vector<Received> got = ReceiveUntil("admin");
  if (got.size() == 1 && got[0].text == "admin") {
    for (auto& m : ReceiveUntil("own")) got.push_back(m);
  }
  // And nothing after them: the shared key's handshake has had its time.
  for (auto& m : ReceiveUntil("(none)", std::chrono::seconds(1))) {
    got.push_back(m);
  }
  ASSERT_EQ(got.size(), 2u);
  for (const Received& m : got) {
    EXPECT_NE(m.text, "shared");
    if (m.text == "own") {
      EXPECT_EQ(m.member_key, own.member_public);
    } else {
      EXPECT_TRUE(m.from_admin) << m.text;
    }
  }
}

// A dealer's limit: a router (a peer that registered as a server, say)
// cannot make a client take a message far over the client's limit. libzmq
// closes that connection unread, for good (a protocol error is not
// reconnected): nothing sent after it arrives either.
TEST(DealerLimit, ARouterCannotSendADealerFarMoreThanItsLimit) {
  std::unique_ptr<Transport> router_side = NewZmqTransport(Security());
  std::unique_ptr<Transport> dealer_side = NewZmqTransport(Security());
  auto router = router_side->NewRouter(0);
  ASSERT_TRUE(router.ok()) << router.status();
  auto bound = (*router)->Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(bound.ok()) << bound.status();
  // Closed beyond 2x + 1 MiB, and never below 2x kControlMessageBytes.
  constexpr int64_t kLimit = int64_t{64} << 20;  // 129 MiB
  auto dealer = dealer_side->NewDealer("limited", kLimit);
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  ASSERT_TRUE((*dealer)->Connect(*bound).ok());
  OutMessage hello;
  hello.AddString("hello");
  ASSERT_TRUE((*dealer)->Send(std::move(hello)).ok());
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  InMessage m;
  bool got = false;
  Socket* const at_router[] = {router->get()};
  while (!got && steady_clock::now() < deadline) {
    ASSERT_TRUE(router_side->Wait(at_router, -1, deadline).ok());
    ASSERT_TRUE((*router)->Receive(&m, &got).ok());
  }
  ASSERT_TRUE(got) << "the router heard nothing";
  const std::string identity(m.frame_view(0));
  auto send = [&](std::string payload) {
    OutMessage out;
    out.AddString(identity);
    out.AddString(std::move(payload));
    ASSERT_TRUE((*router)->Send(std::move(out)).ok());
  };
  send(std::string(size_t{136} << 20, 'x'));
  send("after");
  Socket* const at_dealer[] = {dealer->get()};
  const auto quiet = steady_clock::now() + std::chrono::seconds(2);
  while (steady_clock::now() < quiet) {
    ASSERT_TRUE(dealer_side->Wait(at_dealer, -1, quiet).ok());
    got = false;
    ASSERT_TRUE((*dealer)->Receive(&m, &got).ok());
    ASSERT_FALSE(got) << "the dealer took a message of "
                      << m.frame_view(0).size() << " bytes";
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
        RequestDrainServer(cluster.address(), 0, 10000, member),
        ReportMemberExit(cluster.address(), {"worker", 0, 0, 1}, 10000,
                         member)}) {
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

// A message of `type` under `seq`, naming member `member_id` as its sender.
wire::Header Naming(wire::MessageType type, uint64_t seq, int32_t member_id) {
  wire::Header h;
  h.set_type(type);
  h.set_seq(seq);
  h.set_member_id(member_id);
  return h;
}

// A raw peer's request to a coordinator or server and its reply's header;
// with `keys`, over CURVE, proving the member key if it has one, else the
// cluster's; with `identity`, under that routing identity.
wire::Header AskRaw(const std::string& address, const wire::Header& request,
                    const Security* keys = nullptr,
                    const std::string& identity = "") {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  if (keys != nullptr) {
    socket.set(zmq::sockopt::curve_serverkey, keys->cluster_public);
    socket.set(zmq::sockopt::curve_publickey,
               keys->own_key() ? keys->member_public : keys->cluster_public);
    socket.set(zmq::sockopt::curve_secretkey,
               keys->own_key() ? keys->member_secret : keys->cluster_secret);
  }
  if (!identity.empty()) socket.set(zmq::sockopt::routing_id, identity);
  socket.connect(address);
  const std::string bytes = request.SerializeAsString();
  socket.send(zmq::buffer(bytes), zmq::send_flags::none);
  // The reply carries the request's seq; a member also gets notices
  // (seq 0), skipped here.
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (steady_clock::now() < deadline) {
    zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(100));
    zmq::message_t frame;
    if ((items[0].revents & ZMQ_POLLIN) == 0 ||
        !socket.recv(frame, zmq::recv_flags::none)) {
      continue;
    }
    wire::Header reply;
    reply.ParseFromArray(frame.data(), static_cast<int>(frame.size()));
    while (frame.more() && socket.recv(frame, zmq::recv_flags::none)) {
    }
    if (reply.seq() == request.seq()) return reply;
  }
  return wire::Header();
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

  wire::Header finish = Naming(wire::FINISH, 1, 0);
  wire::Header heartbeat = Naming(wire::HEARTBEAT, 2, 0);
  heartbeat.mutable_counters();  // a server's heartbeat
  wire::Header ack = Naming(wire::RECOVER_ACK, 3, 0);
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

// A member that asks to register again from the same connection (its
// first answer late, or lost with a coordinator that died) is the same
// member: the same id, and not a second server or worker.
TEST(MemberIdentity, ARepeatedRegistrationIsAnsweredAsTheFirst) {
  testing::TestClusterOptions options;
  options.num_servers = 1;
  testing::TestCluster cluster(options);
  wire::Header as_server;
  as_server.set_type(wire::REGISTER);
  as_server.set_role(wire::ROLE_SERVER);
  as_server.set_member_id(-1);  // any id
  as_server.mutable_endpoint()->set_tcp_address("tcp://127.0.0.1:1");
  wire::Header as_worker;
  as_worker.set_type(wire::REGISTER);
  as_worker.set_role(wire::ROLE_WORKER);
  // The worker first: its answer waits for every server's word.
  for (wire::Header* request : {&as_worker, &as_server}) {
    const std::string identity =
        request == &as_server ? "server-again" : "worker-again";
    std::vector<int32_t> ids;
    for (uint64_t seq : {1, 2}) {
      request->set_seq(seq);
      const wire::Header reply = AskRaw(cluster.address(), *request,
                                        /*keys=*/nullptr, identity);
      ASSERT_EQ(reply.status_code(), 0) << reply.status_message();
      ASSERT_EQ(reply.type(), wire::CONTROL_REPLY) << reply.ShortDebugString();
      ids.push_back(reply.member_id());
    }
    EXPECT_EQ(ids[0], ids[1]) << identity;
    EXPECT_GE(ids[0], request == &as_server ? 1 : 0) << identity;
  }
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 10000);
  ASSERT_TRUE(status.ok()) << status.status();
  int servers = 0, workers = 0;
  for (const MemberStatus& m : status->members) {
    servers += m.role == "server";
    workers += m.role == "worker";
  }
  EXPECT_EQ(servers, 2);
  EXPECT_EQ(workers, 1);
}

// The same after the coordinator restarted on its state: a server whose
// registration the coordinator saved, then died before answering, asks the
// new coordinator again. It is the same server: no second id, and no
// rollback for a "restart" that never was.
TEST(MemberIdentity, ARepeatedRegistrationAfterACoordinatorRestartIsTheSame) {
  const std::string dir = NewDir("register-again");
  CoordinatorOptions c;
  c.bind_address = "tcp://127.0.0.1:0";
  c.num_servers = 1;
  c.num_workers = 1;
  c.state_dir = dir + "/coordinator";
  auto first = Coordinator::Start(c);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = (*first)->address();
  wire::Header as_server;
  as_server.set_type(wire::REGISTER);
  as_server.set_seq(1);
  as_server.set_role(wire::ROLE_SERVER);
  as_server.set_member_id(-1);
  as_server.mutable_endpoint()->set_tcp_address("tcp://127.0.0.1:1");
  const wire::Header registered =
      AskRaw(address, as_server, /*keys=*/nullptr, "server-again");
  ASSERT_EQ(registered.status_code(), 0) << registered.status_message();
  const int32_t id = registered.member_id();
  Result<ClusterStatus> before = QueryClusterStatus(address, 10000);
  ASSERT_TRUE(before.ok()) << before.status();
  (*first)->Stop();
  first->reset();

  c.bind_address = address;
  auto second = Coordinator::Start(c);
  ASSERT_TRUE(second.ok()) << second.status();
  as_server.set_seq(2);
  const wire::Header again =
      AskRaw(address, as_server, /*keys=*/nullptr, "server-again");
  ASSERT_EQ(again.status_code(), 0) << again.status_message();
  EXPECT_EQ(again.member_id(), id);
  Result<ClusterStatus> after = QueryClusterStatus(address, 10000);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->generation, before->generation);
  EXPECT_FALSE(after->recovering);
  int servers = 0;
  for (const MemberStatus& m : after->members) servers += m.role == "server";
  EXPECT_EQ(servers, 1);
  (*second)->Stop();
  std::filesystem::remove_all(dir);
}

// Refused with kPermissionDenied, for want of the member key `what` names.
void ExpectRefusedForItsKey(const std::string& address,
                            const wire::Header& spoofed, const Security& keys,
                            const std::string& identity = "") {
  const wire::Header reply = AskRaw(address, spoofed, &keys, identity);
  EXPECT_EQ(reply.status_code(),
            static_cast<int>(StatusCode::kPermissionDenied))
      << wire::MessageType_Name(spoofed.type()) << ": "
      << reply.status_message();
  EXPECT_NE(reply.status_message().find("key"), std::string::npos)
      << reply.status_message();
}

// Members with keys of their own: an id registered with one is bound to
// it. Another member, with a key of its own or the cluster's shared one,
// can neither register under that id (how a restarted member takes its
// place back) nor speak for it, even from a connection with its identity.
TEST(MemberKeys, AMemberRegisteredWithItsKeyIsTakenByNoOtherKey) {
  const std::string dir = NewDir("own-cluster");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  Result<Security> shared = LoadClusterKeys(dir, false);
  ASSERT_TRUE(shared.ok()) << shared.status();
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.security = WithMemberKey(dir, *shared, "server-0");
  testing::TestCluster cluster(options);
  const Security worker_key = WithMemberKey(dir, *shared, "member-a");
  std::unique_ptr<Client> worker = cluster.Connect(true, 20000, &worker_key);
  ASSERT_NE(worker, nullptr);
  ASSERT_EQ(worker->worker_id(), 0);
  TableOptions table;
  table.name = "own";
  auto id = worker->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::vector<Key> keys = {3};
  ASSERT_TRUE(worker->Push(*id, keys, std::vector<float>{1.5f}).ok());

  const Security other = WithMemberKey(dir, *shared, "member-b");
  const Security& shared_key = *shared;
  wire::Header as_worker;
  as_worker.set_type(wire::REGISTER);
  as_worker.set_seq(1);
  as_worker.set_role(wire::ROLE_WORKER);
  as_worker.set_worker_id(0);
  wire::Header as_server;
  as_server.set_type(wire::REGISTER);
  as_server.set_seq(2);
  as_server.set_role(wire::ROLE_SERVER);
  as_server.set_member_id(0);
  as_server.mutable_endpoint()->set_tcp_address("tcp://127.0.0.1:1");
  wire::Header finish = Naming(wire::FINISH, 3, 0);
  wire::Header heartbeat = Naming(wire::HEARTBEAT, 4, 0);
  heartbeat.mutable_counters();  // server 0's
  for (const Security* keys : {&other, &shared_key}) {
    for (const wire::Header& spoofed : {as_worker, as_server, finish}) {
      ExpectRefusedForItsKey(cluster.address(), spoofed, *keys);
    }
    ExpectRefusedForItsKey(cluster.address(), heartbeat, *keys);
  }
  // A peer that knows a member's connection identity and takes it over
  // (the router hands it the identity) is still not that member; the
  // member itself is taken at its word.
  const Security third = WithMemberKey(dir, *shared, "member-c");
  wire::Header as_worker_1 = as_worker;
  as_worker_1.set_worker_id(1);
  const wire::Header registered =
      AskRaw(cluster.address(), as_worker_1, &third, "worker-c-identity");
  ASSERT_EQ(registered.status_code(), 0) << registered.status_message();
  ASSERT_EQ(registered.type(), wire::CONTROL_REPLY)
      << registered.ShortDebugString();
  ASSERT_EQ(registered.member_id(), 1);
  wire::Header finish_1 = finish;
  finish_1.set_member_id(1);
  ExpectRefusedForItsKey(cluster.address(), finish_1, other,
                         "worker-c-identity");
  // Nor does anything else it sends count, whatever it names.
  wire::Header worker_heartbeat = Naming(wire::HEARTBEAT, 7, 99);
  wire::Header as_new_server = as_server;
  as_new_server.set_member_id(5);
  for (const wire::Header& spoofed : {worker_heartbeat, as_new_server}) {
    ExpectRefusedForItsKey(cluster.address(), spoofed, other,
                           "worker-c-identity");
  }
  const wire::Header finished =
      AskRaw(cluster.address(), finish_1, &third, "worker-c-identity");
  EXPECT_EQ(finished.status_code(), 0) << finished.status_message();
  // Servers refuse a push or clock naming worker 0 without its key.
  wire::Header clock;
  clock.set_type(wire::CLOCK);
  clock.set_seq(5);
  clock.set_worker_id(0);
  clock.set_clock(5);
  wire::Header push;
  push.set_type(wire::PUSH);
  push.set_seq(6);
  push.set_worker_id(0);
  for (const Security* keys : {&other, &shared_key}) {
    for (const wire::Header& spoofed : {clock, push}) {
      ExpectRefusedForItsKey(cluster.server(0).address(), spoofed, *keys);
    }
  }
  EXPECT_EQ(cluster.server(0).counters().refused_permission, 4u);

  // The job is intact: every member active, worker 0's state exact.
  const Security admin = *LoadClusterKeys(dir, true);
  Result<ClusterStatus> status =
      QueryClusterStatus(cluster.address(), 10000, admin);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->members.size(), 3u);
  for (const MemberStatus& m : status->members) {
    EXPECT_EQ(m.state, m.role == "worker" && m.id == 1 ? "finished" : "active")
        << m.role << " " << m.id;
  }
  ASSERT_TRUE(worker->Push(*id, keys, std::vector<float>{1.5f}).ok());
  std::vector<float> out(1);
  ASSERT_TRUE(worker->Pull(*id, keys, out).ok());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_TRUE(worker->Finish().ok());
}

TEST(MemberKeys, OnlyServerAndWorkerNamesWithADecimalIdBindARole) {
  bool server = false;
  int32_t id = -1;
  EXPECT_TRUE(MemberKeyRole("server-0", &server, &id));
  EXPECT_TRUE(server);
  EXPECT_EQ(id, 0);
  EXPECT_TRUE(MemberKeyRole("worker-1048575", &server, &id));
  EXPECT_FALSE(server);
  EXPECT_EQ(id, 1048575);
  for (const char* free_name :
       {"member-a", "worker-", "worker-01", "worker--1", "worker-1048576",
        "server-1x", "Server-1", "worker-99999999", "observer-0", ""}) {
    EXPECT_FALSE(MemberKeyRole(free_name, &server, &id)) << free_name;
  }
}

// A key named for a member (server-N, worker-N, as `ductile keygen
// --servers --workers` makes them) registers only as that member: a
// worker's key cannot register as a server and be given slots, nor take
// another worker's id, even one never registered.
TEST(MemberKeys, AKeyNamedForAMemberRegistersOnlyAsThatMember) {
  const std::string dir = NewDir("named-cluster");
  ASSERT_TRUE(GenerateClusterKeys(dir).ok());
  Result<Security> shared = LoadClusterKeys(dir, false);
  ASSERT_TRUE(shared.ok()) << shared.status();
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.security = WithMemberKey(dir, *shared, "server-0");
  options.security.require_member_keys = true;
  testing::TestCluster cluster(options);
  Security worker_1 = WithMemberKey(dir, *shared, "worker-1");
  worker_1.require_member_keys = true;

  wire::Header as_worker;
  as_worker.set_type(wire::REGISTER);
  as_worker.set_role(wire::ROLE_WORKER);
  wire::Header as_server;
  as_server.set_type(wire::REGISTER);
  as_server.set_role(wire::ROLE_SERVER);
  as_server.mutable_endpoint()->set_tcp_address("tcp://127.0.0.1:1");
  uint64_t seq = 1;
  const auto refused = [&](wire::Header h) {
    h.set_seq(seq++);
    const wire::Header reply = AskRaw(cluster.address(), h, &worker_1);
    EXPECT_EQ(reply.status_code(),
              static_cast<int>(StatusCode::kPermissionDenied))
        << h.ShortDebugString() << ": " << reply.ShortDebugString();
    EXPECT_NE(reply.status_message().find("registers only as worker 1"),
              std::string::npos)
        << reply.status_message();
  };
  wire::Header other_worker = as_worker;
  other_worker.set_worker_id(0);  // free, never registered
  refused(other_worker);
  wire::Header new_server = as_server;
  new_server.set_member_id(1);
  refused(new_server);
  wire::Header any_server = as_server;
  any_server.set_member_id(-1);
  refused(any_server);

  // Nor does a worker's key move slots into a server.
  wire::Header migrate;
  migrate.set_type(wire::MIGRATE_DATA);
  migrate.set_seq(seq++);
  migrate.set_change_id(7);
  const wire::Header moved =
      AskRaw(cluster.server(0).address(), migrate, &worker_1);
  EXPECT_EQ(moved.status_code(),
            static_cast<int>(StatusCode::kPermissionDenied))
      << moved.ShortDebugString();
  EXPECT_NE(moved.status_message().find("only servers move slots"),
            std::string::npos)
      << moved.status_message();

  // Its own id is its to take, even unasked (the server above registered
  // with no id and is server 0 by its key); nothing was registered on the
  // way.
  ClientOptions client;
  client.coordinator_address = cluster.address();
  client.request_timeout_ms = 20000;
  client.connect_timeout_ms = 20000;
  client.security = worker_1;
  client.requested_worker_id = -1;
  Result<std::unique_ptr<Client>> worker = Client::Connect(client);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ((*worker)->worker_id(), 1);
  const Security admin = *LoadClusterKeys(dir, true);
  Result<ClusterStatus> status =
      QueryClusterStatus(cluster.address(), 10000, admin);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->members.size(), 2u);  // server 0, worker 1
  for (const MemberStatus& m : status->members) {
    EXPECT_EQ(m.id, m.role == "server" ? 0 : 1) << m.role;
  }
  EXPECT_TRUE((*worker)->Finish().ok());
}

}  // namespace
}  // namespace ductile
