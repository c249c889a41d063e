// Runs a libFuzzer-style target over files without libFuzzer (tests/fuzz/replay.h), so every build (Release,
// ASan) exercises the fuzz invariants on the seed corpus. With --mutate it also feeds every prefix of each
// input and every input with one byte changed (bit 0 and bit 7 flipped).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/replay.h"

int main(int argc, char** argv) {
  bool mutate = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutate") == 0)
      mutate = true;
    else
      paths.emplace_back(argv[i]);
  }
  const auto inputs = urxe::fuzz::read_inputs(paths);
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s [--mutate] FILE|DIR...  (no input files found)\n", argv[0]);
    return 2;
  }
  const urxe::fuzz::Variations v;
  size_t runs = 0;
  for (const auto& in : inputs) runs += urxe::fuzz::replay(in, mutate ? &v : nullptr);
  std::printf("%zu inputs, %zu runs, all invariants held\n", inputs.size(), runs);
  return 0;
}
