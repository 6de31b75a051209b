// host_spdlog.cpp - a host program with its own (Debian's shared) spdlog and fmt, run
// under LD_PRELOAD=libluma.so by the integration test: luma's hidden copies must not
// change what it prints, nor its exit code, nor add anything to stderr.
#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

int main() {
  auto logger = spdlog::stdout_logger_st("host");
  logger->set_pattern("[%n] %l: %v");
  logger->info("{} + {} = {}", 1, 2, fmt::format("{}", 3));
  spdlog::set_default_logger(logger);
  spdlog::warn("default logger {}", SPDLOG_VERSION);
  return 0;
}
