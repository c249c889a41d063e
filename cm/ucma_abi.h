// The UCMA ABI: what librdmacm writes to /dev/infiniband/rdma_cm and what comes back. The command and
// response structures are the kernel's UAPI (<rdma/rdma_user_cm.h> from linux-libc-dev); this adds what the
// UAPI leaves implicit: each command's body size, where its response pointer sits, and the event codes
// (librdmacm's enum rdma_cm_event_type, which only librdmacm-dev declares).
//
// A command is one write(fd, buf, len): an 8-byte header {u32 cmd; u16 in; u16 out} then `in` bytes of
// body. A command with an answer carries a user pointer (`response`) in its body; the kernel writes at most
// `out` bytes there. SET_OPTION carries a second pointer (optval, optlen bytes) and MIGRATE_ID a file
// descriptor (of the channel the id comes from; the write goes to the channel it moves to).
#pragma once
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace urxe::cm {

inline constexpr uint32_t kUcmaAbiVersion = RDMA_USER_CM_ABI_VERSION;  // 4
inline constexpr uint32_t kUcmaCommandCount = RDMA_USER_CM_CMD_JOIN_MCAST + 1;

struct UcmaCommandInfo {
  const char* name;
  uint16_t body_size;       // sizeof the command structure (what librdmacm puts in hdr.in)
  uint16_t resp_size;       // sizeof the response; 0 = none
  int16_t response_offset;  // offset of the u64 response pointer in the body; -1 = none
};

// Indexed by command number (RDMA_USER_CM_CMD_*).
inline constexpr UcmaCommandInfo kUcmaCommands[kUcmaCommandCount] = {
    {"CREATE_ID", sizeof(rdma_ucm_create_id), sizeof(rdma_ucm_create_id_resp),
     offsetof(rdma_ucm_create_id, response)},
    {"DESTROY_ID", sizeof(rdma_ucm_destroy_id), sizeof(rdma_ucm_destroy_id_resp),
     offsetof(rdma_ucm_destroy_id, response)},
    {"BIND_IP", sizeof(rdma_ucm_bind_ip), 0, -1},
    {"RESOLVE_IP", sizeof(rdma_ucm_resolve_ip), 0, -1},
    {"RESOLVE_ROUTE", sizeof(rdma_ucm_resolve_route), 0, -1},
    {"QUERY_ROUTE", sizeof(rdma_ucm_query), sizeof(rdma_ucm_query_route_resp),
     offsetof(rdma_ucm_query, response)},
    {"CONNECT", sizeof(rdma_ucm_connect), 0, -1},
    {"LISTEN", sizeof(rdma_ucm_listen), 0, -1},
    {"ACCEPT", sizeof(rdma_ucm_accept), 0, -1},
    {"REJECT", sizeof(rdma_ucm_reject), 0, -1},
    {"DISCONNECT", sizeof(rdma_ucm_disconnect), 0, -1},
    {"INIT_QP_ATTR", sizeof(rdma_ucm_init_qp_attr), sizeof(ib_uverbs_qp_attr),
     offsetof(rdma_ucm_init_qp_attr, response)},
    {"GET_EVENT", sizeof(rdma_ucm_get_event), sizeof(rdma_ucm_event_resp),
     offsetof(rdma_ucm_get_event, response)},
    {"GET_OPTION", 0, 0, -1},
    {"SET_OPTION", sizeof(rdma_ucm_set_option), 0, -1},
    {"NOTIFY", sizeof(rdma_ucm_notify), 0, -1},
    {"JOIN_IP_MCAST", sizeof(rdma_ucm_join_ip_mcast), sizeof(rdma_ucm_create_id_resp),
     offsetof(rdma_ucm_join_ip_mcast, response)},
    {"LEAVE_MCAST", sizeof(rdma_ucm_destroy_id), sizeof(rdma_ucm_destroy_id_resp),
     offsetof(rdma_ucm_destroy_id, response)},
    {"MIGRATE_ID", sizeof(rdma_ucm_migrate_id), sizeof(rdma_ucm_migrate_resp),
     offsetof(rdma_ucm_migrate_id, response)},
    {"QUERY", sizeof(rdma_ucm_query), 0 /* 280 or more by option: at most `out` */,
     offsetof(rdma_ucm_query, response)},
    {"BIND", sizeof(rdma_ucm_bind), 0, -1},
    {"RESOLVE_ADDR", sizeof(rdma_ucm_resolve_addr), 0, -1},
    {"JOIN_MCAST", sizeof(rdma_ucm_join_mcast), sizeof(rdma_ucm_create_id_resp),
     offsetof(rdma_ucm_join_mcast, response)},
};

// SET_OPTION's optval pointer and length; MIGRATE_ID's fd.
inline constexpr size_t kSetOptionOptvalOffset = offsetof(rdma_ucm_set_option, optval);
inline constexpr size_t kSetOptionOptlenOffset = offsetof(rdma_ucm_set_option, optlen);
inline constexpr size_t kMigrateIdFdOffset = offsetof(rdma_ucm_migrate_id, fd);
inline constexpr uint32_t kMaxOptionLen = 1024;  // larger than any option librdmacm sets (IB_PATH: n x 64 B)

// One write() taken apart as the kernel's ucma_write does, before any handler runs. The one place the
// commands' sizes and fields are checked: the shim (provider/ucma_shim.cc) before it forwards a write, the
// service (cm/ucma.cc) on what it receives.
struct UcmaCommand {
  rdma_ucm_cmd_hdr hdr{};
  const UcmaCommandInfo* info = nullptr;
  std::span<const uint8_t> body;  // everything after the header (may be longer than hdr.in)
};

// 0 with `c` filled in; EINVAL for a write shorter than the header, an unknown command or `in` beyond the
// write; ENOSYS for GET_OPTION (the kernel has no handler for it).
int parse_ucma_command(std::span<const uint8_t> write, UcmaCommand& c);
// ENOSPC when `out` cannot hold the command's response (the handlers' first check), else 0.
int check_ucma_response_room(const UcmaCommand& c);
// Header + at most the command's structure: bytes beyond it mean nothing to any handler.
size_t ucma_command_length(const UcmaCommand& c);
// The response pointer (0 when the command has none or `out` is 0); EFAULT when the body cannot hold it.
int ucma_response_pointer(const UcmaCommand& c, uint64_t& ptr);
// SET_OPTION's optval pointer and optlen: EINVAL for a short body or optlen over kMaxOptionLen, EFAULT for a
// null optval with a length.
int ucma_set_option_value(const UcmaCommand& c, uint64_t& optval, uint32_t& optlen);
// MIGRATE_ID's fd (of the channel the id comes from); EINVAL for a short body.
int ucma_migrate_fd(const UcmaCommand& c, int& fd);

// librdmacm's enum rdma_cm_event_type (the values GET_EVENT reports).
enum class UcmaEvent : uint32_t {
  addr_resolved = 0,
  addr_error = 1,
  route_resolved = 2,
  route_error = 3,
  connect_request = 4,
  connect_response = 5,
  connect_error = 6,
  unreachable = 7,
  rejected = 8,
  established = 9,
  disconnected = 10,
  device_removal = 11,
  multicast_join = 12,
  multicast_error = 13,
  addr_change = 14,
  timewait_exit = 15,
};
const char* ucma_event_name(UcmaEvent e);

static_assert(sizeof(rdma_ucm_cmd_hdr) == 8);
static_assert(sizeof(rdma_ucm_create_id) == 24 && sizeof(rdma_ucm_connect) == 288 &&
              sizeof(rdma_ucm_accept) == 296 && sizeof(rdma_ucm_event_resp) == 336 &&
              sizeof(ib_uverbs_qp_attr) == 144 && sizeof(rdma_ucm_query_route_resp) == 208);

}  // namespace urxe::cm
