// GenerateClusterKeys and LoadClusterKeys: CURVE key files.
//
// A key file holds lines "public <z85>" and, for a key pair, "secret <z85>";
// lines starting with '#' are comments.
#include "ductile/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ductile {
namespace {

constexpr char kClusterKey[] = "cluster.key";
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
  for (const char* name : {kClusterKey, kAdminKey, kAdminPublic}) {
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

Result<Security> LoadClusterKeys(const std::string& dir, bool as_admin) {
  if (dir.empty()) return InvalidArgumentError("no directory for the keys");
  Security security;
  DUCTILE_RETURN_IF_ERROR(ReadKeyFile(PathIn(dir, kClusterKey),
                                      &security.cluster_public,
                                      &security.cluster_secret));
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

}  // namespace ductile
