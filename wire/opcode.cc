#include "wire/opcode.h"

namespace urxe::wire {
namespace {

uint8_t ext_len_of(uint16_t h) {
  uint32_t n = 0;
  if (h & kDeth) n += kDethLen;
  if (h & kReth) n += kRethLen;
  if (h & kAtomicEth) n += kAtomicEthLen;
  if (h & kAeth) n += kAethLen;
  if (h & kAtomicAckEth) n += kAtomicAckEthLen;
  if (h & kImmDt) n += kImmDtLen;
  if (h & kIeth) n += kIethLen;
  return static_cast<uint8_t>(n);
}

struct Row {
  uint8_t low;  // low 5 bits of the opcode
  std::string_view name;
  OpKind kind;
  Position pos;
  uint16_t headers;
  bool payload, request, response, imm, inv;
};

// Operation rows shared by transports; per-transport lists below say which exist (IBTA Table 35).
constexpr Row kRows[] = {
    {op::send_first, "SEND_FIRST", OpKind::send, Position::first, 0, true, true, false, false, false},
    {op::send_middle, "SEND_MIDDLE", OpKind::send, Position::middle, 0, true, true, false, false, false},
    {op::send_last, "SEND_LAST", OpKind::send, Position::last, 0, true, true, false, false, false},
    {op::send_last_imm, "SEND_LAST_WITH_IMMEDIATE", OpKind::send, Position::last, kImmDt, true, true, false,
     true, false},
    {op::send_only, "SEND_ONLY", OpKind::send, Position::only, 0, true, true, false, false, false},
    {op::send_only_imm, "SEND_ONLY_WITH_IMMEDIATE", OpKind::send, Position::only, kImmDt, true, true, false,
     true, false},
    {op::write_first, "RDMA_WRITE_FIRST", OpKind::rdma_write, Position::first, kReth, true, true, false,
     false, false},
    {op::write_middle, "RDMA_WRITE_MIDDLE", OpKind::rdma_write, Position::middle, 0, true, true, false, false,
     false},
    {op::write_last, "RDMA_WRITE_LAST", OpKind::rdma_write, Position::last, 0, true, true, false, false,
     false},
    {op::write_last_imm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", OpKind::rdma_write, Position::last, kImmDt, true,
     true, false, true, false},
    {op::write_only, "RDMA_WRITE_ONLY", OpKind::rdma_write, Position::only, kReth, true, true, false, false,
     false},
    {op::write_only_imm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpKind::rdma_write, Position::only,
     kReth | kImmDt, true, true, false, true, false},
    {op::read_request, "RDMA_READ_REQUEST", OpKind::rdma_read_request, Position::only, kReth, false, true,
     false, false, false},
    {op::read_response_first, "RDMA_READ_RESPONSE_FIRST", OpKind::rdma_read_response, Position::first, kAeth,
     true, false, true, false, false},
    {op::read_response_middle, "RDMA_READ_RESPONSE_MIDDLE", OpKind::rdma_read_response, Position::middle, 0,
     true, false, true, false, false},
    {op::read_response_last, "RDMA_READ_RESPONSE_LAST", OpKind::rdma_read_response, Position::last, kAeth,
     true, false, true, false, false},
    {op::read_response_only, "RDMA_READ_RESPONSE_ONLY", OpKind::rdma_read_response, Position::only, kAeth,
     true, false, true, false, false},
    {op::acknowledge, "ACKNOWLEDGE", OpKind::ack, Position::only, kAeth, false, false, true, false, false},
    {op::atomic_acknowledge, "ATOMIC_ACKNOWLEDGE", OpKind::atomic_ack, Position::only, kAeth | kAtomicAckEth,
     false, false, true, false, false},
    {op::compare_swap, "COMPARE_SWAP", OpKind::compare_swap, Position::only, kAtomicEth, false, true, false,
     false, false},
    {op::fetch_add, "FETCH_ADD", OpKind::fetch_add, Position::only, kAtomicEth, false, true, false, false,
     false},
    {op::send_last_inv, "SEND_LAST_WITH_INVALIDATE", OpKind::send, Position::last, kIeth, true, true, false,
     false, true},
    {op::send_only_inv, "SEND_ONLY_WITH_INVALIDATE", OpKind::send, Position::only, kIeth, true, true, false,
     false, true},
};

constexpr const Row* row_for(uint8_t low) {
  for (const Row& r : kRows)
    if (r.low == low) return &r;
  return nullptr;
}

void put(std::array<OpcodeInfo, 256>& t, uint8_t base, Transport tr, const Row& r, uint16_t extra_headers) {
  uint8_t code = static_cast<uint8_t>(base | r.low);
  OpcodeInfo& e = t[code];
  e.transport = tr;
  e.kind = r.kind;
  e.position = r.pos;
  e.headers = static_cast<uint16_t>(r.headers | extra_headers);
  e.has_payload = r.payload;
  e.is_request = r.request;
  e.is_response = r.response;
  e.with_imm = r.imm;
  e.with_inv = r.inv;
  e.ext_len = ext_len_of(e.headers);
}

// Names with transport prefix, kept static so string_views stay valid.
constexpr std::string_view kRcNames[] = {
    "RC SEND_FIRST", "RC SEND_MIDDLE", "RC SEND_LAST", "RC SEND_LAST_WITH_IMMEDIATE", "RC SEND_ONLY",
    "RC SEND_ONLY_WITH_IMMEDIATE", "RC RDMA_WRITE_FIRST", "RC RDMA_WRITE_MIDDLE", "RC RDMA_WRITE_LAST",
    "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC RDMA_WRITE_ONLY", "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "RC RDMA_READ_REQUEST", "RC RDMA_READ_RESPONSE_FIRST", "RC RDMA_READ_RESPONSE_MIDDLE",
    "RC RDMA_READ_RESPONSE_LAST", "RC RDMA_READ_RESPONSE_ONLY", "RC ACKNOWLEDGE", "RC ATOMIC_ACKNOWLEDGE",
    "RC COMPARE_SWAP", "RC FETCH_ADD", "", "RC SEND_LAST_WITH_INVALIDATE", "RC SEND_ONLY_WITH_INVALIDATE"};
constexpr std::string_view kUcNames[] = {
    "UC SEND_FIRST", "UC SEND_MIDDLE", "UC SEND_LAST", "UC SEND_LAST_WITH_IMMEDIATE", "UC SEND_ONLY",
    "UC SEND_ONLY_WITH_IMMEDIATE", "UC RDMA_WRITE_FIRST", "UC RDMA_WRITE_MIDDLE", "UC RDMA_WRITE_LAST",
    "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC RDMA_WRITE_ONLY", "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE"};

std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> t{};
  for (uint8_t low = 0; low <= op::send_only_inv; ++low) {
    const Row* r = row_for(low);
    if (!r) continue;
    put(t, op::kRc, Transport::rc, *r, 0);
    t[op::kRc | low].name = kRcNames[low];
    if (low <= op::write_only_imm) {
      put(t, op::kUc, Transport::uc, *r, 0);
      t[op::kUc | low].name = kUcNames[low];
    }
  }
  // UD: only SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE, each with a DETH.
  put(t, op::kUd, Transport::ud, *row_for(op::send_only), kDeth);
  t[op::kUd | op::send_only].name = "UD SEND_ONLY";
  put(t, op::kUd, Transport::ud, *row_for(op::send_only_imm), kDeth);
  t[op::kUd | op::send_only_imm].name = "UD SEND_ONLY_WITH_IMMEDIATE";
  // CNP (RoCEv2 Annex A17.9.3): 16 reserved bytes after the BTH, no ACK, no message.
  OpcodeInfo& c = t[op::cnp];
  c.name = "CNP";
  c.transport = Transport::cnp;
  c.kind = OpKind::cnp;
  c.position = Position::only;
  c.ext_len = kCnpPayloadLen;  // reserved bytes, treated as a fixed header so no payload may follow
  return t;
}

}  // namespace

const std::array<OpcodeInfo, 256>& opcode_table() {
  static const std::array<OpcodeInfo, 256> table = build_table();
  return table;
}

}  // namespace urxe::wire
