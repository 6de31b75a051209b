// trace_location.cpp - see trace_location.h.
#include "inputs/trace_location.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <exception>

#include "io/path_pattern.h"
#include "trace/trace_reader.h"

namespace luma::tools {
namespace {

void append_literal(std::string& glob_pattern, char c) {
  if (c == '*' || c == '?' || c == '[' || c == '\\') glob_pattern += '\\';
  glob_pattern += c;
}

void append_literal(std::string& glob_pattern, const std::string& text) {
  for (char c : text) append_literal(glob_pattern, c);
}

std::string to_glob(const std::string& pattern, const TraceNameFields& f, bool any_pid) {
  std::string g;
  core::walk_path_pattern(
      pattern, [&](char c) { append_literal(g, c); },
      [&](char k) {
        switch (k) {
          case 'p':
            if (any_pid) g += "[0-9]*";
            else append_literal(g, std::to_string(f.pid));
            return true;
          case 'h': append_literal(g, f.host); return true;
          case 'r': append_literal(g, f.rank); return true;
          default: g += '*'; return true;  // 'e': whatever the process was called
        }
      });
  return g;
}

}  // namespace

std::vector<std::string> find_written_traces(const std::string& pattern,
                                             const TraceNameFields& fields, bool any_pid) {
  const std::string g = to_glob(pattern, fields, any_pid);
  std::vector<std::string> found;
  for (const std::string& candidate :
       {g, g + "." + (any_pid ? std::string("[0-9]*") : std::to_string(fields.pid))}) {
    glob_t result{};
    if (::glob(candidate.c_str(), 0, nullptr, &result) == 0) {
      for (std::size_t i = 0; i < result.gl_pathc; ++i) found.emplace_back(result.gl_pathv[i]);
    }
    globfree(&result);
  }
  auto mtime = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec
                                       : 0LL;
  };
  std::sort(found.begin(), found.end(),
            [&](const std::string& a, const std::string& b) { return mtime(a) > mtime(b); });
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

TraceOwner trace_owner(const std::string& path) {
  TraceOwner owner;
  try {
    const core::TraceReader reader(path);  // maps the file and reads only its header
    owner.pid = static_cast<long>(reader.header().pid);
    if (!reader.header().command_line.empty())
      owner.executable = reader.header().command_line.front();
  } catch (const std::exception&) {
    // Not a trace (yet): the caller still names the file, without an owner.
  }
  return owner;
}

}  // namespace luma::tools
