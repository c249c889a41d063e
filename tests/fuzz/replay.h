// Runs a libFuzzer-style target (LLVMFuzzerTestOneInput) without libFuzzer, so every build (Release, ASan)
// checks the fuzz invariants: over files (replay_main.cc) or over seeds a replay executable generates
// (seed_replay_main). Each input can also be fed cut short and with single bytes changed, deterministically.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace urxe::fuzz {

using Bytes = std::vector<uint8_t>;

// How an input is varied besides fed whole: every `cut_step`-th prefix (lengths 0, cut_step, ... below its
// size), and, one byte at a time, the input with that byte XORed with each of `flips`.
struct Variations {
  size_t cut_step = 1;
  std::vector<uint8_t> flips = {0x01, 0x80};
};

// Feeds `in` whole and, with `v`, each of its variations; returns how many inputs that fed. Every input is
// its own exactly sized heap copy, so ASan sees any read past its end.
size_t replay(const Bytes& in, const Variations* v);

// The contents of the files named (a directory: each regular file in it).
std::vector<Bytes> read_inputs(const std::vector<std::string>& paths);

// main() of a replay executable that generates its seeds. No arguments: feeds each seed with the variations
// `v` and prints the counts. `--write-seeds DIR`: writes the seeds to DIR/seed0, seed1, ... instead (the fuzz
// build's seed corpus). Otherwise the arguments are files or directories (a libFuzzer corpus or crash
// artifact), each file fed once instead of the seeds.
int seed_replay_main(int argc, char** argv, const std::vector<Bytes>& seeds, const Variations& v);

}  // namespace urxe::fuzz
