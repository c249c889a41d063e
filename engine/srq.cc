// Shared receive queues: applications post, responders of several QPs consume. The limit event fires once
// when the number of posted WQEs drops below srq_limit, then the limit disarms (IBTA 10.2.9.3). An SRQ can
// be resized (IBV_SRQ_MAX_WR, advertised by IBV_DEVICE_SRQ_RESIZE) while it is in use.
#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

int EngineImpl::create_srq(uint32_t pd, const SrqAttr& attr, uint32_t& srq, SrqAttr* actual) {
  Pd* p = pd_get(pd);
  if (!p) return EINVAL;
  const DeviceAttr& d = config.device;
  if (attr.max_wr < 1 || attr.max_wr > d.max_srq_wr || attr.max_sge > d.max_srq_sge) return EINVAL;
  if (attr.srq_limit > attr.max_wr) return EINVAL;
  for (uint32_t i = 1; i < srqs.size(); i++) {
    if (srqs[i].load(std::memory_order_relaxed)) continue;
    auto* s = new Srq;
    s->handle = i;
    s->pd = pd;
    s->rq.init(attr.max_wr, attr.max_sge);
    s->limit.store(attr.srq_limit, std::memory_order_relaxed);
    srqs[i].store(s, std::memory_order_release);
    p->refs++;
    srq = i;
    if (actual) *actual = SrqAttr{attr.max_wr, s->rq.max_sge, attr.srq_limit};
    return 0;
  }
  return ENOMEM;
}

Srq* EngineImpl::srq_get(uint32_t srq) const {
  return (srq > 0 && srq < srqs.size()) ? srqs[srq].load(std::memory_order_acquire) : nullptr;
}

// Checks everything before anything changes (an invalid attribute modifies nothing): a resize needs 1 ≤
// max_wr ≤ max_srq_wr, and the limit in force after the call (the new one, else the armed one) must not
// exceed the SRQ's size after the call. urxe SRQs have no error state (nothing puts one there), so that check
// of rxe's never applies.
int EngineImpl::modify_srq(uint32_t srq, const SrqAttr& attr, uint32_t mask) {
  Srq* s = srq_get(srq);
  if (!s) return EINVAL;
  if (mask & ~(SRQ_MAX_WR | SRQ_LIMIT)) return EINVAL;
  if ((mask & SRQ_MAX_WR) && (attr.max_wr < 1 || attr.max_wr > config.device.max_srq_wr)) return EINVAL;
  const uint32_t max_wr = (mask & SRQ_MAX_WR) ? attr.max_wr : s->rq.ring.capacity;
  const uint32_t limit = (mask & SRQ_LIMIT) ? attr.srq_limit : s->limit.load(std::memory_order_relaxed);
  if (limit > max_wr) return EINVAL;
  if (mask & SRQ_MAX_WR) {
    if (int rc = srq_resize(*s, max_wr)) return rc;
  }
  if (mask & SRQ_LIMIT) {
    s->limit.store(attr.srq_limit, std::memory_order_release);
    srq_check_limit(*s);
  }
  return 0;
}

// Resizing swaps the ring and its SGE pool for new ones holding the posted WQEs in order (as rxe's
// rxe_queue_resize copies them); shrinking is allowed while they fit. Responders consume under the engine
// lock (held here), posters under the ring's lock (taken here, after allocating, so posters wait only for
// the copy). The old arrays are freed after the posters are let go.
int EngineImpl::srq_resize(Srq& s, uint32_t max_wr) {
  RecvQueue& rq = s.rq;
  const uint32_t n = round_up_pow2(max_wr);
  std::vector<RecvWqe> slots(n);
  std::vector<Sge> sges(size_t{n} * rq.max_sge);
  for (uint32_t i = 0; i < n; i++) slots[i].sge_base = i * rq.max_sge;
  LockedRing<RecvWqe>& r = rq.ring;
  std::lock_guard<SpinLock> g(r.lock);
  const uint32_t cons = r.cons.load(std::memory_order_relaxed);
  const uint32_t posted = r.prod.load(std::memory_order_relaxed) - cons;
  if (posted > max_wr) return EINVAL;  // as rxe: never drop a posted WQE to shrink
  for (uint32_t i = 0; i < posted; i++) {
    const RecvWqe& w = r.at(cons + i);
    slots[i].wr_id = w.wr_id;
    slots[i].num_sge = w.num_sge;
    for (uint32_t k = 0; k < w.num_sge; k++) sges[slots[i].sge_base + k] = rq.sges[w.sge_base + k];
  }
  r.slots.swap(slots);
  rq.sges.swap(sges);
  r.mask = n - 1;
  r.capacity = max_wr;
  r.cons.store(0, std::memory_order_release);
  r.prod.store(posted, std::memory_order_release);
  return 0;
}

int EngineImpl::query_srq(uint32_t srq, SrqAttr& attr) {
  Srq* s = srq_get(srq);
  if (!s) return EINVAL;
  attr = SrqAttr{s->rq.ring.capacity, s->rq.max_sge, s->limit.load(std::memory_order_relaxed)};
  return 0;
}

int EngineImpl::destroy_srq(uint32_t srq) {
  Srq* s = srq_get(srq);
  if (!s) return EINVAL;
  if (s->refs) return EBUSY;
  if (Pd* p = pd_get(s->pd)) p->refs--;
  if (s->xrcd) {
    xrc_srq_gone(*s);
    s->cq->refs--;
    xrcds[s->xrcd - 1]--;
  }
  if (s->tm) tm_srq_release(*s);
  srqs[srq].store(nullptr, std::memory_order_release);
  delete s;
  return 0;
}

void EngineImpl::srq_check_limit(Srq& s) {
  const uint32_t limit = s.limit.load(std::memory_order_acquire);
  if (!limit) return;
  const uint32_t posted =
      s.rq.ring.prod.load(std::memory_order_acquire) - s.rq.ring.cons.load(std::memory_order_relaxed);
  if (posted < limit) {
    s.limit.store(0, std::memory_order_release);
    async_event(EVENT_SRQ_LIMIT_REACHED, s.handle);
  }
}

int Engine::post_srq_recv(uint32_t srq, const RecvWr* wr, const RecvWr** bad_wr) {
  Srq* s = impl_->srq_get(srq);
  if (!s) {
    if (bad_wr) *bad_wr = wr;
    return EINVAL;
  }
  return impl_->post_recv_wrs(s->rq, wr, bad_wr);
}

}  // namespace urxe::engine
