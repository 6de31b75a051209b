// write_sequences.cpp - writes the synthetic training sequences of training_sequence.h as
// RMM logs, so that programs replay them (the workload's `replay-rmm`, tests/programs) and
// `luma simulate` reads them like a recorded run: `write_sequences DIR [--only NAME]`
// writes, for each model of training_models() (or NAME alone),
//   DIR/<name>.rmm.csv          every op on Thread 1, as the sequence gives it
//   DIR/<name>.threads.rmm.csv  the same ops with each step's backward pass on Thread 2
// and for each of inference_sequence.h's runs (decoding, moe-routing) DIR/<name>.rmm.csv,
// and prints one line per file written. Ops in order; Time: the op's time_ns as a clock
// (HH:MM:SS.ffffff, from midnight); Pointer: a fake address unique to the allocation;
// Size: its bytes (a free's row repeats them, as RMM's log does); Stream 0x0.
//
// The backward on a second thread, as PyTorch's autograd engine runs it on a device thread
// of its own while the main thread waits (tests/data/torch_train.rmm.csv.gz: threads 1234
// and 1276): the sequence marks no phases, so the rule reads them off its one landmark.
// Each step's loss is its only 4-byte allocation (training_sequence.h: alloc(4) at the end
// of the forward; every other tensor is far larger); the backward is the ops from the
// first allocation after the loss (the gradient of the logits; the frees of autocast's
// weight copies in between still end the forward) up to the loss's free, which the main
// thread makes (Thread 1). A sequence without such a landmark stops the program (exit 1)
// rather than write a log with no second thread.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "inference_sequence.h"
#include "training_sequence.h"

namespace {

// Writes one log; `thread` is empty for all ops on Thread 1. Returns false on an I/O error.
bool write_log(const std::string& path, const luma::core::SimSequence& s,
               const std::vector<int>& thread) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return false;
  std::fputs("Thread,Time,Action,Pointer,Size,Stream\n", out);
  std::vector<std::uint64_t> bytes(s.allocations, 0);
  std::uint64_t second = 0;
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const luma::core::SimOp& op = s.ops[i];
    if (!op.is_free) bytes[op.id] = op.bytes;
    const std::uint64_t us = op.time_ns / 1000;
    const int t = thread.empty() ? 1 : thread[i];
    second += t == 2 ? 1 : 0;
    std::fprintf(out, "%d,%02llu:%02llu:%02llu.%06llu,%s,0x%llx,%llu,0x0\n", t,
                 static_cast<unsigned long long>(us / 3600000000ull % 24),
                 static_cast<unsigned long long>(us / 60000000ull % 60),
                 static_cast<unsigned long long>(us / 1000000ull % 60),
                 static_cast<unsigned long long>(us % 1000000), op.is_free ? "free" : "allocate",
                 // 4 KiB apart from 64 KiB on: distinct, aligned as a driver's would be.
                 static_cast<unsigned long long>(0x10000 + std::uint64_t{op.id} * 0x1000),
                 static_cast<unsigned long long>(bytes[op.id]));
  }
  const bool ok = std::ferror(out) == 0;
  if (std::fclose(out) != 0 || !ok) return false;
  std::printf("%s: %zu rows, %llu allocations, peak live %llu B", path.c_str(), s.ops.size(),
              static_cast<unsigned long long>(s.allocations),
              static_cast<unsigned long long>(s.peak_live));
  if (!thread.empty()) std::printf(", %llu rows on Thread 2", static_cast<unsigned long long>(second));
  std::printf("\n");
  return true;
}

int usage() {
  std::fprintf(stderr, "usage: write_sequences DIR [--only NAME]\n  NAME:");
  for (const auto& m : luma::testing::training_models()) std::fprintf(stderr, " %s", m.name.c_str());
  for (const auto& m : luma::testing::decoding_models()) std::fprintf(stderr, " %s", m.name.c_str());
  for (const auto& m : luma::testing::moe_models()) std::fprintf(stderr, " %s", m.name.c_str());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::strcmp(argv[2], "--only") == 0)) return usage();
  const std::string dir = argv[1];
  const char* only = argc == 4 ? argv[3] : nullptr;
  bool matched = false;
  for (const auto& model : luma::testing::training_models()) {
    if (only != nullptr && model.name != only) continue;
    matched = true;
    const luma::core::SimSequence s = luma::testing::TrainingSequence(model).make();
    const std::vector<int> threads = luma::testing::backward_on_thread_2(s);
    if (threads.empty()) {
      std::fprintf(stderr, "write_sequences: %s has no %llu-byte loss to find its backward by\n",
                   model.name.c_str(), static_cast<unsigned long long>(luma::testing::kLossBytes));
      return 1;
    }
    for (const bool threaded : {false, true}) {
      const std::string path = dir + "/" + model.name + (threaded ? ".threads" : "") + ".rmm.csv";
      if (!write_log(path, s, threaded ? threads : std::vector<int>{})) {
        std::fprintf(stderr, "write_sequences: cannot write %s: %s\n", path.c_str(),
                     std::strerror(errno));
        return 1;
      }
    }
  }
  // The other shapes (inference_sequence.h): one thread (their phases have no landmark).
  std::vector<std::pair<std::string, luma::core::SimSequence>> others;
  for (const auto& m : luma::testing::decoding_models())
    if (only == nullptr || m.name == only) others.emplace_back(m.name, luma::testing::make_decoding(m));
  for (const auto& m : luma::testing::moe_models())
    if (only == nullptr || m.name == only) others.emplace_back(m.name, luma::testing::make_moe(m));
  for (const auto& [name, s] : others) {
    matched = true;
    const std::string path = dir + "/" + name + ".rmm.csv";
    if (!write_log(path, s, {})) {
      std::fprintf(stderr, "write_sequences: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
  }
  if (!matched) {
    std::fprintf(stderr, "write_sequences: no sequence named '%s'\n", only);
    return usage();
  }
  return 0;
}
