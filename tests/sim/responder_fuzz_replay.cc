// Runs the responder fuzz target without libFuzzer, so every build (Release, ASan) exercises its invariants:
// deterministic pseudo-random inputs (URXE_FUZZ_REPLAY_N, default 20000), then any files named on the command
// line (e.g. a libFuzzer corpus or crash artifact). `--write-seeds DIR N` writes N of the generated inputs as
// files instead (the seed corpus of the fuzz build).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/sim/sim_net.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
void responder_fuzz_print_stats();

namespace {

std::vector<uint8_t> generate(urxe::sim::Rng& rng) {
  // Records as the target reads them, mostly structured frames (kind 1) so that most inputs reach the QPs'
  // state machines; the field bytes are random.
  std::vector<uint8_t> in;
  uint64_t recs = rng.range(1, 24);
  for (uint64_t r = 0; r < recs; ++r) {
    uint64_t kind = rng.below(10);
    // one structured frame in eight comes flagged as a batch frame of 0-15 packets (kinds 0xc0 and up)
    const uint8_t batch = kind < 7 && rng.chance(0.125) ? static_cast<uint8_t>(0xc0 | rng.below(16) << 2) : 0;
    in.push_back(static_cast<uint8_t>(batch | (kind < 7 ? 1 : kind == 7 ? 0 : kind == 8 ? 2 : 3)));
    size_t len = kind < 7 ? 90 : kind == 7 ? rng.range(0, 200) : kind == 8 ? 2 : 1;
    in.push_back(static_cast<uint8_t>(len));
    in.push_back(static_cast<uint8_t>(len >> 8));
    size_t at = in.size();
    for (size_t k = 0; k < len; ++k) in.push_back(static_cast<uint8_t>(rng.next()));
    if (kind < 6) {
      // A clean request for the RC QP most of the time (the field order of structured() in responder_fuzz.cc:
      // sel, opsel, flags, mrsel, variations, psn, va(2), dma mode, payload length(2)): expected PSN, no
      // variations, an address inside the remote-writable or zero-based MR, DMA length = payload, at most one
      // MTU; the rest of the fields stay random. Such frames reach the responder's write/read/atomic paths.
      uint8_t* b = &in[at];
      b[0] = static_cast<uint8_t>(rng.chance(0.7) ? 0 : rng.below(4));
      b[2] &= static_cast<uint8_t>(~0x20);
      b[3] = rng.chance(0.5) ? 0 : 2;
      b[4] = 0xff;
      b[5] = 0;
      b[8] = static_cast<uint8_t>(2 | (rng.chance(0.5) ? 0x80 : 0));
      uint16_t pl = static_cast<uint16_t>(0x4000 | rng.below(1025));
      b[9] = static_cast<uint8_t>(pl);
      b[10] = static_cast<uint8_t>(pl >> 8);
    }
  }
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  urxe::sim::Rng rng(0xf022);
  if (argc == 4 && std::string(argv[1]) == "--write-seeds") {
    uint64_t n = std::strtoull(argv[3], nullptr, 0);
    for (uint64_t i = 0; i < n; ++i) {
      auto in = generate(rng);
      std::ofstream(std::string(argv[2]) + "/gen" + std::to_string(i), std::ios::binary)
          .write(reinterpret_cast<const char*>(in.data()), static_cast<std::streamsize>(in.size()));
    }
    return 0;
  }
  const char* env = std::getenv("URXE_FUZZ_REPLAY_N");
  uint64_t n = env && *env ? std::strtoull(env, nullptr, 0) : 20000;
  for (uint64_t i = 0; i < n; ++i) {
    auto in = generate(rng);
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  for (int a = 1; a < argc; ++a) {
    std::ifstream f(argv[a], std::ios::binary);
    std::vector<uint8_t> in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  responder_fuzz_print_stats();
  std::printf("responder_fuzz_replay: %" PRIu64 " generated inputs and %d files, no invariant violated\n", n,
              argc - 1);
  return 0;
}
