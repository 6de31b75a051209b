// output_file.h - writing a file the user named (an export, a plan, its CSV or SVG) so
// that nothing the user had is lost: the text goes to a temporary file with a unique name
// next to the target and is renamed over it only once every byte is written, so a failed
// write leaves the old file (or none) in place, never half a file. A symbolic link as the
// output is followed: its target is replaced and the link stays. A target that exists and
// is not a regular file (a FIFO, a terminal, /dev/null) cannot be replaced, so it is
// written directly; "-" and /dev/stdout write to standard output.
#pragma once

#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace luma::core {

class OutputFile {
 public:
  // Opens the output. Throws std::runtime_error naming the path when it cannot (a
  // directory, a folder that does not exist, no permission).
  explicit OutputFile(const std::string& path);
  // Without commit(): the temporary is removed and the target left as it was.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::ostream& stream() noexcept;
  // Flushes, syncs and puts the file in place. Throws std::runtime_error naming the path
  // when a write failed (the temporary is then removed; the target is untouched).
  void commit();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Writes `text` to `path` through an OutputFile.
void write_output_file(const std::string& path, std::string_view text);

// True when the two paths name one file: the same device and inode when both exist (links
// and different spellings included), else the same weakly canonical path. "-" is standard
// output, never a file.
bool same_file(const std::string& a, const std::string& b);

// Throws std::runtime_error naming both when an output names the same file as an input or
// as another output: writing it would destroy the input before (or while) it is read.
void check_outputs_distinct(const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs);

}  // namespace luma::core
