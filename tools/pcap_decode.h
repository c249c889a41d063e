// `urxe pcap decode`: read a pcap/pcapng capture with libpcap and decode every frame with wire/'s parser,
// one text line or one JSON object per frame. A library so tests can decode in-process.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wire/mad.h"
#include "wire/packet.h"

namespace urxe::tools {

// One frame as decoded. A frame is RoCE when its bytes carry IPv4/IPv6 + UDP with destination port 4791,
// whether or not the rest is well formed (so a corrupted RoCE frame shows as an error, not as skipped).
struct DecodedFrame {
  uint64_t number = 0;  // 1-based, as Wireshark numbers frames
  int64_t ts_sec = 0;
  uint32_t ts_nsec = 0;
  uint32_t caplen = 0, wirelen = 0;
  bool has_src_mac = true, has_dst_mac = true;  // false for link types without that address (SLL, raw IP)
  bool roce = false;
  wire::ParseError error = wire::ParseError::ok;  // meaningful when roce
  std::string_view skip_reason;                   // one word, when !roce: "arp", "tcp", "udp", "fragment" ...
  bool ip_parsed = false, udp_parsed = false, bth_parsed = false;
  wire::Packet pkt;  // as far as parsing got; pkt.payload is cleared (it would point into the frame)
  // A QP1 frame's MAD (wire::qp1_mad), decoded while the payload was at hand. A MAD that does not decode
  // is shown with its error but does not make the frame bad: the RoCE frame itself is fine.
  bool mad = false;
  wire::MadError mad_error = wire::MadError::ok;
  wire::CmMad cm;

  // One of the frames a UDP GSO datagram held (wire/gso.h: a capture on the sending side of a veth shows
  // them as one), 1-based, of gso_count; 0 for a frame as captured.
  uint32_t gso_index = 0, gso_count = 0;

  bool good() const { return roce && error == wire::ParseError::ok && pkt.icrc_ok; }
};

// Decodes one Ethernet frame (caplen bytes; wirelen is the original length, for truncation messages).
DecodedFrame decode_frame(wire::ByteSpan eth_frame, uint64_t number, uint32_t wirelen = 0);

// Output lines, without the trailing newline. `t0_*` is the first frame's time, for relative times.
std::string format_text(const DecodedFrame& f, int64_t t0_sec, uint32_t t0_nsec);
std::string format_json(const DecodedFrame& f);

// A capture file read through libpcap (pcap or pcapng). Frames of the link types Linux cooked (SLL, SLL2)
// and raw IP are handed out as Ethernet frames with a synthesized header (zero MACs where unknown).
class PcapReader {
 public:
  struct Frame {
    wire::ByteSpan eth;  // valid until the next call to next()
    uint32_t caplen = 0, wirelen = 0;
    int64_t ts_sec = 0;
    uint32_t ts_nsec = 0;
    bool has_src_mac = true, has_dst_mac = true;
  };
  PcapReader();
  ~PcapReader();
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;

  bool open(const std::string& path, std::string& err);
  // 1: a frame in `f`; 0: end of file; -1: read error (message in `err`).
  int next(Frame& f, std::string& err);
  int linktype() const { return linktype_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int linktype_ = -1;
  std::vector<uint8_t> buf_;
};

struct DecodeOptions {
  bool json = false;
  bool strict = false;
};
struct DecodeSummary {
  uint64_t frames = 0, roce = 0, good = 0, bad = 0, skipped = 0;
  uint64_t gso_datagrams = 0;  // captured frames that were UDP GSO datagrams, each counted as its frames
};
inline constexpr int kExitOk = 0, kExitBadFrames = 1, kExitError = 2;

// Decodes every frame of `path`, one line each on `out`. Returns kExitOk, kExitBadFrames (strict and a RoCE
// frame was malformed or had a bad ICRC), or kExitError (cannot open or read the file; message on `err`).
int decode_file(const std::string& path, const DecodeOptions& opt, std::ostream& out, std::ostream& err,
                DecodeSummary* summary = nullptr);

}  // namespace urxe::tools
