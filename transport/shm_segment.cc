#include "transport/shm_segment.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ductile {
namespace {

// Why `path` could not be opened: lasting (kNotFound: no such process or
// descriptor; kPermissionDenied: another user's) or passing
// (kUnavailable: this process is short of descriptors or memory).
Status OpenError(const std::string& path, int error) {
  const std::string message = "opening " + path + ": " + std::strerror(error);
  switch (error) {
    case ENOENT:
    case ESRCH:
      return NotFoundError(message);
    case EACCES:
    case EPERM:
      return PermissionDeniedError(message);
    default:
      return UnavailableError(message);
  }
}

constexpr char kMagic[] = "ductile-shm-v1";  // 15 bytes with its NUL
// The memfd's name; /proc/PID/fd/FD of one reads "/memfd:NAME (deleted)".
constexpr char kName[] = "ductile-values";
constexpr uint64_t kMaxSegmentBytes = (uint64_t{64} << 30) + 4096;
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_SEAL;

std::string Errno(const std::string& what) {
  const int error = errno;
  return what + ": " + std::strerror(error);
}

Result<std::string> RandomToken() {
  std::string token(ShmSegment::kTokenBytes, '\0');
  size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = getrandom(token.data() + got, token.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return UnavailableError(Errno("getrandom"));
    got += static_cast<size_t>(n);
  }
  return token;
}

Result<uint8_t*> Map(int fd, uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return UnavailableError(Errno("mmap"));
  return static_cast<uint8_t*>(p);
}

}  // namespace

Result<std::unique_ptr<ShmSegment>> ShmSegment::Create(uint64_t bytes) {
  if (bytes <= kHeaderBytes || bytes > kMaxSegmentBytes) {
    return InvalidArgumentError("a shared memory segment of " +
                                std::to_string(bytes) + " bytes: must be " +
                                std::to_string(kHeaderBytes + 1) + " to " +
                                std::to_string(kMaxSegmentBytes));
  }
  Result<std::string> token = RandomToken();
  DUCTILE_RETURN_IF_ERROR(token.status());
  std::unique_ptr<ShmSegment> segment(new ShmSegment);
  segment->fd_ = memfd_create(kName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (segment->fd_ < 0) return UnavailableError(Errno("memfd_create"));
  if (ftruncate(segment->fd_, static_cast<off_t>(bytes)) != 0) {
    return UnavailableError(Errno("ftruncate"));
  }
  if (fcntl(segment->fd_, F_ADD_SEALS, kRequiredSeals) != 0) {
    return UnavailableError(Errno("sealing a memfd"));
  }
  Result<uint8_t*> data = Map(segment->fd_, bytes);
  DUCTILE_RETURN_IF_ERROR(data.status());
  segment->data_ = *data;
  segment->size_ = bytes;
  segment->pid_ = static_cast<int32_t>(getpid());
  segment->token_ = std::move(*token);
  std::memcpy(segment->data_, kMagic, sizeof(kMagic));
  std::memcpy(segment->data_ + sizeof(kMagic), segment->token_.data(),
              kTokenBytes);
  return segment;
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::Open(int32_t pid, int32_t fd,
                                                     std::string_view token) {
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  if (pid <= 0 || fd < 0 || token.size() != kTokenBytes) {
    return InvalidArgumentError("no shared memory segment is named by " + path +
                                " and a token of " +
                                std::to_string(token.size()) + " bytes");
  }
  // Only a ductile memfd is opened for reading and writing at all: a
  // peer's request must not make this process open whatever another
  // process holds (a device, a pipe). The descriptor is pinned first
  // (O_PATH opens nothing), so that what is checked is what is opened.
  const int pinned = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (pinned < 0) return OpenError(path, errno);
  const std::string own = "/proc/self/fd/" + std::to_string(pinned);
  char target[64] = {};
  const ssize_t n = readlink(own.c_str(), target, sizeof(target) - 1);
  struct statfs fs {};
  const bool is_segment = n > 0 &&
                          std::string_view(target, static_cast<size_t>(n)) ==
                              std::string("/memfd:") + kName + " (deleted)" &&
                          fstatfs(pinned, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  const int file =
      is_segment ? open(own.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
                 : -1;
  const int open_error = errno;
  close(pinned);
  if (!is_segment) {
    return InvalidArgumentError(path + " is not a ductile segment");
  }
  if (file < 0) return OpenError(path, open_error);
  struct stat st {};
  const int seals = fcntl(file, F_GET_SEALS);
  Status s;
  if (fstat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = InvalidArgumentError(path + " is not a memory file");
  } else if (seals < 0 || (seals & kRequiredSeals) != kRequiredSeals) {
    s = InvalidArgumentError(path + " is not sealed against shrinking");
  } else if (static_cast<uint64_t>(st.st_size) <= kHeaderBytes ||
             static_cast<uint64_t>(st.st_size) > kMaxSegmentBytes) {
    s = InvalidArgumentError(path + " has " + std::to_string(st.st_size) +
                             " bytes, not a segment's size");
  }
  std::unique_ptr<ShmSegment> segment(new ShmSegment);
  if (s.ok()) {
    Result<uint8_t*> data = Map(file, static_cast<uint64_t>(st.st_size));
    s = data.status();
    if (s.ok()) {
      segment->data_ = *data;
      segment->size_ = static_cast<uint64_t>(st.st_size);
      segment->device_ = static_cast<uint64_t>(st.st_dev);
      segment->inode_ = static_cast<uint64_t>(st.st_ino);
    }
  }
  close(file);
  DUCTILE_RETURN_IF_ERROR(s);
  if (std::memcmp(segment->data_, kMagic, sizeof(kMagic)) != 0 ||
      std::memcmp(segment->data_ + sizeof(kMagic), token.data(), kTokenBytes) !=
          0) {
    return InvalidArgumentError(path + " is not the segment named: its token " +
                                "differs");
  }
  segment->token_.assign(token);
  return segment;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace ductile
