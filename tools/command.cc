#include "tools/command.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace urxe::tools {

bool is_help(std::string_view a) {
  return a == "-h" || a == "--help" || a == "help";
}

int print_help(const char* usage) {
  std::fputs(usage, stdout);
  return 0;
}

int usage_error(std::string_view prog, std::string_view message, const char* usage) {
  std::fprintf(stderr, "%.*s: %.*s\n%s", static_cast<int>(prog.size()), prog.data(),
               static_cast<int>(message.size()), message.data(), usage ? usage : "");
  return kExitUsage;
}

namespace {
// Long options return kLongBase + their index, so -LETTER and --NAME of one Option come back apart and a
// missing value (':' with optopt) still names its option.
constexpr int kLongBase = 256;
}  // namespace

OptionParser::OptionParser(Args args, std::span<const Option> options, ParseMode mode)
    : args_(args),
      options_(options),
      first_(std::min(mode.leading, args.size())),
      stop_(mode.stop_at_operand),
      rest_(args.size()) {
  for (std::string_view a : args) {
    if (is_help(a)) {
      help_ = true;
      break;
    }
    if (stop_ && (a == "--" || a.size() < 2 || a[0] != '-')) break;
  }
  words_.emplace_back("urxe");
  for (std::string_view a : args.subspan(first_)) words_.emplace_back(a);
  for (std::string& w : words_) argv_.push_back(w.data());
  argv_.push_back(nullptr);
  // '+': stop at the first operand; '-': return operands in order (code 1); ':': ':' for a missing value.
  short_ = stop_ ? "+:" : "-:";
  for (const Option& o : options) names_.emplace_back(o.name);
  for (size_t i = 0; i < options.size(); ++i) {
    const int has = options[i].value == Option::required   ? required_argument
                    : options[i].value == Option::optional ? optional_argument
                                                           : no_argument;
    long_.push_back({names_[i].c_str(), has, nullptr, kLongBase + static_cast<int>(i)});
    if (options[i].letter) {
      short_ += options[i].letter;
      if (options[i].value != Option::none) short_ += options[i].value == Option::required ? ":" : "::";
    }
  }
  long_.push_back({nullptr, 0, nullptr, 0});
  opterr = 0;  // the messages are the command's
  optind = 0;  // glibc: start afresh
}

const Option* OptionParser::find(int code) const {
  if (code >= kLongBase && code < kLongBase + static_cast<int>(options_.size()))
    return &options_[static_cast<size_t>(code - kLongBase)];
  for (const Option& o : options_)
    if (o.letter && o.letter == code) return &o;
  return nullptr;
}

// optarg points into words_; the caller gets the same text in its own arguments, which outlive us.
std::string_view OptionParser::in_args(const char* p) const {
  for (size_t i = 1; i < words_.size(); ++i) {
    const char* w = words_[i].c_str();
    if (p >= w && p <= w + words_[i].size())
      return arg(static_cast<int>(i)).substr(static_cast<size_t>(p - w));
  }
  return {};
}

Token OptionParser::next() {
  if (done_) return {};
  const int argc = static_cast<int>(words_.size());
  const int at = optind == 0 ? 1 : optind;  // the word getopt_long reads next
  const std::string_view word = at < argc ? arg(at) : std::string_view();
  optarg = nullptr;
  const int c = getopt_long(argc, argv_.data(), short_.c_str(), long_.data(), nullptr);
  if (c == -1) {
    done_ = true;
    rest_ = first_ + static_cast<size_t>(std::min(optind, argc) - 1);
    // getopt_long ends at "--"; a command that takes no command line after it has no use for one.
    if (!stop_ && word == "--" && at < argc) return {.kind = Token::unknown, .word = word};
    return {};
  }
  if (c == 1) return {.kind = Token::operand, .word = word};
  const Option* opt = find(c == ':' ? optopt : c);
  bool whole = false;
  if (opt && word.starts_with("--")) {
    whole = word.substr(0, word.find('=')).substr(2) == opt->name;
  } else if (opt) {
    // -LETTER on its own (or with its value attached); optind stays on a word it has not finished.
    whole = optind != at && word.size() >= 2 && word[1] == opt->letter &&
            (word.size() == 2 || opt->value != Option::none);
  }
  if (!whole) {
    done_ = true;
    return {.kind = Token::unknown, .word = word};
  }
  if (c == ':') {
    done_ = true;
    return {.kind = Token::missing_value, .opt = opt, .word = word};
  }
  Token t{.kind = Token::option, .opt = opt, .word = word};
  if (optarg) {
    t.value = in_args(optarg);
  } else if (opt->value == Option::optional && opt->takes && optind < argc && opt->takes(arg(optind))) {
    t.value = arg(optind);
    ++optind;
  }
  return t;
}

std::string OptionParser::valid() const {
  std::string s;
  for (const Option& o : options_) s += (s.empty() ? "--" : ", --") + std::string(o.name);
  return s;
}

namespace {
void print_list(FILE* to, std::string_view prog, std::string_view description,
                std::span<const Command> commands, std::string_view epilog) {
  std::fprintf(to, "usage: %.*s COMMAND [ARGS...]\n%.*s\n\ncommands:\n", static_cast<int>(prog.size()),
               prog.data(), static_cast<int>(description.size()), description.data());
  size_t w = 0;
  for (const Command& c : commands) w = std::max(w, c.name.size());
  for (const Command& c : commands) {
    std::fprintf(to, "  %-*.*s  %.*s\n", static_cast<int>(w), static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::fprintf(to, "\n'%.*s COMMAND --help' describes a command.\n", static_cast<int>(prog.size()),
               prog.data());
  if (!epilog.empty()) std::fprintf(to, "\n%.*s", static_cast<int>(epilog.size()), epilog.data());
}
}  // namespace

int dispatch(std::string_view prog, std::string_view description, std::span<const Command> commands,
             Args args, std::string_view epilog) {
  if (args.empty()) {
    print_list(stderr, prog, description, commands, epilog);
    return kExitUsage;
  }
  if (is_help(args[0])) {
    print_list(stdout, prog, description, commands, epilog);
    return 0;
  }
  for (const Command& c : commands) {
    if (c.name == args[0]) return c.run(args.subspan(1));
  }
  std::string valid;
  for (const Command& c : commands) {
    if (!valid.empty()) valid += ", ";
    valid += c.name;
  }
  std::fprintf(stderr, "%.*s: unknown command '%.*s' (valid: %s)\n", static_cast<int>(prog.size()),
               prog.data(), static_cast<int>(args[0].size()), args[0].data(), valid.c_str());
  return kExitUsage;
}

}  // namespace urxe::tools
