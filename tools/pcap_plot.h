// `urxe pcap plot`: one RC connection of a capture as PSN against time, a self-contained SVG (what
// tcptrace/Wireshark stream graphs show for TCP). A library so tests can plot in-process.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "tools/pcapng_file.h"

namespace urxe::tools {

// One plotted frame. `space` is the PSN space: 0 for QP N's requests and the responses to them, 1 for the
// peer's requests and the responses to them. `kind` is the mark: request, retransmission, ack, nak-seq,
// nak-rnr, nak-invalid, nak-access, nak-operational, read-response, atomic-ack, cnp.
struct PlotPoint {
  uint64_t frame = 0;
  int64_t t_ns = 0;  // since the connection's first frame
  uint32_t psn = 0;  // as on the wire
  int64_t y = 0;     // unwrapped: the space's first PSN plus the signed 24-bit steps since
  int space = 0;
  uint32_t dqpn = 0;
  uint8_t opcode = 0;
  std::string kind, op, position, comment;  // op: send, write, read, atomic (requests); position: first..only
  int fault_rule = -1;                      // the fault rule the comment names, or -1
  bool dropped = false;                     // "(not sent)": a fault rule dropped this outgoing frame
  std::string bad;  // why the frame is not good (bad ICRC, malformed after the BTH), or ""
};

struct PlotResult {
  uint32_t qpn = 0, peer = 0;
  bool have_peer = false;
  std::string peer_from;  // how the peer was found: "comment", "answers", "reverse", or ""
  std::vector<PlotPoint> points;
  uint32_t first_psn[2] = {0, 0};
};

inline constexpr int kPlotExitOk = 0, kPlotExitNoQp = 1, kPlotExitError = 2;

// Reads `path` and collects the frames of the connection of QP `qpn`. Returns kPlotExitOk, kPlotExitNoQp
// (no frame to or from that QP; message on `err`) or kPlotExitError (unreadable file).
int collect_plot(const std::string& path, uint32_t qpn, PlotResult& r, std::ostream& err);

std::string render_svg(const PlotResult& r, const std::string& title);
// Text for an XML 1.0 document (the SVG; also HTML text): UTF-8, markup characters escaped, control
// characters other than tab and newline (XML 1.0 allows no others) as '?'.
std::string xml_escape(std::string_view raw);
std::string render_json(const PlotResult& r);  // one JSON object per point, one a line

}  // namespace urxe::tools
