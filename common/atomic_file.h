// A file written whole or not at all: vtpu's one way to write an output file (profiles,
// snapshots, traces, plans, reports).
//
// The bytes go to an unnamed temporary file in the target's directory (Linux's O_TMPFILE), which
// commit() flushes to disk, links under a hidden name (".<name>.vtpu-<id>") and renames over
// the target, as `rename` replaces a file atomically. Until commit() nothing is visible: a failed
// write leaves the old file as it was, and a killed process leaves no temporary behind (an
// unnamed file vanishes with its last descriptor). Where the file system has no O_TMPFILE, the
// temporary is a named file (mkstemp) removed on every error; only a kill between its creation
// and commit() can leave it. A device, a FIFO or a path under /dev or /proc (/dev/stdout) cannot
// be replaced and is written in place, and so is an existing file in a directory where no
// temporary can be made (its directory is not writable, the file is).
#pragma once

#include <string>
#include <string_view>

namespace vtpu {

/// Writes one file atomically (see above). The replacement keeps an existing file's permission
/// bits and, where the process may set them, its owner and group; a new file gets 0666 less the
/// umask, as open(2) gives. Through a symbolic link the file it points to is replaced. Errors are
/// those of throw_file_write_error (common/error.h): "cannot write <what> to '<path>': <the
/// system's reason>", NotFoundError for a missing directory, PermissionDeniedError, and
/// ResourceExhaustedError for a full disk or a file size limit. Thread-compatible; distinct
/// objects (also for one path: the last commit wins) are independent.
class AtomicFile {
 public:
  /// Opens the temporary for `path`; `what` names the content in messages ("the memory
  /// profile").
  AtomicFile(std::string path, std::string what);
  /// Without commit(): removes the temporary; the target is left as it was.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `bytes` to the temporary (or, in place, to the file).
  void write(std::string_view bytes);
  /// Flushes the bytes to disk and puts the file in place. After an error the target is as it
  /// was and the temporary is gone; commit() may be called once.
  void commit();
  /// Whether the file is written in place (a device, a FIFO, /dev/stdout, ...).
  bool in_place() const { return in_place_; }

 private:
  [[noreturn]] void fail(int err);
  void discard() noexcept;

  std::string path_;    // as given
  std::string target_;  // the file to replace: `path_` through its symbolic links
  std::string what_;
  std::string temp_name_;  // the named temporary (mkstemp), or the linked O_TMPFILE during commit
  int fd_ = -1;
  bool in_place_ = false;
  bool committed_ = false;
};

/// AtomicFile of `path` holding `bytes`, committed. Throws as AtomicFile.
void write_file_atomically(const std::string& path, const std::string& what,
                           std::string_view bytes);

}  // namespace vtpu
