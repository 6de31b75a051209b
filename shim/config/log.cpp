// log.cpp - builds the logger (see log.h). Not registered in spdlog's registry: luma's
// logger is private to libluma.so and never touches a registry the host might share.
#include "config/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>

namespace luma::shim {
namespace {

// Leaked on purpose: hooks may log from destructors of other libraries after luma's own
// static destructors would have run.
spdlog::logger* g_logger = nullptr;

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::trace: return spdlog::level::trace;
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::err: return spdlog::level::err;
    case LogLevel::off: return spdlog::level::off;
  }
  return spdlog::level::warn;
}

}  // namespace

void init_logging(LogLevel level, const std::string& file) noexcept {
  try {
    spdlog::sink_ptr sink;
    std::string file_error;
    if (!file.empty()) {
      try {
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, false);
      } catch (const std::exception& e) {
        file_error = e.what();
      }
    }
    if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* logger = new spdlog::logger("luma", sink);
    logger->set_pattern("luma: %l: %v");
    logger->set_level(to_spdlog(level));
    logger->flush_on(spdlog::level::trace);
    g_logger = logger;
    if (!file_error.empty())
      logger->warn("LUMA_LOG_FILE='{}' cannot be opened ({}); logging to stderr", file,
                   file_error);
  } catch (...) {
    // No logger: luma stays silent rather than disturb its host.
  }
}

bool log_enabled(LogLevel level) noexcept {
  return g_logger != nullptr && g_logger->should_log(to_spdlog(level));
}

void log_line(LogLevel level, std::string_view line) noexcept {
  try {
    if (g_logger != nullptr) g_logger->log(to_spdlog(level), line);
  } catch (...) {
  }
}

}  // namespace luma::shim
