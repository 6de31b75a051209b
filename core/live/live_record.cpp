// live_record.cpp - the record's file name (see live_record.h).
#include "live/live_record.h"

#include <charconv>

namespace luma::core::live {

namespace {
constexpr std::string_view kPrefix = "luma-live.";

// A decimal number with nothing else, no sign, no leading zero (so one id has one name).
bool parse_id(std::string_view text, unsigned* out) {
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc{} && end == text.data() + text.size();
}
}  // namespace

std::string record_file_name(unsigned uid, unsigned pid) {
  return std::string(kPrefix) + std::to_string(uid) + "." + std::to_string(pid);
}

std::optional<RecordName> parse_record_file_name(std::string_view name) {
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  RecordName r;
  if (!parse_id(name.substr(0, dot), &r.uid) || !parse_id(name.substr(dot + 1), &r.pid)) return std::nullopt;
  return r;
}

}  // namespace luma::core::live
