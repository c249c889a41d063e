// Per-WR-opcode behaviour: the one table (engine/wr_table.cc) the requester, the completer and post_send
// read, indexed by WrOpcode. The wire side's counterpart is wire/opcode.h's kOpcodeTable.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/verbs.h"
#include "wire/opcode.h"

namespace urxe::engine {

struct WrInfo {
  WrOpcode opcode = WR_RDMA_WRITE;  // this row's index in the table
  bool valid = false;
  bool rc = false, uc = false, ud = false;  // QP types that take it
  WcOpcode wc_opcode = WC_SEND;
  wire::MsgOpcodes ops{};  // low 5 bits of the BTH opcode by position (a READ or atomic has only `only`)
  bool is_read = false, is_atomic = false, is_local = false, has_imm = false, has_inv = false;
  bool is_write = false, is_send = false;
  // ATOMIC WRITE (Annex A19): also is_atomic (one packet, a responder resource, only its own response
  // completes it), but its 8 bytes go out as payload and its response is an RDMA READ RESPONSE ONLY.
  bool is_atomic_write = false;
};
// The table's rows, one per WrOpcode up to WR_ATOMIC_WRITE; wr_info is inline: the requester, completer
// and post_send look a row up per packet or WQE.
constexpr size_t kWrRows = size_t{WR_ATOMIC_WRITE} + 1;
extern const WrInfo kWrTable[kWrRows];
extern const WrInfo kInvalidWr;
inline const WrInfo& wr_info(WrOpcode op) {
  return op < kWrRows ? kWrTable[op] : kInvalidWr;
}

}  // namespace urxe::engine
