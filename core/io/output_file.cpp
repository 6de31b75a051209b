// output_file.cpp - the temporary-and-rename writer of output_file.h, on POSIX calls: the
// temporary is created with O_EXCL under a random name (mkstemp's guarantee, but with the
// mode the umask gives a new file, 0666 & ~umask, rather than mkstemp's 0600), and written
// through a small stream buffer over the descriptor.
#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <streambuf>

namespace luma::core {

namespace {

namespace fs = std::filesystem;

// Symbolic-link levels followed before giving up, as the kernel's ELOOP limit.
constexpr int kMaxLinkLevels = 40;
// Names tried for the temporary before giving up (each collision is one in 2^48).
constexpr int kTemporaryNameTries = 100;

std::string errno_text(int err) { return std::strerror(err); }

// The file a path finally names: symbolic links followed one level at a time, so that a
// dangling link yields the path it points to (which the output then creates).
std::string resolve_links(const std::string& path) {
  std::string p = path;
  for (int level = 0; level < kMaxLinkLevels; ++level) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string target(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) throw std::runtime_error(path + ": cannot read the symbolic link " + p + ": " + errno_text(errno));
    target.resize(static_cast<std::size_t>(n));
    p = fs::path(target).is_absolute() ? target : (fs::path(p).parent_path() / target).string();
  }
  throw std::runtime_error(path + ": too many levels of symbolic links");
}

// A stream buffer over a file descriptor: write(2) in blocks, EINTR retried; a failed
// write makes the stream bad and is remembered.
class FdBuffer final : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }
  int error() const noexcept { return error_; }

 protected:
  int_type overflow(int_type ch) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    while (p < pptr() && error_ == 0) {
      const ssize_t n = ::write(fd_, p, static_cast<std::size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) error_ = n < 0 ? errno : EIO;
      else p += n;
    }
    setp(buffer_, buffer_ + sizeof buffer_);
    return error_ == 0;
  }

  int fd_;
  int error_ = 0;
  char buffer_[1 << 16];
};

}  // namespace

struct OutputFile::State {
  std::string path;       // as the user named it
  std::string target;     // the file replaced (links resolved); empty when written directly
  std::string temporary;  // the temporary's name; empty when written directly
  int fd = -1;
  bool owns_fd = true;  // false for standard output
  std::unique_ptr<FdBuffer> buffer;
  std::unique_ptr<std::ostream> stream;

  void open_direct(int descriptor, bool owned) {
    fd = descriptor;
    owns_fd = owned;
  }

  void open_temporary(const struct stat* existing) {
    const fs::path t(target);
    const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
    std::random_device seed;
    std::mt19937_64 random(static_cast<std::uint64_t>(seed()) << 32 ^ seed());
    for (int i = 0; i < kTemporaryNameTries && fd < 0; ++i) {
      char suffix[16];
      std::snprintf(suffix, sizeof suffix, "%012llx",
                    static_cast<unsigned long long>(random() & 0xFFFFFFFFFFFFull));
      // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict for "." + str.
      std::string name(1, '.');
      name += t.filename().string();
      name += ".tmp-";
      name += suffix;
      temporary = (dir / name).string();
      fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd < 0 && errno != EEXIST)
        throw std::runtime_error(path + ": cannot create a temporary file in " + dir.string() +
                                 ": " + errno_text(errno));
    }
    if (fd < 0) throw std::runtime_error(path + ": no free temporary name in " + dir.string());
    // Replacing a file keeps its permissions.
    if (existing != nullptr) (void)::fchmod(fd, existing->st_mode & 07777);
  }

  void remove_temporary() noexcept {
    if (!temporary.empty()) ::unlink(temporary.c_str());
    temporary.clear();
  }

  void close_fd() noexcept {
    if (fd >= 0 && owns_fd) ::close(fd);
    fd = -1;
  }
};

OutputFile::OutputFile(const std::string& path) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = path;
  if (path.empty()) throw std::runtime_error("an empty output file name");
  if (path == "-" || path == "/dev/stdout") {
    s.open_direct(STDOUT_FILENO, false);
  } else {
    s.target = resolve_links(path);
    struct stat st {};
    const bool exists = ::stat(s.target.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) throw std::runtime_error(path + ": is a directory");
    if (exists && !S_ISREG(st.st_mode)) {
      // A FIFO, a terminal, a device: only written, never replaced.
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) throw std::runtime_error(path + ": cannot open for writing: " + errno_text(errno));
      s.open_direct(fd, true);
      s.target.clear();
    } else {
      s.open_temporary(exists ? &st : nullptr);
    }
  }
  s.buffer = std::make_unique<FdBuffer>(s.fd);
  s.stream = std::make_unique<std::ostream>(s.buffer.get());
}

OutputFile::~OutputFile() {
  if (!state_) return;
  state_->close_fd();
  state_->remove_temporary();
}

std::ostream& OutputFile::stream() noexcept { return *state_->stream; }

void OutputFile::commit() {
  State& s = *state_;
  s.stream->flush();
  const int write_error = s.buffer->error();
  if (!*s.stream || write_error != 0) {
    s.close_fd();
    s.remove_temporary();
    throw std::runtime_error(s.path + ": write failed" +
                             (write_error != 0 ? ": " + errno_text(write_error) : std::string()));
  }
  if (s.temporary.empty()) {  // written directly
    s.close_fd();
    return;
  }
  // The data reaches the disk before the name does: a crash leaves the old file or the new.
  const bool synced = ::fsync(s.fd) == 0;
  const int sync_error = errno;
  const bool closed = ::close(s.fd) == 0;
  const int close_error = errno;
  s.fd = -1;
  if (!synced || !closed) {
    s.remove_temporary();
    throw std::runtime_error(s.path + ": write failed: " + errno_text(!synced ? sync_error : close_error));
  }
  if (::rename(s.temporary.c_str(), s.target.c_str()) != 0) {
    const int err = errno;
    s.remove_temporary();
    throw std::runtime_error(s.path + ": cannot replace " + s.target + ": " + errno_text(err));
  }
  s.temporary.clear();
}

void write_output_file(const std::string& path, std::string_view text) {
  OutputFile out(path);
  out.stream().write(text.data(), static_cast<std::streamsize>(text.size()));
  out.commit();
}

bool same_file(const std::string& a, const std::string& b) {
  if (a == "-" || b == "-") return false;
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(resolve_links(a), ea);
  const fs::path cb = fs::weakly_canonical(resolve_links(b), eb);
  return !ea && !eb && ca == cb;
}

void check_outputs_distinct(const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const std::string& in : inputs)
      if (same_file(outputs[i], in))
        throw std::runtime_error("the output " + outputs[i] + " is the input " + in +
                                 " (writing it would destroy the input); name another file");
    for (std::size_t j = 0; j < i; ++j)
      if (same_file(outputs[i], outputs[j]))
        throw std::runtime_error("the outputs " + outputs[j] + " and " + outputs[i] +
                                 " are the same file; name different files");
  }
}

}  // namespace luma::core
