#include "cm/ucma_abi.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace urxe::cm {
namespace {

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

int parse_ucma_command(std::span<const uint8_t> write, UcmaCommand& c) {
  if (write.size() < sizeof c.hdr) return EINVAL;
  std::memcpy(&c.hdr, write.data(), sizeof c.hdr);
  if (c.hdr.cmd >= kUcmaCommandCount || c.hdr.in + sizeof c.hdr > write.size()) return EINVAL;
  if (c.hdr.cmd == RDMA_USER_CM_CMD_GET_OPTION) return ENOSYS;
  c.info = &kUcmaCommands[c.hdr.cmd];
  c.body = write.subspan(sizeof c.hdr);
  return 0;
}

int check_ucma_response_room(const UcmaCommand& c) {
  return c.info->resp_size && c.hdr.out < c.info->resp_size ? ENOSPC : 0;
}

size_t ucma_command_length(const UcmaCommand& c) {
  return sizeof c.hdr + std::min<size_t>(c.body.size(), c.info->body_size);
}

int ucma_response_pointer(const UcmaCommand& c, uint64_t& ptr) {
  ptr = 0;
  if (c.info->response_offset < 0 || c.hdr.out == 0) return 0;
  if (c.body.size() < static_cast<size_t>(c.info->response_offset) + 8) return EFAULT;
  ptr = load_u64(c.body.data() + c.info->response_offset);
  return 0;
}

int ucma_set_option_value(const UcmaCommand& c, uint64_t& optval, uint32_t& optlen) {
  if (c.body.size() < kSetOptionOptlenOffset + 4) return EINVAL;
  optlen = load_u32(c.body.data() + kSetOptionOptlenOffset);
  if (optlen > kMaxOptionLen) return EINVAL;
  optval = load_u64(c.body.data() + kSetOptionOptvalOffset);
  return optlen && !optval ? EFAULT : 0;
}

int ucma_migrate_fd(const UcmaCommand& c, int& fd) {
  if (c.body.size() < kMigrateIdFdOffset + 4) return EINVAL;
  fd = static_cast<int>(load_u32(c.body.data() + kMigrateIdFdOffset));
  return 0;
}

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
