// UDP GSO batches of RoCEv2 frames. A sender may hand the kernel a run of frames of one flow (same
// addresses, ports, TOS/TTL) as one UDP datagram: the headers once, then each frame's UDP payload (BTH ...
// ICRC) back to back, every one `seg` bytes long but the last, which may be shorter. The kernel, or a NIC,
// cuts it into those frames where they leave the host, giving segment i the datagram's headers with its
// own IP/UDP lengths, a new IPv4 header checksum and IPv4 ID = the datagram's + i (IPv6 has none). So
// the ICRC of segment i is over those headers, and a sender computes it so. Within one host (a veth) the
// datagram arrives whole: a packet socket reads it with its segment size (virtio-net header), and a
// capture there shows it as one datagram, which gso_segment_len recognises afterwards.
#pragma once
#include <cstdint>

#include "wire/headers.h"

namespace urxe::wire {

// The length of Ethernet + IP + UDP headers of an untagged IPv4 (no options) or IPv6 UDP frame: 42 or 62;
// 0 for anything else (a tagged frame, IP options, not UDP, shorter than IPv6 + UDP headers).
uint32_t gso_headers_len(const uint8_t* frame, uint32_t len);

// Gives the headers at `frame` (hdr bytes, as gso_headers_len) what segment `index` of a batch whose
// first IPv4 ID is `ipv4_id0` carries, for `payload` UDP payload bytes: IP length, IPv4 ID and header
// checksum, UDP length. The UDP checksum is left as it is. checksum_valid: the IPv4 header checksum there
// is right for the header as it is, and is updated for the words that change instead of summed again.
void set_gso_segment_headers(uint8_t* frame, uint32_t hdr, uint32_t payload, uint16_t ipv4_id0,
                             uint32_t index, bool checksum_valid = false);

// Writes at `out` the headers segment `index` of the datagram whose headers are at `datagram` (hdr bytes)
// carries with `payload` UDP payload bytes: set_gso_segment_headers with the datagram's IPv4 ID as the
// first, and UDP checksum 0 (what a receiver that splits the datagram itself hands on).
void copy_gso_segment_headers(uint8_t* out, const uint8_t* datagram, uint32_t hdr, uint32_t payload,
                              uint32_t index);

// If `datagram` (a whole captured frame) is a batch as above that still holds several RoCEv2 frames: the
// segment length (BTH to ICRC) at which its first frame, given its own headers, has a valid ICRC and the
// next one starts with a valid BTH to the same destination QP. 0 otherwise (a single RoCEv2 frame, or not
// RoCE).
uint32_t gso_segment_len(ByteSpan datagram);

// Writes segment `index` of `datagram` (segment length `seg`) into `out` as a whole frame: the datagram's
// headers as set_gso_segment_headers gives them, with UDP checksum 0, then the segment. Returns its
// length; 0 when index is past the last segment or out is too small.
uint32_t gso_segment(ByteSpan datagram, uint32_t seg, uint32_t index, MutByteSpan out);

}  // namespace urxe::wire
