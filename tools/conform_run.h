// `urxe conform`: executing a Run (tools on both sides, the local device's fault rules) into a Trace.
#pragma once
#include <string>

#include "tools/conform.h"

namespace urxe::tools::conform {

struct RunContext {
  Setup setup;
  std::string urxe;        // this program, for `urxe run`
  std::string ibdev_path;  // the local device's directory (its fault rules)
  std::string peer_exec;   // the prefix that runs a shell command on the peer ("" = here)
  std::string out_dir;     // logs, slices, the report
  std::string pcap_dir;    // out_dir/pcap: every local process's capture
  int server_wait_ms = 500;
};

// Runs `run` (index: its place in the catalogue, for its TCP port) and loads its frames. false + err when
// the run could not be set up (rules refused, a fork failed); tools failing is the judges' business.
bool execute_run(const RunContext& cx, const Run& run, int index, Trace& t, std::string& err);

}  // namespace urxe::tools::conform
