// Runs the responder fuzz target without libFuzzer, so every build (Release, ASan) exercises its invariants:
// deterministic pseudo-random inputs (URXE_FUZZ_REPLAY_N, default 2000), then any files named on the command
// line (e.g. a libFuzzer corpus or crash artifact).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "tests/sim/sim_net.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  const char* env = std::getenv("URXE_FUZZ_REPLAY_N");
  uint64_t n = env && *env ? std::strtoull(env, nullptr, 0) : 2000;
  urxe::sim::Rng rng(0xf022);
  for (uint64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> in(rng.range(1, 3000));
    for (auto& b : in) b = static_cast<uint8_t>(rng.next());
    // Bias towards structured records (kind 1) so most inputs reach the QPs' state machines.
    for (size_t k = 0; k < in.size(); k += 1 + rng.below(200))
      if (rng.chance(0.6)) in[k] = 1;
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  for (int a = 1; a < argc; ++a) {
    std::ifstream f(argv[a], std::ios::binary);
    std::vector<uint8_t> in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  std::printf("responder_fuzz_replay: %" PRIu64 " generated inputs and %d files, no invariant violated\n", n,
              argc - 1);
  return 0;
}
