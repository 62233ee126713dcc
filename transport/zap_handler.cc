#include "transport/zap_handler.h"

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "glog/logging.h"

namespace ductile {
namespace {

// The public keys of members with keys of their own, from the directory
// Security::members_dir names. Read again at a handshake when the
// directory has changed or a second has passed since it was last read (so
// a key added or removed counts within a second, and a flood of
// handshakes reads it at most once a second).
class MemberKeyDirectory {
 public:
  explicit MemberKeyDirectory(std::string dir) : dir_(std::move(dir)) {}

  // Whether `key` (32 bytes) is a member's; if so, its Z85 text and the
  // name of its file.
  bool Find(const uint8_t* key, std::string* z85, std::string* name) {
    char text[41];
    if (dir_.empty() || zmq_z85_encode(text, key, 32) == nullptr) return false;
    Reload();
    auto found = keys_.find(text);
    if (found == keys_.end()) return false;
    *z85 = text;
    *name = found->second;
    return true;
  }

 private:
  void Reload() {
    const auto now = std::chrono::steady_clock::now();
    struct stat st {};
    const bool exists = stat(dir_.c_str(), &st) == 0;
    const bool changed = exists != existed_ ||
                         st.st_mtim.tv_sec != mtime_.tv_sec ||
                         st.st_mtim.tv_nsec != mtime_.tv_nsec;
    if (read_ && !changed && now - read_at_ < std::chrono::seconds(1)) {
      return;
    }
    std::vector<Status> skipped;
    Result<std::vector<MemberPublicKey>> keys =
        ReadMemberPublicKeys(dir_, &skipped);
    read_ = true;
    read_at_ = now;
    existed_ = exists;
    mtime_ = st.st_mtim;
    if (!keys.ok()) skipped.push_back(keys.status());
    for (const Status& s : skipped) {
      // A key file being written, or a bad one: left out for now.
      if (++problems_ <= 10 || problems_ % 1000 == 0) {
        LOG(WARNING) << "member keys: " << s;
      }
    }
    if (keys.ok()) {
      keys_.clear();
      // One key under two names would be two members, or a role-bound
      // key unbound by a copy under another name: it admits no one.
      std::set<std::string> twice;
      for (const MemberPublicKey& k : *keys) {
        if (!keys_.emplace(k.key, k.name).second) twice.insert(k.key);
      }
      for (const std::string& key : twice) {
        if (++problems_ <= 10 || problems_ % 1000 == 0) {
          LOG(WARNING) << "member keys: the key of " << keys_[key]
                       << ".pub is also under another name in " << dir_
                       << "; it is refused until one is removed";
        }
        keys_.erase(key);
      }
    }
  }

  const std::string dir_;
  std::map<std::string, std::string> keys_;  // Z85 key -> its file's name
  bool read_ = false;
  std::chrono::steady_clock::time_point read_at_{};
  bool existed_ = false;
  timespec mtime_{};
  uint64_t problems_ = 0;
};

}  // namespace

// Answers the ZAP requests of a context's CURVE routers (RFC 27): admits
// the cluster's key as a member, the admin's key as the admin, and the
// keys of members with keys of their own under their names; nobody else.
// Runs until the context is shut down.
void ServeZap(const Security& security, zmq::socket_t& socket) {
  MemberKeyDirectory member_keys(security.members_dir);
  uint8_t cluster[32];
  uint8_t admin[32];
  const bool keys_ok =
      zmq_z85_decode(cluster, security.cluster_public.c_str()) != nullptr &&
      zmq_z85_decode(admin, security.admin_public.c_str()) != nullptr;
  uint64_t refused = 0;
  while (true) {
    std::vector<zmq::message_t> request;
    bool more = true;
    while (more) {
      zmq::message_t frame;
      try {
        if (!socket.recv(frame)) continue;
      } catch (const zmq::error_t& e) {
        // A process stopped and resumed (SIGSTOP, SIGCONT) sees EINTR
        // here: the handler must go on, or no handshake would complete.
        if (e.num() == EINTR) continue;
        if (e.num() == ETERM) return;
        LOG(ERROR) << "ZAP handler: " << e.what();
        return;
      }
      more = frame.more();
      request.push_back(std::move(frame));
    }
    // version, request id, domain, address, identity, mechanism, key
    std::string status = "400";
    std::string user;
    if (request.size() == 7 && request[5].to_string_view() == "CURVE" &&
        request[6].size() == 32 && keys_ok) {
      if (std::memcmp(request[6].data(), cluster, 32) == 0) {
        if (!security.require_member_keys) {
          status = "200";
          user = kMemberUser;
        }
      } else if (std::memcmp(request[6].data(), admin, 32) == 0) {
        status = "200";
        user = kAdminUser;
      } else if (std::string key, name; member_keys.Find(
                     static_cast<const uint8_t*>(request[6].data()), &key,
                     &name)) {
        status = "200";
        // The key (40 characters), then the name it was found under.
        user = std::string(kOwnKeyUser) + key + name;
      }
    }
    if (status != "200") {
      ++refused;
      // The first refusals, then every 1000th: a scan cannot flood the log.
      if (refused <= 10 || refused % 1000 == 0) {
        LOG(WARNING) << "refused a connection from "
                     << (request.size() > 3 ? request[3].to_string() : "?")
                     << (security.require_member_keys
                             ? ": it proves neither a member key of its own "
                               "nor the admin's (--require_member_keys) ("
                             : ": it holds none of the cluster's keys (")
                     << refused << " refused so far)";
      }
    }
    const std::string request_id =
        request.size() > 1 ? request[1].to_string() : "";
    const std::string reply[] = {"1.0", request_id, status, "", user, ""};
    for (size_t i = 0; i < std::size(reply);) {
      try {
        socket.send(zmq::buffer(reply[i]), i + 1 < std::size(reply)
                                               ? zmq::send_flags::sndmore
                                               : zmq::send_flags::none);
        ++i;
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;  // as above: send it again
        if (e.num() == ETERM) return;
        LOG(ERROR) << "ZAP handler: " << e.what();
        return;
      }
    }
  }
}

}  // namespace ductile
