#include "tools/pcap_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <utility>

#include "tools/json_writer.h"
#include "tools/pcap_decode.h"
#include "wire/gso.h"
#include "wire/psn.h"

namespace urxe::tools {

namespace {

struct Rec {
  uint64_t frame = 0;
  int64_t ts_sec = 0;
  uint32_t ts_nsec = 0;
  wire::Gid src{}, dst{};
  uint32_t dqpn = 0, psn = 0;
  uint8_t opcode = 0, syndrome = 0;
  const wire::OpcodeInfo* info = nullptr;
  const std::string* comment = nullptr;
  std::string bad;  // why a kept frame is not good, or ""
};

// "from QP 0x..." in a comment (dpdk/capture_port.cc), or -1.
int64_t comment_src_qp(const std::string& c) {
  const size_t at = c.find("from QP 0x");
  if (at == std::string::npos) return -1;
  return static_cast<int64_t>(std::strtoul(c.c_str() + at + 10, nullptr, 16));
}

std::string nak_kind(uint8_t syndrome) {
  const auto type = static_cast<wire::AethType>((syndrome >> 5) & 3);
  if (type == wire::AethType::ack) return "ack";
  if (type == wire::AethType::rnr_nak) return "nak-rnr";
  switch (static_cast<wire::NakCode>(syndrome & 0x1f)) {
    case wire::NakCode::psn_seq_error:
      return "nak-seq";
    case wire::NakCode::remote_access_error:
      return "nak-access";
    case wire::NakCode::remote_operational_error:
      return "nak-operational";
    default:
      return "nak-invalid";  // invalid request, invalid RD request, reserved codes
  }
}

std::string op_name(wire::OpKind k) {
  switch (k) {
    case wire::OpKind::send:
      return "send";
    case wire::OpKind::rdma_write:
      return "write";
    case wire::OpKind::rdma_read_request:
      return "read";
    case wire::OpKind::compare_swap:
    case wire::OpKind::fetch_add:
    case wire::OpKind::atomic_write:
      return "atomic";
    default:
      return "";
  }
}

std::string position_name(wire::Position p) {
  switch (p) {
    case wire::Position::first:
      return "first";
    case wire::Position::middle:
      return "middle";
    case wire::Position::last:
      return "last";
    case wire::Position::only:
      return "only";
    default:
      return "";
  }
}

std::string hex_qp(uint32_t q) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%06x", q);
  return b;
}

}  // namespace

int collect_plot(const std::string& path, uint32_t qpn, PlotResult& r, std::ostream& err) {
  r = PlotResult{};
  r.qpn = qpn;
  std::vector<std::string> comments;
  std::string e;
  PcapReader reader;
  if (!reader.open(path, e) || !read_pcapng_comments(path, comments, e)) {
    err << "urxe pcap plot: " << (e.starts_with(path) ? "" : path + ": ") << e << "\n";
    return kPlotExitError;
  }
  static const std::string kNone;
  std::vector<Rec> recs;
  bool ud_to_qp = false;  // a UD frame to QP N: named in the error, UD has no connection to draw
  PcapReader::Frame fr;
  std::vector<uint8_t> seg;
  int rc;
  for (uint64_t n = 1; (rc = reader.next(fr, e)) == 1; ++n) {
    const std::string* comment = n <= comments.size() ? &comments[n - 1] : &kNone;
    auto keep = [&](const DecodedFrame& d) {
      // A frame with a bad ICRC or a malformed tail is kept when its BTH is readable: a fault rule's
      // corruption is one of the things the plot is for.
      if (!d.roce || !d.bth_parsed || !d.pkt.info || !d.pkt.info->valid()) return;
      if (d.pkt.info->transport == wire::Transport::ud) {
        ud_to_qp |= d.pkt.bth.dqpn == qpn;
        return;
      }
      Rec x;
      x.frame = n;
      x.ts_sec = fr.ts_sec;
      x.ts_nsec = fr.ts_nsec;
      x.src = d.pkt.src_gid();
      x.dst = d.pkt.dst_gid();
      x.dqpn = d.pkt.bth.dqpn;
      x.psn = d.pkt.bth.psn;
      x.opcode = d.pkt.bth.opcode;
      x.syndrome = d.pkt.aeth.syndrome;
      x.info = d.pkt.info;
      x.comment = comment;
      if (!d.good())
        x.bad = d.error != wire::ParseError::ok ? std::string(wire::to_string(d.error)) : "bad ICRC";
      recs.push_back(x);
    };
    DecodedFrame d = decode_frame(fr.eth, n, fr.wirelen);
    // A UDP GSO datagram captured whole (wire/gso.h): its frames, as pcap decode shows them.
    const uint32_t s = d.roce && !d.good() ? wire::gso_segment_len(fr.eth) : 0;
    if (s == 0) {
      keep(d);
      continue;
    }
    seg.resize(fr.eth.size());
    for (uint32_t i = 0, len; (len = wire::gso_segment(fr.eth, s, i, wire::MutByteSpan(seg))) != 0; ++i)
      keep(decode_frame(wire::ByteSpan(seg.data(), len), n, 0));
  }
  if (rc < 0) {
    err << "urxe pcap plot: " << path << ": " << e << "\n";
    return kPlotExitError;
  }

  // The peer. 1: a comment of a frame to QP N names its sender ("from QP 0x..."), or a frame from QP N
  // names N as its sender. 2: answers: among frames flowing the other way between the same two addresses,
  // the DestQP whose frames carry the PSN of a frame to N with the request/response role reversed (an ACK
  // or response repeats its request's PSN; PSNs start at random, so other QPs do not match). 3: the only
  // DestQP flowing the other way.
  const Rec* to_n = nullptr;
  for (const Rec& x : recs) {
    if (x.dqpn == qpn && !to_n) to_n = &x;
    if (!r.have_peer && x.dqpn == qpn && comment_src_qp(*x.comment) >= 0) {
      r.peer = static_cast<uint32_t>(comment_src_qp(*x.comment));
      r.have_peer = true, r.peer_from = "comment";
    }
    if (!r.have_peer && comment_src_qp(*x.comment) == static_cast<int64_t>(qpn)) {
      r.peer = x.dqpn;
      r.have_peer = true, r.peer_from = "comment";
    }
  }
  if (!to_n && !r.have_peer) {
    err << "urxe pcap plot: " << path << ": no RC/UC/XRC frame to or from QP " << hex_qp(qpn) << " (" << qpn
        << ")" << (ud_to_qp ? "; its frames are UD, which has no connection to plot" : "") << "\n";
    return kPlotExitNoQp;
  }
  wire::Gid addr_n{}, addr_p{};  // QP N's address and its peer's
  if (to_n) addr_n = to_n->dst, addr_p = to_n->src;
  if (!r.have_peer && to_n) {
    std::set<std::pair<uint32_t, bool>> psns;  // frames to N: (PSN, is a response)
    for (const Rec& x : recs)
      if (x.dqpn == qpn && x.dst == addr_n) psns.emplace(x.psn, x.info->is_response);
    std::map<uint32_t, uint64_t> votes, reverse;
    for (const Rec& x : recs) {
      // Both ends may have a QP numbered N; only on one address is a frame to N not one to the peer.
      if (x.src != addr_n || x.dst != addr_p || (x.dqpn == qpn && addr_n == addr_p) ||
          x.info->transport == wire::Transport::cnp)
        continue;
      ++reverse[x.dqpn];
      if (psns.contains({x.psn, !x.info->is_response})) ++votes[x.dqpn];
    }
    auto best = std::max_element(votes.begin(), votes.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best != votes.end()) {
      r.peer = best->first;
      r.have_peer = true, r.peer_from = "answers";
    } else if (reverse.size() == 1) {
      r.peer = reverse.begin()->first;
      r.have_peer = true, r.peer_from = "reverse";
    }
  }
  if (!to_n) {  // only N's own frames were captured: its address is their source
    for (const Rec& x : recs)
      if (x.dqpn == r.peer) {
        addr_n = x.src, addr_p = x.dst;
        break;
      }
  }

  // The connection's frames, in capture order, each in its PSN space, unwrapped there.
  bool started[2] = {false, false};
  int64_t last_y[2] = {0, 0};
  uint32_t last_psn[2] = {0, 0};
  std::set<int64_t> requested[2];
  int64_t t0_sec = 0;
  uint32_t t0_nsec = 0;
  for (const Rec& x : recs) {
    const bool to_qp = x.dqpn == qpn && x.dst == addr_n;
    const bool to_peer = r.have_peer && x.dqpn == r.peer && x.dst == addr_p && x.src == addr_n;
    if (!to_qp && !to_peer) continue;
    if (r.points.empty()) t0_sec = x.ts_sec, t0_nsec = x.ts_nsec;
    PlotPoint p;
    p.frame = x.frame;
    p.t_ns = (x.ts_sec - t0_sec) * 1'000'000'000 + (static_cast<int64_t>(x.ts_nsec) - t0_nsec);
    p.psn = x.psn;
    p.dqpn = x.dqpn;
    p.opcode = x.opcode;
    p.comment = *x.comment;
    p.bad = x.bad;
    const bool cnp = x.info->transport == wire::Transport::cnp;
    // Space 0: N's requests (to the peer) and the responses to them (to N); CNPs to N slow N's sending.
    p.space = (to_qp == (x.info->is_response || cnp)) ? 0 : 1;
    int& s = p.space;
    if (cnp) {
      p.y = started[s] ? last_y[s] : 0;  // a CNP's PSN means nothing: drawn at the space's latest PSN
    } else if (!started[s]) {
      started[s] = true;
      r.first_psn[s] = x.psn;
      p.y = last_y[s] = x.psn;
      last_psn[s] = x.psn;
    } else {
      p.y = last_y[s] = last_y[s] + wire::psn_diff(x.psn, last_psn[s]);
      last_psn[s] = x.psn;
    }
    if (x.info->is_request || x.info->kind == wire::OpKind::rdma_read_response)
      p.position = position_name(x.info->position);
    if (cnp) {
      p.kind = "cnp";
    } else if (x.info->is_request) {
      p.op = op_name(x.info->kind);
      p.kind = requested[s].insert(p.y).second ? "request" : "retransmission";
    } else if (x.info->kind == wire::OpKind::ack) {
      p.kind = nak_kind(x.syndrome);
    } else if (x.info->kind == wire::OpKind::atomic_ack) {
      p.kind = "atomic-ack";
    } else {
      p.kind = "read-response";
    }
    if (const size_t at = p.comment.find("fault rule "); at != std::string::npos) {
      p.fault_rule = std::atoi(p.comment.c_str() + at + 11);
      p.dropped = p.comment.find("(not sent)") != std::string::npos;
    }
    r.points.push_back(std::move(p));
  }
  // CNPs before the space's first PSN were drawn at 0: move them to its first PSN.
  for (PlotPoint& p : r.points)
    if (p.kind == "cnp" && p.y == 0 && started[p.space]) p.y = r.first_psn[p.space];
  return kPlotExitOk;
}

namespace {

// Marks (tools/README.md lists them): a shape, a fill and a stroke per kind.
enum class Shape : uint8_t { circle, triangle_up, triangle_down, square, diamond, cross };
struct Style {
  std::string_view cls;    // class tokens after "mark"
  std::string_view label;  // legend text
  Shape shape;
  std::string_view fill, stroke;
  double size, stroke_width;
};
constexpr Style kStyles[] = {
    {"request send", "SEND request (hollow: first/middle)", Shape::circle, "#1f77b4", "#1f77b4", 3.5, 1},
    {"request write", "WRITE request (hollow: first/middle)", Shape::circle, "#2ca02c", "#2ca02c", 3.5, 1},
    {"request read", "READ request", Shape::circle, "#9467bd", "#9467bd", 3.5, 1},
    {"request atomic", "atomic request", Shape::circle, "#ff7f0e", "#ff7f0e", 3.5, 1},
    {"retransmission", "retransmission (PSN seen before)", Shape::circle, "#d62728", "#000000", 5, 1.5},
    {"ack", "ACK", Shape::triangle_up, "#006400", "#006400", 4.5, 1},
    {"nak nak-seq", "NAK: PSN sequence error", Shape::triangle_down, "#d62728", "#000000", 6.5, 1},
    {"nak nak-rnr", "RNR NAK", Shape::triangle_down, "#8c564b", "#000000", 6.5, 1},
    {"nak nak-invalid", "NAK: invalid request", Shape::triangle_down, "#17becf", "#000000", 6.5, 1},
    {"nak nak-access", "NAK: remote access error", Shape::triangle_down, "#bcbd22", "#000000", 6.5, 1},
    {"nak nak-operational", "NAK: remote operational error", Shape::triangle_down, "#7f7f7f", "#000000", 6.5,
     1},
    {"read-response", "READ response", Shape::square, "#c5b0d5", "#9467bd", 3.5, 1},
    {"atomic-ack", "atomic ACK", Shape::square, "#ffbb78", "#ff7f0e", 4, 1},
    {"cnp", "CNP (at the latest PSN)", Shape::diamond, "#ff00ff", "#800080", 5, 1},
    {"fault", "fault rule made/changed it", Shape::square, "none", "#ff7f0e", 8, 2},
    {"fault dropped", "fault rule dropped it (not sent)", Shape::cross, "none", "#000000", 7, 2.5},
};

const Style& style_of(std::string_view cls) {
  for (const Style& s : kStyles)
    if (s.cls == cls) return s;
  return kStyles[0];
}

double dbl(int64_t v) {
  return static_cast<double>(v);
}

std::string num(double v, const char* fmt = "%.2f") {
  char b[48];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// Bytes of a UTF-8 sequence starting at s[i] when well formed (lead byte and continuation bytes), else 0.
size_t utf8_len(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

// `s` with each byte that is not part of a UTF-8 sequence as '?': a comment or a path is free text, the
// SVG and the JSON lines are UTF-8.
std::string utf8_clean(std::string_view s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t n = static_cast<unsigned char>(s[i]) < 0x80 ? 1 : utf8_len(s, i);
    o += n ? s.substr(i, n) : std::string_view("?");
    i += n ? n - 1 : 0;
  }
  return o;
}

}  // namespace

std::string xml_escape(std::string_view raw) {
  std::string o;
  for (const char c : utf8_clean(raw)) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') ? '?' : c;
    }
  }
  return o;
}

namespace {

// An element for `s` at (x, y), left open so the caller adds its class and <title>.
std::string shape_open(const Style& s, double x, double y, bool hollow) {
  const double r = s.size;
  std::string o;
  switch (s.shape) {
    case Shape::circle:
      o = "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\"";
      break;
    case Shape::square:
      o = "<rect x=\"" + num(x - r) + "\" y=\"" + num(y - r) + "\" width=\"" + num(2 * r) + "\" height=\"" +
          num(2 * r) + "\"";
      break;
    case Shape::triangle_up:
      o = "<path d=\"M" + num(x) + " " + num(y - r) + "L" + num(x + r) + " " + num(y + r * 0.8) + "L" +
          num(x - r) + " " + num(y + r * 0.8) + "Z\"";
      break;
    case Shape::triangle_down:
      o = "<path d=\"M" + num(x) + " " + num(y + r) + "L" + num(x + r) + " " + num(y - r * 0.8) + "L" +
          num(x - r) + " " + num(y - r * 0.8) + "Z\"";
      break;
    case Shape::diamond:
      o = "<path d=\"M" + num(x) + " " + num(y - r) + "L" + num(x + r) + " " + num(y) + "L" + num(x) + " " +
          num(y + r) + "L" + num(x - r) + " " + num(y) + "Z\"";
      break;
    case Shape::cross:
      o = "<path d=\"M" + num(x - r) + " " + num(y - r) + "L" + num(x + r) + " " + num(y + r) + "M" +
          num(x - r) + " " + num(y + r) + "L" + num(x + r) + " " + num(y - r) + "\"";
      break;
  }
  o += " fill=\"" + std::string(hollow ? "#ffffff" : s.fill) + "\" stroke=\"" + std::string(s.stroke) +
       "\" stroke-width=\"" + num(s.stroke_width, "%g") + "\"";
  return o;
}

// Round tick steps (1, 2, 5 x 10^k) covering [lo, hi] with about `n` ticks.
std::vector<double> ticks(double lo, double hi, int n) {
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string nak_text(std::string_view kind) {
  for (const Style& s : kStyles)
    if (s.cls.ends_with(kind) && s.cls.starts_with("nak")) return std::string(s.label);
  return std::string(kind);
}

}  // namespace

std::string render_svg(const PlotResult& r, const std::string& title) {
  constexpr double kW = 1160, kLeft = 100, kRight = 860, kPanelH = 320, kTop = 60, kGap = 90, kLegendX = 885;
  const bool used[2] = {
      std::any_of(r.points.begin(), r.points.end(), [](const PlotPoint& p) { return p.space == 0; }),
      std::any_of(r.points.begin(), r.points.end(), [](const PlotPoint& p) { return p.space == 1; })};
  const int panels = std::max(1, int{used[0]} + int{used[1]});
  const double height = std::max(kTop + panels * (kPanelH + kGap), kTop + std::size(kStyles) * 20.0 + 40);
  int64_t tmax = 0;
  for (const PlotPoint& p : r.points) tmax = std::max(tmax, p.t_ns);
  const double xspan = tmax > 0 ? dbl(tmax) * 1e-9 : 1e-6;
  // Marks keep clear of the frame: time 0 and the last frame sit kInset inside it.
  constexpr double kInset = 10;
  auto xof = [&](double t) { return kLeft + kInset + t / xspan * (kRight - kLeft - 2 * kInset); };
  auto xpos = [&](int64_t t_ns) { return xof(dbl(t_ns) * 1e-9); };

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW, "%g") + "\" height=\"" +
       num(height, "%g") + "\" viewBox=\"0 0 " + num(kW, "%g") + " " + num(height, "%g") +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<title>" + xml_escape(title) + "</title>\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  o += "<text class=\"title\" x=\"" + num(kLeft, "%g") + "\" y=\"24\" font-size=\"15\">" + xml_escape(title) +
       "</text>\n";
  const std::string qn = hex_qp(r.qpn), qp = r.have_peer ? hex_qp(r.peer) : std::string("?");
  int panel = 0;
  for (int s = 0; s < 2; ++s) {
    if (!used[s] && !(s == 0 && !used[1])) continue;
    const double top = kTop + panel++ * (kPanelH + kGap), bottom = top + kPanelH;
    int64_t ymin = INT64_MAX, ymax = INT64_MIN;
    for (const PlotPoint& p : r.points)
      if (p.space == s) ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
    if (ymin > ymax) ymin = ymax = 0;
    const double pad = std::max(1.0, dbl(ymax - ymin) * 0.05);
    const double lo = dbl(ymin) - pad, hi = dbl(ymax) + pad;
    auto ypos = [&](double y) { return bottom - (y - lo) / (hi - lo) * kPanelH; };
    const std::string from = s == 0 ? qn : qp, to = s == 0 ? qp : qn;
    o += "<g class=\"panel\" id=\"space" + std::to_string(s) + "\">\n";
    o += "<text class=\"panel-title\" x=\"" + num(kLeft) + "\" y=\"" + num(top - 10) +
         "\" font-size=\"13\">QP " + from + " requests to QP " + to + " and its responses (PSN space from " +
         hex_qp(r.first_psn[s]) + ")</text>\n";
    o += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(top) + "\" width=\"" + num(kRight - kLeft) +
         "\" height=\"" + num(kPanelH) + "\" fill=\"none\" stroke=\"#000000\"/>\n";
    for (double t : ticks(0, xspan, 8)) {
      const double x = xof(t);
      o += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom) +
           "\" stroke=\"#e0e0e0\"/><text x=\"" + num(x) + "\" y=\"" + num(bottom + 16) +
           "\" text-anchor=\"middle\">" + num(t, "%g") + "</text>\n";
    }
    for (double y : ticks(lo, hi, 6)) {
      if (y != std::floor(y)) continue;  // PSNs are whole
      o += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(ypos(y)) + "\" x2=\"" + num(kRight) + "\" y2=\"" +
           num(ypos(y)) + "\" stroke=\"#e0e0e0\"/><text x=\"" + num(kLeft - 6) + "\" y=\"" +
           num(ypos(y) + 4) + "\" text-anchor=\"end\">" + num(y, "%.0f") + "</text>\n";
    }
    o += "<text class=\"axis-label x\" x=\"" + num((kLeft + kRight) / 2) + "\" y=\"" + num(bottom + 36) +
         "\" text-anchor=\"middle\">time (s) since the connection's first frame</text>\n";
    o += "<text class=\"axis-label y\" x=\"" + num(24) + "\" y=\"" + num(top + kPanelH / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 24 " + num(top + kPanelH / 2) +
         ")\">PSN (unwrapped 24-bit)</text>\n";
    // Requests first, responses over them, fault marks over both.
    for (int pass = 0; pass < 3; ++pass)
      for (const PlotPoint& p : r.points) {
        const bool request = p.kind == "request" || p.kind == "retransmission";
        if (p.space != s || (pass < 2 && request != (pass == 0)) || (pass == 2 && p.fault_rule < 0)) continue;
        const double x = xpos(p.t_ns), y = ypos(static_cast<double>(p.y));
        const std::string cls = p.kind == "request"          ? "request " + p.op
                                : p.kind.starts_with("nak-") ? "nak " + p.kind
                                                             : p.kind;
        const Style& st = style_of(cls);
        const bool hollow = p.kind == "request" && (p.position == "first" || p.position == "middle");
        const std::string name = wire::opcode_info(p.opcode).name.empty()
                                     ? std::string("opcode ") + std::to_string(p.opcode)
                                     : std::string(wire::opcode_info(p.opcode).name);
        std::string tip = "frame " + std::to_string(p.frame) + ", t " + num(dbl(p.t_ns) * 1e-9, "%.9f") +
                          " s, " + name + ", PSN " + hex_qp(p.psn) + " (" + std::to_string(p.psn) +
                          "), to QP " + hex_qp(p.dqpn);
        if (p.kind == "retransmission") tip += ", retransmission";
        if (p.kind.starts_with("nak-")) tip += ", " + nak_text(p.kind);
        if (!p.bad.empty()) tip += ", " + p.bad;
        if (!p.comment.empty()) tip += "\n" + p.comment;
        std::string cls_attr = "mark " + (p.kind == "retransmission" ? cls + " " + p.op : cls);
        if (!p.position.empty()) cls_attr += " " + p.position;
        if (pass < 2)
          o += shape_open(st, x, y, hollow) + " class=\"" + cls_attr + "\" data-frame=\"" +
               std::to_string(p.frame) + "\"><title>" + xml_escape(tip) + "</title>" +
               (st.shape == Shape::circle   ? "</circle>"
                : st.shape == Shape::square ? "</rect>"
                                            : "</path>") +
               "\n";
        if (pass == 2) {
          const Style& f = style_of(p.dropped ? "fault dropped" : "fault");
          o += shape_open(f, x, y, false) + " class=\"mark " + std::string(f.cls) + "\" data-frame=\"" +
               std::to_string(p.frame) + "\" data-rule=\"" + std::to_string(p.fault_rule) + "\"><title>" +
               xml_escape(tip) + "</title>" + (f.shape == Shape::square ? "</rect>" : "</path>") + "\n";
        }
      }
    o += "</g>\n";
  }
  o += "<g class=\"legend\">\n";
  double ly = kTop + 8;
  for (const Style& st : kStyles) {
    o += shape_open(st, kLegendX + 8, ly, false) + "/>";
    o += "<text x=\"" + num(kLegendX + 22) + "\" y=\"" + num(ly + 4) + "\">" + xml_escape(st.label) +
         "</text>\n";
    ly += 20;
  }
  o += "</g>\n</svg>\n";
  return o;
}

std::string render_json(const PlotResult& r) {
  std::string out;
  for (const PlotPoint& p : r.points) {
    JsonWriter j;
    j.begin_object().num("frame", p.frame);
    j.num("t_ns", p.t_ns).num("space", static_cast<uint64_t>(p.space)).num("dqpn", p.dqpn).num("psn", p.psn);
    j.num("y", p.y).num("opcode", p.opcode).str("kind", p.kind).str("op", p.op).str("position", p.position);
    j.str("comment", utf8_clean(p.comment));
    if (!p.bad.empty()) j.str("bad", p.bad);
    if (p.fault_rule >= 0)
      j.num("fault_rule", static_cast<uint64_t>(p.fault_rule)).boolean("dropped", p.dropped);
    j.end_object();
    out += j.take();
    out += '\n';
  }
  return out;
}

}  // namespace urxe::tools
