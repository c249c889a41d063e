#include "wire/opcode.h"

namespace urxe::wire {
namespace {

constexpr uint8_t ext_len_of(uint16_t h) {
  uint32_t n = 0;
  if (h & kDeth) n += kDethLen;
  if (h & kXrceth) n += kXrcethLen;
  if (h & kReth) n += kRethLen;
  if (h & kAtomicEth) n += kAtomicEthLen;
  if (h & kAeth) n += kAethLen;
  if (h & kAtomicAckEth) n += kAtomicAckEthLen;
  if (h & kImmDt) n += kImmDtLen;
  if (h & kIeth) n += kIethLen;
  return static_cast<uint8_t>(n);
}

// Every opcode urxe knows (IBTA 9.2, Table 35, and Annex A19's ATOMIC WRITE), one row each; opcode_table()
// places each at its index. XRC's rows are derived from RC's (below). RD opcodes are absent (invalid).
// ext_len is derived from headers, except CNP's.
constexpr OpcodeInfo kRows[] = {
    {.opcode = op::kRc | op::send_first,
     .name = "RC SEND_FIRST",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::first,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::send_middle,
     .name = "RC SEND_MIDDLE",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::middle,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::send_last,
     .name = "RC SEND_LAST",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::last,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::send_last_imm,
     .name = "RC SEND_LAST_WITH_IMMEDIATE",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::last,
     .headers = kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kRc | op::send_only,
     .name = "RC SEND_ONLY",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::only,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::send_only_imm,
     .name = "RC SEND_ONLY_WITH_IMMEDIATE",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::only,
     .headers = kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kRc | op::write_first,
     .name = "RC RDMA_WRITE_FIRST",
     .transport = Transport::rc,
     .kind = OpKind::rdma_write,
     .position = Position::first,
     .headers = kReth,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::write_middle,
     .name = "RC RDMA_WRITE_MIDDLE",
     .transport = Transport::rc,
     .kind = OpKind::rdma_write,
     .position = Position::middle,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::write_last,
     .name = "RC RDMA_WRITE_LAST",
     .transport = Transport::rc,
     .kind = OpKind::rdma_write,
     .position = Position::last,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::write_last_imm,
     .name = "RC RDMA_WRITE_LAST_WITH_IMMEDIATE",
     .transport = Transport::rc,
     .kind = OpKind::rdma_write,
     .position = Position::last,
     .headers = kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kRc | op::write_only,
     .name = "RC RDMA_WRITE_ONLY",
     .transport = Transport::rc,
     .kind = OpKind::rdma_write,
     .position = Position::only,
     .headers = kReth,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kRc | op::write_only_imm,
     .name = "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     .transport = Transport::rc,
     .kind = OpKind::rdma_write,
     .position = Position::only,
     .headers = kReth | kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kRc | op::read_request,
     .name = "RC RDMA_READ_REQUEST",
     .transport = Transport::rc,
     .kind = OpKind::rdma_read_request,
     .position = Position::only,
     .headers = kReth,
     .is_request = true},
    {.opcode = op::kRc | op::read_response_first,
     .name = "RC RDMA_READ_RESPONSE_FIRST",
     .transport = Transport::rc,
     .kind = OpKind::rdma_read_response,
     .position = Position::first,
     .headers = kAeth,
     .has_payload = true,
     .is_response = true},
    {.opcode = op::kRc | op::read_response_middle,
     .name = "RC RDMA_READ_RESPONSE_MIDDLE",
     .transport = Transport::rc,
     .kind = OpKind::rdma_read_response,
     .position = Position::middle,
     .has_payload = true,
     .is_response = true},
    {.opcode = op::kRc | op::read_response_last,
     .name = "RC RDMA_READ_RESPONSE_LAST",
     .transport = Transport::rc,
     .kind = OpKind::rdma_read_response,
     .position = Position::last,
     .headers = kAeth,
     .has_payload = true,
     .is_response = true},
    {.opcode = op::kRc | op::read_response_only,
     .name = "RC RDMA_READ_RESPONSE_ONLY",
     .transport = Transport::rc,
     .kind = OpKind::rdma_read_response,
     .position = Position::only,
     .headers = kAeth,
     .has_payload = true,
     .is_response = true},
    {.opcode = op::kRc | op::acknowledge,
     .name = "RC ACKNOWLEDGE",
     .transport = Transport::rc,
     .kind = OpKind::ack,
     .position = Position::only,
     .headers = kAeth,
     .is_response = true},
    {.opcode = op::kRc | op::atomic_acknowledge,
     .name = "RC ATOMIC_ACKNOWLEDGE",
     .transport = Transport::rc,
     .kind = OpKind::atomic_ack,
     .position = Position::only,
     .headers = kAeth | kAtomicAckEth,
     .is_response = true},
    {.opcode = op::kRc | op::compare_swap,
     .name = "RC COMPARE_SWAP",
     .transport = Transport::rc,
     .kind = OpKind::compare_swap,
     .position = Position::only,
     .headers = kAtomicEth,
     .is_request = true},
    {.opcode = op::kRc | op::fetch_add,
     .name = "RC FETCH_ADD",
     .transport = Transport::rc,
     .kind = OpKind::fetch_add,
     .position = Position::only,
     .headers = kAtomicEth,
     .is_request = true},
    {.opcode = op::kRc | op::send_last_inv,
     .name = "RC SEND_LAST_WITH_INVALIDATE",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::last,
     .headers = kIeth,
     .has_payload = true,
     .is_request = true,
     .with_inv = true},
    {.opcode = op::kRc | op::send_only_inv,
     .name = "RC SEND_ONLY_WITH_INVALIDATE",
     .transport = Transport::rc,
     .kind = OpKind::send,
     .position = Position::only,
     .headers = kIeth,
     .has_payload = true,
     .is_request = true,
     .with_inv = true},
    // RETH (VA, R_Key, DMA length 8) and exactly 8 payload bytes, answered by an RDMA READ RESPONSE ONLY
    // without payload (Annex A19).
    {.opcode = op::kRc | op::atomic_write,
     .name = "RC ATOMIC_WRITE",
     .transport = Transport::rc,
     .kind = OpKind::atomic_write,
     .position = Position::only,
     .headers = kReth,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::send_first,
     .name = "UC SEND_FIRST",
     .transport = Transport::uc,
     .kind = OpKind::send,
     .position = Position::first,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::send_middle,
     .name = "UC SEND_MIDDLE",
     .transport = Transport::uc,
     .kind = OpKind::send,
     .position = Position::middle,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::send_last,
     .name = "UC SEND_LAST",
     .transport = Transport::uc,
     .kind = OpKind::send,
     .position = Position::last,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::send_last_imm,
     .name = "UC SEND_LAST_WITH_IMMEDIATE",
     .transport = Transport::uc,
     .kind = OpKind::send,
     .position = Position::last,
     .headers = kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kUc | op::send_only,
     .name = "UC SEND_ONLY",
     .transport = Transport::uc,
     .kind = OpKind::send,
     .position = Position::only,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::send_only_imm,
     .name = "UC SEND_ONLY_WITH_IMMEDIATE",
     .transport = Transport::uc,
     .kind = OpKind::send,
     .position = Position::only,
     .headers = kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kUc | op::write_first,
     .name = "UC RDMA_WRITE_FIRST",
     .transport = Transport::uc,
     .kind = OpKind::rdma_write,
     .position = Position::first,
     .headers = kReth,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::write_middle,
     .name = "UC RDMA_WRITE_MIDDLE",
     .transport = Transport::uc,
     .kind = OpKind::rdma_write,
     .position = Position::middle,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::write_last,
     .name = "UC RDMA_WRITE_LAST",
     .transport = Transport::uc,
     .kind = OpKind::rdma_write,
     .position = Position::last,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::write_last_imm,
     .name = "UC RDMA_WRITE_LAST_WITH_IMMEDIATE",
     .transport = Transport::uc,
     .kind = OpKind::rdma_write,
     .position = Position::last,
     .headers = kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kUc | op::write_only,
     .name = "UC RDMA_WRITE_ONLY",
     .transport = Transport::uc,
     .kind = OpKind::rdma_write,
     .position = Position::only,
     .headers = kReth,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUc | op::write_only_imm,
     .name = "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     .transport = Transport::uc,
     .kind = OpKind::rdma_write,
     .position = Position::only,
     .headers = kReth | kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::kUd | op::send_only,
     .name = "UD SEND_ONLY",
     .transport = Transport::ud,
     .kind = OpKind::send,
     .position = Position::only,
     .headers = kDeth,
     .has_payload = true,
     .is_request = true},
    {.opcode = op::kUd | op::send_only_imm,
     .name = "UD SEND_ONLY_WITH_IMMEDIATE",
     .transport = Transport::ud,
     .kind = OpKind::send,
     .position = Position::only,
     .headers = kDeth | kImmDt,
     .has_payload = true,
     .is_request = true,
     .with_imm = true},
    {.opcode = op::cnp,
     .name = "CNP",
     .transport = Transport::cnp,
     .kind = OpKind::cnp,
     .position = Position::only,
     .ext_len = kCnpPayloadLen},
};

// XRC (IBTA Annex A14): the RC operations 0x00-0x17 again at 0xa0-0xb7, every request with an XRCETH
// (the responder's XRC SRQ number) after the BTH, responses without one. Indexed by the low 5 bits; an
// empty name is an operation XRC lacks as RC does (0x15, RESYNC, is not implemented for either).
constexpr std::string_view kXrcNames[0x18] = {"XRC SEND_FIRST",
                                              "XRC SEND_MIDDLE",
                                              "XRC SEND_LAST",
                                              "XRC SEND_LAST_WITH_IMMEDIATE",
                                              "XRC SEND_ONLY",
                                              "XRC SEND_ONLY_WITH_IMMEDIATE",
                                              "XRC RDMA_WRITE_FIRST",
                                              "XRC RDMA_WRITE_MIDDLE",
                                              "XRC RDMA_WRITE_LAST",
                                              "XRC RDMA_WRITE_LAST_WITH_IMMEDIATE",
                                              "XRC RDMA_WRITE_ONLY",
                                              "XRC RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                                              "XRC RDMA_READ_REQUEST",
                                              "XRC RDMA_READ_RESPONSE_FIRST",
                                              "XRC RDMA_READ_RESPONSE_MIDDLE",
                                              "XRC RDMA_READ_RESPONSE_LAST",
                                              "XRC RDMA_READ_RESPONSE_ONLY",
                                              "XRC ACKNOWLEDGE",
                                              "XRC ATOMIC_ACKNOWLEDGE",
                                              "XRC COMPARE_SWAP",
                                              "XRC FETCH_ADD",
                                              "",
                                              "XRC SEND_LAST_WITH_INVALIDATE",
                                              "XRC SEND_ONLY_WITH_INVALIDATE"};

constexpr void place(std::array<OpcodeInfo, 256>& t, const OpcodeInfo& r) {
  OpcodeInfo& e = t[r.opcode];
  e = r;
  // CNP (RoCEv2 Annex A17.9.3): its 16 reserved bytes count as a fixed header, so no payload may follow
  if (r.transport != Transport::cnp) e.ext_len = ext_len_of(r.headers);
}

constexpr std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> t{};
  for (uint32_t i = 0; i < t.size(); ++i) t[i].opcode = static_cast<uint8_t>(i);
  for (const OpcodeInfo& r : kRows) place(t, r);
  for (const OpcodeInfo& r : kRows) {
    if (r.transport != Transport::rc || r.opcode >= std::size(kXrcNames)) continue;
    OpcodeInfo x = r;
    x.opcode = static_cast<uint8_t>(op::kXrc | r.opcode);
    x.name = kXrcNames[r.opcode];
    x.transport = Transport::xrc;
    if (r.is_request) x.headers = static_cast<uint16_t>(x.headers | kXrceth);
    place(t, x);
  }
  return t;
}

constexpr std::array<OpcodeInfo, 256> kTable = build_table();

// Each row is named once and sits at its own opcode: no two rows share one, and the name's transport
// prefix agrees with the opcode's transport bits.
constexpr bool rows_placed() {
  for (const OpcodeInfo& r : kRows) {
    if (kTable[r.opcode].name != r.name) return false;
    const uint8_t base = r.opcode & 0xe0;
    const std::string_view prefix = base == op::kRc   ? "RC "
                                    : base == op::kUc ? "UC "
                                    : base == op::kUd ? "UD "
                                                      : "CNP";
    if (!r.name.starts_with(prefix)) return false;
  }
  // XRC: an RC row's twin for each named operation, and nothing else at 0xa0-0xbf
  size_t xrc = 0;
  for (uint32_t low = 0; low < 0x20; ++low) {
    const OpcodeInfo& x = kTable[op::kXrc | low];
    const bool named = low < std::size(kXrcNames) && !kXrcNames[low].empty();
    if (x.valid() != named) return false;
    if (!named) continue;
    const OpcodeInfo& r = kTable[low];
    if (!r.valid() || x.name != kXrcNames[low] || x.kind != r.kind || x.position != r.position ||
        x.has_payload != r.has_payload || x.is_request != r.is_request ||
        x.ext_len != r.ext_len + (r.is_request ? kXrcethLen : 0))
      return false;
    ++xrc;
  }
  size_t valid = 0;
  for (const OpcodeInfo& e : kTable) valid += e.valid();
  return valid == std::size(kRows) + xrc;
}
static_assert(rows_placed());

}  // namespace

constinit const std::array<OpcodeInfo, 256> kOpcodeTable = kTable;

}  // namespace urxe::wire
