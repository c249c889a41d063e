// The report of a `urxe conform` run: per scenario the clause, the expectation, what the peer did, the
// verdict and the evidence frames, as text (the terminal), JSON (scripts, CI) and a self-contained HTML page
// (people: the plots of the failing runs are embedded, the slices linked).
#pragma once
#include <span>
#include <string>

#include "tools/conform.h"

namespace urxe::tools::conform {

struct ScenarioResult {
  const Scenario* s = nullptr;
  Finding f;
  std::string slice;  // the run's pcapng slice
  std::string plot;   // the run's SVG (a run with a scenario not passing), or ""
};

// What one run took and how its tools ended (report.json "runs": a slow peer shows here).
struct RunRecord {
  std::string_view id;
  bool peer_is_server = true;
  int64_t ms = 0;
  int local_status = -1, peer_status = -1;
  bool local_timed_out = false, peer_timed_out = false;
};

struct Report {
  size_t pass = 0, fail = 0, inconclusive = 0;
  std::string text, json, html;
};

Report make_report(const Setup& setup, std::span<const ScenarioResult> results,
                   std::span<const RunRecord> runs, const std::string& out_dir);

}  // namespace urxe::tools::conform
