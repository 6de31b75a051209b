// exporter_command.cpp - `luma exporter --listen HOST:PORT`: the live records
// (docs/live-record.md) as Prometheus metrics at /metrics, served by prometheus-cpp's
// exposer (civetweb). Each scrape lists and reads the records afresh; it never touches
// the processes. The metrics, one series per process and device, labelled pid, device,
// command and group: luma_allocated_bytes, luma_reserved_bytes, luma_peak_reserved_bytes,
// luma_pending_free_bytes, luma_limit_bytes (only where a limit applies), luma_oom_total.
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <signal.h>

#include <charconv>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "commands/commands.h"
#include "inputs/live_directory.h"

namespace luma::tools {

namespace {

namespace live = core::live;

// One metric: its name, help, type and the row's value (nullopt: no series for the row).
struct Metric {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  std::optional<double> (*value)(const live::DeviceRow&);
};

const Metric kMetrics[] = {
    {"luma_allocated_bytes", "Device memory the process holds (luma's rounded block sizes)",
     prometheus::MetricType::Gauge, [](const live::DeviceRow& r) -> std::optional<double> {
       return static_cast<double>(r.allocated_bytes);
     }},
    {"luma_reserved_bytes", "Device memory luma reserved from the driver for the process (its cache included)",
     prometheus::MetricType::Gauge, [](const live::DeviceRow& r) -> std::optional<double> {
       return static_cast<double>(r.reserved_bytes);
     }},
    {"luma_peak_reserved_bytes", "The most device memory luma reserved for the process since it started",
     prometheus::MetricType::Gauge, [](const live::DeviceRow& r) -> std::optional<double> {
       return static_cast<double>(r.peak_reserved_bytes);
     }},
    {"luma_pending_free_bytes", "Device memory the process freed that waits for its stream work to finish",
     prometheus::MetricType::Gauge, [](const live::DeviceRow& r) -> std::optional<double> {
       return static_cast<double>(r.pending_free_bytes);
     }},
    {"luma_limit_bytes", "The device's memory limit (memory_limit, memory_fraction; with limit_group the group's budget)",
     prometheus::MetricType::Gauge, [](const live::DeviceRow& r) -> std::optional<double> {
       if (!r.limit_bytes) return std::nullopt;
       return static_cast<double>(*r.limit_bytes);
     }},
    {"luma_oom_total", "Allocations that failed with out-of-memory", prometheus::MetricType::Counter,
     [](const live::DeviceRow& r) -> std::optional<double> { return static_cast<double>(r.oom_count); }},
};

class LiveCollector final : public prometheus::Collectable {
 public:
  explicit LiveCollector(std::string dir) : dir_(std::move(dir)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    for (const Metric& m : kMetrics) families.push_back({m.name, m.help, m.type, {}});
    LiveScan scan;
    try {
      scan = scan_live_directory(dir_);
    } catch (const std::exception& e) {  // the scrape gets no series; the line says why
      say(e.what());
      return families;
    }
    for (const live::SkippedFile& s : scan.skipped) say(skipped_line(s));
    for (const live::DeviceRow& r : rows_of(scan)) {
      const std::vector<prometheus::ClientMetric::Label> labels = {
          {"pid", std::to_string(r.pid)}, {"device", std::to_string(r.device)}, {"command", r.exe}, {"group", r.group}};
      for (std::size_t i = 0; i < std::size(kMetrics); ++i) {
        const std::optional<double> v = kMetrics[i].value(r);
        if (!v) continue;
        prometheus::ClientMetric c;
        c.label = labels;
        if (kMetrics[i].type == prometheus::MetricType::Counter) c.counter.value = *v;
        else c.gauge.value = *v;
        families[i].metric.push_back(std::move(c));
      }
    }
    return families;
  }

 private:
  // Each line once for the life of the exporter (scrapes come every few seconds).
  void say(const std::string& line) const {
    std::lock_guard lock(mu_);
    if (said_.insert(line).second) std::fprintf(stderr, "luma exporter: %s\n", line.c_str());
  }

  std::string dir_;
  mutable std::mutex mu_;
  mutable std::set<std::string> said_;
};

// HOST:PORT ([v6 address]:PORT too): "" when well formed, else what is wrong.
std::string check_listen(const std::string& listen) {
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return "expected HOST:PORT (e.g. 127.0.0.1:9400 or 0.0.0.0:9400)";
  const std::string port = listen.substr(colon + 1);
  unsigned n = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || n > 65535)
    return "the port '" + port + "' is not a number 0..65535";
  return "";
}

}  // namespace

void add_exporter_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "exporter", "Serve the live statistics of this user's processes under luma as Prometheus metrics "
                  "at /metrics");
  struct Options {
    std::string listen;
    std::string dir;
  };
  auto o = std::make_shared<Options>();
  o->dir = default_live_dir();
  cmd->add_option("--listen", o->listen, "HOST:PORT to serve /metrics on (port 0: any free port)")
      ->required()
      ->check([](const std::string& v) { return check_listen(v); });
  cmd->add_option("--dir", o->dir, "the directory of the live records (LUMA_LIVE_DIR of the programs)")
      ->capture_default_str();
  cmd->callback([o] {
    // SIGINT and SIGTERM end the exporter: blocked before the server's threads start (they
    // inherit the mask), then waited for here.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::unique_ptr<prometheus::Exposer> exposer;
    try {
      exposer = std::make_unique<prometheus::Exposer>(o->listen, 2);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "luma exporter: cannot listen on %s: %s\n", o->listen.c_str(), e.what());
      throw ExitCode{kExitFailure};
    }
    auto collector = std::make_shared<LiveCollector>(o->dir);
    exposer->RegisterCollectable(collector);
    const std::vector<int> ports = exposer->GetListeningPorts();
    const std::string host = o->listen.substr(0, o->listen.rfind(':'));
    std::printf("luma exporter: serving http://%s:%d/metrics from the records in %s\n", host.c_str(),
                ports.empty() ? 0 : ports.front(), o->dir.c_str());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
  });
}

}  // namespace luma::tools
