// make_training_log.cpp - writes the synthetic training sequences of
// tests/doubles/training_sequence.h as RMM logs, for `luma simulate` by hand:
// `make_training_log DIR` writes DIR/<name>.rmm.csv for each model (docs/placement.md).
#include <cstdio>
#include <fstream>
#include <string>

#include "training_sequence.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_training_log DIR\n");
    return 2;
  }
  for (const auto& model : luma::testing::training_models()) {
    const luma::core::SimSequence s = luma::testing::TrainingSequence(model).make();
    const std::string path = std::string(argv[1]) + "/" + model.name + ".rmm.csv";
    std::ofstream out(path);
    out << "Thread,Time,Action,Pointer,Size,Stream\n";
    std::vector<std::uint64_t> bytes(s.allocations);
    for (const auto& op : s.ops) {
      const std::uint64_t us = op.time_ns / 1000;
      if (!op.is_free) bytes[op.id] = op.bytes;
      char line[160];
      std::snprintf(line, sizeof line, "1,%02llu:%02llu:%02llu.%06llu,%s,0x%llx,%llu,0x0\n",
                    static_cast<unsigned long long>(us / 3600000000ull % 24),
                    static_cast<unsigned long long>(us / 60000000ull % 60),
                    static_cast<unsigned long long>(us / 1000000ull % 60),
                    static_cast<unsigned long long>(us % 1000000), op.is_free ? "free" : "allocate",
                    static_cast<unsigned long long>(0x100000 + std::uint64_t{op.id} * 256),
                    static_cast<unsigned long long>(bytes[op.id]));
      out << line;
    }
    std::printf("%s: %llu allocations, peak live %llu B\n", path.c_str(),
                static_cast<unsigned long long>(s.allocations), static_cast<unsigned long long>(s.peak_live));
    if (!out) return 1;
  }
  return 0;
}
