// utf8_text.h - text from a trace (a program's name and arguments, module and source paths
// of call sites) is whatever bytes the system had, not necessarily UTF-8; JSON and
// Python's pickle text must be. Invalid sequences become U+FFFD, as Python's
// errors="replace" and nlohmann's error_handler_t::replace do.
#pragma once

#include <string>
#include <string_view>

namespace luma::core {

// `s` with every ill-formed UTF-8 sequence (each maximal invalid subpart, as Unicode
// recommends) replaced by U+FFFD; valid text is returned unchanged.
std::string valid_utf8(std::string_view s);

}  // namespace luma::core
