// GenerateClusterKeys and LoadClusterKeys: CURVE key files.
//
// A key file holds lines "public <z85>" and, for a key pair, "secret <z85>";
// lines starting with '#' are comments.
#include "ductile/security.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

namespace ductile {
namespace {

constexpr char kClusterKey[] = "cluster.key";
constexpr char kClusterPublic[] = "cluster.pub";
constexpr char kMembersDir[] = "members";
constexpr char kAdminKey[] = "admin.key";
constexpr char kAdminPublic[] = "admin.pub";

std::string PathIn(const std::string& dir, const char* name) {
  return dir + "/" + name;
}

// Creates `path` with `mode`, failing if it exists.
Status WriteNewFile(const std::string& path, const std::string& text,
                    mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) {
    const int e = errno;
    if (e == EEXIST) {
      return AlreadyExistsError(path +
                                " exists: keys are never overwritten (remove "
                                "the old ones first)");
    }
    return UnavailableError("cannot create " + path + ": " + strerror(e));
  }
  const ssize_t n = write(fd, text.data(), text.size());
  const int e = errno;
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (n != static_cast<ssize_t>(text.size()) || !synced) {
    unlink(path.c_str());
    return UnavailableError("cannot write " + path + ": " + strerror(e));
  }
  return Status::Ok();
}

struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

Result<KeyPair> NewKeyPair() {
  char public_key[41];
  char secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return FailedPreconditionError(
        std::string("cannot make a CURVE key pair (libzmq built without "
                    "CURVE?): ") +
        zmq_strerror(zmq_errno()));
  }
  return KeyPair{public_key, secret_key};
}

std::string KeyFileText(const char* what, const KeyPair& pair,
                        bool with_secret) {
  std::string text =
      std::string("# ") + what + "\npublic " + pair.public_key + "\n";
  if (with_secret) text += "secret " + pair.secret_key + "\n";
  return text;
}

bool IsZ85Key(const std::string& key) {
  uint8_t bytes[32];
  return key.size() == 40 && zmq_z85_decode(bytes, key.c_str()) != nullptr;
}

// Reads a key file; `secret` is null for a public key file.
Status ReadKeyFile(const std::string& path, std::string* public_key,
                   std::string* secret) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return NotFoundError("cannot read " + path + ": " + strerror(errno) +
                         " (make keys with `ductile keygen --out=DIR`)");
  }
  if (secret != nullptr && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDeniedError(path + " holds a secret key but has mode " +
                                 mode +
                                 ": make it readable by its owner "
                                 "only (chmod 600)");
  }
  std::ifstream in(path);
  if (!in) return UnavailableError("cannot open " + path);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, value, extra;
    fields >> name >> value;
    if (fields >> extra || value.empty() ||
        (name != "public" && name != "secret")) {
      return InvalidArgumentError(path + ":" + std::to_string(line_no) +
                                  ": expected 'public <key>' or 'secret "
                                  "<key>'");
    }
    if (!IsZ85Key(value)) {
      return InvalidArgumentError(path + ":" + std::to_string(line_no) +
                                  ": not a CURVE key (40 characters of Z85)");
    }
    if (name == "public") {
      *public_key = value;
    } else if (secret != nullptr) {
      *secret = value;
    } else {
      return InvalidArgumentError(path +
                                  " is a public key file but holds a "
                                  "secret key");
    }
  }
  if (public_key->empty()) {
    return InvalidArgumentError(path + " holds no public key");
  }
  if (secret == nullptr) return Status::Ok();
  if (secret->empty()) {
    return InvalidArgumentError(path + " holds no secret key");
  }
  char derived[41];
  if (zmq_curve_public(derived, secret->c_str()) != 0 ||
      *public_key != derived) {
    return InvalidArgumentError(path +
                                ": the public key is not the secret key's");
  }
  return Status::Ok();
}

}  // namespace

Status GenerateClusterKeys(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("no directory for the keys");
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return UnavailableError("cannot create " + dir + ": " + strerror(errno));
  }
  for (const char* name :
       {kClusterKey, kClusterPublic, kAdminKey, kAdminPublic}) {
    if (access(PathIn(dir, name).c_str(), F_OK) == 0) {
      return AlreadyExistsError(PathIn(dir, name) +
                                " exists: keys are never overwritten (remove "
                                "the old ones first)");
    }
  }
  DUCTILE_ASSIGN_OR_RETURN(KeyPair cluster, NewKeyPair());
  DUCTILE_ASSIGN_OR_RETURN(KeyPair admin, NewKeyPair());
  DUCTILE_RETURN_IF_ERROR(WriteNewFile(
      PathIn(dir, kClusterKey),
      KeyFileText("ductile cluster key pair: every member needs it; keep it "
                  "secret",
                  cluster, true),
      0600));
  DUCTILE_RETURN_IF_ERROR(WriteNewFile(
      PathIn(dir, kClusterPublic),
      KeyFileText("ductile cluster public key: enough for a member with a "
                  "key of its own that does not listen",
                  cluster, false),
      0644));
  DUCTILE_RETURN_IF_ERROR(WriteNewFile(
      PathIn(dir, kAdminKey),
      KeyFileText("ductile admin key pair: only administrators need it; "
                  "keep it secret",
                  admin, true),
      0600));
  return WriteNewFile(
      PathIn(dir, kAdminPublic),
      KeyFileText("ductile admin public key: every member needs it", admin,
                  false),
      0644);
}

Status GenerateMemberKey(const std::string& dir, const std::string& name) {
  if (dir.empty()) return InvalidArgumentError("no directory for the keys");
  const bool name_ok =
      !name.empty() && name.size() <= 64 &&
      std::all_of(name.begin(), name.end(),
                  [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) ||
                           c == '_' || c == '.' || c == '-';
                  }) &&
      name != "." && name != "..";
  if (!name_ok) {
    return InvalidArgumentError("member key name '" + name +
                                "': use 1 to 64 of A-Z a-z 0-9 _ . -");
  }
  // A name that looks bound to a member must be one (worker-01 would not
  // bind the key to worker 1, and nobody would notice).
  bool server = false;
  int32_t id = -1;
  if ((name.starts_with("server-") || name.starts_with("worker-")) &&
      !MemberKeyRole(name, &server, &id)) {
    return InvalidArgumentError(
        "member key name '" + name +
        "': server-N and worker-N take a decimal id without leading zeros, "
        "below 1048576 (they bind the key to that member)");
  }
  const std::string members = PathIn(dir, kMembersDir);
  for (const std::string& d : {dir, members}) {
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      return UnavailableError("cannot create " + d + ": " + strerror(errno));
    }
  }
  const std::string secret_path = members + "/" + name + ".key";
  const std::string public_path = members + "/" + name + ".pub";
  for (const std::string& path : {secret_path, public_path}) {
    if (access(path.c_str(), F_OK) == 0) {
      return AlreadyExistsError(path +
                                " exists: keys are never overwritten (remove "
                                "the old ones first)");
    }
  }
  DUCTILE_ASSIGN_OR_RETURN(KeyPair pair, NewKeyPair());
  const std::string what = "ductile member key pair of " + name +
                           ": only that member needs it; keep it secret";
  DUCTILE_RETURN_IF_ERROR(
      WriteNewFile(secret_path, KeyFileText(what.c_str(), pair, true), 0600));
  const std::string pub_what = "ductile member public key of " + name +
                               ": every coordinator and server needs it";
  return WriteNewFile(public_path, KeyFileText(pub_what.c_str(), pair, false),
                      0644);
}

Result<Security> LoadClusterKeys(const std::string& dir, bool as_admin) {
  if (dir.empty()) return InvalidArgumentError("no directory for the keys");
  Security security;
  if (access(PathIn(dir, kClusterKey).c_str(), F_OK) != 0 &&
      access(PathIn(dir, kClusterPublic).c_str(), F_OK) == 0) {
    // A process that proves another key needs only the public one.
    DUCTILE_RETURN_IF_ERROR(ReadKeyFile(PathIn(dir, kClusterPublic),
                                        &security.cluster_public, nullptr));
  } else {
    DUCTILE_RETURN_IF_ERROR(ReadKeyFile(PathIn(dir, kClusterKey),
                                        &security.cluster_public,
                                        &security.cluster_secret));
  }
  security.members_dir = PathIn(dir, kMembersDir);
  if (as_admin) {
    DUCTILE_RETURN_IF_ERROR(ReadKeyFile(PathIn(dir, kAdminKey),
                                        &security.admin_public,
                                        &security.admin_secret));
  } else {
    DUCTILE_RETURN_IF_ERROR(ReadKeyFile(PathIn(dir, kAdminPublic),
                                        &security.admin_public, nullptr));
  }
  if (security.admin_public == security.cluster_public) {
    return InvalidArgumentError(dir +
                                ": the admin key is the cluster's key (make "
                                "keys with `ductile keygen`)");
  }
  return security;
}

Status LoadMemberKey(const std::string& path, Security* security) {
  if (!security->curve()) {
    return InvalidArgumentError(
        "a member key goes with the cluster's keys (--keys)");
  }
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".pub") == 0) {
    return InvalidArgumentError(path +
                                " is a public key file: a member needs its "
                                "key pair (NAME.key)");
  }
  std::string public_key;
  std::string secret;
  DUCTILE_RETURN_IF_ERROR(ReadKeyFile(path, &public_key, &secret));
  if (public_key == security->cluster_public ||
      public_key == security->admin_public) {
    return InvalidArgumentError(path +
                                " is the cluster's or the admin's key, not "
                                "a member's (ductile keygen --member=NAME)");
  }
  security->member_public = public_key;
  security->member_secret = secret;
  return Status::Ok();
}

Result<std::vector<MemberPublicKey>> ReadMemberPublicKeys(
    const std::string& members_dir, std::vector<Status>* skipped) {
  std::vector<MemberPublicKey> keys;
  if (members_dir.empty()) return keys;
  DIR* d = opendir(members_dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return keys;
    return UnavailableError("cannot read " + members_dir + ": " +
                            strerror(errno));
  }
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".pub") == 0) {
      names.push_back(name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string key;
    Status read = ReadKeyFile(members_dir + "/" + name, &key, nullptr);
    if (read.ok()) {
      keys.push_back({name.substr(0, name.size() - 4), key});
    } else if (skipped != nullptr) {
      skipped->push_back(read);
    } else {
      return read;
    }
  }
  return keys;
}

bool MemberKeyRole(const std::string& name, bool* server, int32_t* id) {
  std::string_view digits;
  if (name.starts_with("server-")) {
    *server = true;
    digits = std::string_view(name).substr(7);
  } else if (name.starts_with("worker-")) {
    *server = false;
    digits = std::string_view(name).substr(7);
  } else {
    return false;
  }
  if (digits.empty() || digits.size() > 7 ||
      (digits.size() > 1 && digits[0] == '0')) {
    return false;
  }
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value >= (int64_t{1} << 20)) return false;
  *id = static_cast<int32_t>(value);
  return true;
}

Status ValidateConnectionLimits(const Security& security) {
  if (security.handshake_timeout_ms < 100 ||
      security.handshake_timeout_ms > 600000) {
    return InvalidArgumentError(
        "handshake_timeout_ms must be in [100, 600000], not " +
        std::to_string(security.handshake_timeout_ms));
  }
  if (security.reserved_descriptors < 16 ||
      security.reserved_descriptors > 65536) {
    return InvalidArgumentError(
        "reserved_descriptors must be in [16, 65536], not " +
        std::to_string(security.reserved_descriptors));
  }
  if (security.max_connections_per_source < 0 ||
      security.max_connections_per_source > (1 << 20)) {
    return InvalidArgumentError(
        "max_connections_per_source must be in [0, 1048576], not " +
        std::to_string(security.max_connections_per_source));
  }
  return Status::Ok();
}

}  // namespace ductile
