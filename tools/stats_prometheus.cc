// Prometheus text exposition of urxe's counters (stats_prometheus.h).
#include "tools/stats_prometheus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

// A sysfs attribute's first line, or "" when it cannot be read.
std::string attr(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "4: ACTIVE" -> 4; 0 ("no change") when it does not start with a number.
uint64_t leading_number(const std::string& s) {
  return std::strtoull(s.c_str(), nullptr, 10);
}

std::string label_value(const std::string& v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The families, each with its HELP and TYPE once and then one sample per device (the format wants a
// family's samples together).
class Exposition {
 public:
  void family(const std::string& name, const char* type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, uint64_t v) {
    out_ += name + "{" + labels + "} " + std::to_string(v) + "\n";
  }
  std::string& text() { return out_; }

 private:
  std::string out_;
};

std::string port_labels(const PrometheusDevice& d) {
  return "device=\"" + label_value(d.name) + "\",port=\"1\"";
}

// node_exporter's infiniband collector: its names and help texts (collector/infiniband_linux.go).
struct PortFamily {
  const char* name;
  const char* type;
  const char* help;
  uint64_t (*value)(const PrometheusDevice&);
};
uint64_t state_id(const PrometheusDevice& d) {
  return leading_number(attr(d.ibdev_path + "/ports/1/state"));
}
uint64_t phys_state_id(const PrometheusDevice& d) {
  return leading_number(attr(d.ibdev_path + "/ports/1/phys_state"));
}
uint64_t rate_bytes(const PrometheusDevice& d) {  // "25 Gb/sec (1X EDR)" -> 25 * 125000000
  return static_cast<uint64_t>(std::strtod(attr(d.ibdev_path + "/ports/1/rate").c_str(), nullptr) *
                               125000000.0);
}
uint64_t counter(const PrometheusDevice& d, const char* name) {
  return d.counters->total.get(name);
}
// A PMA counter as the collector reads ports/1/counters/ (provider::port_counters); data words times 4.
uint64_t pma(const PrometheusDevice& d, std::string_view name) {
  for (const auto& [n, v] : prov::port_counters(d.counters->total))
    if (n == name) return name.ends_with("_data") ? v * 4 : v;
  return 0;
}
constexpr PortFamily kPortFamilies[] = {
    {"node_infiniband_state_id", "gauge",
     "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
     state_id},
    {"node_infiniband_physical_state_id", "gauge",
     "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: "
     "link "
     "up, 6: link error recover, 7: phytest)",
     phys_state_id},
    {"node_infiniband_rate_bytes_per_second", "gauge", "Maximum signal transfer rate", rate_bytes},
    {"node_infiniband_port_data_received_bytes_total", "counter",
     "Number of data octets received on all links",
     [](const PrometheusDevice& d) { return pma(d, "port_rcv_data"); }},
    {"node_infiniband_port_data_transmitted_bytes_total", "counter",
     "Number of data octets transmitted on all links",
     [](const PrometheusDevice& d) { return pma(d, "port_xmit_data"); }},
    {"node_infiniband_port_packets_received_total", "counter",
     "Number of packets received on all VLs by this port (including errors)",
     [](const PrometheusDevice& d) { return pma(d, "port_rcv_packets"); }},
    {"node_infiniband_port_packets_transmitted_total", "counter",
     "Number of packets transmitted on all VLs from this port (including errors)",
     [](const PrometheusDevice& d) { return pma(d, "port_xmit_packets"); }},
    {"node_infiniband_link_downed_total", "counter",
     "Number of times the link failed to recover from an error state and went down",
     [](const PrometheusDevice& d) { return counter(d, "link_downed"); }},
};

// The CM service's groups (provider::kCmCounterGroups order) as families.
constexpr const char* kCmFamilies[][2] = {
    {"urxe_cm_messages_sent_total", "CM MADs the CM service (urxe cm) sent, by message"},
    {"urxe_cm_messages_received_total", "CM MADs the CM service received, by message"},
    {"urxe_cm_retries_total", "CM MADs the CM service sent again after their timeout, by message"},
    {"urxe_cm_duplicates_received_total", "CM MADs the CM service received twice, by message"},
};
static_assert(std::size(kCmFamilies) == std::size(prov::kCmCounterGroups));

}  // namespace

std::string prometheus_text(const std::vector<PrometheusDevice>& devs) {
  Exposition x;
  x.family("node_infiniband_info", "gauge",
           "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.");
  for (const PrometheusDevice& d : devs)
    x.sample("node_infiniband_info",
             "device=\"" + label_value(d.name) + "\",board_id=\"" +
                 label_value(attr(d.ibdev_path + "/board_id")) + "\",firmware_version=\"" +
                 label_value(attr(d.ibdev_path + "/fw_ver")) + "\",hca_type=\"" +
                 label_value(attr(d.ibdev_path + "/hca_type")) + "\"",
             1);
  for (const PortFamily& f : kPortFamilies) {
    x.family(f.name, f.type, f.help);
    for (const PrometheusDevice& d : devs) x.sample(f.name, port_labels(d), f.value(d));
  }
  // Every counter any device has, in the first device's order (all have the engine's list).
  std::vector<std::string> names;
  for (const PrometheusDevice& d : devs)
    for (const auto& [n, v] : d.counters->total.values)
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  for (const std::string& n : names) {
    const std::string fam = "urxe_" + n + "_total";
    x.family(fam, "counter", "urxe hw_counters/" + n + " (urxe stats --help says what it counts)");
    for (const PrometheusDevice& d : devs) x.sample(fam, port_labels(d), d.counters->total.get(n));
  }
  for (size_t g = 0; g < std::size(kCmFamilies); ++g) {
    bool any = false;
    for (const PrometheusDevice& d : devs) any = any || d.cm;
    if (!any) break;
    x.family(kCmFamilies[g][0], "counter", kCmFamilies[g][1]);
    for (const PrometheusDevice& d : devs) {
      if (!d.cm) continue;
      for (size_t m = 0; m < std::size(prov::kCmCounterMessages); ++m)
        x.sample(kCmFamilies[g][0], port_labels(d) + ",message=\"" + prov::kCmCounterMessages[m] + "\"",
                 (*d.cm)[g][m]);
    }
  }
  x.family("urxe_processes", "gauge", "Processes that have the urxe device open");
  for (const PrometheusDevice& d : devs) {
    uint64_t live = 0;
    for (const prov::ProcessCounters& p : d.counters->processes) live += p.alive;
    x.sample("urxe_processes", "device=\"" + label_value(d.name) + "\"", live);
  }
  return std::move(x.text());
}

bool write_textfile(const std::string& path, const std::string& text, std::string& err) {
  const size_t slash = path.rfind('/');
  const std::string tmp = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "." +
                          (slash == std::string::npos ? path : path.substr(slash + 1)) + "." +
                          std::to_string(::getpid()) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = tmp + ": " + std::strerror(errno);
    return false;
  }
  ::fchmod(fd, 0644);  // whatever the umask: the exporter's user reads it
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace urxe::tools
