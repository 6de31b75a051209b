// log.h - luma's one logger (spdlog, compiled into libluma.so and hidden, so a host program
// with its own spdlog never sees it). Lines look like "luma: warning: ...".
// Only log.cpp includes spdlog: its header-only implementation doubled the compile time of
// every file that logged (about 20 s per file under AddressSanitizer). Lines are formatted
// here with fmt and handed over whole.
// Never call it from the exit-time statistics printer (a dying process may hold its lock),
// nor before init_logging().
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "config/settings.h"

namespace luma::shim {

// Creates the logger: to `file` (appended) when not empty, else stderr. Never throws; a
// file that cannot be opened falls back to stderr with one line saying so.
void init_logging(LogLevel level, const std::string& file) noexcept;

// Whether a line at `level` is written (false before init_logging(): nothing is).
bool log_enabled(LogLevel level) noexcept;

// Writes one line at `level`.
void log_line(LogLevel level, std::string_view line) noexcept;

// One line at `level`, never throwing: what every part of luma logs with (a full disk or a
// bad format argument must never reach the host program). Formats only when the line is
// written.
template <typename... Args>
void log_noexcept(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!log_enabled(level)) return;
  try {
    log_line(level, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {
  }
}

}  // namespace luma::shim
