// `urxe cm`'s cm::CmPlatform (cm/service/platform.h): the devices of the run directory's tree in this
// namespace (provider/device_tree.h), QP1 of each on a kernel-socket port (dpdk/socket_port.h) under the
// device's live capture, and the CM counters written where `urxe stats` reads them (provider/stats.h).
#pragma once
#include <map>
#include <string>

#include "cm/service/platform.h"
#include "provider/device_tree.h"

namespace urxe::tools {

class CmPlatformImpl final : public cm::CmPlatform {
 public:
  explicit CmPlatformImpl(const std::string& run_dir) : paths_{run_dir} {}
  std::vector<cm::FoundDevice> scan_devices() override;
  std::unique_ptr<cm::Qp1Port> open_qp1(const cm::FoundDevice& d, std::string& err) override;
  bool write_counters(const cm::FoundDevice& d, const cm::CmService::Counters& k, std::string& err) override;

 private:
  provider::Paths paths_;
  std::map<std::string, provider::DeviceConfig> configs_;  // by device name, from the last scan
};

}  // namespace urxe::tools
