// pcapng files read and written block by block, for what libpcap does not hand out: each packet's
// direction (epb_flags) and comment, which urxe's captures carry (dpdk/capture_port.cc), and for writing a
// slice of frames with them kept (`urxe conform`'s evidence files).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace urxe::tools {

// pcapng block types and options (pcapng specification, sections 4.1-4.3).
inline constexpr uint32_t kPcapngShb = 0x0A0D0D0A, kPcapngIdb = 1, kPcapngObsoletePb = 2, kPcapngSpb = 3,
                          kPcapngEpb = 6;
inline constexpr uint32_t kPcapngByteOrderMagic = 0x1A2B3C4D;
inline constexpr uint16_t kPcapngOptEnd = 0, kPcapngOptComment = 1, kPcapngIfTsresol = 9, kPcapngEpbFlags = 2;
inline constexpr uint32_t kPcapngInbound = 1, kPcapngOutbound = 2;  // epb_flags bits 0-1

struct PcapngPacket {
  int64_t ts_ns = 0;          // since the epoch, from the interface's if_tsresol
  uint32_t flags = 0;         // epb_flags; 0 when absent
  uint32_t linktype = 0;      // of the packet's interface
  uint32_t wirelen = 0;       // original length
  std::string comment;        // the first opt_comment, or ""
  std::vector<uint8_t> data;  // the captured bytes
  bool inbound() const { return (flags & 3) == kPcapngInbound; }
  bool outbound() const { return (flags & 3) == kPcapngOutbound; }
};

// Every packet block of `path` in file order (EPB, SPB, obsolete PB). A classic pcap file gives false + err
// ("not a pcapng file"); a file cut short in its last block gives the blocks before it (a capture still
// being written).
bool read_pcapng_packets(const std::string& path, std::vector<PcapngPacket>& out, std::string& err);

// The comment of each packet block of a pcapng file, in file order (frame 1 is [0]); "" where a block has
// none. A classic pcap file gives an empty list.
bool read_pcapng_comments(const std::string& path, std::vector<std::string>& comments, std::string& err);

// Writes `packets` as one section with one Ethernet interface (nanosecond timestamps), each packet an EPB
// with its flags and comment. Packets of another link type are left out.
bool write_pcapng(const std::string& path, const std::vector<const PcapngPacket*>& packets,
                  const std::string& section_comment, std::string& err);

}  // namespace urxe::tools
