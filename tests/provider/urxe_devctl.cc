// Test driver for provider/cli.h: `urxe_devctl link|env|run ...` behaves as `urxe link|env|run ...` will.
#include <cstring>
#include <iostream>

#include "provider/cli.h"

int main(int argc, char** argv) {
  using namespace urxe::provider::cli;
  if (argc < 2) {
    std::cerr << "usage: urxe_devctl link|env|run ...\n";
    return 2;
  }
  if (!std::strcmp(argv[1], "link")) return link_main(argc - 2, argv + 2, std::cout, std::cerr);
  if (!std::strcmp(argv[1], "env")) return env_main(argc - 2, argv + 2, std::cout, std::cerr);
  if (!std::strcmp(argv[1], "run")) return run_main(argc - 2, argv + 2, std::cerr);
  std::cerr << "urxe_devctl: unknown command " << argv[1] << "\n";
  return 2;
}
