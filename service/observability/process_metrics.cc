#include "service/observability/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>

namespace cmestream::service {
namespace {

// statm: size resident shared text lib data dt, in pages.
struct Statm {
  double virtual_pages = 0;
  double resident_pages = 0;
};
std::optional<Statm> ReadStatm() {
  std::ifstream in("/proc/self/statm");
  Statm s;
  if (!(in >> s.virtual_pages >> s.resident_pages)) return std::nullopt;
  return s;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

prometheus::MetricFamily Gauge(const char* name, const char* help, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = value;
  f.metric.push_back(m);
  return f;
}

}  // namespace

ProcessMetrics::ProcessMetrics()
    : start_time_seconds_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

double ProcessMetrics::ResidentBytes() {
  const std::optional<Statm> statm = ReadStatm();
  return statm ? statm->resident_pages * static_cast<double>(sysconf(_SC_PAGESIZE)) : 0;
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const Statm statm = ReadStatm().value_or(Statm{});
  const double rss = statm.resident_pages, vsz = statm.virtual_pages;
  return {Gauge("process_resident_memory_bytes", "Resident memory size in bytes (/proc/self/statm)", rss * page),
          Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes (/proc/self/statm)", vsz * page),
          Gauge("process_open_fds", "Open file descriptors (/proc/self/fd)", OpenFds()),
          Gauge("process_start_time_seconds", "Start time of the process since the Unix epoch in seconds",
                start_time_seconds_)};
}

}  // namespace cmestream::service
