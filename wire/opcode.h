// The one RoCEv2 opcode table (IBTA 9.2, Table 35): everything that depends on the BTH opcode reads it.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace urxe::wire {

enum class Transport : uint8_t { rc = 0, uc = 1, rd = 2, ud = 3, cnp = 4, xrc = 5, none = 0xff };

// Extension headers, in the order they follow the BTH on the wire.
enum ExtHeader : uint16_t {
  kRdeth = 1u << 0,  // RD only; never valid here (RD opcodes are not in the table)
  kDeth = 1u << 1,
  kReth = 1u << 2,
  kAtomicEth = 1u << 3,
  kAeth = 1u << 4,
  kAtomicAckEth = 1u << 5,
  kImmDt = 1u << 6,
  kIeth = 1u << 7,
  kXrceth = 1u << 8,  // XRC requests (IBTA Annex A14): right after the BTH, before RETH/AtomicETH/ImmDt/IETH
};

// Where a packet sits in a message.
enum class Position : uint8_t { none = 0, first, middle, last, only };

// What kind of operation, independent of transport and position.
enum class OpKind : uint8_t {
  none = 0,
  send,
  rdma_write,
  rdma_read_request,
  rdma_read_response,
  ack,
  atomic_ack,
  compare_swap,
  fetch_add,
  atomic_write,  // IBTA Annex A19 (Memory Placement Extensions): one 8-byte atomic store
  cnp
};

// One row of the table, as kernel rxe's rxe_opcode[]: indexed by the BTH opcode, which it also names.
struct OpcodeInfo {
  uint8_t opcode = 0;     // this row's index in opcode_table()
  std::string_view name;  // IBTA name, e.g. "RC SEND_FIRST"
  Transport transport = Transport::none;
  OpKind kind = OpKind::none;
  Position position = Position::none;
  uint16_t headers = 0;      // ExtHeader bits
  bool has_payload = false;  // a data payload may follow the headers
  bool is_request = false;   // requester → responder
  bool is_response = false;  // responder → requester (ACK, READ response, atomic ACK)
  bool with_imm = false;
  bool with_inv = false;
  uint8_t ext_len = 0;  // total length of the extension headers in bytes (the table derives it from headers)
  constexpr bool valid() const { return transport != Transport::none; }
  constexpr bool is_first() const { return position == Position::first || position == Position::only; }
  constexpr bool is_last() const { return position == Position::last || position == Position::only; }
};

// Extension header sizes (IBTA 9.3).
inline constexpr uint32_t kEthLen = 14, kVlanLen = 4, kIpv4MinLen = 20, kIpv6Len = 40, kUdpLen = 8;
inline constexpr uint32_t kBthLen = 12, kRethLen = 16, kAethLen = 4, kAtomicEthLen = 28, kAtomicAckEthLen = 8,
                          kImmDtLen = 4, kIethLen = 4, kDethLen = 8, kXrcethLen = 4, kIcrcLen = 4,
                          kCnpPayloadLen = 16;
inline constexpr uint16_t kRoceV2Port = 4791;

namespace op {
inline constexpr uint8_t kRc = 0x00, kUc = 0x20, kRd = 0x40, kUd = 0x60, kCnpBase = 0x80, kXrc = 0xa0;
inline constexpr uint8_t send_first = 0x00, send_middle = 0x01, send_last = 0x02, send_last_imm = 0x03,
                         send_only = 0x04, send_only_imm = 0x05, write_first = 0x06, write_middle = 0x07,
                         write_last = 0x08, write_last_imm = 0x09, write_only = 0x0a, write_only_imm = 0x0b,
                         read_request = 0x0c, read_response_first = 0x0d, read_response_middle = 0x0e,
                         read_response_last = 0x0f, read_response_only = 0x10, acknowledge = 0x11,
                         atomic_acknowledge = 0x12, compare_swap = 0x13, fetch_add = 0x14,
                         send_last_inv = 0x16, send_only_inv = 0x17;
// IBTA Annex A19 (Memory Placement Extensions), RC only: FLUSH (0x1c) is not implemented (not in the table:
// dropped as an unknown opcode), ATOMIC WRITE (0x1d) is.
inline constexpr uint8_t flush = 0x1c, atomic_write = 0x1d;
inline constexpr uint8_t cnp = 0x81;
}  // namespace op

// Indexed by opcode (opcode.cc fills it at compile time); declared here so that a lookup on the per-frame
// path is one load, not a call into another file.
extern const std::array<OpcodeInfo, 256> kOpcodeTable;
inline const std::array<OpcodeInfo, 256>& opcode_table() {
  return kOpcodeTable;
}
inline const OpcodeInfo& opcode_info(uint8_t opcode) {
  return kOpcodeTable[opcode];
}

// The low 5 bits of the opcodes of a message's packets by position: the requester's SEND/WRITE packets and
// the responder's READ responses pick theirs here.
struct MsgOpcodes {
  uint8_t first = 0, middle = 0, last = 0, only = 0;
  constexpr uint8_t pick(bool is_first, bool is_last) const {
    return is_first && is_last ? only : is_first ? first : is_last ? last : middle;
  }
};
inline constexpr MsgOpcodes kReadResponseOpcodes{.first = op::read_response_first,
                                                 .middle = op::read_response_middle,
                                                 .last = op::read_response_last,
                                                 .only = op::read_response_only};

// Combine a transport base (op::kRc, op::kUc, op::kUd, op::kXrc) with a low-5-bit operation code.
constexpr uint8_t make_opcode(uint8_t transport_base, uint8_t op_low) {
  return static_cast<uint8_t>(transport_base | op_low);
}

}  // namespace urxe::wire
