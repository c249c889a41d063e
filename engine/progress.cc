// The progress round: take the due timers and the active QPs, visit each (completer, responder, requester),
// read the port while sending, then send the round's frames or hold its ACKs for the app's answer. Also
// when a QP next needs a visit (qp_wake, schedule) and when the engine next does (next_deadline_ns).
#include <climits>
#include <functional>

#include "engine/internal.h"

namespace urxe::engine {

bool Engine::progress() {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->progress_round();
}

bool Engine::try_progress(bool* ran, Round round) {
  std::unique_lock<std::mutex> g(impl_->mu, std::try_to_lock);
  if (ran) *ran = g.owns_lock();
  return g.owns_lock() && impl_->progress_round(round);
}

bool Engine::acks_held() const {
  return impl_->held_any.load(std::memory_order_relaxed);
}

namespace {

// Counts at the start of a round: whether it wrote a completion, raised a completion event or placed a
// WRITE decides whether it may hold its ACKs (hold_acks).
struct RoundMarks {
  uint64_t cq_posts, comp_events, writes_placed;
};

// Due timers: their QPs get a visit.
void wake_due_timers(EngineImpl& e) {
  const uint64_t stall_before = e.stall_ns;
  while (!e.wakes.empty() && e.wakes.front().t <= e.now) {
    const EngineImpl::Wake w = e.wakes.front();
    std::pop_heap(e.wakes.begin(), e.wakes.end(), std::greater<>{});
    e.wakes.pop_back();
    Qp* q = e.qps[w.index].load(std::memory_order_relaxed);
    if (q && q->scheduled_wake == w.t) {
      q->scheduled_wake = UINT64_MAX;
      if (e.stall_ns == stall_before) e.note_late_wake(*q, w.t);  // the earliest due: the whole delay
      e.activate_locked(*q);
    }
  }
}

// Takes the bits of the active QPs into e.taken; returns how many words, and in n_active how many QPs.
// Words with bits are taken (the top word first, then each summary word it names, then each word); a bit
// set meanwhile stays for the next round.
uint32_t take_active(EngineImpl& e, uint32_t& n_active) {
  uint32_t nw = 0;
  n_active = 0;
  uint64_t top =
      e.active_top.load(std::memory_order_relaxed) ? e.active_top.exchange(0, std::memory_order_seq_cst) : 0;
  const size_t n_words = e.active_words.size();
  while (top) {
    const size_t g = static_cast<size_t>(__builtin_ctzll(top));
    top &= top - 1;
    const size_t end = std::min(n_words, (g + 1) << e.active_top_shift);
    for (size_t s = g << e.active_top_shift; s < end; s++) {
      uint64_t sum = e.active_words[s].load(std::memory_order_relaxed)
                         ? e.active_words[s].exchange(0, std::memory_order_seq_cst)
                         : 0;
      while (sum) {
        const uint32_t w = static_cast<uint32_t>(s * 64 + static_cast<size_t>(__builtin_ctzll(sum)));
        sum &= sum - 1;
        const uint64_t bits = e.active[w].exchange(0, std::memory_order_acquire);
        if (bits) e.taken[nw++] = {w, bits};
        n_active += static_cast<uint32_t>(__builtin_popcountll(bits));
      }
    }
  }
  return nw;
}

// Visits the QPs of the nw taken words: completer, responder, requester, completer again, then schedule.
// Returns whether any did work.
// The active QPs go in index order from walk_start round to it again. The next round starts right after
// the last QP that sent in this one: when the windows of all QPs cannot fit the path, the same QPs must not
// always be the ones whose frames come last (and that a full queue drops), and when a shared path rate
// lets only a few QPs send per round, the turns go round.
bool visit_active(EngineImpl& e, uint32_t nw, uint32_t burst) {
  bool did = false;
  // The receive ring is drained as fast as this round sends: for every burst of frames out, up to two
  // bursts in. A round that sent the window of many QPs before reading again let the peer's ACKs overflow
  // the ring (counted as rx_ring_drops); the lost ACKs then cost timeouts and resends of whole windows.
  const uint64_t& sent = e.counters[static_cast<size_t>(Counter::sent_pkts)];
  uint64_t sent_mark = sent;
  int64_t last_sender = -1;
  auto visit = [&](uint32_t word, uint64_t bits) {
    while (bits) {
      const uint32_t i = word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      Qp* qp = e.qps[i].load(std::memory_order_relaxed);
      if (!qp) continue;
      const uint64_t sent_before = sent;
      {
        const EngineImpl::CurQp in_qp(e, qp);
        if (e.completer_run(*qp)) did = true;
        if (e.responder_tx(*qp, e.visit_budget)) did = true;
        if (e.requester_run(*qp)) did = true;
        if (e.completer_run(*qp)) did = true;
      }
      e.schedule(*qp);
      if (sent != sent_before) last_sender = i;
      if (sent - sent_mark >= burst) {
        e.tx_flush();
        if (e.rx_drain(2 * burst)) did = true;
        sent_mark = sent;
      }
    }
  };
  // from walk_start round to it again: the taken words in index order, the first one split at walk_start
  const uint32_t start = e.walk_start, sw = start >> 6, sb = start & 63;
  const uint64_t low = sb ? (uint64_t{1} << sb) - 1 : 0;
  uint32_t k0 = 0;
  while (k0 < nw && e.taken[k0].word < sw) k0++;
  for (uint32_t k = 0; k < nw; k++) {
    const auto [w, bits] = e.taken[(k0 + k) % nw];
    visit(w, w == sw ? bits & ~low : bits);
  }
  for (uint32_t k = 0; k < nw; k++)
    if (e.taken[k].word == sw) visit(sw, e.taken[k].bits & low);
  // A QP that the full port (or its budget) stopped in the middle of a message goes first next round: its
  // message's last packets carry the AckReq, and waiting for every other QP's turn first they waited past
  // the retransmit timeout with nothing lost.
  if (last_sender >= 0) {
    const Qp* q = e.qps[static_cast<uint32_t>(last_sender)].load(std::memory_order_relaxed);
    e.walk_start = static_cast<uint32_t>(last_sender) + (q && q->req.offset != 0 ? 0 : 1);
  }
  return did;
}

// An app round that completed work and has only ACKs to send keeps them until the app answers: it
// answers a completion (ib_send_lat: a SEND) within a microsecond or two, and the answer then leaves
// first, in the same transmit call, instead of waiting for the ACKs' own (a veth's transmit also runs the
// receiving side's softirq, microseconds). The app's later rounds keep them while they make no other
// frame and a completion written since is still unread (the app polls again before it answers: perftest
// waits for its SEND's completion, then polls the receive CQ), for kAckHoldNs at most; then, or with
// the first other frame (after it), or in a round of the progress thread, they go.
// Nor does a round that raised a completion event hold anything: its app learns of the completion from
// a channel, and the hold would put its peer's events in another order than a NIC that ACKs at once
// gives (the answer's receive completion before the ACK's send completion). An app that takes both CQs'
// events from one channel and polls the CQ it expects (Debian's perftest 4.5-0.17 with -e) then waits
// for good (engine/README.md).
// A WRITE placed in memory (no completion: its app may spin on that memory, as ib_write_lat and MPI's
// eager protocols do) holds its ACK the same way, in the app's rounds and in the progress thread's
// (which reads such frames when the app does not poll, and wakes by next_deadline_ns): the app's
// answer, a post that runs a round itself (Engine::acks_held), then carries it in one transmit call,
// and the peer takes both frames in one wake-up instead of two. While a hold for a WRITE waits, a
// round that places another WRITE sends it (a stream, not an exchange), and a hold that nobody answered
// lets the next rounds that place a WRITE send their ACKs at once (1, 2, 4 ... kWriteHoldBackoff of them
// in a row: tx_flush).
// Returns true when the round's frames stay held, false when they are to go now.
bool hold_acks(EngineImpl& e, Engine::Round round, const RoundMarks& m) {
  const bool app_round = round == Engine::Round::app;
  if (round != Engine::Round::other && e.config.hold_acks && e.tx_not_ack == 0 &&
      e.comp_events == m.comp_events) {
    const bool placed = e.writes_placed != m.writes_placed;
    if (e.held.empty()) {
      const bool for_cqe = app_round && e.cq_posts != m.cq_posts;
      const bool for_write = placed && e.write_hold_skip == 0;
      if (placed && e.write_hold_skip) e.write_hold_skip--;
      if (!e.tx.empty() && (for_cqe || for_write)) {
        e.held.swap(e.tx);  // both keep the same capacity: no allocation
        e.held_since = e.now;
        e.held_for_write = !for_cqe;
        e.held_any.store(true, std::memory_order_relaxed);
        return true;
      }
    } else if (e.now - e.held_since < Engine::kAckHoldNs &&
               (e.held_for_write ? !placed : app_round && e.cqe_unread()) &&
               e.held.size() + e.tx.size() <= e.held.capacity()) {
      e.held.insert(e.held.end(), e.tx.begin(), e.tx.end());
      e.tx.clear();
      return true;
    }
  }
  return false;
}

}  // namespace

bool EngineImpl::progress_round(Engine::Round round) {
  EngineImpl& e = *this;
  const bool app_round = round == Engine::Round::app;
  e.now = e.clock.now_ns();
  const RoundMarks marks{e.cq_posts, e.comp_events, e.writes_placed};
  if (e.held.empty()) e.n_cq_marks = 0;
  // Only a round that may hold ACKs, or one while some are held, needs to know which completions it wrote.
  e.mark_cqes = (app_round && e.config.hold_acks) || !e.held.empty();
  const uint32_t burst = static_cast<uint32_t>(e.rx.size());
  // At least four bursts, and past the marking threshold: frames that deep in the ring are the ones marked.
  bool did = e.rx_drain(std::max(4 * burst, e.rx_mark_frames + 2 * burst)) > 0;
  wake_due_timers(e);
  uint32_t n_active = 0;
  const uint32_t nw = take_active(e, n_active);
  // Each QP's turn sends at most visit_budget frames, so that a turn of every active QP stays near
  // kRoundFrames frames (at least 8 each: a visit has its cost). With tx_budget for each of many QPs, a QP
  // that pacing stopped in the middle of a message waited for every other QP's full turn, past the
  // retransmit timeout, and the QPs first in a round got more than the others.
  e.visit_budget =
      std::clamp(kRoundFrames / std::max(n_active, 1u), std::min(8u, e.config.tx_budget), e.config.tx_budget);
  if (visit_active(e, nw, burst)) did = true;
  if (!hold_acks(e, round, marks)) e.tx_flush();
  return did;
}

bool EngineImpl::cqe_unread() const {
  for (uint32_t i = 0; i < n_cq_marks; i++) {
    const CqMark& m = cq_marks[i];
    const Cq* c = cq_get(m.handle);
    if (c && static_cast<int32_t>(m.prod - c->ring.cons.load(std::memory_order_acquire)) > 0) return true;
  }
  return false;
}

uint64_t EngineImpl::qp_wake(const Qp& q, bool& paced) const {
  paced = false;
  const QpState st = q.state.load(std::memory_order_relaxed);
  if (q.flush_needed) return 0;
  if ((st == QPS_ERR || st == QPS_SQE) &&
      q.sq.cons.load(std::memory_order_relaxed) != q.sq.prod.load(std::memory_order_acquire))
    return 0;
  if (st == QPS_ERR && !q.srq &&
      q.rq.ring.cons.load(std::memory_order_relaxed) != q.rq.ring.prod.load(std::memory_order_acquire))
    return 0;
  uint64_t best = UINT64_MAX, pace = 0;
  if (res_pending(q)) {
    pace = paced_until(q);  // READ responses wait for their rate (and ACKs behind them)
    if (!pace) return 0;
    best = pace;
  } else if (q.resp.ack_pending) {
    return 0;
  }
  if (q.comp.rnr_until) {
    best = std::min(best, q.comp.rnr_until);
  } else if (!requester_blocked(q)) {
    return 0;
  } else if (const uint64_t t = paced_until(q); t && q.req.idx != q.sq.prod.load(std::memory_order_acquire)) {
    pace = t;
    best = std::min(best, t);  // paced: it may send again then
  }
  if (q.comp.timer_deadline) best = std::min(best, q.comp.timer_deadline);
  if (q.comp.probe_deadline && (st == QPS_RTS || st == QPS_SQD)) best = std::min(best, q.comp.probe_deadline);
  paced = pace != 0 && best == pace;
  return best;
}

void EngineImpl::schedule(Qp& q) {
  bool paced = false;
  const uint64_t t = qp_wake(q, paced);
  if (t <= now) {
    activate_locked(q);
  } else if (t != UINT64_MAX && t < q.scheduled_wake) {
    if (wakes.size() == wakes.capacity()) {
      // full of stale entries: keep one per QP, its live one (no allocation here; at most one per QP
      // remains, and create_qp keeps room for two)
      std::erase_if(wakes, [this](const Wake& w) {
        const Qp* o = qps[w.index].load(std::memory_order_relaxed);
        return !o || o->scheduled_wake != w.t;
      });
      std::sort(wakes.begin(), wakes.end(), [](const Wake& a, const Wake& b) { return a.index < b.index; });
      wakes.erase(std::unique(wakes.begin(), wakes.end(),
                              [](const Wake& a, const Wake& b) { return a.index == b.index; }),
                  wakes.end());
      std::make_heap(wakes.begin(), wakes.end(), std::greater<>{});
    }
    q.scheduled_wake = t;
    q.wake_paced = paced;
    wakes.push_back({t, q.index});
    std::push_heap(wakes.begin(), wakes.end(), std::greater<>{});
  }
}

uint64_t Engine::next_deadline_ns(bool wait_for_lock, bool* lock_busy) const {
  EngineImpl& e = *impl_;
  std::unique_lock<std::mutex> g(e.mu, std::defer_lock);
  const bool busy = !wait_for_lock && !g.try_lock();
  if (lock_busy) *lock_busy = busy;
  if (busy) return 0;
  if (!g.owns_lock()) g.lock();
  if (!e.tx.empty()) return 0;
  for (const auto& w : e.active_words)
    if (w.load(std::memory_order_acquire)) return 0;
  // ACKs an app round held: the app's next round that makes a frame sends them, any round once they
  // waited kAckHoldNs
  const uint64_t hold = e.held.empty() ? UINT64_MAX : e.held_since + Engine::kAckHoldNs;
  // the earliest live timer (stale entries on top are dropped here)
  while (!e.wakes.empty()) {
    const EngineImpl::Wake w = e.wakes.front();
    const Qp* q = e.qps[w.index].load(std::memory_order_relaxed);
    if (q && q->scheduled_wake == w.t) return std::min(w.t, hold);
    std::pop_heap(e.wakes.begin(), e.wakes.end(), std::greater<>{});
    e.wakes.pop_back();
  }
  return hold;
}

}  // namespace urxe::engine
