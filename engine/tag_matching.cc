// Tag-matching SRQs (engine/tag_matching.h), with ConnectX's (mlx5's) semantics:
// - The tag list: TAG_ADD appends a tagged buffer, TAG_DEL removes one (WC_TM_ERR when a message consumed
//   it meanwhile), TAG_SYNC only passes the app's unexpected count. Operations run at once, in order; a
//   signaled one completes on the SRQ's CQ (WC_TM_ADD / DEL / SYNC).
// - Phase synchronisation: a message no armed tag matches is unexpected and counted (unexp_hw). A tag added
//   while the app had not handled every unexpected message (its OPS_TM_SYNC count differs) is not armed
//   (it might belong to one of those messages): its ADD completion carries WC_TM_SYNC_REQ, and it arms when
//   an operation brings the app's count level with the NIC's.
// - Every completion of a TM SRQ goes to its CQ, receives included (not the QP's recv_cq): as XRC SRQs, and
//   as mlx5, where a TM SRQ is an XRQ with its own CQ.
// - A SEND on a QP of a TM SRQ starts with a TMH. EAGER: the first armed tag in posting order with
//   (TMH.tag & mask) == tag takes the data after the TMH: one WC_TM_RECV with TM_MATCH | TM_DATA_VALID.
//   RNDV (a one-packet message, TMH + RVH): on a match the NIC READs the sender's buffer into the tag's
//   over the same QP (WQEs of its own, in kTmSqSlots extra SQ slots, completing to nobody) and then SENDs
//   the sender a FIN (a TMH with TMH_FIN, the RNDV's app_ctx and tag) that the sender's receive reports:
//   WC_TM_RECV with TM_MATCH at once, WC_TM_RECV with TM_DATA_VALID when the data is in. When the NIC
//   cannot (buffer too small, QP not RTS or in a thread domain, no slot) the message goes whole into the
//   tag's buffer and completes with WC_TM_RNDV_INCOMPLETE: the app reads and sends the FIN itself, as on
//   mlx5. Unexpected (no match, or a malformed RNDV): the whole message, TMH kept, into an ordinary SRQ WQE
//   (WC_TM_RECV, no flags). NO_TAG, FIN, other opcodes or a message shorter than a TMH: an ordinary
//   receive, TMH kept (WC_TM_NO_TAG).
// The ordinary receive path pays one branch (the SRQ has a tag list); QPs without a TM SRQ nothing more.
#include <cerrno>

#include "engine/internal.h"
#include "wire/bytes.h"

namespace urxe::engine {

int EngineImpl::create_srq_tm(uint32_t pd, const SrqAttr& attr, const TmSrqAttr& tm, uint32_t& srq,
                              SrqAttr* actual) {
  Cq* cq = cq_get(tm.cq);
  if (!cq) return EINVAL;
  if (tm.max_num_tags < 1 || tm.max_num_tags > kTmCaps.max_num_tags || tm.max_ops < 1 ||
      tm.max_ops > kTmCaps.max_ops)
    return EINVAL;
  if (int rc = create_srq(pd, attr, srq, actual)) return rc;
  auto t = std::make_unique<TmSrq>();
  t->max_ops = tm.max_ops;
  t->tags.resize(tm.max_num_tags);
  t->order.reserve(tm.max_num_tags);
  t->free.reserve(tm.max_num_tags);
  for (uint32_t h = tm.max_num_tags; h-- > 0;) t->free.push_back(h);  // handle 0 first
  cq->refs++;
  Srq* s = srq_get(srq);
  s->cq = cq;
  s->tm = std::move(t);
  return 0;
}

void EngineImpl::tm_srq_release(Srq& s) {
  s.cq->refs--;
}

namespace {

// The app's unexpected count (OPS_TM_SYNC): once it equals the NIC's, every tag on the list may match.
void tm_sync(TmSrq& t, uint32_t unexpected_cnt) {
  t.unexp_sw = unexpected_cnt;
  if (t.unexp_sw != t.unexp_hw) return;
  for (uint32_t h : t.order) t.tags[h].armed = true;
}

}  // namespace

int EngineImpl::post_srq_op(uint32_t srq, OpsWr& op) {
  Srq* s = srq_get(srq);
  if (!s || !s->tm) return EINVAL;
  TmSrq& t = *s->tm;
  if (op.flags & ~(OPS_SIGNALED | OPS_TM_SYNC)) return EINVAL;
  Wc wc;
  wc.wr_id = op.wr_id;
  bool post = op.flags & OPS_SIGNALED;
  switch (op.opcode) {
    case WR_TAG_ADD: {
      if (op.num_sge < 0 || static_cast<uint32_t>(op.num_sge) > kTmCaps.max_sge) return EINVAL;
      if (t.free.empty()) return ENOMEM;  // as mlx5: the tag list is full
      if (op.flags & OPS_TM_SYNC) tm_sync(t, op.unexpected_cnt);
      const uint32_t h = t.free.back();
      t.free.pop_back();
      TmTag& g = t.tags[h];
      g = TmTag{};
      g.state = TmTag::State::live;
      g.armed = t.unexp_sw == t.unexp_hw;
      g.tag = op.tag;
      g.mask = op.mask;
      g.wr_id = op.recv_wr_id;
      g.num_sge = static_cast<uint32_t>(op.num_sge);
      if (g.num_sge) g.sge = op.sg_list[0];
      t.order.push_back(h);
      op.handle = h;
      wc.opcode = WC_TM_ADD;
      if (!g.armed) wc.wc_flags = WC_TM_SYNC_REQ;
      break;
    }
    case WR_TAG_DEL: {
      if (op.handle >= t.tags.size() || t.tags[op.handle].state == TmTag::State::free) return EINVAL;
      if (op.flags & OPS_TM_SYNC) tm_sync(t, op.unexpected_cnt);
      TmTag& g = t.tags[op.handle];
      wc.opcode = WC_TM_DEL;
      if (g.state == TmTag::State::consumed) {
        wc.status = WC_TM_ERR;  // a message took it: its receive completion reports it
        post = true;            // an error is always reported
        break;
      }
      std::erase(t.order, op.handle);
      g.state = TmTag::State::free;
      t.free.push_back(op.handle);
      break;
    }
    case WR_TAG_SYNC:
      if (op.flags & OPS_TM_SYNC) tm_sync(t, op.unexpected_cnt);
      wc.opcode = WC_TM_SYNC;
      break;
    default:
      return EINVAL;
  }
  if (post) cq_post(*s->cq, wc, false);
  return 0;
}

int Engine::create_srq_tm(uint32_t pd, const SrqAttr& attr, const TmSrqAttr& tm, uint32_t& srq,
                          SrqAttr* actual) {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->create_srq_tm(pd, attr, tm, srq, actual);
}

int Engine::post_srq_op(uint32_t srq, OpsWr& op) {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->post_srq_op(srq, op);
}

// A QP on a TM SRQ gets kTmSqSlots SQ slots beyond the app's, with inline room for a FIN's TMH in each. The
// NIC's own WQEs take at most kTmSqSlots, so the app can always post its max_send_wr (more while the NIC
// holds fewer: post_send's bound counts both).
void EngineImpl::tm_qp_init(Qp& q) {
  const QpCap& cap = q.cap;
  const uint32_t stride = cap.max_inline_data > kTmhSize ? cap.max_inline_data : kTmhSize;
  q.sq.init(cap.max_send_wr + kTmSqSlots);
  q.sq.capacity = cap.max_send_wr + kTmSqSlots;
  q.sq_sges.assign(size_t{q.sq.slots.size()} * cap.max_send_sge, Sge{});
  q.sq_inline.assign(size_t{q.sq.slots.size()} * stride, 0);
  for (uint32_t i = 0; i < q.sq.slots.size(); i++) {
    q.sq.slots[i].sge_base = i * cap.max_send_sge;
    q.sq.slots[i].inline_base = i * stride;
  }
}

namespace {

uint32_t free_sq_slots(const Qp& q) {
  const uint32_t used = q.sq.prod.load(std::memory_order_acquire) - q.sq.cons.load(std::memory_order_relaxed);
  return static_cast<uint32_t>(q.sq.slots.size()) - used;
}

// The NIC's own WQEs in the SQ (published slots only: the app writes nothing below prod).
uint32_t internal_wqes(const Qp& q) {
  uint32_t n = 0;
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  for (uint32_t i = q.sq.cons.load(std::memory_order_relaxed); i != prod; i++)
    n += (q.sq.at(i).send_flags & kSendTmInternal) != 0;
  return n;
}

// Whether the NIC can serve a matched rendezvous itself: the data fits the tag's buffer, the QP can send,
// two SQ slots are free within the NIC's share (kTmSqSlots), and the app's posts take the SQ's lock (a QP
// of a thread domain posts without it: the NIC could not add WQEs safely).
bool rndv_servable(const Qp& q, const TmTag& g, uint32_t len) {
  const uint64_t room = g.num_sge ? g.sge.length : 0;
  return len <= room && !q.sq.app_unlocked && q.state.load(std::memory_order_relaxed) == QPS_RTS &&
         free_sq_slots(q) >= 2 && internal_wqes(q) + 2 <= kTmSqSlots;
}

SendWqe& fresh_wqe(Qp& q, uint32_t i) {
  SendWqe& w = q.sq.at(i);
  const uint32_t sge_base = w.sge_base, inline_base = w.inline_base;
  w = SendWqe{};
  w.sge_base = sge_base;
  w.inline_base = inline_base;
  return w;
}

}  // namespace

// The first packet of a SEND on a QP of a TM SRQ: picks the buffer (a tag's or an SRQ WQE) into the current
// receive. Returns how many leading payload bytes are not placed, or -1 when no SRQ WQE is there (RNR).
int EngineImpl::tm_recv_first(Qp& q, const wire::Packet& pkt) {
  const uint32_t n = pkt.payload_len;
  if (q.resp.have_recv) {  // the message's first packet again (a go-back): its buffer is already chosen
    if (q.resp.tm.kind == TmKind::expected) return static_cast<int>(kTmhSize);
    return q.resp.tm.kind == TmKind::rndv ? static_cast<int>(n) : 0;
  }
  TmSrq& t = *q.srq->tm;
  const uint8_t* p = pkt.payload.data();
  TmRecv m;
  const uint8_t op = n >= kTmhSize ? p[0] : uint8_t{TMH_NO_TAG};  // shorter than a TMH: delivered as it is
  if (op != TMH_EAGER && op != TMH_RNDV) {
    if (!pop_recv(q)) return -1;
    m.kind = TmKind::no_tag;
    q.resp.tm = m;
    return 0;
  }
  m.app_ctx = wire::load_be32(p + 4);
  m.tag = wire::load_be64(p + 8);
  for (size_t i = 0; i < t.order.size(); i++) {
    const uint32_t h = t.order[i];
    TmTag& g = t.tags[h];
    if (!g.armed || (m.tag & g.mask) != g.tag) continue;
    if (op == TMH_RNDV) {
      // a rendezvous the NIC serves is one packet holding TMH and RVH; any other is the app's (unexpected)
      if (!pkt.info->is_first() || !pkt.info->is_last() || n < kTmhSize + kRvhSize) break;
      m.va = wire::load_be64(p + kTmhSize);
      m.rkey = wire::load_be32(p + kTmhSize + 8);
      m.len = wire::load_be32(p + kTmhSize + 12);
      m.kind = rndv_servable(q, g, m.len) ? TmKind::rndv : TmKind::rndv_sw;
    } else {
      m.kind = TmKind::expected;
    }
    q.resp.recv_wr_id = g.wr_id;
    q.resp.recv_num_sge = g.num_sge;
    if (g.num_sge) q.resp.recv_sges[0] = g.sge;
    q.resp.have_recv = true;
    g.state = TmTag::State::consumed;
    t.order.erase(t.order.begin() + static_cast<std::ptrdiff_t>(i));
    t.free.insert(t.free.begin(), h);  // reused last: a late TAG_DEL of it still finds it consumed
    q.resp.tm = m;
    if (m.kind == TmKind::expected) return static_cast<int>(kTmhSize);
    return m.kind == TmKind::rndv ? static_cast<int>(n) : 0;
  }
  if (!pop_recv(q)) return -1;
  t.unexp_hw++;
  m.kind = TmKind::unexpected;
  q.resp.tm = m;
  return 0;
}

namespace {

// A matched rendezvous: the READ of the sender's buffer into the tag's, then (fenced behind it) the FIN.
bool post_rndv(EngineImpl& e, Qp& q, const TmRecv& m, uint64_t wr_id, const Sge& buf) {
  if (q.state.load(std::memory_order_relaxed) != QPS_RTS) return false;
  {
    AppSide<SendWqe> g(q.sq);
    const uint32_t p = q.sq.prod.load(std::memory_order_relaxed);
    if (free_sq_slots(q) < 2) return false;
    SendWqe& r = fresh_wqe(q, p);
    r.wr_id = wr_id;
    r.opcode = WR_RDMA_READ;
    r.send_flags = kSendTmInternal;
    r.remote_addr = m.va;
    r.rkey = m.rkey;
    r.length = m.len;
    r.num_sge = m.len ? 1 : 0;
    q.sq_sges[r.sge_base] = Sge{buf.addr, m.len, buf.lkey};
    SendWqe& f = fresh_wqe(q, p + 1);
    f.opcode = WR_SEND;
    f.send_flags = kSendTmInternal | SEND_FENCE;
    f.is_inline = true;
    f.length = kTmhSize;
    uint8_t* d = q.sq_inline.data() + f.inline_base;
    std::memset(d, 0, kTmhSize);
    d[0] = TMH_FIN;
    wire::store_be32(d + 4, m.app_ctx);
    wire::store_be64(d + 8, m.tag);
    q.sq.prod.store(p + 2, std::memory_order_release);
  }
  e.activate(q);
  return true;
}

}  // namespace

// The last packet of a SEND received on a TM SRQ: its completion (and a rendezvous's READ and FIN).
void EngineImpl::tm_complete_recv(Qp& q, uint32_t byte_len, uint32_t flags, uint32_t imm, bool solicited) {
  const TmRecv m = q.resp.tm;
  q.resp.tm = TmRecv{};
  Wc wc;
  wc.wr_id = q.resp.recv_wr_id;
  wc.opcode = WC_TM_RECV;
  wc.byte_len = byte_len;
  wc.wc_flags = flags;
  wc.imm_data = imm;
  wc.qp_num = q.qpn;
  wc.src_qp = q.attr.dest_qp_num;
  switch (m.kind) {
    case TmKind::no_tag:
      wc.opcode = WC_TM_NO_TAG;
      break;
    case TmKind::unexpected:
      break;
    case TmKind::expected:
      wc.wc_flags |= WC_TM_MATCH | WC_TM_DATA_VALID;
      wc_set_tm_info(wc, m.tag, m.app_ctx);
      break;
    case TmKind::rndv:
    case TmKind::rndv_sw:
      wc.wc_flags |= WC_TM_MATCH;
      wc_set_tm_info(wc, m.tag, m.app_ctx);
      if (m.kind == TmKind::rndv_sw || !post_rndv(*this, q, m, q.resp.recv_wr_id, q.resp.recv_sges[0]))
        wc.status = WC_TM_RNDV_INCOMPLETE;
      break;
    case TmKind::none:
      break;
  }
  q.resp.have_recv = false;
  cq_post(*q.srq->cq, wc, solicited);
  count(Counter::rdma_recvs);
}

// One of the NIC's own WQEs left the SQ (done, failed or flushed): a READ completes its tag's receive
// (TM_DATA_VALID, or the error); a FIN reports nothing.
void EngineImpl::tm_send_retired(Qp& q, const SendWqe& w, WcStatus status) {
  if (w.opcode != WR_RDMA_READ) return;
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = WC_TM_RECV;
  wc.byte_len = static_cast<uint32_t>(w.length);
  wc.wc_flags = status == WC_SUCCESS ? uint32_t{WC_TM_DATA_VALID} : 0u;
  wc.qp_num = q.qpn;
  cq_post(*q.srq->cq, wc, false);
}

}  // namespace urxe::engine
