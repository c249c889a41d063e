// The engine's verbs vocabulary. Every enum has the same numeric values as rdma-core 44's
// <infiniband/verbs.h> (checked by static_asserts in tests/engine), so the provider converts by cast; the
// structs mirror the libibverbs ones field by field but carry engine handles instead of ibv_* pointers.
// No libibverbs header is included here: the engine does not depend on rdma-core.
#pragma once
#include <cstdint>

#include "wire/headers.h"

namespace urxe::engine {

// ---- completions (ibv_wc_status, ibv_wc_opcode, ibv_wc_flags) ----
enum WcStatus : uint32_t {
  WC_SUCCESS = 0,
  WC_LOC_LEN_ERR = 1,
  WC_LOC_QP_OP_ERR = 2,
  WC_LOC_EEC_OP_ERR = 3,
  WC_LOC_PROT_ERR = 4,
  WC_WR_FLUSH_ERR = 5,
  WC_MW_BIND_ERR = 6,
  WC_BAD_RESP_ERR = 7,
  WC_LOC_ACCESS_ERR = 8,
  WC_REM_INV_REQ_ERR = 9,
  WC_REM_ACCESS_ERR = 10,
  WC_REM_OP_ERR = 11,
  WC_RETRY_EXC_ERR = 12,
  WC_RNR_RETRY_EXC_ERR = 13,
  WC_LOC_RDD_VIOL_ERR = 14,
  WC_REM_INV_RD_REQ_ERR = 15,
  WC_REM_ABORT_ERR = 16,
  WC_INV_EECN_ERR = 17,
  WC_INV_EEC_STATE_ERR = 18,
  WC_FATAL_ERR = 19,
  WC_RESP_TIMEOUT_ERR = 20,
  WC_GENERAL_ERR = 21,
  WC_TM_ERR = 22,              // tag matching: a TAG_DEL of a tag consumed meanwhile
  WC_TM_RNDV_INCOMPLETE = 23,  // tag matching: a matched rendezvous the app must complete itself
};
const char* wc_status_str(WcStatus s);

enum WcOpcode : uint32_t {
  WC_SEND = 0,
  WC_RDMA_WRITE = 1,
  WC_RDMA_READ = 2,
  WC_COMP_SWAP = 3,
  WC_FETCH_ADD = 4,
  WC_BIND_MW = 5,
  WC_LOCAL_INV = 6,
  WC_ATOMIC_WRITE = 9,
  WC_RECV = 1u << 7,  // (opcode & WC_RECV) tells a receive completion
  WC_RECV_RDMA_WITH_IMM = (1u << 7) + 1,
  WC_TM_ADD = (1u << 7) + 2,  // tag-matching SRQ operations and receives (engine/tag_matching.h)
  WC_TM_DEL = (1u << 7) + 3,
  WC_TM_SYNC = (1u << 7) + 4,
  WC_TM_RECV = (1u << 7) + 5,
  WC_TM_NO_TAG = (1u << 7) + 6,
};

enum WcFlags : uint32_t {
  WC_GRH = 1u << 0,
  WC_WITH_IMM = 1u << 1,
  WC_IP_CSUM_OK = 1u << 2,
  WC_WITH_INV = 1u << 3,
  WC_TM_SYNC_REQ = 1u << 4,
  WC_TM_MATCH = 1u << 5,
  WC_TM_DATA_VALID = 1u << 6,
};

// Same fields and meaning as struct ibv_wc.
struct Wc {
  uint64_t wr_id = 0;
  WcStatus status = WC_SUCCESS;
  WcOpcode opcode = WC_SEND;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  // WC_WITH_IMM: imm_data in network byte order (the bytes as on the wire, like ibv_wc.imm_data);
  // WC_WITH_INV: the invalidated rkey (host order). Same storage, as in ibv_wc.
  uint32_t imm_data = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;  // UD: the sender's QPN from the DETH
  uint32_t wc_flags = 0;
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;  // UD receives: kWcSlRoceV2Ipv4/Ipv6 (the L3 header type, as ConnectX reports it)
  uint8_t dlid_path_bits = 0;
};
// A WC_TM_MATCH completion (RC only) carries the message's TMH tag and app_ctx (ibv_wc_tm_info) in fields
// that mean nothing for it (vendor_err: errors only; src_qp, pkey_index, slid: UD only), so a Wc stays the
// size of an ibv_wc and completions without tag matching pay nothing.
inline void wc_set_tm_info(Wc& wc, uint64_t tag, uint32_t priv) {
  wc.vendor_err = static_cast<uint32_t>(tag >> 32);
  wc.src_qp = static_cast<uint32_t>(tag);
  wc.slid = static_cast<uint16_t>(priv >> 16);
  wc.pkey_index = static_cast<uint16_t>(priv);
}
// Zero in a completion without WC_TM_MATCH (as mlx5 reports an unexpected message's).
inline uint64_t wc_tm_tag(const Wc& wc) {
  return (wc.wc_flags & WC_TM_MATCH) ? uint64_t{wc.vendor_err} << 32 | wc.src_qp : 0;
}
inline uint32_t wc_tm_priv(const Wc& wc) {
  return (wc.wc_flags & WC_TM_MATCH) ? uint32_t{wc.slid} << 16 | wc.pkey_index : 0;
}
inline constexpr uint8_t kWcSlRoceV2Ipv6 = 0x9;
inline constexpr uint8_t kWcSlRoceV2Ipv4 = 0xa;

// ---- work requests (ibv_wr_opcode, ibv_send_flags) ----
enum WrOpcode : uint32_t {
  WR_RDMA_WRITE = 0,
  WR_RDMA_WRITE_WITH_IMM = 1,
  WR_SEND = 2,
  WR_SEND_WITH_IMM = 3,
  WR_RDMA_READ = 4,
  WR_ATOMIC_CMP_AND_SWP = 5,
  WR_ATOMIC_FETCH_AND_ADD = 6,
  WR_LOCAL_INV = 7,
  WR_BIND_MW = 8,
  WR_SEND_WITH_INV = 9,
  WR_TSO = 10,           // refused: EOPNOTSUPP
  WR_FLUSH = 14,         // refused: EOPNOTSUPP (Annex A19 FLUSH is not implemented)
  WR_ATOMIC_WRITE = 15,  // RC: 8 bytes (inline or SGEs) stored atomically at an 8-byte aligned remote VA
};

enum SendFlags : uint32_t {
  SEND_FENCE = 1u << 0,
  SEND_SIGNALED = 1u << 1,
  SEND_SOLICITED = 1u << 2,
  SEND_INLINE = 1u << 3,
  SEND_IP_CSUM = 1u << 4,  // refused on RC/UC/UD: EINVAL
};

struct Sge {
  uint64_t addr = 0;  // a virtual address inside the MR named by lkey (the MR's iova space)
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// Same shape as struct ibv_send_wr. A linked list through `next`, like verbs.
struct SendWr {
  uint64_t wr_id = 0;
  SendWr* next = nullptr;
  const Sge* sg_list = nullptr;  // with SEND_INLINE: addr is a plain pointer to the bytes, lkey ignored
  int num_sge = 0;
  WrOpcode opcode = WR_SEND;
  uint32_t send_flags = 0;
  // *_WITH_IMM: imm_data in network byte order (as ibv_send_wr.imm_data); SEND_WITH_INV / LOCAL_INV:
  // the rkey to invalidate (host order), as ibv_send_wr.invalidate_rkey.
  uint32_t imm_data = 0;
  uint32_t invalidate_rkey = 0;
  struct {
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
  } rdma;
  struct {
    uint64_t remote_addr = 0;
    uint64_t compare_add = 0;
    uint64_t swap = 0;
    uint32_t rkey = 0;
  } atomic;
  // BIND_MW (ibv_send_wr.bind_mw): the window named by its current rkey, the rkey it gets (its index with
  // the low byte of `rkey`), and what it opens: [addr, addr + length) of the MR `mr_lkey`, with `access`
  // (ACCESS_REMOTE_* | ACCESS_ZERO_BASED). Length 0 unbinds (a type-1 window; mr_lkey may then be 0).
  struct {
    uint32_t mw_rkey = 0;
    uint32_t rkey = 0;
    uint32_t mr_lkey = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
    uint32_t access = 0;
  } bind_mw;
  struct {
    uint32_t ah = 0;  // handle from Engine::create_ah
    uint32_t remote_qpn = 0;
    uint32_t remote_qkey = 0;  // bit 31 set: use the QP's own Q_Key (IBTA "privileged" Q_Key rule)
  } ud;
  uint32_t xrc_remote_srqn = 0;  // XRC_SEND: the responder's XRC SRQ (ibv_send_wr.qp_type.xrc.remote_srqn)
};

// Same shape as struct ibv_recv_wr.
struct RecvWr {
  uint64_t wr_id = 0;
  RecvWr* next = nullptr;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
};

// ---- memory (ibv_access_flags) ----
enum AccessFlags : uint32_t {
  ACCESS_LOCAL_WRITE = 1u << 0,
  ACCESS_REMOTE_WRITE = 1u << 1,
  ACCESS_REMOTE_READ = 1u << 2,
  ACCESS_REMOTE_ATOMIC = 1u << 3,
  ACCESS_MW_BIND = 1u << 4,
  ACCESS_ZERO_BASED = 1u << 5,
  ACCESS_ON_DEMAND = 1u << 6,  // EOPNOTSUPP without EngineConfig::odp_fault_in
  ACCESS_HUGETLB = 1u << 7,
  ACCESS_RELAXED_ORDERING = 1u << 20,  // IBV_ACCESS_OPTIONAL_FIRST: optional, ignored
};
// Optional access bits (IBV_ACCESS_OPTIONAL_RANGE) a device may ignore.
inline constexpr uint32_t kAccessOptionalRange = 0x3ffu << 20;
// ibv_mw_type. Type 1: bound by ibv_bind_mw, to the PD only; type 2 (2B): bound by a BIND_MW WR, to the PD
// and the QP that posted it.
enum MwType : uint32_t { MW_TYPE_1 = 1, MW_TYPE_2 = 2 };
// ibv_rereg_mr flags (enum ibv_rereg_mr_flags).
enum ReregMrFlags : uint32_t {
  REREG_MR_CHANGE_TRANSLATION = 1u << 0,
  REREG_MR_CHANGE_PD = 1u << 1,
  REREG_MR_CHANGE_ACCESS = 1u << 2,
};

// ---- QPs (ibv_qp_type, ibv_qp_state, ibv_mtu, ibv_mig_state, ibv_qp_attr_mask) ----
// XRC (IBTA Annex A14): XRC_SEND is the initiator (a send queue only; each WR names the responder's XRC
// SRQ), XRC_RECV the target (no send or receive queue, no PD or CQ: an XRC domain's; each request goes to
// the XRC SRQ its XRCETH names, under that SRQ's PD, completing on that SRQ's CQ).
enum QpType : uint32_t { QPT_RC = 2, QPT_UC = 3, QPT_UD = 4, QPT_XRC_SEND = 9, QPT_XRC_RECV = 10 };
// RC and XRC: acknowledged, with the same requester, completer and responder.
constexpr bool qp_type_reliable(QpType t) {
  return t == QPT_RC || t == QPT_XRC_SEND || t == QPT_XRC_RECV;
}

enum QpState : uint32_t {
  QPS_RESET = 0,
  QPS_INIT = 1,
  QPS_RTR = 2,
  QPS_RTS = 3,
  QPS_SQD = 4,
  QPS_SQE = 5,
  QPS_ERR = 6,
  QPS_UNKNOWN = 7,
};
const char* qp_state_str(QpState s);

enum Mtu : uint32_t { MTU_256 = 1, MTU_512 = 2, MTU_1024 = 3, MTU_2048 = 4, MTU_4096 = 5 };
constexpr uint32_t mtu_to_bytes(Mtu m) {
  return (m >= MTU_256 && m <= MTU_4096) ? (128u << m) : 0;
}

enum MigState : uint32_t { MIG_MIGRATED = 0, MIG_REARM = 1, MIG_ARMED = 2 };

enum QpAttrMask : uint32_t {
  QP_STATE = 1u << 0,
  QP_CUR_STATE = 1u << 1,
  QP_EN_SQD_ASYNC_NOTIFY = 1u << 2,
  QP_ACCESS_FLAGS = 1u << 3,
  QP_PKEY_INDEX = 1u << 4,
  QP_PORT = 1u << 5,
  QP_QKEY = 1u << 6,
  QP_AV = 1u << 7,
  QP_PATH_MTU = 1u << 8,
  QP_TIMEOUT = 1u << 9,
  QP_RETRY_CNT = 1u << 10,
  QP_RNR_RETRY = 1u << 11,
  QP_RQ_PSN = 1u << 12,
  QP_MAX_QP_RD_ATOMIC = 1u << 13,
  QP_ALT_PATH = 1u << 14,
  QP_MIN_RNR_TIMER = 1u << 15,
  QP_SQ_PSN = 1u << 16,
  QP_MAX_DEST_RD_ATOMIC = 1u << 17,
  QP_PATH_MIG_STATE = 1u << 18,
  QP_CAP = 1u << 19,
  QP_DEST_QPN = 1u << 20,
  QP_RATE_LIMIT = 1u << 25,
};

// The RoCEv2 address vector (ibv_ah_attr with its GRH, reduced to what RoCE uses). The provider resolves
// the destination MAC (ARP/ND); the engine takes it as given.
struct AddressVector {
  wire::Gid dgid{};
  uint8_t sgid_index = 0;  // index into PortAttr::gids; IPv4-mapped sgid → IPv4 frames, else IPv6
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  wire::MacAddr dmac{};
  uint8_t sl = 0;
  uint8_t port_num = 1;
};

struct QpCap {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

struct QpInitAttr {
  uint32_t send_cq = 0;  // CQ handles
  uint32_t recv_cq = 0;
  uint32_t srq = 0;  // 0 = none; else an SRQ handle (the RQ capacities are then ignored)
  QpCap cap;
  QpType qp_type = QPT_RC;
  uint32_t xrcd = 0;  // XRC_RECV: its XRC domain (then no PD, CQs or SRQ)
  bool sq_sig_all = false;
  uint32_t qpn = 0;  // 0: the engine picks; else a wanted QPN inside the engine's range (EBUSY if taken)
  // The app posts to this QP from one thread at a time (a thread domain): posts to its send queue and own
  // receive queue take no lock (an SRQ's keep theirs).
  bool single_threaded = false;
};

// Same fields as struct ibv_qp_attr (without the alternate path, which RoCE does not use: QP_ALT_PATH is
// refused with EINVAL).
struct QpAttr {
  QpState qp_state = QPS_RESET;
  QpState cur_qp_state = QPS_RESET;
  Mtu path_mtu = MTU_1024;
  MigState path_mig_state = MIG_MIGRATED;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;  // REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC
  QpCap cap;
  AddressVector ah_attr;
  uint16_t pkey_index = 0;
  uint8_t en_sqd_async_notify = 0;
  uint8_t sq_draining = 0;
  uint8_t max_rd_atomic = 0;       // outstanding READ/atomic requests this QP may have as requester
  uint8_t max_dest_rd_atomic = 0;  // responder resources (READ/atomic replay slots)
  uint8_t min_rnr_timer = 0;       // RNR NAK timer code (IBTA Table 45) this QP sends
  uint8_t port_num = 1;
  uint8_t timeout = 0;    // local ACK timeout: 4.096 µs × 2^timeout; 0 = infinite
  uint8_t retry_cnt = 0;  // 0..7
  uint8_t rnr_retry = 0;  // 0..7, 7 = retry forever
  uint32_t rate_limit = 0;
};

// ---- SRQ (ibv_srq_attr_mask) ----
enum SrqAttrMask : uint32_t { SRQ_MAX_WR = 1u << 0, SRQ_LIMIT = 1u << 1 };
struct SrqAttr {
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  uint32_t srq_limit = 0;  // armed when non-zero: SRQ_LIMIT_REACHED once fewer WQEs remain, then disarmed
};

// ---- async events (ibv_event_type) ----
enum EventType : uint32_t {
  EVENT_CQ_ERR = 0,
  EVENT_QP_FATAL = 1,
  EVENT_QP_REQ_ERR = 2,
  EVENT_QP_ACCESS_ERR = 3,
  EVENT_COMM_EST = 4,
  EVENT_SQ_DRAINED = 5,
  EVENT_PATH_MIG = 6,
  EVENT_PATH_MIG_ERR = 7,
  EVENT_DEVICE_FATAL = 8,
  EVENT_PORT_ACTIVE = 9,
  EVENT_PORT_ERR = 10,
  EVENT_LID_CHANGE = 11,
  EVENT_PKEY_CHANGE = 12,
  EVENT_SM_CHANGE = 13,
  EVENT_SRQ_ERR = 14,
  EVENT_SRQ_LIMIT_REACHED = 15,
  EVENT_QP_LAST_WQE_REACHED = 16,
  EVENT_CLIENT_REREGISTER = 17,
  EVENT_GID_CHANGE = 18,
};

struct AsyncEvent {
  EventType type = EVENT_CQ_ERR;
  // The object the event is about: a QPN (QP events), a CQ or SRQ handle, or the port number.
  uint32_t element = 0;
};

}  // namespace urxe::engine
