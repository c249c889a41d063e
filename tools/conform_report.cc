// The report of a `urxe conform` run in its three forms (conform_report.h).
#include "tools/conform_report.h"

#include <fstream>
#include <sstream>

#include "tools/json_writer.h"
#include "tools/pcap_plot.h"

namespace urxe::tools::conform {
namespace {

std::string_view verdict_word(Verdict v) {
  return v == Verdict::pass ? "pass" : v == Verdict::fail ? "fail" : "inconclusive";
}

// A path inside the report's directory, as the page links it (relative: the directory can be moved).
std::string relative(const std::string& path, const std::string& dir) {
  const std::string prefix = dir + "/";
  return path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : path;
}

std::string evidence_text(const Finding& f) {
  std::string ev;
  for (uint64_t n : f.evidence) ev += (ev.empty() ? "#" : ", #") + std::to_string(n);
  return ev;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr char kStyle[] =
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}"
    ".pass{background:#dfd}.fail{background:#fcc}.inconclusive{background:#ffd}"
    "figure{margin:1em 0}figcaption{font-weight:bold}";

}  // namespace

Report make_report(const Setup& setup, std::span<const ScenarioResult> results,
                   std::span<const RunRecord> runs, const std::string& out_dir) {
  Report rep;
  JsonWriter w;
  w.begin_object().str("peer", setup.peer_ip).str("peer_dev", setup.peer_dev).str("dev", setup.dev);
  w.begin_array("scenarios");
  std::ostringstream text, rows, figures;
  std::string plotted;  // the runs whose plot is already on the page, one figure per run
  for (const ScenarioResult& r : results) {
    const Scenario& s = *r.s;
    (r.f.verdict == Verdict::pass ? rep.pass : r.f.verdict == Verdict::fail ? rep.fail : rep.inconclusive)++;
    const std::string ev = evidence_text(r.f);
    const bool known = r.f.verdict != Verdict::pass && !s.rxe_note.empty();
    text << s.id << "  " << verdict_name(r.f.verdict) << "\n"
         << "  clause:   " << s.clause << "\n  expect:   " << s.expect << "\n  observed: " << r.f.observed
         << "\n"
         << "  frames:   " << (ev.empty() ? "-" : ev) << " in " << r.slice << "\n";
    if (!r.plot.empty()) text << "  plot:     " << r.plot << "\n";
    if (known) text << "  known:    " << s.rxe_note << "\n";

    w.begin_object()
        .str("id", s.id)
        .str("run", s.run)
        .str("clause", s.clause)
        .str("expect", s.expect)
        .str("verdict", verdict_word(r.f.verdict))
        .str("observed", r.f.observed)
        .str("pcapng", r.slice);
    w.begin_array("frames");
    for (uint64_t n : r.f.evidence) w.num(n);
    w.end_array();
    if (!r.plot.empty()) w.str("plot", r.plot);
    if (!s.rxe_note.empty()) w.str("known_rxe_deviation", s.rxe_note);
    w.end_object();

    const std::string cls(verdict_word(r.f.verdict));
    rows << "<tr class=\"" << cls << "\"><td>" << xml_escape(s.id) << "</td><td>" << xml_escape(cls)
         << "</td><td>" << xml_escape(s.clause) << "</td><td>" << xml_escape(s.expect) << "</td><td>"
         << xml_escape(r.f.observed);
    if (known) rows << "<br><i>known kernel rxe deviation: " << xml_escape(s.rxe_note) << "</i>";
    rows << "</td><td>" << xml_escape(ev.empty() ? "-" : ev) << " in <a href=\""
         << xml_escape(relative(r.slice, out_dir)) << "\">" << xml_escape(s.run) << ".pcapng</a>";
    if (!r.plot.empty()) rows << "<br><a href=\"#plot-" << xml_escape(s.run) << "\">plot</a>";
    rows << "</td></tr>\n";
    if (!r.plot.empty() && plotted.find("|" + std::string(s.run) + "|") == std::string::npos) {
      plotted += "|" + std::string(s.run) + "|";
      figures << "<figure id=\"plot-" << xml_escape(s.run) << "\"><figcaption>run " << xml_escape(s.run)
              << "</figcaption>\n"
              << read_file(r.plot) << "\n</figure>\n";
    }
  }
  w.end_array();
  w.begin_array("runs");
  for (const RunRecord& r : runs)
    w.begin_object()
        .str("id", r.id)
        .boolean("peer_is_server", r.peer_is_server)
        .num("ms", r.ms)
        .num("local_status", int64_t{r.local_status})
        .num("peer_status", int64_t{r.peer_status})
        .boolean("local_timed_out", r.local_timed_out)
        .boolean("peer_timed_out", r.peer_timed_out)
        .end_object();
  w.end_array();
  w.begin_object("summary")
      .num("scenarios", uint64_t{results.size()})
      .num("pass", uint64_t{rep.pass})
      .num("fail", uint64_t{rep.fail})
      .num("inconclusive", uint64_t{rep.inconclusive})
      .end_object();
  w.end_object();
  std::ostringstream summary;
  summary << results.size() << " scenarios: " << rep.pass << " pass, " << rep.fail << " FAIL, "
          << rep.inconclusive << " inconclusive";
  text << summary.str() << " (" << out_dir << ")\n";
  rep.text = text.str();
  rep.json = w.text() + "\n";

  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>urxe conform: "
       << xml_escape(setup.peer_dev) << " at " << xml_escape(setup.peer_ip) << "</title><style>" << kStyle
       << "</style></head><body>\n<h1>urxe conform: " << xml_escape(setup.peer_dev) << " at "
       << xml_escape(setup.peer_ip) << "</h1>\n<p>urxe device " << xml_escape(setup.dev) << ". "
       << xml_escape(summary.str()) << ".</p>\n"
       << "<table><tr><th>scenario</th><th>verdict</th><th>clause</th><th>expected</th><th>observed</th>"
          "<th>frames</th></tr>\n"
       << rows.str() << "</table>\n"
       << figures.str() << "</body></html>\n";
  rep.html = html.str();
  return rep;
}

}  // namespace urxe::tools::conform
