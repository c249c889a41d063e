// Replay of a RoCEv2 capture into urxe's engine: one side of every connection in the capture is
// "played" by an Engine (its QPs, PSNs, rkeys and VAs recreated from the capture), the other side's frames
// are fed to it at their capture times through a Port, and what the engine emits is compared with what the
// played side really sent: every request, READ response, atomic ACK, ACK/NAK, and the memory and completions
// the capture implies. See tests/replay/README.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "wire/headers.h"

namespace urxe::replay {

struct Options {
  std::string play_mac;  // the side the engine plays ("52:54:00:77:00:01")
  std::string peer_mac;  // if set: only frames between the played side and this MAC (a capture of 3+ hosts)
  bool srq = false;      // receives through one SRQ shared by all of the played side's QPs
  // the played side's frames passed a lossy link (netem) before the capture point: a response of ours the
  // capture lacks may have been sent and dropped, so it is a difference, not a failure
  bool played_output_lossy = false;
  // the application writes the memory the peer READs between operations (rping): bytes a READ response shows
  // that the earlier requests did not leave there are written into the engine's memory (a difference, not a
  // failure)
  bool app_writes = false;
  uint8_t timeout = 14;    // local ACK timeout of the played side's RC QPs (4.096 us * 2^timeout)
  std::string write_pcap;  // if set: every frame the engine emitted, as a pcap file
};

struct Result {
  bool replayable = true;  // false: the capture cannot be replayed from this side (reason in `why`)
  std::string why;
  std::vector<std::string> failures;     // spec-fixed fields that differ, wrong memory or completions
  std::vector<std::string> differences;  // allowed differences (ACK coalescing, AckReq, retransmissions)
  std::vector<std::string> summary;      // what was replayed and checked
  uint32_t fed = 0, emitted = 0, compared_requests = 0, compared_responses = 0, acks_covered = 0;
};

Result replay_capture(const std::string& path, const Options& opt);

}  // namespace urxe::replay
