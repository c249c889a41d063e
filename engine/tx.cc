// Transmit: a frame is built in place (begin_frame writes its headers, the role fills the payload,
// finish_frame seals and queues it), the round's frames leave in batches (tx_flush, tx_send), and a run of
// full middle packets may leave as one batch frame to a port that takes them (batch_bytes_for,
// batch_packets). Also the UDP source ports the frames carry.
#include <algorithm>

#include "engine/internal.h"

namespace urxe::engine {

uint16_t udp_sport_connected(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
  uint32_t fl = flow_label & 0xfffff;
  if (fl == 0) {
    uint64_t v = uint64_t{lqpn} * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    fl = static_cast<uint32_t>(v & 0xfffff);
  }
  const uint32_t low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
  return static_cast<uint16_t>(low | 0xc000);
}

uint16_t udp_sport_ud(uint32_t qpn) {
  const uint32_t h = (qpn * 0x61C88647u) >> 18;  // 14-bit multiplicative hash
  return static_cast<uint16_t>(0xc000 | (h & 0x3fff));
}

uint8_t* EngineImpl::begin_frame(const wire::FrameSpec& spec, uint32_t payload_len,
                                 const wire::HeaderPrefix* prefix) {
  const uint32_t size = wire::frame_size(spec, payload_len);
  if (tx.size() >= kTxBatch) {
    tx_flush();
    if (tx.size() >= kTxBatch) {  // the port takes nothing: backpressure
      count(Counter::tx_no_buf);
      return nullptr;
    }
  }
  cur_buf.gather = nullptr;
  cur_buf.batch = 0;
  if (!port.tx_alloc(size, cur_buf)) {
    count(Counter::tx_no_buf);
    return nullptr;
  }
  const wire::MutByteSpan out(cur_buf.data, size);
  if (!(prefix ? wire::build_headers(out, *prefix, spec, payload_len, cur_layout)
               : wire::build_headers(out, spec, payload_len, cur_layout))) {
    port.tx_free(cur_buf);
    return nullptr;
  }
  return cur_buf.data + cur_layout.payload_offset;
}

void EngineImpl::finish_frame(bool ack_only) {
  // A port that fills the ICRC where a frame needs one (the same-host path: not on its memory hop) gets
  // none (a UDP checksum covers it, so then it is there).
  wire::seal_frame(wire::MutByteSpan(cur_buf.data, cur_layout.frame_len), cur_layout, !port_icrc_offload);
  cur_buf.icrc_absent = port_icrc_offload && !cur_layout.udp_checksum;
  cur_buf.len = cur_layout.frame_len;
  cur_buf.bth_offset = cur_layout.l3_offset + cur_layout.ip_hdr_len + wire::kUdpLen;
  tx.push_back(cur_buf);
  if (!ack_only) tx_not_ack++;
  // a batch frame counts as the packets it stands for
  count(Counter::sent_pkts, cur_buf.batch ? cur_buf.batch : 1);
  count(Counter::sent_bytes, wire_bytes());
}

uint32_t EngineImpl::wire_bytes() const {
  const uint32_t len = cur_layout.frame_len;  // (a batch's packets are middles: no pad)
  return wire::batch_wire_len(len, len - cur_layout.payload_offset - wire::kIcrcLen, cur_buf.batch);
}

uint32_t EngineImpl::batch_bytes_for(const Qp& q, uint32_t npkts) {
  return port_batch_bytes && npkts >= 4 && !q.prefix.udp_checksum
             ? port.tx_batch_bytes_to(q.spec.dst_mac.data(), q.spec.bth.dqpn)
             : 0;
}

uint32_t EngineImpl::batch_packets(uint32_t batch_bytes, uint32_t mtu, uint64_t rest) {
  const auto k = static_cast<uint32_t>(std::min<uint64_t>(batch_bytes / mtu, (rest - 1) / mtu));
  return std::min({k, Port::kMaxBatch, 0xffffu / mtu});  // (the payload fits gather_len)
}

void EngineImpl::abort_frame() {
  port.tx_free(cur_buf);
}

void EngineImpl::tx_send(std::vector<PacketBuf>& q) {
  // Frames the port does not take now stay queued, in order, for the next flush.
  uint32_t done = 0;
  const uint32_t n = static_cast<uint32_t>(q.size());
  while (done < n) {
    const uint32_t k = port.tx_burst(q.data() + done, n - done);
    if (k == 0) break;
    done += k;
  }
  if (done) q.erase(q.begin(), q.begin() + done);
  // What stays queued may wait past this round, and its application memory may be gone by then.
  for (uint32_t i = done; i < n; i++) make_whole(q[i - done]);
}

void EngineImpl::tx_flush() {
  if (!held.empty()) {
    // A WRITE's hold that nobody answered (a stream, or an app that does not answer) skips the next rounds
    // that place a WRITE, twice as many each time in a row, up to kWriteHoldBackoff; an answered one ends
    // the backoff. (A fixed skip after any unanswered hold made one slow answer, an app off its CPU for a
    // moment, cost the next exchanges their hold; docs/performance.md.)
    if (held_for_write) {
      if (tx_not_ack == 0) {
        write_hold_fails = std::min(write_hold_fails + 1, kWriteHoldMaxFails);
        write_hold_skip = std::min(kWriteHoldBackoff, 1u << (write_hold_fails - 1));
      } else {
        write_hold_fails = 0;
      }
    }
    // After this round's frames and in the same transmit call (on a packet socket one send() per call,
    // which on a veth also delivers to the peer: its app, waiting for this ACK's send completion, would
    // wait for a second call). An ACK of an older PSN behind a newer response of the same QP is a
    // duplicate the requester ignores.
    tx.insert(tx.end(), held.begin(), held.end());
    held.clear();
    held_any.store(false, std::memory_order_relaxed);
  }
  tx_send(tx);
  if (tx.empty()) tx_not_ack = 0;
}

}  // namespace urxe::engine
