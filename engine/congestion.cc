// DCQCN: the notification point (a CE-marked packet is answered with a CNP) and the reaction point (a CNP
// cuts the QP's rate; timers recover it), as ConnectX runs them (EngineConfig::Dcqcn has the parameters).
#include <algorithm>
#include <cmath>

#include "engine/internal.h"

namespace urxe::engine {

namespace {
double line_rate_mbps(const EngineConfig::Dcqcn& p) {
  return p.rp_max_rate ? p.rp_max_rate : 100000.0;
}
}  // namespace

void EngineImpl::np_ce_received(Qp& q) {
  // A UD sender has no fixed peer to notify (its address is in each packet): CE is counted only.
  const uint64_t gap = uint64_t{config.dcqcn.np_min_time_between_cnps} * 1000;
  if (!config.dcqcn.np_enable || q.type == QPT_UD || (q.np_last_cnp_ns && now - q.np_last_cnp_ns < gap))
    return;
  // As ConnectX-4 Lx sends it (pcap-fixtures/cx4lx-scapy-cnp.pcap): DSCP 48 with ECT(0), UDP source port 0,
  // BTH opcode 0x81 to the sending QP, P_Key 0xFFFF, BECN set, PSN 0, 16 reserved zero bytes.
  wire::FrameSpec spec = q.spec;
  spec.traffic_class = static_cast<uint8_t>((config.dcqcn.np_cnp_dscp & 0x3f) << 2 | 2);
  spec.udp_sport = 0;
  spec.bth = wire::Bth{};
  spec.bth.opcode = wire::op::cnp;
  spec.bth.pkey = 0xffff;
  spec.bth.becn = true;
  spec.bth.dqpn = q.spec.bth.dqpn;
  spec.bth.psn = 0;
  if (!begin_frame(spec, 0)) return;
  finish_frame();
  q.np_last_cnp_ns = now ? now : 1;
  count(Counter::np_cnp_sent);
}

void EngineImpl::note_late_wake(const Qp& q, uint64_t due) {
  // (a paced wake is one of a limited rate: the QP's or its path's)
  if (!q.wake_paced || now < due + kStallGraceNs) return;
  if (q.req.idx == q.sq.prod.load(std::memory_order_acquire) && !res_pending(q)) return;  // nothing to send
  stall_ns += now - due - kStallGraceNs;
}

namespace {
// Starts rate control at line rate (a first CNP, or the first since the rate got back to line rate).
void rp_start(Qp::Rate& r, const EngineConfig::Dcqcn& p, uint64_t now, uint64_t stall_ns) {
  r = Qp::Rate{};
  r.limited = true;
  r.rc = r.rt = line_rate_mbps(p);
  r.alpha = p.rp_initial_alpha_value / 1024.0;
  r.alpha_ns = r.increase_ns = now;
  r.next_send_ns = now;
  r.stall_mark = stall_ns;
}

// Applies the α and increase timers that ran out by `now`. `rtt_ns` (a path's rate: the measured round
// trip) stretches α's period and the increase period to at least a round trip: every QP's CNPs drive a
// path's rate, so some CNP comes in nearly every microsecond while the queue is marked (per-microsecond α
// would sit at 1), and a cut shows in the queue only a round trip later (increases every 300 us, faster than
// that, would undo the cut before it could work when a deep queue makes the round trip long).
// The timers stand still for the time the engine stalled (`stall_ns`, EngineImpl::stall_ns): its threads
// off the CPU, a paced sender's frames due. The CNPs that came meanwhile are read in one go and make one
// cut (one per monitor period); counting the periods the stall hid as increases made the rate climb by
// tens of steps per stall: on a loaded machine 128 QPs held up to 3.7x the rate at which a switch marked.
void rate_update(Qp::Rate& r, const EngineConfig::Dcqcn& p, uint64_t now, uint64_t stall_ns,
                 uint64_t rtt_ns = 0) {
  if (!r.limited) return;
  if (const uint64_t d = stall_ns - r.stall_mark) {
    r.alpha_ns = std::min(r.alpha_ns + d, now);
    r.increase_ns = std::min(r.increase_ns + d, now);
    r.stall_mark = stall_ns;
  }
  const double g = p.rp_dce_tcp_g / 1024.0;
  const uint64_t alpha_period = std::max(uint64_t{p.rp_dce_tcp_rtt} * 1000, rtt_ns);
  if (alpha_period && now >= r.alpha_ns + alpha_period) {
    const uint64_t n = (now - r.alpha_ns) / alpha_period;
    // the period that had the CNP moves α toward 1, the later ones (none had one) let it decay
    r.alpha = r.cnp_in_period ? g * r.alpha + (1 - g) : g * r.alpha;
    if (n > 1) r.alpha *= std::pow(g, static_cast<double>(n - 1));
    r.cnp_in_period = false;
    r.alpha_ns += n * alpha_period;
  }
  const uint64_t step = std::max(uint64_t{p.rp_time_reset} * 1000, rtt_ns);
  const double line = line_rate_mbps(p);
  if (step && now >= r.increase_ns + step) {
    uint64_t n = (now - r.increase_ns) / step;
    r.increase_ns += n * step;
    for (n = std::min<uint64_t>(n, 256); n > 0 && r.limited; n--) {
      // a stretched period adds proportionally more, so the rate grows as fast per second as DCQCN's
      const double scale = static_cast<double>(step) / (static_cast<double>(p.rp_time_reset) * 1000.0);
      if (r.stage == p.rp_threshold) {
        r.rt += p.rp_ai_rate * scale;  // additive increase
      } else if (r.stage > p.rp_threshold) {
        r.rt += p.rp_hai_rate * scale;  // hyper increase
      }                                 // below the threshold: fast recovery toward RT
      r.rt = std::min(r.rt, line);
      r.rc = std::min((r.rt + r.rc) / 2, line);
      r.stage++;
      if (r.rc >= line * 0.999) r.limited = false;  // back at line rate: unpaced again
    }
  }
}

// A CNP: RC ← RC·(1 − α/2), at most once per monitor period (a path's rate: once per round trip, the time
// its cut takes to show in the queue), never below rp_min_dec_fac % of it.
void rate_cnp(Qp::Rate& r, const EngineConfig::Dcqcn& p, uint64_t now, uint64_t stall_ns,
              uint64_t rtt_ns = 0) {
  rate_update(r, p, now, stall_ns, rtt_ns);
  if (!r.limited) rp_start(r, p, now, stall_ns);
  r.cnp_in_period = true;
  const uint64_t monitor = std::max(uint64_t{p.rp_rate_reduce_monitor_period} * 1000, rtt_ns);
  if (r.last_cut_ns && now - r.last_cut_ns < monitor) return;  // one cut per monitor period
  if (p.rp_clamp_tgt_rate || r.stage > 0) r.rt = r.rc;
  const double cut = r.rc * (1 - r.alpha / 2), floor_dec = r.rc * p.rp_min_dec_fac / 100.0;
  r.rc = std::max<double>({cut, floor_dec, static_cast<double>(p.rp_min_rate)});
  r.stage = 0;
  r.increase_ns = now;
  r.last_cut_ns = now ? now : 1;
}

// A retransmit timeout: α = 1, the rate halves (never below rp_min_rate).
void rate_timeout(Qp::Rate& r, const EngineConfig::Dcqcn& p, uint64_t now, uint64_t stall_ns) {
  rate_update(r, p, now, stall_ns);
  if (!r.limited) rp_start(r, p, now, stall_ns);
  r.alpha = 1;
  r.rt = r.rc;
  r.rc = std::max(r.rc / 2, static_cast<double>(p.rp_min_rate));
  r.stage = 0;
  r.increase_ns = now;
  r.last_cut_ns = now ? now : 1;
}
}  // namespace

void EngineImpl::rp_update(Qp& q) {
  rate_update(q.rate, config.dcqcn, now, stall_ns);
  if (Qp::Rate* p = path_rate(q)) rate_update(*p, config.dcqcn, now, stall_ns, srtt_any_ns);
}

void EngineImpl::rp_cnp_received(Qp& q) {
  count(Counter::rp_cnp_handled);
  rate_cnp(q.rate, config.dcqcn, now, stall_ns);
  if (Qp::Rate* p = path_rate(q)) rate_cnp(*p, config.dcqcn, now, stall_ns, srtt_any_ns);
}

void EngineImpl::rp_timeout(Qp& q) {
  // ConnectX's DCQCN reacts to CNPs only, on fabrics made lossless by PFC. urxe's paths are lossy (a veth, a
  // switch without PFC): frames lost in an overflow are a congestion signal too, and the window the QP now
  // resends must not go out at line rate into the queue that just overflowed.
  if (!config.dcqcn.rp_enable || !q.reliable) return;
  // Only the QP's own rate: one QP's lost frames say little about the path all of them share, whose rate
  // follows the CNPs of all.
  count(Counter::rp_timeout_cuts);
  rate_timeout(q.rate, config.dcqcn, now, stall_ns);
}

}  // namespace urxe::engine
