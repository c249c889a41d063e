// Capture replay into the engine (replay.h, README.md): the engine's setup, posting the played side's work
// requests at their capture times, running the clock, and the emitted frames as a pcap.
#include "tests/replay/replay_internal.h"

namespace urxe::replay {
namespace detail {

bool Replayer::setup_engine() {
  PortAttr pa;
  pa.mac = play_mac_;
  pa.mtu = 9000;
  pa.gids = {play_gid_};
  EngineConfig cfg;
  uint32_t lo = ~0u, hi = 0;
  for (Conn& c : conns_)
    if (c.lqpn) lo = std::min(lo, c.lqpn), hi = std::max(hi, c.lqpn);
  if (lo == ~0u) lo = hi = 0x11;
  cfg.qpn_base = lo;
  cfg.device.max_qp = hi - lo + 1 + 16;  // room for QPs whose QPN the capture does not show
  uint32_t max_index = 0;
  for (auto& [k, r] : regions_) max_index = std::max(max_index, k >> 8);
  cfg.device.max_mr = std::max<uint32_t>(cfg.device.max_mr, max_index + 64);
  clock_ = std::make_unique<ManualClock>();
  port_ = std::make_unique<ReplayPort>(pa, *clock_);
  eng_ = std::make_unique<Engine>(*port_, *clock_, cfg);
  if (eng_->alloc_pd(pd_)) return cannot("alloc_pd");
  // rkeys as in the capture: the engine's rkey is index << 8 | key, the lowest free index, its key one more
  // than the last one at that index; fill lower indices with 1-byte MRs and cycle the key.
  static uint8_t dummy;
  const uint32_t all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
  uint32_t next_index = 1;
  for (auto& [rkey, r] : regions_) {
    uint32_t idx = rkey >> 8, key = rkey & 0xff;
    if (idx < next_index)
      return cannot(fmt("rkey 0x%x: its index is taken by another rkey of the capture", rkey));
    MrInfo mi;
    for (; next_index < idx; next_index++)
      if (eng_->reg_mr(pd_, &dummy, 1, 0, ACCESS_LOCAL_WRITE, mi)) return cannot("reg_mr (filler)");
    for (uint32_t n = (key - 1) & 0xff; n > 0; n--) {
      if (eng_->reg_mr(pd_, &dummy, 1, 0, ACCESS_LOCAL_WRITE, mi) || eng_->dereg_mr(mi.lkey))
        return cannot("key cycle");
    }
    if (eng_->reg_mr(pd_, r.mem.data(), r.mem.size(), r.lo, all, mi)) return cannot("reg_mr");
    if (mi.rkey != rkey) return cannot(fmt("rkey 0x%x could not be recreated (got 0x%x)", rkey, mi.rkey));
    next_index = idx + 1;
  }
  uint32_t nwr = 64;
  for (Conn& c : conns_) nwr += 2 * static_cast<uint32_t>(c.in_msgs.size() + c.out_msgs.size());
  if (eng_->create_cq(nwr, cq_)) return cannot("create_cq");
  uint32_t nrecv_all = 0;
  for (Conn& c : conns_)
    for (const Msg& m : c.in_msgs) nrecv_all += m.takes_recv();
  if (opt_.srq) {
    SrqAttr sa;
    sa.max_wr = nrecv_all + 1;
    sa.max_sge = 1;
    if (eng_->create_srq(pd_, sa, srq_)) return cannot("create_srq");
  }
  for (Conn& c : conns_) {
    // receive buffers: one slot per message that takes a receive, as large as the largest (+ GRH on UD)
    uint32_t nrecv = 0, slot = 0;
    for (const Msg& m : c.in_msgs)
      if (m.takes_recv()) nrecv++, slot = std::max(slot, m.len());
    c.rslot = slot + (c.type == QPT_UD ? 40 : 0);
    c.rbuf.assign(std::max<size_t>(1, size_t(c.rslot) * nrecv), 0);
    MrInfo mi;
    if (eng_->reg_mr(pd_, c.rbuf.data(), c.rbuf.size(), reinterpret_cast<uintptr_t>(c.rbuf.data()),
                     ACCESS_LOCAL_WRITE, mi))
      return cannot("reg_mr (receive buffers)");
    c.rkey_recv = mi.lkey;
    // requester: message data and READ/atomic results, 8-byte aligned
    uint64_t off = 0;
    for (const Msg& m : c.out_msgs) {
      c.loff.push_back(off);
      uint64_t n = (m.kind == w::OpKind::compare_swap || m.kind == w::OpKind::fetch_add) ? 8 : m.len();
      off += (n + 7) & ~7ull;
    }
    c.lbuf.assign(std::max<uint64_t>(off, 8), 0);
    for (size_t k = 0; k < c.out_msgs.size(); k++) {
      const Msg& m = c.out_msgs[k];
      if (!m.data.empty()) memcpy(&c.lbuf[c.loff[k]], m.data.data(), m.data.size());
    }
    if (eng_->reg_mr(pd_, c.lbuf.data(), c.lbuf.size(), reinterpret_cast<uintptr_t>(c.lbuf.data()),
                     ACCESS_LOCAL_WRITE, mi))
      return cannot("reg_mr (requester buffer)");
    c.lkey = mi.lkey;

    QpInitAttr ia;
    ia.send_cq = ia.recv_cq = cq_;
    ia.srq = opt_.srq ? srq_ : 0;
    ia.qp_type = c.type;
    ia.sq_sig_all = true;
    ia.qpn = c.lqpn;
    ia.cap.max_send_wr = static_cast<uint32_t>(c.out_msgs.size()) + 1;
    ia.cap.max_recv_wr = nrecv + 1;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    if (int e = eng_->create_qp(pd_, ia, c.qpn)) return cannot(fmt("create_qp 0x%x: errno %d", c.lqpn, e));
    // PSNs: the lowest request PSN of each direction (a first packet lost in the capture shows up
    // retransmitted)
    c.rq_psn = c.in_msgs.empty() ? 0 : c.in_msgs.front().psn;
    c.sq_psn = c.out_msgs.empty() ? 0 : c.out_msgs.front().psn;
    QpAttr a;
    a.qp_state = QPS_INIT;
    a.qp_access_flags = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    a.qkey = 0;
    for (size_t i : c.in)
      if (c.type == QPT_UD) a.qkey = cap_[i].pkt.deth.qkey;
    uint32_t m = QP_STATE | QP_PKEY_INDEX | QP_PORT | (c.type == QPT_UD ? QP_QKEY : QP_ACCESS_FLAGS);
    if (eng_->modify_qp(c.qpn, a, m)) return cannot("modify_qp INIT");
    a.qp_state = QPS_RTR;
    a.path_mtu = mtu_enum(c.mtu);
    a.dest_qp_num = c.rqpn;
    a.rq_psn = c.rq_psn;
    a.max_dest_rd_atomic = 128;
    a.min_rnr_timer = 12;
    a.ah_attr.dgid = peer_gid_;
    a.ah_attr.dmac = peer_mac_;
    a.ah_attr.sgid_index = 0;
    m = QP_STATE;
    if (c.type == QPT_RC)
      m |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    if (c.type == QPT_UC) m |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
    if (eng_->modify_qp(c.qpn, a, m)) return cannot("modify_qp RTR");
    a.qp_state = QPS_RTS;
    a.sq_psn = c.sq_psn;
    a.timeout = opt_.timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 128;
    m = QP_STATE | QP_SQ_PSN;
    if (c.type == QPT_RC) m |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    if (eng_->modify_qp(c.qpn, a, m)) return cannot("modify_qp RTS");
    // every receive up front (the capture shows no RNR NAK from the played side; checked by the caller)
    for (uint32_t k = 0; k < nrecv; k++) {
      Sge sge{reinterpret_cast<uintptr_t>(c.rbuf.data()) + uint64_t(k) * c.rslot, c.rslot, c.rkey_recv};
      RecvWr wr;
      wr.wr_id = (uint64_t(&c - conns_.data()) << 32) | k;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      const RecvWr* bad;
      if (opt_.srq ? eng_->post_srq_recv(srq_, &wr, &bad) : eng_->post_recv(c.qpn, &wr, &bad))
        return cannot("post_recv");
    }
    if (c.type == QPT_UD)
      for (size_t i : c.out) {
        const w::Packet& p = cap_[i].pkt;
        auto key = std::make_pair(p.eth.dst, p.dst_gid());
        if (ahs_.count(key)) continue;
        AddressVector av;
        av.dgid = key.second;
        av.dmac = key.first;
        uint32_t ah;
        if (eng_->create_ah(pd_, av, ah)) return cannot("create_ah");
        ahs_[key] = ah;
      }
  }
  return true;
}

// Posts the played side's message k as the WR its application must have posted.
void Replayer::post_msg(Conn& c, size_t k) {
  const Msg& m = c.out_msgs[k];
  const w::Packet& h = m.head->pkt;
  const w::Packet& t = m.tail->pkt;
  SendWr wr;
  Sge sge{reinterpret_cast<uintptr_t>(c.lbuf.data()) + c.loff[k], m.len(), c.lkey};
  wr.wr_id = (uint64_t(&c - conns_.data()) << 32) | k;
  wr.sg_list = &sge;
  wr.num_sge = m.len() ? 1 : 0;
  if (t.bth.se) wr.send_flags |= SEND_SOLICITED;
  switch (m.kind) {
    case w::OpKind::send:
      wr.opcode = m.tail->info().with_imm   ? WR_SEND_WITH_IMM
                  : m.tail->info().with_inv ? WR_SEND_WITH_INV
                                            : WR_SEND;
      wr.imm_data = htonl(t.imm);
      wr.invalidate_rkey = t.ieth_rkey;
      if (c.type == QPT_UD) {
        wr.ud.ah = ahs_[{h.eth.dst, h.dst_gid()}];
        wr.ud.remote_qpn = h.bth.dqpn;
        wr.ud.remote_qkey = h.deth.qkey;
      }
      break;
    case w::OpKind::rdma_write:
      wr.opcode = m.tail->info().with_imm ? WR_RDMA_WRITE_WITH_IMM : WR_RDMA_WRITE;
      wr.imm_data = htonl(t.imm);
      wr.rdma.remote_addr = h.reth.va;
      wr.rdma.rkey = h.reth.rkey;
      break;
    case w::OpKind::rdma_read_request:
      wr.opcode = WR_RDMA_READ;
      wr.rdma.remote_addr = h.reth.va;
      wr.rdma.rkey = h.reth.rkey;
      break;
    case w::OpKind::compare_swap:
    case w::OpKind::fetch_add:
      wr.opcode = m.kind == w::OpKind::compare_swap ? WR_ATOMIC_CMP_AND_SWP : WR_ATOMIC_FETCH_AND_ADD;
      wr.atomic.remote_addr = h.atomic_eth.va;
      wr.atomic.rkey = h.atomic_eth.rkey;
      wr.atomic.compare_add =
          m.kind == w::OpKind::compare_swap ? h.atomic_eth.compare : h.atomic_eth.swap_add;
      wr.atomic.swap = h.atomic_eth.swap_add;
      sge.length = 8;
      wr.num_sge = 1;
      break;
    default:
      fail(fmt("frame %zu: cannot post opcode 0x%x", m.head->no, h.bth.opcode));
      return;
  }
  const SendWr* bad;
  if (int e = eng_->post_send(c.qpn, &wr, &bad))
    fail(fmt("post_send of the message at PSN 0x%x: errno %d", m.psn, e));
  posted_.emplace_back(&c - conns_.data(), k);
}

void Replayer::drain() {
  for (int i = 0; i < 100000 && eng_->progress(); i++) {
  }
  Wc wc[64];
  int n;
  while ((n = eng_->poll_cq(cq_, 64, wc)) > 0) wcs_.insert(wcs_.end(), wc, wc + n);
}

// Moves the clock to t, stopping at every engine deadline on the way (retransmit and RNR timers fire at their
// time relative to the fed frames).
void Replayer::advance_to(uint64_t t) {
  for (int i = 0; i < 100000; i++) {
    drain();
    uint64_t d = eng_->next_deadline_ns();
    if (d == 0) continue;
    if (d > t) break;
    clock_->t = std::max(clock_->t, d);
  }
  clock_->t = std::max(clock_->t, t);
  drain();
}

Result Replayer::run() {
  if (!load() || !build_conns()) return r_;
  for (Conn& c : conns_) {
    if (!build_msgs(c, c.in, c.in_msgs, "fed side") || !build_msgs(c, c.out, c.out_msgs, "played side"))
      return r_;
    for (size_t i : c.out)
      if (cap_[i].info().kind == w::OpKind::ack && cap_[i].pkt.aeth.type() == w::AethType::rnr_nak)
        return (
            cannot(fmt(
                "frame %zu: the played side sent an RNR NAK; when its application posted receives is not in "
                "the capture",
                cap_[i].no)),
            r_);
  }
  if (!build_memory() || !setup_engine()) return r_;
  next_post_.assign(conns_.size(), 0);
  const uint64_t t0 = clock_->t;
  for (size_t i = 0; i < cap_.size(); i++) {
    advance_to(t0 + cap_[i].t);
    for (size_t c = 0; c < conns_.size(); c++)
      while (next_post_[c] < conns_[c].out_msgs.size() && conns_[c].out_msgs[next_post_[c]].trigger <= i)
        post_msg(conns_[c], next_post_[c]++);
    drain();
    if (cap_[i].played) continue;
    for (const Patch& p : patches_)
      if (p.at == i) p.r->mem[p.off] = p.v;
    port_->inbox.push_back(cap_[i].bytes);
    r_.fed++;
    drain();
  }
  // let the last timers run out (a lost final ACK is retransmitted for), bounded: 10 s of engine time
  advance_to(clock_->t + 10'000'000'000ull);
  for (auto& f : port_->sent) {
    if (!parse(f)) fail(fmt("emitted frame %zu does not parse or has a bad ICRC", f.no));
  }
  r_.emitted = static_cast<uint32_t>(port_->sent.size());
  compare();
  check_completions();
  check_memory();
  for (Counter k :
       {Counter::rx_drop_parse, Counter::rx_drop_icrc, Counter::rx_drop_qpn, Counter::rx_drop_qkey})
    if (eng_->counter(k))
      fail(fmt("engine dropped %llu fed frames (%s)", (unsigned long long)eng_->counter(k), counter_name(k)));
  for (Counter k : {Counter::rx_drop_pkey, Counter::rx_drop_opcode, Counter::rx_drop_no_recv_wqe,
                    Counter::rx_drop_uc, Counter::rx_drop_dup_unmatched, Counter::rx_drop_resp_busy,
                    Counter::rx_drop_stale_response, Counter::rx_drop_bad_response})
    if (eng_->counter(k))
      diff(fmt("engine silently dropped %llu fed frames (%s)", (unsigned long long)eng_->counter(k),
               counter_name(k)));
  if (!opt_.write_pcap.empty()) write_pcap();
  return r_;
}

void Replayer::write_pcap() {
  FILE* f = fopen(opt_.write_pcap.c_str(), "wb");
  if (!f) {
    fail("cannot write " + opt_.write_pcap);
    return;
  }
  const uint32_t hdr[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};  // pcap, version 2.4, Ethernet
  fwrite(hdr, 4, 6, f);
  for (const Frame& fr : port_->sent) {
    uint64_t us = fr.t / 1000;
    const uint32_t rec[4] = {static_cast<uint32_t>(us / 1000000), static_cast<uint32_t>(us % 1000000),
                             static_cast<uint32_t>(fr.bytes.size()), static_cast<uint32_t>(fr.bytes.size())};
    fwrite(rec, 4, 4, f);
    fwrite(fr.bytes.data(), 1, fr.bytes.size(), f);
  }
  fclose(f);
}

}  // namespace detail

Result replay_capture(const std::string& path, const Options& opt) {
  detail::Replayer r(path, opt);
  return r.run();
}

}  // namespace urxe::replay
