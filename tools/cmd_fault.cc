// `urxe fault add|list|del|clear`: a device's fault rules (the language of wire/fault_rule.h), kept in the
// device tree (provider/fault_rules.h) and taken by every process that has the device open within about
// 100 ms; `list` shows each rule's counters summed over those processes and the ones that closed
// (provider/stats.h).
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "provider/device_tree.h"
#include "provider/fault_rules.h"
#include "provider/stats.h"
#include "tools/command.h"
#include "tools/json_writer.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

constexpr char kDescription[] =
    "urxe fault - fault injection rules of a device: drop, duplicate, delay, reorder, corrupt, mark or\n"
    "truncate chosen RoCE frames, in every process that has the device open (within ~100 ms of a change)";

constexpr char kEpilog[] =
    "examples:\n"
    "  urxe fault add urxe0 dir tx opcode send_only every 10 drop\n"
    "  urxe fault list urxe0\n"
    "  urxe fault clear urxe0\n";

constexpr char kAddUsage[] =
    "usage: urxe fault add DEV RULE...\n"
    "Add a fault rule to the device DEV: the RULE words (or one quoted string) in the language below. Every\n"
    "process that has DEV open applies it within about 100 ms, and processes that open DEV later from the\n"
    "start. Rules get ids 1, 2, ... in the order added, never reused on the device ('clear' included), so "
    "an\n"
    "id and its counters always name one rule. A device takes at most 32 rules. Needs write access to the\n"
    "device tree (root, as 'urxe link add').\n"
    "\n"
    "A rule: fields (all ANDed), selectors, and exactly one action, as words in any order:\n"
    "  dir tx|rx                  frames the device sends | receives\n"
    "  qpn N                      BTH destination QP\n"
    "  opcode NAME|N              send_only, rdma_write_first, acknowledge, ... (rc_ uc_ ud_ xrc_: one\n"
    "                             transport), or a number 0..255\n"
    "  class C                    request ack nak rnr-nak read-response atomic atomic-ack cnp cm[:TYPE]\n"
    "  psn [+]N[-M]               BTH PSN or range; '+': from the first PSN the rule saw on the QP\n"
    "  skip N, every N, first N   ignore the first N matches; take every N-th; stop after N hits\n"
    "  prob P [seed N]            keep each match with probability P (0..1), reproducibly\n"
    "  after TIME, for TIME       only matches from TIME after the rule's first match, for TIME\n"
    "  drop | duplicate [N] | delay TIME (250us, 2ms) | reorder N (held until N later frames passed)\n"
    "  corrupt icrc | corrupt FIELD[=VALUE] (bth_psn, reth_rkey, aeth_syndrome, payload, ...)\n"
    "  ecn-ce | truncate N\n"
    "The whole grammar: wire/README.md (wire/fault_rule.h). The rule is stored in its canonical form.\n"
    "\n"
    "examples:\n"
    "  urxe fault add urxe0 dir tx opcode send_only every 10 drop\n"
    "  urxe fault add urxe0 'dir rx class ack prob 0.05 seed 7 delay 2ms'\n"
    "  urxe fault add urxe0 'dir rx class request after 300ms for 200ms every 4 ecn-ce'\n"
    "  urxe fault add urxe0 qpn 0x11 psn +3 first 1 corrupt icrc\n"
    "\n"
    "exit status: 0 added (its id printed), 1 no such device, the device has 32 rules, or the rules file\n"
    "cannot be written, 2 usage error or a malformed rule (the message names the bad word; nothing "
    "changes)\n";

constexpr char kListUsage[] =
    "usage: urxe fault list [DEV] [--json]\n"
    "The fault rules of DEV (default: every device of $URXE_RUN_DIR), in the order they apply, each with "
    "its\n"
    "id and HITS: the frames its selectors picked, summed over the processes that have DEV open and those\n"
    "that closed it (only the first rule that hits a frame applies its action; 'urxe stats' shows matched,\n"
    "hits and applied).\n"
    "\n"
    "  --json   one JSON object per device and line: {\"device\": DEV, \"generation\": N, \"rules\": "
    "[{\"id\",\n"
    "           \"rule\", \"matched\", \"hits\", \"applied\"}, ...]}\n"
    "\n"
    "examples:\n"
    "  urxe fault list urxe0\n"
    "  urxe fault list urxe0 --json | jq '.rules[].hits'\n"
    "\n"
    "exit status: 0, 1 no such device or its rules file unreadable, 2 usage error\n";

constexpr char kDelUsage[] =
    "usage: urxe fault del DEV ID\n"
    "Remove the fault rule ID ('urxe fault list' shows the ids) from DEV; processes that have DEV open stop\n"
    "applying it within about 100 ms. The other rules keep their ids.\n"
    "\n"
    "examples:\n"
    "  urxe fault del urxe0 2\n"
    "\n"
    "exit status: 0 removed, 1 no such device or rule, or the rules file cannot be written, 2 usage error\n";

constexpr char kClearUsage[] =
    "usage: urxe fault clear DEV\n"
    "Remove every fault rule of DEV. Ids are not reused afterwards: the next rule added gets the next id.\n"
    "\n"
    "examples:\n"
    "  urxe fault clear urxe0\n"
    "\n"
    "exit status: 0 cleared, 1 no such device or the rules file cannot be written, 2 usage error\n";

static_assert(wire::kFaultTableSize == 32, "kAddUsage and 'link add --fault' name the table size");

// The device called `name`, or false after saying so on stderr.
bool find_device(const char* prog, const std::string& name, prov::DeviceInfo& out) {
  const prov::Paths paths = prov::Paths::from_env();
  for (prov::DeviceInfo& d : prov::list_devices(paths)) {
    if (d.config.name == name) {
      out = std::move(d);
      return true;
    }
  }
  std::fprintf(stderr, "%s: no urxe device '%s' in %s ('urxe link show' lists them)\n", prog, name.c_str(),
               paths.sysfs().c_str());
  return false;
}

std::string write_hint(const std::string& err) {
  if (err.find("ermission denied") != std::string::npos || err.find("ead-only") != std::string::npos)
    return " (run it as root: the device tree in $URXE_RUN_DIR belongs to whoever made the device)";
  return "";
}

// The words of a command that takes no options: -h/--help/help anywhere is help, any other word that
// starts with '-' an unknown option.
int check_words(const char* prog, Args args, const char* usage, size_t min, size_t max, bool* help) {
  *help = false;
  for (std::string_view a : args)
    if (is_help(a)) {
      *help = true;
      return print_help(usage);
    }
  for (std::string_view a : args)
    if (a.size() > 1 && a[0] == '-')
      return usage_error(prog, "unknown option '" + std::string(a) + "' (this command takes none)", usage);
  if (args.size() < min || args.size() > max)
    return usage_error(prog, min == max && min == 1 ? "expected DEV" : "expected DEV and ID", usage);
  return 0;
}

int add_main(Args args) {
  constexpr const char* prog = "urxe fault add";
  for (std::string_view a : args)
    if (is_help(a)) return print_help(kAddUsage);
  if (args.size() < 2) return usage_error(prog, "expected DEV RULE...", kAddUsage);
  std::string text;
  for (std::string_view a : args.subspan(1)) text += (text.empty() ? "" : " ") + std::string(a);
  const wire::FaultParse parsed = wire::parse_fault_rule(text);
  if (!parsed)
    return usage_error(prog, "bad rule '" + text + "': " + parsed.error + " ('urxe fault add --help')");
  prov::DeviceInfo dev;
  if (!find_device(prog, std::string(args[0]), dev)) return 1;
  uint32_t id = 0;
  std::string err;
  const bool ok = prov::update_fault_rules(
      dev.ibdev_path,
      [&](prov::FaultRuleSet& set, std::string& e) {
        if (set.rules.size() >= wire::kFaultTableSize) {
          e = dev.config.name + " has " + std::to_string(set.rules.size()) +
              " fault rules, the most a device takes ('urxe fault del' or 'urxe fault clear' first)";
          return false;
        }
        id = set.next_id++;
        set.rules.emplace_back(id, *parsed.rule);
        return true;
      },
      err);
  if (!ok) {
    std::fprintf(stderr, "%s: %s%s\n", prog, err.c_str(), write_hint(err).c_str());
    return 1;
  }
  std::printf("%s: rule %u: %s\n", dev.config.name.c_str(), id,
              wire::format_fault_rule(*parsed.rule).c_str());
  return 0;
}

int del_main(Args args) {
  constexpr const char* prog = "urxe fault del";
  bool help = false;
  if (const int rc = check_words(prog, args, kDelUsage, 2, 2, &help); rc || help) return rc;
  uint32_t id = 0;
  const std::string_view w = args[1];
  const auto r = std::from_chars(w.data(), w.data() + w.size(), id);
  if (r.ec != std::errc() || r.ptr != w.data() + w.size() || id == 0)
    return usage_error(prog, "ID '" + std::string(w) + "' is not a rule id (1, 2, ...: 'urxe fault list')");
  prov::DeviceInfo dev;
  if (!find_device(prog, std::string(args[0]), dev)) return 1;
  std::string err;
  const bool ok = prov::update_fault_rules(
      dev.ibdev_path,
      [&](prov::FaultRuleSet& set, std::string& e) {
        for (auto it = set.rules.begin(); it != set.rules.end(); ++it)
          if (it->first == id) {
            set.rules.erase(it);
            return true;
          }
        e = "no rule " + std::to_string(id) + " on " + dev.config.name + " ('urxe fault list " +
            dev.config.name + "' lists them)";
        return false;
      },
      err);
  if (!ok) {
    std::fprintf(stderr, "%s: %s%s\n", prog, err.c_str(), write_hint(err).c_str());
    return 1;
  }
  return 0;
}

int clear_main(Args args) {
  constexpr const char* prog = "urxe fault clear";
  bool help = false;
  if (const int rc = check_words(prog, args, kClearUsage, 1, 1, &help); rc || help) return rc;
  prov::DeviceInfo dev;
  if (!find_device(prog, std::string(args[0]), dev)) return 1;
  std::string err;
  if (!prov::update_fault_rules(
          dev.ibdev_path,
          [](prov::FaultRuleSet& set, std::string&) {
            set.rules.clear();
            return true;
          },
          err)) {
    std::fprintf(stderr, "%s: %s%s\n", prog, err.c_str(), write_hint(err).c_str());
    return 1;
  }
  return 0;
}

int list_main(Args args) {
  constexpr const char* prog = "urxe fault list";
  static constexpr Option kOptions[] = {{"json"}};
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kListUsage);
  bool json = false;
  std::string name;
  for (Token t; (t = opts.next());) {
    if (t.kind == Token::option) {
      json = true;
    } else if (t.kind != Token::operand) {
      return usage_error(prog, "unknown option '" + std::string(t.word) + "' (valid: " + opts.valid() + ")");
    } else if (name.empty()) {
      name = t.word;
    } else {
      return usage_error(prog, "more than one device name");
    }
  }
  std::vector<prov::DeviceInfo> devs;
  if (name.empty()) {
    devs = prov::list_devices(prov::Paths::from_env());
  } else {
    devs.emplace_back();
    if (!find_device(prog, name, devs.back())) return 1;
  }
  int rc = 0;
  for (const prov::DeviceInfo& d : devs) {
    prov::FaultRuleSet set;
    std::string err;
    if (!prov::read_fault_rules(d.ibdev_path, set, err)) {
      std::fprintf(stderr, "%s: %s: %s\n", prog, d.config.name.c_str(), err.c_str());
      rc = 1;
      continue;
    }
    prov::DeviceCounters dc;
    prov::read_device_counters(d.ibdev_path, true, dc, err);  // no counters: zeros
    if (json) {
      JsonWriter w;
      w.begin_object().str("device", d.config.name).num("generation", set.generation).begin_array("rules");
      for (const auto& [id, rule] : set.rules) {
        const prov::FaultRuleCounters c = prov::fault_counters_of(dc.faults, id);
        w.begin_object()
            .num("id", id)
            .str("rule", wire::format_fault_rule(rule))
            .num("matched", c.matched)
            .num("hits", c.hits)
            .num("applied", c.applied)
            .end_object();
      }
      w.end_array().end_object();
      std::printf("%s\n", w.text().c_str());
      continue;
    }
    if (set.rules.empty()) {
      std::printf("%s: no fault rules\n", d.config.name.c_str());
      continue;
    }
    std::printf("%s: %zu fault rule%s\n  %4s %12s  %s\n", d.config.name.c_str(), set.rules.size(),
                set.rules.size() == 1 ? "" : "s", "ID", "HITS", "RULE");
    for (const auto& [id, rule] : set.rules)
      std::printf("  %4u %12llu  %s\n", id,
                  static_cast<unsigned long long>(prov::fault_counters_of(dc.faults, id).hits),
                  wire::format_fault_rule(rule).c_str());
  }
  return rc;
}

constexpr Command kCommands[] = {
    {"add", "add a rule (urxe fault add urxe0 dir tx opcode send_only every 10 drop)", add_main},
    {"list", "the rules with their ids and hits; --json", list_main},
    {"del", "remove one rule by id", del_main},
    {"clear", "remove every rule", clear_main},
};

}  // namespace

int fault_main(Args args) {
  return dispatch("urxe fault", kDescription, kCommands, args, kEpilog);
}

}  // namespace urxe::tools
