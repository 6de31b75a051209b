// log.h - luma's one logger (spdlog, compiled into libluma.so and hidden, so a host program
// with its own spdlog never sees it). Lines look like "luma: warning: ...".
// Never call it from the exit-time statistics printer (a dying process may hold its lock),
// nor before init_logging().
#pragma once

#include <spdlog/spdlog.h>

#include <utility>

#include "settings.h"

namespace luma::shim {

// Creates the logger: to `file` (appended) when not empty, else stderr. Never throws; a
// file that cannot be opened falls back to stderr with one line saying so.
void init_logging(LogLevel level, const std::string& file) noexcept;

// The logger; a logger that drops everything before init_logging().
spdlog::logger& log() noexcept;

// One line at `level`, never throwing: what a hook or a noexcept function logs with (a
// full disk or a bad format argument must never reach the host program).
template <typename... Args>
void log_noexcept(spdlog::level::level_enum level, spdlog::format_string_t<Args...> format,
                  Args&&... args) noexcept {
  try {
    log().log(level, format, std::forward<Args>(args)...);
  } catch (...) {
  }
}

}  // namespace luma::shim
