// The WR behaviour table: for each WR opcode, the QP types that take it, its completion opcode and its wire
// opcodes by packet position. The requester, the completer and post_send read it through wr_info
// (engine/wr_table.h); a new WR opcode is a row here. The wire side's counterpart is wire/opcode.cc.
#include "engine/wr_table.h"

#include <iterator>

namespace urxe::engine {

namespace {
namespace op = wire::op;
constexpr uint8_t kNone = 0xff;  // no such packet position
constexpr wire::MsgOpcodes single(uint8_t only) {
  return {.first = kNone, .middle = kNone, .last = kNone, .only = only};
}
}  // namespace
// Which transports take the WR, the completion opcode and the wire opcodes.
constexpr WrInfo kWrTable[kWrRows] = {
    {.opcode = WR_RDMA_WRITE,
     .valid = true,
     .rc = true,
     .uc = true,
     .wc_opcode = WC_RDMA_WRITE,
     .ops = {.first = op::write_first,
             .middle = op::write_middle,
             .last = op::write_last,
             .only = op::write_only},
     .is_write = true},
    {.opcode = WR_RDMA_WRITE_WITH_IMM,
     .valid = true,
     .rc = true,
     .uc = true,
     .wc_opcode = WC_RDMA_WRITE,
     .ops = {.first = op::write_first,
             .middle = op::write_middle,
             .last = op::write_last_imm,
             .only = op::write_only_imm},
     .has_imm = true,
     .is_write = true},
    {.opcode = WR_SEND,
     .valid = true,
     .rc = true,
     .uc = true,
     .ud = true,
     .wc_opcode = WC_SEND,
     .ops =
         {.first = op::send_first, .middle = op::send_middle, .last = op::send_last, .only = op::send_only},
     .is_send = true},
    {.opcode = WR_SEND_WITH_IMM,
     .valid = true,
     .rc = true,
     .uc = true,
     .ud = true,
     .wc_opcode = WC_SEND,
     .ops = {.first = op::send_first,
             .middle = op::send_middle,
             .last = op::send_last_imm,
             .only = op::send_only_imm},
     .has_imm = true,
     .is_send = true},
    {.opcode = WR_RDMA_READ,
     .valid = true,
     .rc = true,
     .wc_opcode = WC_RDMA_READ,
     .ops = single(op::read_request),
     .is_read = true},
    {.opcode = WR_ATOMIC_CMP_AND_SWP,
     .valid = true,
     .rc = true,
     .wc_opcode = WC_COMP_SWAP,
     .ops = single(op::compare_swap),
     .is_atomic = true},
    {.opcode = WR_ATOMIC_FETCH_AND_ADD,
     .valid = true,
     .rc = true,
     .wc_opcode = WC_FETCH_ADD,
     .ops = single(op::fetch_add),
     .is_atomic = true},
    // executed by the requester in queue order, no packet; memory windows are bound to RC/UC QPs only
    // (ibv_post_send(3): LOCAL_INV and BIND_MW on UC, RC, XRC)
    {.opcode = WR_LOCAL_INV,
     .valid = true,
     .rc = true,
     .uc = true,
     .wc_opcode = WC_LOCAL_INV,
     .ops = single(kNone),
     .is_local = true},
    {.opcode = WR_BIND_MW,
     .valid = true,
     .rc = true,
     .uc = true,
     .wc_opcode = WC_BIND_MW,
     .ops = single(kNone),
     .is_local = true},
    // RC only: UC and UD have no SEND_*_INV opcodes
    {.opcode = WR_SEND_WITH_INV,
     .valid = true,
     .rc = true,
     .wc_opcode = WC_SEND,
     .ops = {.first = op::send_first,
             .middle = op::send_middle,
             .last = op::send_last_inv,
             .only = op::send_only_inv},
     .has_inv = true,
     .is_send = true},
    {.opcode = WR_TSO},                     // not supported (no TSO on RC/UC/UD)
    {.opcode = static_cast<WrOpcode>(11)},  // IBV_WR_DRIVER1: not used
    {.opcode = static_cast<WrOpcode>(12)},  // (no such opcode)
    {.opcode = static_cast<WrOpcode>(13)},  // (no such opcode)
    {.opcode = WR_FLUSH},                   // not supported
    // Annex A19: RC only; one packet of RETH + 8 bytes, answered like a READ
    {.opcode = WR_ATOMIC_WRITE,
     .valid = true,
     .rc = true,
     .wc_opcode = WC_ATOMIC_WRITE,
     .ops = single(op::atomic_write),
     .is_atomic = true,
     .is_atomic_write = true},
};
namespace {
constexpr bool wr_rows_placed() {
  for (size_t i = 0; i < std::size(kWrTable); i++)
    if (kWrTable[i].opcode != i) return false;
  return true;
}
static_assert(wr_rows_placed(), "kWrTable: each row at its WrOpcode");
}  // namespace
constexpr WrInfo kInvalidWr{};

}  // namespace urxe::engine
