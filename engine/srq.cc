// Shared receive queues: applications post, responders of several QPs consume. The limit event fires once
// when the number of posted WQEs drops below srq_limit, then the limit disarms (IBTA 10.2.9.3).
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

int EngineImpl::modify_srq(uint32_t srq, const SrqAttr& attr, uint32_t mask) {
  Srq* s = srq_get(srq);
  if (!s) return EINVAL;
  if (mask & ~(SRQ_MAX_WR | SRQ_LIMIT)) return EINVAL;
  if (mask & SRQ_MAX_WR) return EOPNOTSUPP;  // resizing is not supported (no IBV_DEVICE_SRQ_RESIZE)
  if (mask & SRQ_LIMIT) {
    if (attr.srq_limit > s->rq.ring.capacity) return EINVAL;
    s->limit.store(attr.srq_limit, std::memory_order_release);
    srq_check_limit(*s);
  }
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
