// The fault rule language: parse_fault_rule and format_fault_rule (grammar in fault_rule.h).
#include "wire/fault_rule.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "wire/mad.h"
#include "wire/psn.h"

namespace urxe::wire {

namespace {

constexpr FaultFieldInfo field(std::string_view name, uint16_t header, uint8_t off, uint8_t bytes,
                               uint8_t shift, uint8_t width) {
  return {name, header, off, bytes, shift, width};
}

}  // namespace

// Offsets within each header as IBTA 9.2-9.3 lays them out (wire/headers.cc writes the same).
const std::array<FaultFieldInfo, static_cast<size_t>(FaultField::count)> kFaultFields = {
    field("icrc", 0, 0, 0, 0, 0),
    field("bth.opcode", 0, 0, 1, 0, 8),
    field("bth.se", 0, 1, 1, 7, 1),
    field("bth.migreq", 0, 1, 1, 6, 1),
    field("bth.pad", 0, 1, 1, 4, 2),
    field("bth.tver", 0, 1, 1, 0, 4),
    field("bth.pkey", 0, 2, 2, 0, 16),
    field("bth.destqp", 0, 5, 3, 0, 24),
    field("bth.ackreq", 0, 8, 1, 7, 1),
    field("bth.psn", 0, 9, 3, 0, 24),
    field("reth.va", kReth, 0, 8, 0, 64),
    field("reth.rkey", kReth, 8, 4, 0, 32),
    field("reth.len", kReth, 12, 4, 0, 32),
    field("aeth.syndrome", kAeth, 0, 1, 0, 8),
    field("aeth.msn", kAeth, 1, 3, 0, 24),
    field("atomiceth.va", kAtomicEth, 0, 8, 0, 64),
    field("atomiceth.rkey", kAtomicEth, 8, 4, 0, 32),
    field("atomiceth.swap", kAtomicEth, 12, 8, 0, 64),
    field("atomiceth.compare", kAtomicEth, 20, 8, 0, 64),
    field("atomicacketh.orig", kAtomicAckEth, 0, 8, 0, 64),
    field("deth.qkey", kDeth, 0, 4, 0, 32),
    field("deth.srcqp", kDeth, 5, 3, 0, 24),
    field("xrceth.srqn", kXrceth, 1, 3, 0, 24),
    field("immdt", kImmDt, 0, 4, 0, 32),
    field("ieth.rkey", kIeth, 0, 4, 0, 32),
    field("payload", kFaultPayload, 0, 1, 0, 8),
};

namespace {

constexpr std::string_view kFieldWords[] = {"dir", "qpn", "opcode", "class", "psn"};
constexpr std::string_view kSelectorWords[] = {"skip", "every", "first", "prob", "seed", "after", "for"};
constexpr std::string_view kActionWords[] = {"drop",    "duplicate", "delay",   "reorder",
                                             "corrupt", "ecn-ce",    "truncate"};
constexpr FaultAction kActions[] = {FaultAction::drop,    FaultAction::duplicate, FaultAction::delay,
                                    FaultAction::reorder, FaultAction::corrupt,   FaultAction::ecn_ce,
                                    FaultAction::truncate};

struct ClassName {
  std::string_view name;
  FaultClass cls;
};
constexpr ClassName kClasses[] = {
    {"request", FaultClass::request},
    {"ack", FaultClass::ack},
    {"nak", FaultClass::nak},
    {"rnr-nak", FaultClass::rnr_nak},
    {"read-response", FaultClass::read_response},
    {"atomic", FaultClass::atomic},
    {"atomic-ack", FaultClass::atomic_ack},
    {"cnp", FaultClass::cnp},
    {"cm", FaultClass::cm},
};
struct CmName {
  std::string_view name;
  CmAttr attr;
};
constexpr CmName kCmNames[] = {
    {"req", CmAttr::req}, {"mra", CmAttr::mra},           {"rej", CmAttr::rej},          {"rep", CmAttr::rep},
    {"rtu", CmAttr::rtu}, {"dreq", CmAttr::dreq},         {"drep", CmAttr::drep},        {"lap", CmAttr::lap},
    {"apr", CmAttr::apr}, {"sidr-req", CmAttr::sidr_req}, {"sidr-rep", CmAttr::sidr_rep}};
struct TransportPrefix {
  std::string_view prefix;
  uint8_t base;
};
constexpr TransportPrefix kPrefixes[] = {
    {"rc_", op::kRc}, {"uc_", op::kUc}, {"ud_", op::kUd}, {"xrc_", op::kXrc}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string quoted(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

template <size_t N>
std::string join(const std::string_view (&words)[N]) {
  std::string out;
  for (std::string_view w : words) out += (out.empty() ? "" : " ") + std::string(w);
  return out;
}

std::string field_names() {
  std::string out;
  for (const FaultFieldInfo& f : kFaultFields) out += (out.empty() ? "" : " ") + std::string(f.name);
  return out;
}

// Levenshtein distance, for "did you mean".
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Unsigned decimal or 0x hex, no sign, no overflow.
bool parse_num(std::string_view s, uint64_t& out) {
  uint64_t base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) base = 16, s.remove_prefix(2);
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    uint64_t d;
    if (c >= '0' && c <= '9')
      d = static_cast<uint64_t>(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = static_cast<uint64_t>(c - 'a' + 10);
    else if (base == 16 && c >= 'A' && c <= 'F')
      d = static_cast<uint64_t>(c - 'A' + 10);
    else
      return false;
    if (v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  out = v;
  return true;
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// The table name of the operation with low 5 bits `low`, lower case ("rdma_write_first"), or "" if none.
std::string op_name(uint8_t low) {
  const OpcodeInfo& info = opcode_info(low);  // the RC row: every operation RoCEv2 has, has one
  if (!info.valid() || info.name.size() < 3) return {};
  return lower(info.name.substr(3));
}

std::string_view prefix_of(Transport t) {
  switch (t) {
    case Transport::rc:
      return "rc_";
    case Transport::uc:
      return "uc_";
    case Transport::ud:
      return "ud_";
    case Transport::xrc:
      return "xrc_";
    default:
      return {};
  }
}

std::string format_time(uint64_t ns) {
  if (ns % 1000000000 == 0) return std::to_string(ns / 1000000000) + "s";
  if (ns % 1000000 == 0) return std::to_string(ns / 1000000) + "ms";
  if (ns % 1000 == 0) return std::to_string(ns / 1000) + "us";
  return std::to_string(ns) + "ns";
}

class Parser {
 public:
  explicit Parser(std::string_view text) {
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && is_blank(text[i])) ++i;
      const size_t start = i;
      while (i < text.size() && !is_blank(text[i])) ++i;
      if (i > start) words_.push_back(text.substr(start, i - start));
    }
  }

  FaultParse run() {
    if (words_.empty()) return fail("empty rule: give an action (" + join(kActionWords) + ")");
    std::string err;
    for (pos_ = 0; pos_ < words_.size() && err.empty();) err = word();
    if (err.empty() && r_.action == FaultAction::none) err = "no action (one of: " + join(kActionWords) + ")";
    if (err.empty() && seed_given_ && !r_.has_prob) err = "seed: without prob";
    if (!err.empty()) return fail(err);
    return FaultParse{r_, {}};
  }

 private:
  static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static FaultParse fail(std::string e) { return FaultParse{std::nullopt, std::move(e)}; }

  // The next word as the value of `key`; false (with `err`) when the rule ends.
  bool value(std::string_view key, std::string_view what, std::string_view& out, std::string& err) {
    if (pos_ >= words_.size()) {
      err = std::string(key) + ": needs " + std::string(what);
      return false;
    }
    out = words_[pos_++];
    return true;
  }
  bool number(std::string_view key, uint64_t lo, uint64_t hi, uint64_t& out, std::string& err) {
    std::string_view w;
    if (!value(key, "a number", w, err)) return false;
    return check_number(key, w, lo, hi, out, err);
  }
  static bool check_number(std::string_view key, std::string_view w, uint64_t lo, uint64_t hi, uint64_t& out,
                           std::string& err) {
    if (!parse_num(w, out)) {
      err = std::string(key) + ": " + quoted(w) + " is not a number";
      return false;
    }
    if (out < lo || out > hi) {
      err = std::string(key) + ": " + std::string(w) + " is not in " + std::to_string(lo) + ".." +
            (hi > 0xffff ? hex(hi) : std::to_string(hi));
      return false;
    }
    return true;
  }
  bool once(std::string_view key, bool& seen, std::string& err) {
    if (seen) err = std::string(key) + ": given twice";
    seen = true;
    return err.empty();
  }

  std::string word() {
    const std::string_view orig = words_[pos_++];
    const std::string w = lower(orig);
    std::string err;
    for (size_t i = 0; i < std::size(kActionWords); ++i)
      if (w == kActionWords[i]) return action(kActions[i], orig);
    uint64_t n = 0;
    if (w == "dir") {
      std::string_view v;
      if (!once("dir", seen_dir_, err) || !value("dir", "tx or rx", v, err)) return err;
      const std::string lv = lower(v);
      if (lv != "tx" && lv != "rx") return "dir: " + quoted(v) + " is not tx or rx";
      r_.has_dir = true;
      r_.dir = lv == "tx" ? FaultDir::tx : FaultDir::rx;
    } else if (w == "qpn") {
      if (!once("qpn", r_.has_qpn, err) || !number("qpn", 0, kPsnMask, n, err)) return err;
      r_.qpn = static_cast<uint32_t>(n);
    } else if (w == "opcode") {
      std::string_view v;
      if (!once("opcode", seen_opcode_, err) || !value("opcode", "a name or number", v, err)) return err;
      return opcode(v);
    } else if (w == "class") {
      std::string_view v;
      if (!once("class", seen_class_, err) || !value("class", "a class", v, err)) return err;
      return cls(v);
    } else if (w == "psn") {
      std::string_view v;
      if (!once("psn", seen_psn_, err) || !value("psn", "a PSN, range or +offset", v, err)) return err;
      return psn(v);
    } else if (w == "skip") {
      if (!once("skip", seen_skip_, err) || !number("skip", 0, UINT32_MAX, n, err)) return err;
      r_.skip = static_cast<uint32_t>(n);
    } else if (w == "every") {
      if (!once("every", seen_every_, err) || !number("every", 1, UINT32_MAX, n, err)) return err;
      r_.every = static_cast<uint32_t>(n);
    } else if (w == "first") {
      if (!once("first", seen_first_, err) || !number("first", 1, UINT32_MAX, n, err)) return err;
      r_.first = static_cast<uint32_t>(n);
    } else if (w == "prob") {
      std::string_view v;
      if (!once("prob", r_.has_prob, err) || !value("prob", "a probability from 0 to 1", v, err)) return err;
      return prob(v);
    } else if (w == "seed") {
      if (!once("seed", seed_given_, err) || !number("seed", 0, UINT64_MAX, n, err)) return err;
      r_.seed = n;
    } else if (w == "after" || w == "for") {
      std::string_view v;
      const bool after = w == "after";
      if (!once(w, after ? seen_after_ : seen_for_, err) || !value(w, "a time (e.g. 200ms, 1s)", v, err))
        return err;
      return time(w, v, kFaultMaxWindowNs, after ? r_.after_ns : r_.for_ns);
    } else {
      return unknown(orig, w);
    }
    return {};
  }

  std::string unknown(std::string_view orig, const std::string& w) {
    std::string_view best;
    size_t best_d = 3;
    bool is_action = false;
    auto consider = [&](std::string_view cand, bool act) {
      const size_t d = distance(w, cand);
      if (d < best_d) best_d = d, best = cand, is_action = act;
    };
    for (std::string_view c : kActionWords) consider(c, true);
    for (std::string_view c : kFieldWords) consider(c, false);
    for (std::string_view c : kSelectorWords) consider(c, false);
    if (!best.empty() && w.size() > 2)
      return std::string(is_action ? "unknown action " : "unknown word ") + quoted(orig) + " (did you mean " +
             std::string(best) + "?)";
    return "unknown word " + quoted(orig) + " (fields: " + join(kFieldWords) +
           "; selectors: " + join(kSelectorWords) + "; actions: " + join(kActionWords) + ")";
  }

  std::string action(FaultAction a, std::string_view orig) {
    const std::string name = lower(orig);
    if (r_.action != FaultAction::none) return "two actions: " + action_word_ + " and " + name;
    r_.action = a;
    action_word_ = name;
    std::string err;
    uint64_t n = 0;
    switch (a) {
      case FaultAction::duplicate:
        r_.count = 1;
        if (pos_ < words_.size() && !words_[pos_].empty() && words_[pos_][0] >= '0' &&
            words_[pos_][0] <= '9') {
          if (!number("duplicate", 1, kFaultMaxDuplicate, n, err)) return err;
          r_.count = static_cast<uint32_t>(n);
        }
        break;
      case FaultAction::reorder:
        if (!number("reorder", 1, kFaultMaxReorder, n, err)) return err;
        r_.count = static_cast<uint32_t>(n);
        break;
      case FaultAction::truncate:
        if (!number("truncate", 1, 0xffff, n, err)) return err;
        r_.count = static_cast<uint32_t>(n);
        break;
      case FaultAction::delay: {
        std::string_view v;
        if (!value("delay", "a time (e.g. 250us, 2ms)", v, err)) return err;
        return time("delay", v, kFaultMaxDelayNs, r_.delay_ns);
      }
      case FaultAction::corrupt: {
        std::string_view v;
        if (!value("corrupt", "icrc or a field (" + field_names() + ")", v, err)) return err;
        return corrupt(v);
      }
      default:
        break;
    }
    return {};
  }

  // A TIME for `key` (delay, after, for): a whole number with a unit, 1ns..max.
  std::string time(std::string_view key, std::string_view v, uint64_t max, uint64_t& out) {
    size_t digits = 0;
    while (digits < v.size() && v[digits] >= '0' && v[digits] <= '9') ++digits;
    const std::string unit = lower(v.substr(digits));
    uint64_t mult = 0;
    if (unit == "ns") mult = 1;
    if (unit == "us") mult = 1000;
    if (unit == "ms") mult = 1000000;
    if (unit == "s") mult = 1000000000;
    uint64_t n = 0;
    const std::string k(key);
    if (digits == 0 || mult == 0 || !parse_num(v.substr(0, digits), n))
      return k + ": " + quoted(v) + " is not a whole number with a unit (ns, us, ms, s)";
    if (n == 0 || n > max / mult) return k + ": " + std::string(v) + " is not in 1ns.." + format_time(max);
    out = n * mult;
    return {};
  }

  std::string corrupt(std::string_view v) {
    const size_t eq = v.find('=');
    const std::string name = lower(v.substr(0, eq));
    for (size_t i = 0; i < kFaultFields.size(); ++i) {
      const FaultFieldInfo& f = kFaultFields[i];
      if (name != f.name) continue;
      r_.field = static_cast<FaultField>(i);
      if (eq == std::string_view::npos) return {};
      if (r_.field == FaultField::icrc) return "corrupt: icrc takes no value (it is made wrong)";
      const std::string_view val = v.substr(eq + 1);
      if (!parse_num(val, r_.value)) return "corrupt: " + quoted(val) + " is not a number";
      if (f.width < 64 && (r_.value >> f.width) != 0)
        return "corrupt: " + std::string(val) + " does not fit " + std::string(f.name) + " (" +
               std::to_string(f.width) + " bits)";
      r_.has_value = true;
      return {};
    }
    return "corrupt: no field " + quoted(v.substr(0, eq)) + " (fields: " + field_names() + ")";
  }

  std::string opcode(std::string_view v) {
    uint64_t n = 0;
    if (!v.empty() && v[0] >= '0' && v[0] <= '9') {
      std::string err;
      if (!check_number("opcode", v, 0, 255, n, err)) return err;
      r_.opcode_match = FaultOpcode::exact;
      r_.opcode = static_cast<uint8_t>(n);
      return {};
    }
    std::string w = lower(v);
    std::replace(w.begin(), w.end(), '-', '_');
    if (w == "cnp") {
      r_.opcode_match = FaultOpcode::exact;
      r_.opcode = op::cnp;
      return {};
    }
    int base = -1;
    for (const TransportPrefix& p : kPrefixes)
      if (w.starts_with(p.prefix)) base = p.base, w.erase(0, p.prefix.size());
    if (w.starts_with("write_") || w.starts_with("read_")) w.insert(0, "rdma_");
    if (w.ends_with("_imm")) w.replace(w.size() - 4, 4, "_with_immediate");
    if (w.ends_with("_inv")) w.replace(w.size() - 4, 4, "_with_invalidate");
    for (uint8_t low = 0; low < 0x20; ++low) {
      if (op_name(low) != w) continue;
      if (base < 0) {
        r_.opcode_match = FaultOpcode::any_transport;
        r_.opcode = low;
        return {};
      }
      const uint8_t code = make_opcode(static_cast<uint8_t>(base), low);
      if (!opcode_info(code).valid())
        return "opcode: " + quoted(v) + " does not exist (that transport lacks it)";
      r_.opcode_match = FaultOpcode::exact;
      r_.opcode = code;
      return {};
    }
    return "opcode: no opcode " + quoted(v) +
           " (a name such as send_only, rdma_write_first, acknowledge, cnp, " +
           "with an optional rc_/uc_/ud_/xrc_ prefix, or a number)";
  }

  std::string cls(std::string_view v) {
    const std::string w = lower(v);
    const size_t colon = w.find(':');
    const std::string name = w.substr(0, colon);
    for (const ClassName& c : kClasses) {
      if (name != c.name) continue;
      r_.cls = c.cls;
      if (colon == std::string::npos) return {};
      if (c.cls != FaultClass::cm) return "class: " + name + " takes no :TYPE (only cm does)";
      const std::string type = w.substr(colon + 1);
      for (const CmName& m : kCmNames)
        if (type == m.name) {
          r_.cm_attr = static_cast<uint16_t>(m.attr);
          return {};
        }
      return "class: no CM message " + quoted(v.substr(colon + 1)) +
             " (req mra rej rep rtu dreq drep lap apr sidr-req sidr-rep)";
    }
    std::string all;
    for (const ClassName& c : kClasses) all += (all.empty() ? "" : " ") + std::string(c.name);
    return "class: no class " + quoted(v) + " (" + all + ", cm:TYPE)";
  }

  std::string psn(std::string_view v) {
    std::string_view s = v;
    const bool rel = s.starts_with('+');
    if (rel) s.remove_prefix(1);
    const size_t dash = s.find('-');
    std::string_view a = s.substr(0, dash), b = dash == std::string_view::npos ? a : s.substr(dash + 1);
    if (rel && b.starts_with('+')) b.remove_prefix(1);
    uint64_t lo = 0, hi = 0;
    if (!parse_num(a, lo) || !parse_num(b, hi))
      return "psn: " + quoted(v) + " is not a PSN, a range A-B or an offset +N";
    if (lo > kPsnMask || hi > kPsnMask) return "psn: " + std::string(v) + " is more than 24 bits";
    if (rel && lo > hi) return "psn: " + std::string(v) + " ends before it starts";
    r_.psn_match = rel ? FaultPsn::relative : FaultPsn::absolute;
    r_.psn_lo = static_cast<uint32_t>(lo);
    r_.psn_hi = static_cast<uint32_t>(hi);
    return {};
  }

  std::string prob(std::string_view v) {
    const size_t dot = v.find('.');
    const std::string_view whole = v.substr(0, dot),
                           frac = dot == std::string_view::npos ? "" : v.substr(dot + 1);
    const auto digits = [](std::string_view s) {
      return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if ((whole.empty() && frac.empty()) || !digits(whole) || !digits(frac) || whole.size() > 9 ||
        (dot != std::string_view::npos && frac.empty()))
      return "prob: " + quoted(v) + " is not a decimal number";
    if (frac.size() > 9) return "prob: " + std::string(v) + " has more than 9 decimals";
    uint64_t w = 0, f = 0;
    if (!whole.empty()) parse_num(whole, w);
    for (size_t i = 0; i < 9; ++i) f = f * 10 + (i < frac.size() ? static_cast<uint64_t>(frac[i] - '0') : 0);
    const uint64_t ppb = w * kFaultProbOne + f;
    if (ppb > kFaultProbOne) return "prob: " + std::string(v) + " is not between 0 and 1";
    r_.prob = static_cast<uint32_t>(ppb);
    return {};
  }

  std::vector<std::string_view> words_;
  size_t pos_ = 0;
  FaultRule r_;
  std::string action_word_;
  bool seen_dir_ = false, seen_opcode_ = false, seen_class_ = false, seen_psn_ = false, seen_skip_ = false,
       seen_every_ = false, seen_first_ = false, seed_given_ = false, seen_after_ = false, seen_for_ = false;
};

std::string format_opcode(const FaultRule& r) {
  if (r.opcode_match == FaultOpcode::any_transport) return op_name(r.opcode & 0x1f);
  const OpcodeInfo& info = opcode_info(r.opcode);
  if (info.transport == Transport::cnp) return "cnp";
  if (!info.valid()) return "0x" + std::string(r.opcode < 16 ? "0" : "") + hex(r.opcode).substr(2);
  return std::string(prefix_of(info.transport)) + op_name(r.opcode & 0x1f);
}

std::string format_prob(uint32_t ppb) {
  if (ppb >= kFaultProbOne) return "1";
  if (ppb == 0) return "0";
  char b[16];
  std::snprintf(b, sizeof b, "0.%09u", ppb);
  std::string s(b);
  while (s.back() == '0') s.pop_back();
  return s;
}

}  // namespace

FaultParse parse_fault_rule(std::string_view text) {
  return Parser(text).run();
}

std::string_view fault_action_name(FaultAction a) {
  for (size_t i = 0; i < std::size(kActions); i++)
    if (kActions[i] == a) return kActionWords[i];
  return {};
}

std::string format_fault_rule(const FaultRule& r) {
  std::string out;
  const auto put = [&out](std::string_view a, const std::string& b = {}) {
    if (!out.empty()) out += ' ';
    out += a;
    if (!b.empty()) out += " " + b;
  };
  if (r.has_dir) put("dir", r.dir == FaultDir::tx ? "tx" : "rx");
  if (r.has_qpn) put("qpn", hex(r.qpn));
  if (r.opcode_match != FaultOpcode::none) put("opcode", format_opcode(r));
  if (r.cls != FaultClass::any) {
    std::string c;
    for (const ClassName& n : kClasses)
      if (n.cls == r.cls) c = n.name;
    for (const CmName& m : kCmNames)
      if (r.cls == FaultClass::cm && r.cm_attr == static_cast<uint16_t>(m.attr))
        c += ":" + std::string(m.name);
    put("class", c);
  }
  if (r.psn_match != FaultPsn::none) {
    std::string p = (r.psn_match == FaultPsn::relative ? "+" : "") + std::to_string(r.psn_lo);
    if (r.psn_hi != r.psn_lo) p += "-" + std::to_string(r.psn_hi);
    put("psn", p);
  }
  if (r.after_ns) put("after", format_time(r.after_ns));
  if (r.for_ns) put("for", format_time(r.for_ns));
  if (r.skip) put("skip", std::to_string(r.skip));
  if (r.every) put("every", std::to_string(r.every));
  if (r.has_prob) put("prob", format_prob(r.prob) + " seed " + std::to_string(r.seed));
  if (r.first) put("first", std::to_string(r.first));
  switch (r.action) {
    case FaultAction::drop:
      put("drop");
      break;
    case FaultAction::duplicate:
      put("duplicate", r.count == 1 ? std::string() : std::to_string(r.count));
      break;
    case FaultAction::delay:
      put("delay", format_time(r.delay_ns));
      break;
    case FaultAction::reorder:
      put("reorder", std::to_string(r.count));
      break;
    case FaultAction::corrupt: {
      const FaultFieldInfo& f = kFaultFields[static_cast<size_t>(r.field)];
      put("corrupt", std::string(f.name) + (r.has_value ? "=" + hex(r.value) : std::string()));
      break;
    }
    case FaultAction::ecn_ce:
      put("ecn-ce");
      break;
    case FaultAction::truncate:
      put("truncate", std::to_string(r.count));
      break;
    case FaultAction::none:
      break;
  }
  return out;
}

}  // namespace urxe::wire
