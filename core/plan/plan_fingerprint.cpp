// plan_fingerprint.cpp - see plan_fingerprint.h.
#include "plan/plan_fingerprint.h"

#include <algorithm>

#include <fmt/format.h>

namespace luma::core {
namespace {

// Arguments can be long (a JSON config on the command line): quote at most this much of
// one in a reason, so the line stays one line.
constexpr std::size_t kQuoteChars = 60;

std::string quoted(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, kQuoteChars)) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    out += c;
  }
  if (s.size() > kQuoteChars) out += "...";
  return "'" + out + "'";
}

std::vector<FingerprintDevice> by_index(std::vector<FingerprintDevice> devices) {
  std::stable_sort(devices.begin(), devices.end(),
                   [](const FingerprintDevice& a, const FingerprintDevice& b) { return a.index < b.index; });
  return devices;
}

}  // namespace

std::string executable_base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

RunFingerprint fingerprint_of(const TraceHeader& header) {
  RunFingerprint f;
  if (!header.command_line.empty()) {
    f.executable = header.command_line.front();
    f.arguments.assign(header.command_line.begin() + 1, header.command_line.end());
  }
  for (const TraceDevice& d : header.devices) f.devices.push_back({d.index, d.name, d.total_bytes});
  return f;
}

FingerprintMatch match_fingerprint(const RunFingerprint& planned, const RunFingerprint& current) {
  const std::string pe = executable_base_name(planned.executable);
  const std::string ce = executable_base_name(current.executable);
  if (pe != ce)
    return {false, fmt::format("the plan was made for executable {}, this is {}", quoted(pe), quoted(ce))};
  const std::size_t n = std::min(planned.arguments.size(), current.arguments.size());
  for (std::size_t i = 0; i < n; ++i)
    if (planned.arguments[i] != current.arguments[i])
      return {false, fmt::format("argument {} differs: the plan has {}, this run {}", i + 1,
                                 quoted(planned.arguments[i]), quoted(current.arguments[i]))};
  if (planned.arguments.size() != current.arguments.size())
    return {false, fmt::format("the plan was made with {} argument(s), this run has {}",
                               planned.arguments.size(), current.arguments.size())};
  const auto pd = by_index(planned.devices);
  const auto cd = by_index(current.devices);
  if (pd.size() != cd.size())
    return {false, fmt::format("the plan was made with {} device(s), this run has {}", pd.size(), cd.size())};
  for (std::size_t i = 0; i < pd.size(); ++i) {
    if (pd[i].index != cd[i].index)
      return {false, fmt::format("the plan's device {} is device {} here", pd[i].index, cd[i].index)};
    if (pd[i].name != cd[i].name)
      return {false, fmt::format("device {} is {} in the plan, {} here", pd[i].index, quoted(pd[i].name),
                                 quoted(cd[i].name))};
  }
  return {true, {}};
}

}  // namespace luma::core
