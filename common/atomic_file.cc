#include "vtpu/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

namespace fs = std::filesystem;

// Closes `fd`, retrying on EINTR is wrong on Linux (the descriptor is gone): once only.
int close_once(int fd) { return ::close(fd); }

// The process's umask, read without changing it (umask(2) would, for every thread): "Umask:" of
// /proc/self/status; 022 where that is missing.
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0)
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  return 022;
}

// A hidden name for the temporary beside `target`: ".<name>.vtpu-<pid>-<n>".
std::string hidden_name(const fs::path& target, uint64_t n) {
  return (target.parent_path() / ("." + target.filename().string() + ".vtpu-" +
                                  std::to_string(::getpid()) + "-" + std::to_string(n)))
      .string();
}

std::atomic<uint64_t> next_temp_id{0};

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  if (path_.empty()) fail(ENOENT);
  const auto open_in_place = [&] {
    in_place_ = true;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) fail(errno);
  };
  // /dev/stdout, /proc/self/fd/N: a descriptor of this process (perhaps redirected to a regular
  // file by the shell); replacing the file it resolves to would cut it off from the descriptor.
  if (path_.starts_with("/dev/") || path_.starts_with("/proc/")) {
    open_in_place();
    return;
  }
  struct stat old {};
  const bool exists = ::stat(path_.c_str(), &old) == 0;
  if (exists && S_ISDIR(old.st_mode)) fail(EISDIR);
  if (exists && !S_ISREG(old.st_mode)) {
    open_in_place();  // a device, a FIFO
    return;
  }
  std::error_code ec;
  fs::path target = exists ? fs::canonical(path_, ec) : fs::weakly_canonical(path_, ec);
  if (ec) target = fs::path(path_);
  target_ = target.string();
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // O_TMPFILE: unnamed until commit() links it, so a killed process leaves nothing behind.
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE on this file system: a named temporary, removed on every error.
    std::string name = hidden_name(target, next_temp_id++) + "-XXXXXX";
    fd_ = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd_ >= 0) {
      temp_name_ = std::move(name);
      if (!exists && ::fchmod(fd_, 0666 & ~current_umask()) != 0) fail(errno);
    }
  }
  if (fd_ < 0) {
    const int err = errno;
    // A directory without write permission can hold a writable file: write that one in place.
    if (exists && (err == EACCES || err == EPERM || err == EROFS)) {
      open_in_place();
      return;
    }
    fail(err);
  }
  if (exists) {
    if (::fchmod(fd_, old.st_mode & 07777) != 0) fail(errno);
    if (::fchown(fd_, old.st_uid, old.st_gid) != 0 && ::fchown(fd_, -1, old.st_gid) != 0) {
      // Not permitted: the replacement belongs to this process's user and group, as a new file.
    }
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) close_once(fd_);
  fd_ = -1;
  if (!temp_name_.empty()) ::unlink(temp_name_.c_str());
  temp_name_.clear();
}

void AtomicFile::fail(int err) {
  discard();
  throw_file_write_error(what_, path_, err);
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0) fail(EBADF);  // after an error or commit()
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) fail(EBADF);
  if (in_place_) {
    const int fd = fd_;
    fd_ = -1;
    if (close_once(fd) != 0) fail(errno);
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) fail(errno);
  if (temp_name_.empty()) {
    // Give the O_TMPFILE a hidden name beside the target, to rename it over the target.
    const std::string proc_path = "/proc/self/fd/" + std::to_string(fd_);
    for (;;) {
      std::string name = hidden_name(fs::path(target_), next_temp_id++);
      if (::linkat(AT_FDCWD, proc_path.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        temp_name_ = std::move(name);
        break;
      }
      if (errno != EEXIST) fail(errno);
    }
  }
  const int fd = fd_;
  fd_ = -1;
  if (close_once(fd) != 0) fail(errno);
  if (std::rename(temp_name_.c_str(), target_.c_str()) != 0) fail(errno);
  temp_name_.clear();
  committed_ = true;
  // The rename itself reaches the disk with the directory; failing that is no lost data.
  const fs::path dir =
      fs::path(target_).has_parent_path() ? fs::path(target_).parent_path() : fs::path(".");
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    (void)::fsync(dir_fd);
    close_once(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const std::string& what,
                           std::string_view bytes) {
  AtomicFile file(path, what);
  file.write(bytes);
  file.commit();
}

}  // namespace vtpu
