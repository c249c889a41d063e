// `urxe stats --prometheus`: devices' counters in Prometheus' text exposition format (version 0.0.4), for
// node_exporter's textfile collector beside a host's own collectors.
//
// The port figures take the names, labels and help texts node_exporter's infiniband collector gives them
// (node_infiniband_info, state_id, physical_state_id, rate_bytes_per_second, port_data_*_bytes_total,
// port_packets_*_total, link_downed_total), so dashboards made for RDMA NICs show urxe devices, and a family
// that the collector also exports for a real HCA on the same host agrees with it. Then urxe's own: every
// hw_counters counter as urxe_<name>_total (DCQCN's np_/rp_ counters among them), the CM service's MADs
// (urxe_cm_*_total by message), and the processes that have the device open. No timestamps: the textfile
// collector refuses a file that has them.
#pragma once
#include <string>
#include <vector>

#include "provider/stats.h"

namespace urxe::tools {

struct PrometheusDevice {
  std::string name;        // "urxe0"
  std::string ibdev_path;  // its sysfs directory: board_id, fw_ver, ports/1/{state,phys_state,rate}
  const provider::DeviceCounters* counters = nullptr;
  const provider::CmCounterTable* cm = nullptr;  // null: no CM service has run for it
};

std::string prometheus_text(const std::vector<PrometheusDevice>& devs);

// Writes `text` to `path` as node_exporter's textfile collector wants it: a temporary file in the same
// directory, world-readable (Debian's exporter runs as user prometheus), renamed over `path`.
bool write_textfile(const std::string& path, const std::string& text, std::string& err);

}  // namespace urxe::tools
