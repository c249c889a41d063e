#include "tools/command.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace urxe::tools {

bool is_help(std::string_view a) {
  return a == "-h" || a == "--help" || a == "help";
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
