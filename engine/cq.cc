// Completion queues: the progress thread produces, applications poll. Overflow puts the CQ in error and
// raises EVENT_CQ_ERR (the completion is lost, as on hardware).
#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

int EngineImpl::create_cq(uint32_t cqe, uint32_t& cq, uint32_t* actual, const CqOptions& options) {
  if (cqe < 1 || cqe > config.device.max_cqe) return EINVAL;
  for (uint32_t i = 1; i < cqs.size(); i++) {
    if (cqs[i].load(std::memory_order_relaxed)) continue;
    auto* c = new Cq;
    c->handle = i;
    c->cqe = cqe;
    c->ring.init(cqe);
    if (options.timestamps) c->ts.assign(c->ring.slots.size(), 0);
    c->ring.app_unlocked = options.single_threaded;
    cqs[i].store(c, std::memory_order_release);
    cq = i;
    if (actual) *actual = cqe;
    return 0;
  }
  return ENOMEM;
}

Cq* EngineImpl::cq_get(uint32_t cq) const {
  return (cq > 0 && cq < cqs.size()) ? cqs[cq].load(std::memory_order_acquire) : nullptr;
}

int EngineImpl::destroy_cq(uint32_t cq) {
  Cq* c = cq_get(cq);
  if (!c) return EINVAL;
  if (c->refs) return EBUSY;
  cqs[cq].store(nullptr, std::memory_order_release);
  delete c;
  return 0;
}

// Completions are produced under the engine lock and consumed under the ring's poll lock; holding both
// (in that order, as nothing takes them the other way round) lets the ring be swapped for a new one.
int Engine::resize_cq(uint32_t cq, uint32_t cqe, uint32_t* actual) {
  EngineImpl& e = *impl_;
  if (cqe < 1 || cqe > e.config.device.max_cqe) return EINVAL;
  std::lock_guard<std::mutex> g(e.mu);
  Cq* c = e.cq_get(cq);
  if (!c) return EINVAL;
  // Catch up with work already queued first (as an app thread's poll does through try_progress): a NIC has
  // long finished the UD sends posted just before, and the count of waiting completions must say so.
  for (int i = 0; i < 16 && e.progress_round(); i++) {
  }
  LockedRing<Wc>& r = c->ring;
  std::vector<Wc> slots(round_up_pow2(cqe));  // allocated before pollers are held up
  std::vector<uint64_t> ts(c->ts.empty() ? 0 : slots.size());
  {
    std::lock_guard<SpinLock> pg(r.lock);
    const uint32_t cons = r.cons.load(std::memory_order_relaxed);
    const uint32_t waiting = r.prod.load(std::memory_order_relaxed) - cons;
    if (waiting > cqe) return EINVAL;  // as rxe: never drop a completion to shrink
    for (uint32_t i = 0; i < waiting; i++) slots[i] = r.at(cons + i);
    for (uint32_t i = 0; i < waiting && !ts.empty(); i++) ts[i] = c->ts[(cons + i) & r.mask];
    r.slots.swap(slots);
    c->ts.swap(ts);
    r.mask = static_cast<uint32_t>(r.slots.size()) - 1;
    r.capacity = cqe;
    r.cons.store(0, std::memory_order_release);
    r.prod.store(waiting, std::memory_order_release);
  }
  c->cqe = cqe;
  if (actual) *actual = cqe;
  return 0;  // the old slots are freed here, after the pollers were let go
}

// A QP moved to RESET takes its completions still waiting in its CQs with it, the others stay in order (as
// mlx4/mlx5 clean their CQs at RESET): an app that recycles a QP through RESET, e.g. after an error, must
// not poll the flushed receives of its previous life. Engine lock held (no producer); the poll lock keeps
// pollers out while the ring is compacted.
void EngineImpl::cq_clean(const Qp& qp) {
  for (Cq* c : {qp.scq, qp.rcq}) {
    if (!c) continue;
    LockedRing<Wc>& r = c->ring;
    std::lock_guard<SpinLock> pg(r.lock);
    const uint32_t cons = r.cons.load(std::memory_order_relaxed),
                   prod = r.prod.load(std::memory_order_relaxed);
    uint32_t keep = cons;
    for (uint32_t i = cons; i != prod; i++) {
      if (r.at(i).qp_num == qp.qpn) continue;
      if (keep != i) {
        r.at(keep) = r.at(i);
        if (!c->ts.empty()) c->ts[keep & r.mask] = c->ts[i & r.mask];
      }
      keep++;
    }
    r.prod.store(keep, std::memory_order_release);
    if (qp.scq == qp.rcq) break;  // one CQ for both queues: cleaned once
  }
}

bool EngineImpl::cq_post(Cq& cq, const Wc& wc, bool solicited) {
  LockedRing<Wc>& r = cq.ring;
  const uint32_t p = r.prod.load(std::memory_order_relaxed);
  if (cq.overflowed || p - r.cons.load(std::memory_order_acquire) >= r.capacity) {
    count(Counter::cq_overflow);
    if (!cq.overflowed) {
      cq.overflowed = true;
      async_event(EVENT_CQ_ERR, cq.handle);
    }
    return false;
  }
  r.at(p) = wc;
  // The completion's time, read now rather than the round's `now` (a round that began before the WR was
  // posted may write its completion): only for CQs that asked, the others read no clock.
  if (!cq.ts.empty()) cq.ts[p & r.mask] = clock.now_ns();
  r.prod.store(p + 1, std::memory_order_release);
  cq_posts++;
  if (mark_cqes) {
    for (uint32_t i = 0;; i++) {  // (a few CQs at most: one round's, or a held ACK's wait's)
      if (i == n_cq_marks) {
        if (i < kCqMarks) cq_marks[n_cq_marks++] = {cq.handle, p + 1};
        break;
      }
      if (cq_marks[i].handle == cq.handle) {
        cq_marks[i].prod = p + 1;
        break;
      }
    }
  }
  // Store prod, then load armed; the app stores armed (req_notify_cq), then loads prod (poll_cq). Without
  // a full fence on both sides each may miss the other's store (x86 lets a load pass an earlier store): the
  // completion would raise no event and the app, having found the CQ empty, would sleep on it forever.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const int armed = cq.armed.load(std::memory_order_acquire);
  // A solicited-only arming fires on solicited receives and on any error completion (IBTA 11.4.2.2).
  if (armed == 2 || (armed == 1 && (solicited || wc.status != WC_SUCCESS))) {
    if (cq.armed.exchange(0, std::memory_order_acq_rel) != 0) {
      comp_events++;
      if (sink) sink->comp_event(cq.handle);
    }
  }
  return true;
}

namespace {

// poll_cq and poll_cq_ts: the timestamps are copied only where the caller asked for them (kTs).
template <bool kTs>
int poll_ring(Cq& c, int num, Wc* wc, uint64_t* ts) {
  LockedRing<Wc>& r = c.ring;
  AppSide<Wc> g(r);
  const uint32_t cons = r.cons.load(std::memory_order_relaxed);
  const uint32_t avail = r.prod.load(std::memory_order_acquire) - cons;
  const uint32_t n = avail < static_cast<uint32_t>(num) ? avail : static_cast<uint32_t>(num);
  for (uint32_t i = 0; i < n; i++) {
    wc[i] = r.at(cons + i);
    if constexpr (kTs) ts[i] = c.ts[(cons + i) & r.mask];
  }
  r.cons.store(cons + n, std::memory_order_release);
  return static_cast<int>(n);
}

}  // namespace

int Engine::poll_cq(uint32_t cq, int num, Wc* wc) {
  Cq* c = impl_->cq_get(cq);
  if (!c || num < 0) return -EINVAL;
  return poll_ring<false>(*c, num, wc, nullptr);
}

int Engine::poll_cq_ts(uint32_t cq, int num, Wc* wc, uint64_t* ts) {
  Cq* c = impl_->cq_get(cq);
  if (!c || num < 0 || c->ts.empty()) return -EINVAL;
  return poll_ring<true>(*c, num, wc, ts);
}

int Engine::req_notify_cq(uint32_t cq, bool solicited_only) {
  Cq* c = impl_->cq_get(cq);
  if (!c) return EINVAL;
  // Arming to "any" never weakens an existing arming; arming solicited-only never clears "any".
  int want = solicited_only ? 1 : 2;
  int cur = c->armed.load(std::memory_order_relaxed);
  while (cur < want && !c->armed.compare_exchange_weak(cur, want, std::memory_order_acq_rel)) {
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the other half of cq_post's fence
  return 0;
}

}  // namespace urxe::engine
