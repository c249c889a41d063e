// tools/command.h's OptionParser on its own: the rules every urxe command's options follow.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/command.h"

namespace urxe::tools {
namespace {

bool is_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

constexpr Option kOptions[] = {{"json"},
                               {"processes", Option::none, 'p'},
                               {"count", Option::required},
                               {"count-all"},
                               {"watch", Option::optional, 0, is_digits}};

// Every token as one line: "opt NAME[=VALUE]", "arg WORD", "unknown WORD", "missing NAME WORD".
std::vector<std::string> parse(std::vector<std::string_view> words, ParseMode mode = {},
                               std::vector<std::string>* rest = nullptr) {
  std::vector<std::string> out;
  OptionParser p(words, kOptions, mode);
  for (Token t; (t = p.next());) {
    switch (t.kind) {
      case Token::option:
        out.push_back("opt " + std::string(t.opt->name) + (t.value ? "=" + std::string(*t.value) : ""));
        break;
      case Token::operand:
        out.push_back("arg " + std::string(t.word));
        break;
      case Token::unknown:
        out.push_back("unknown " + std::string(t.word));
        break;
      case Token::missing_value:
        out.push_back("missing " + std::string(t.opt->name) + " " + std::string(t.word));
        break;
      case Token::end:
        break;
    }
  }
  EXPECT_FALSE(p.next());  // stays at the end
  if (rest) rest->assign(p.rest().begin(), p.rest().end());
  return out;
}

using V = std::vector<std::string>;

TEST(OptionParser, OptionsAndOperandsInOrder) {
  EXPECT_EQ(parse({"a", "--json", "b", "-p", "--processes"}),
            (V{"arg a", "opt json", "arg b", "opt processes", "opt processes"}));
  EXPECT_EQ(parse({}), V{});
  EXPECT_EQ(parse({"-", ""}), (V{"arg -", "arg "}));
}

TEST(OptionParser, ValueAsNextWordOrAfterEquals) {
  EXPECT_EQ(parse({"--count", "3", "--count=4", "--count=", "--count", "-5"}),
            (V{"opt count=3", "opt count=4", "opt count=", "opt count=-5"}));
  EXPECT_EQ(parse({"x", "--count"}), (V{"arg x", "missing count --count"}));
}

TEST(OptionParser, OptionalValueOnlyWhenTheNextWordFits) {
  EXPECT_EQ(parse({"--watch", "2", "--watch", "x", "--watch=y", "--watch"}),
            (V{"opt watch=2", "opt watch", "arg x", "opt watch=y", "opt watch"}));
}

TEST(OptionParser, WholeNamesOnly) {
  EXPECT_EQ(parse({"--js"}), V{"unknown --js"});
  EXPECT_EQ(parse({"--coun", "3"}), V{"unknown --coun"});  // unique prefix: still unknown
  EXPECT_EQ(parse({"--count-"}), V{"unknown --count-"});   // ambiguous
  EXPECT_EQ(parse({"--cou"}), V{"unknown --cou"});         // and missing its value
  EXPECT_EQ(parse({"--json=1"}), V{"unknown --json=1"});   // no value allowed
  EXPECT_EQ(parse({"--count-all"}), V{"opt count-all"});
}

TEST(OptionParser, UnknownEndsTheParse) {
  EXPECT_EQ(parse({"a", "--bogus", "b", "--json"}), (V{"arg a", "unknown --bogus"}));
  EXPECT_EQ(parse({"-x", "--json"}), V{"unknown -x"});
  EXPECT_EQ(parse({"--", "a"}), V{"unknown --"});
}

TEST(OptionParser, NoBundledShortOptions) {
  EXPECT_EQ(parse({"-pp"}), V{"unknown -pp"});
  EXPECT_EQ(parse({"-px"}), V{"unknown -px"});
  EXPECT_EQ(parse({"-xp"}), V{"unknown -xp"});
}

TEST(OptionParser, StopAtOperandLeavesTheRestAlone) {
  std::vector<std::string> rest;
  EXPECT_EQ(parse({"--json", "cmd", "--bogus", "-p"}, {.stop_at_operand = true}, &rest), V{"opt json"});
  EXPECT_EQ(rest, (V{"cmd", "--bogus", "-p"}));
  EXPECT_EQ(parse({"--", "--help", "x"}, {.stop_at_operand = true}, &rest), V{});
  EXPECT_EQ(rest, (V{"--help", "x"}));
  EXPECT_EQ(parse({"--"}, {.stop_at_operand = true}, &rest), V{});
  EXPECT_EQ(rest, V{});
  EXPECT_EQ(parse({"-", "x"}, {.stop_at_operand = true}, &rest), V{});
  EXPECT_EQ(rest, (V{"-", "x"}));
}

TEST(OptionParser, LeadingWordsAreNotParsed) {
  EXPECT_EQ(parse({"--json", "netdev", "-x", "--count", "1"}, {.leading = 3}), V{"opt count=1"});
  EXPECT_EQ(parse({"a"}, {.leading = 3}), V{});
}

TEST(OptionParser, HelpAnywhereButAfterTheCommandLine) {
  const auto help = [](std::vector<std::string_view> words, ParseMode mode = {}) {
    return OptionParser(words, kOptions, mode).help();
  };
  EXPECT_TRUE(help({"--bogus", "-h"}));
  EXPECT_TRUE(help({"a", "help"}));
  EXPECT_TRUE(help({"x", "y", "--help"}, {.leading = 3}));
  EXPECT_FALSE(help({"--helpme", "h"}));
  EXPECT_TRUE(help({"-x", "help"}, {.stop_at_operand = true}));
  EXPECT_FALSE(help({"cmd", "--help"}, {.stop_at_operand = true}));
  EXPECT_FALSE(help({"--", "-h"}, {.stop_at_operand = true}));
}

TEST(OptionParser, ValidListsTheLongNames) {
  OptionParser p({}, kOptions);
  EXPECT_EQ(p.valid(), "--json, --processes, --count, --count-all, --watch");
}

}  // namespace
}  // namespace urxe::tools
