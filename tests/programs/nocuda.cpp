// nocuda.cpp - a host program that uses no CUDA at all: under LD_PRELOAD=libluma.so it
// must print exactly the same line, nothing on stderr, and exit with the same code (7,
// chosen so that a changed exit status is visible).
#include <cstdio>
#include <cstdlib>

int main() {
  void* p = std::malloc(1024);  // some host allocation, nothing else
  std::printf("prog_nocuda: no CUDA here\n");
  std::free(p);
  return 7;
}
