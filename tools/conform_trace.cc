// `urxe conform`: a run's frames from the capture files, and the judges' frame vocabulary.
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/conform.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {

bool Frame::is_ack_opcode() const {
  return d.bth_parsed && d.pkt.info && d.pkt.info->kind == wire::OpKind::ack;
}
bool Frame::is_ack() const {
  return is_ack_opcode() && d.pkt.aeth.type() == wire::AethType::ack;
}
bool Frame::is_nak(int code) const {
  return is_ack_opcode() && d.pkt.aeth.type() == wire::AethType::nak &&
         (code < 0 || d.pkt.aeth.value() == code);
}
bool Frame::is_rnr_nak() const {
  return is_ack_opcode() && d.pkt.aeth.type() == wire::AethType::rnr_nak;
}
bool Frame::is_request() const {
  return d.bth_parsed && d.pkt.info && d.pkt.info->is_request && !cm();
}
bool Frame::is_read_response() const {
  return d.bth_parsed && d.pkt.info && d.pkt.info->kind == wire::OpKind::rdma_read_response;
}
bool Frame::is_atomic_ack() const {
  return d.bth_parsed && d.pkt.info && d.pkt.info->kind == wire::OpKind::atomic_ack;
}
const uint8_t* Frame::payload() const {
  if (!raw || !d.bth_parsed || d.pkt.payload_len == 0) return nullptr;
  if (uint64_t{d.pkt.payload_offset} + d.pkt.payload_len > raw->data.size()) return nullptr;
  return raw->data.data() + d.pkt.payload_offset;
}

std::vector<const Frame*> Trace::hits(size_t k) const {
  std::vector<const Frame*> r;
  if (k >= rule_ids.size()) return r;
  for (const Frame& f : frames)
    if (f.fault_rule >= 0 && static_cast<uint32_t>(f.fault_rule) == rule_ids[k]) r.push_back(&f);
  return r;
}

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass:
      return "pass";
    case Verdict::fail:
      return "FAIL";
    case Verdict::inconclusive:
      return "inconclusive";
  }
  return "?";
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string frame_list(const std::vector<const Frame*>& f, size_t max) {
  std::string s;
  for (size_t i = 0; i < f.size() && i < max; ++i) s += (i ? ", #" : "#") + std::to_string(f[i]->n);
  if (f.size() > max) s += ", ... (" + std::to_string(f.size()) + ")";
  return s;
}

int32_t psn_diff(uint32_t a, uint32_t b) {
  const uint32_t d = (b - a) & 0xffffff;
  return d & 0x800000 ? static_cast<int32_t>(d) - 0x1000000 : static_cast<int32_t>(d);
}

namespace {

// ", fault rule N: ACTION[ (not sent|not delivered)]" at the end of a capture comment
// (dpdk/capture_port.cc).
void parse_fault_comment(const std::string& c, Frame& f) {
  const size_t at = c.find("fault rule ");
  if (at == std::string::npos) return;
  char* end = nullptr;
  const unsigned long id = std::strtoul(c.c_str() + at + 11, &end, 10);
  if (!end || *end != ':') return;
  f.fault_rule = static_cast<int>(id);
  std::string rest(end + 1);
  if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
  if (const size_t p = rest.find(" (not sent)"); p != std::string::npos) {
    f.not_sent = true;
    rest.resize(p);
  } else if (const size_t q = rest.find(" (not delivered)"); q != std::string::npos) {
    f.not_delivered = true;
    rest.resize(q);
  }
  f.fault_action = rest;
}

}  // namespace

bool load_trace(const std::string& dir, int64_t t0_ns, int64_t t1_ns, Trace& t, std::string& err) {
  t.packets.clear();
  t.frames.clear();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return true;  // nothing captured
  std::vector<std::string> files;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".pcapng") == 0) files.push_back(dir + "/" + n);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  for (const std::string& path : files) {
    std::vector<PcapngPacket> pk;
    if (!read_pcapng_packets(path, pk, err)) return false;
    for (PcapngPacket& p : pk)
      if (p.ts_ns >= t0_ns && p.ts_ns <= t1_ns) t.packets.push_back(std::move(p));
  }
  std::stable_sort(t.packets.begin(), t.packets.end(),
                   [](const PcapngPacket& a, const PcapngPacket& b) { return a.ts_ns < b.ts_ns; });
  t.frames.reserve(t.packets.size());
  for (const PcapngPacket& p : t.packets) {
    Frame f;
    f.n = t.frames.size() + 1;
    f.t_ns = p.ts_ns - t0_ns;
    f.out = p.outbound();
    f.raw = &p;
    f.d = decode_frame(wire::ByteSpan(p.data.data(), p.data.size()), f.n,
                       std::max<uint32_t>(p.wirelen, static_cast<uint32_t>(p.data.size())));
    parse_fault_comment(p.comment, f);
    t.frames.push_back(std::move(f));
  }
  return true;
}

}  // namespace urxe::tools::conform
