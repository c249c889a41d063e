#include "cm/ucma_abi.h"

namespace urxe::cm {

const char* ucma_event_name(UcmaEvent e) {
  static constexpr const char* kNames[] = {
      "ADDR_RESOLVED",   "ADDR_ERROR",       "ROUTE_RESOLVED", "ROUTE_ERROR",
      "CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR",  "UNREACHABLE",
      "REJECTED",        "ESTABLISHED",      "DISCONNECTED",   "DEVICE_REMOVAL",
      "MULTICAST_JOIN",  "MULTICAST_ERROR",  "ADDR_CHANGE",    "TIMEWAIT_EXIT"};
  const auto i = static_cast<uint32_t>(e);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

}  // namespace urxe::cm
