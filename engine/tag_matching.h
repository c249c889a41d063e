// Tag matching SRQs (IBV_SRQT_TM), as ConnectX (mlx5) offers them: the app keeps a list of tagged buffers on
// the SRQ (IBV_WR_TAG_ADD / DEL / SYNC through ibv_post_srq_ops); a SEND arriving on an RC QP attached to it
// starts with a tag-matching header (struct ibv_tmh) that picks the buffer. Numbers as in libibverbs
// (<infiniband/verbs.h>, <infiniband/tm_types.h>). The flows are in tag_matching.cc.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/verbs.h"

namespace urxe::engine {

// ibv_srq_type
enum SrqType : uint32_t { SRQT_BASIC = 0, SRQT_XRC = 1, SRQT_TM = 2 };

// ibv_tmh_op: the first byte of a tag-matching message
enum TmhOp : uint8_t { TMH_NO_TAG = 0, TMH_RNDV = 1, TMH_FIN = 2, TMH_EAGER = 3 };
inline constexpr uint32_t kTmhSize = 16;  // struct ibv_tmh: opcode, 3 reserved, app_ctx be32, tag be64
inline constexpr uint32_t kRvhSize =
    16;  // struct ibv_rvh (after the TMH of a RNDV): va be64, rkey be32, len be32

// ibv_ops_wr_opcode, ibv_ops_flags
enum OpsWrOpcode : uint32_t { WR_TAG_ADD = 0, WR_TAG_DEL = 1, WR_TAG_SYNC = 2 };
enum OpsFlags : uint32_t { OPS_SIGNALED = 1u << 0, OPS_TM_SYNC = 1u << 1 };

// One struct ibv_ops_wr (without its list link).
struct OpsWr {
  uint64_t wr_id = 0;
  OpsWrOpcode opcode = WR_TAG_ADD;
  uint32_t flags = 0;
  uint32_t unexpected_cnt = 0;  // OPS_TM_SYNC: unexpected messages the app has handled
  uint32_t handle = 0;          // TAG_DEL: the tag; TAG_ADD: set to the new tag's handle
  uint64_t recv_wr_id = 0;      // TAG_ADD: wr_id of the tag's receive completion
  const Sge* sg_list = nullptr;
  int num_sge = 0;
  uint64_t tag = 0, mask = 0;  // a message matches when (TMH.tag & mask) == tag
};

// ibv_tm_caps as urxe honours them; ibv_tm_cap_flags.
inline constexpr uint32_t kTmCapRc = 1u << 0;
struct TmCaps {
  uint32_t max_rndv_hdr_size = 64;  // a RNDV message the NIC serves itself: TMH + RVH + app header
  uint32_t max_num_tags = 255;
  uint32_t flags = kTmCapRc;
  uint32_t max_ops = 1024;
  uint32_t max_sge = 1;
};
inline constexpr TmCaps kTmCaps{};

// ibv_srq_init_attr_ex's TM part: tm_cap and the CQ its operations complete on.
struct TmSrqAttr {
  uint32_t max_num_tags = 0;
  uint32_t max_ops = 0;
  uint32_t cq = 0;
};

// ---- engine side ----
struct Cq;

struct TmTag {
  enum class State : uint8_t { free, live, consumed };
  State state = State::free;
  bool armed = false;  // may match: added while the app had seen every unexpected message (or synced since)
  uint64_t tag = 0, mask = 0, wr_id = 0;
  Sge sge{};
  uint32_t num_sge = 0;
};

struct TmSrq {  // (its CQ, for operation and receive completions: Srq::cq)
  uint32_t max_ops = 0;
  std::vector<TmTag> tags;      // by handle
  std::vector<uint32_t> order;  // live handles in posting order: the matching order
  std::vector<uint32_t> free;   // handles to reuse (a stack)
  uint32_t unexp_hw = 0;        // unexpected messages delivered so far
  uint32_t unexp_sw = 0;        // unexpected messages the app last said it handled (OPS_TM_SYNC)
};

// What the SEND being received at a QP on a TM SRQ turned out to be (Qp::Responder::tm).
enum class TmKind : uint8_t { none, expected, unexpected, no_tag, rndv, rndv_sw };
struct TmRecv {
  TmKind kind = TmKind::none;
  uint32_t app_ctx = 0;
  uint64_t tag = 0;
  uint64_t va = 0;  // RNDV: the sender's buffer
  uint32_t rkey = 0, len = 0;
};

// send_flags bit of the WQEs the NIC posts itself (a rendezvous's READ and FIN): no completion for the app.
inline constexpr uint32_t kSendTmInternal = 1u << 31;
// SQ slots added to a QP on a TM SRQ for those WQEs (a READ and a FIN per rendezvous in flight).
inline constexpr uint32_t kTmSqSlots = 16;

}  // namespace urxe::engine
