// How a cluster's connections are secured (docs/security.md).
//
// With keys, every connection uses ZeroMQ's CURVE: both ends authenticate
// and everything is encrypted. Every router (the coordinator's port, each
// server's tcp:// and ipc:// ports) admits only peers that prove they hold
// the cluster's secret key or the admin's; anyone else completes no
// handshake and gets nothing from any port. Shutting the cluster down,
// checkpoints on demand, resizes, drains and consistency changes need the
// admin key.
//
// A member may also hold a key pair of its own (`ductile keygen
// --member=NAME`): its connections then prove that key, and the
// coordinator and servers bind its member id to it, so no other key holder
// can register under that id again or act in its name.
//
// Without keys (plain mode) nothing is authenticated or encrypted and every
// peer may do anything: for one host only. A plain socket bound to an
// address other than loopback or ipc:// is refused unless
// `allow_plain_network` is set.
//
// Example (a member, and an administrator's tool):
//
//   ductile::Status made = ductile::GenerateClusterKeys("/etc/ductile/keys");
//   ductile::ServerOptions options;
//   auto keys = ductile::LoadClusterKeys("/etc/ductile/keys", false);
//   if (!keys.ok()) return 1;
//   options.security = *keys;
//   ...
//   auto admin = ductile::LoadClusterKeys("/etc/ductile/keys", true);
//   ductile::RequestShutdown(address, 10000, *admin);
#ifndef DUCTILE_SECURITY_H_
#define DUCTILE_SECURITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ductile/status.h"

namespace ductile {

struct Security {
  // CURVE keys, Z85-encoded (40 characters each); all empty in plain mode.
  // Every member holds the cluster's key pair: routers use it as their
  // server key, and connections use it as their client key.
  std::string cluster_public;
  std::string cluster_secret;
  // The admin's public key, which routers admit with admin rights, and,
  // in an administrator's process only, its secret: connections then use
  // the admin key pair as their client key.
  std::string admin_public;
  std::string admin_secret;
  // This process's own member key pair, if it has one: its connections
  // prove it instead of the cluster's key (or the admin's), and the member
  // id it registers is bound to it. A member with its own key needs only
  // the cluster's public key unless it also listens (a server).
  std::string member_public;
  std::string member_secret;
  // Routers also admit the public keys of members found in this directory
  // (files NAME.pub, `ductile keygen --member=NAME`), read again at a
  // handshake when it has changed or a second has passed; "" admits none.
  std::string members_dir;
  // Only keys of members' own and the admin's are admitted: routers refuse
  // a connection proving the cluster's shared key, and a process with
  // neither the admin key nor one of its own cannot connect. Every member
  // id is then bound to a key (no member can register as, or act for,
  // another, whatever ids it names), and holding cluster.key no longer
  // makes one a member. The `ductile` command line sets it with --keys
  // unless given --norequire_member_keys.
  bool require_member_keys = false;
  // Plain mode only: allow binding to addresses other than loopback and
  // ipc:// (anyone who reaches them can act as any member).
  bool allow_plain_network = false;

  // Limits on the connections a process accepts, in every mode (keys or
  // not): each takes a file descriptor from the moment it is accepted,
  // before any handshake, so anyone who can reach a port could otherwise
  // take them all (docs/security.md, "Connections").
  //
  // A connection that has not completed its handshake (ZeroMQ's greeting
  // and, with keys, CURVE's) within this time is closed, on every socket,
  // in ms: [100, 600000].
  int64_t handshake_timeout_ms = 10000;
  // File descriptors kept for the process's own files and sockets: a
  // tcp:// connection accepted when fewer than this many are left under
  // the soft limit of open files is closed at once (refused), an ipc://
  // one when fewer than half are. So the tcp:// connections of a process
  // stay below its limit minus this. [16, 65536].
  int64_t reserved_descriptors = 128;
  // The most tcp:// connections one router keeps from one source address;
  // more from it are closed as they come (refused). 0: no cap. Members on
  // one host behind one address each take one connection per server.
  // [0, 1048576].
  int64_t max_connections_per_source = 256;

  bool curve() const { return !cluster_public.empty(); }
  bool admin() const { return !admin_secret.empty(); }
  bool own_key() const { return !member_secret.empty(); }
};

// Writes a new set of keys into `dir` (created if absent, mode 0700):
// cluster.key (the cluster's key pair), cluster.pub (its public key),
// admin.key (the admin's key pair) and admin.pub (the admin's public key),
// secret files with mode 0600. Refuses (kAlreadyExists) to overwrite keys
// already there. Members need cluster.key and admin.pub; only
// administrators need admin.key.
Status GenerateClusterKeys(const std::string& dir);

// Writes a member's own key pair into `dir`/members: NAME.key (0600, for
// that member only) and NAME.pub (for every coordinator and server).
// `name` is 1 to 64 of [A-Za-z0-9_.-]; one starting "server-" or "worker-"
// must be a role-bound name (MemberKeyRole). Refuses to overwrite.
Status GenerateMemberKey(const std::string& dir, const std::string& name);

// Reads the keys in `dir`; with `as_admin`, admin.key too (then
// connections use the admin key). Checks that each public key is the one
// its secret key makes and that secret files are readable by their owner
// only. Without cluster.key, cluster.pub is enough for a process that
// proves another key (an administrator, or a member with its own key) and
// does not listen. Routers admit the member keys in `dir`/members.
Result<Security> LoadClusterKeys(const std::string& dir, bool as_admin);

// Reads a member's own key pair (a NAME.key from GenerateMemberKey) into
// `security`, which must already hold the cluster's keys.
Status LoadMemberKey(const std::string& path, Security* security);

// A member's public key as a router finds it: NAME.pub's NAME and the key.
struct MemberPublicKey {
  std::string name;
  std::string key;  // Z85, 40 characters
};

// The member public keys in `members_dir` (every *.pub file, in the order
// of their names; a missing directory holds none). A file that is not a
// public key fails the call, or, with `skipped`, is left out and its error
// added there.
Result<std::vector<MemberPublicKey>> ReadMemberPublicKeys(
    const std::string& members_dir, std::vector<Status>* skipped = nullptr);

// The role and id a member key's name binds it to: "server-N" and
// "worker-N" (N a decimal id without leading zeros, below 2^20) may
// register only as that server or worker; any other name binds to
// whatever id the key first registers. Returns false for other names.
bool MemberKeyRole(const std::string& name, bool* server, int32_t* id);

// kInvalidArgument naming the first of `security`'s connection limits
// outside its range (handshake_timeout_ms, reserved_descriptors,
// max_connections_per_source).
Status ValidateConnectionLimits(const Security& security);

}  // namespace ductile

#endif  // DUCTILE_SECURITY_H_
