// fuzz_lifetime_readers.cpp - libFuzzer target: any bytes as a planner CSV and as an RMM
// log (each reader directly, and through format detection). A reader must return
// lifetimes or throw PlanInputError; returned lifetimes must be well formed.
// Built twice: LUMA_FUZZ_READER selects which reader the input goes to first.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "planner/input/csv_reader.h"
#include "planner/input/lifetime_reader.h"
#include "planner/input/rmm_log_reader.h"

namespace {

template <typename Reader>
void read_with(const std::string& text) {
  try {
    std::istringstream in(text);
    auto lifetimes = Reader().read(in, "fuzz");
    for (const auto& l : lifetimes) {
      if (l.upper < l.lower) __builtin_trap();  // a lifetime never ends before it starts
    }
  } catch (const luma::core::PlanInputError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace luma::core;
  const std::string text(reinterpret_cast<const char*>(data), size);
#if LUMA_FUZZ_READER == 1
  read_with<PlannerCsvReader>(text);
#else
  read_with<RmmLogReader>(text);
#endif
  try {
    (void)read_lifetimes_text(text, "fuzz", builtin_readers());
  } catch (const PlanInputError&) {
  }
  return 0;
}
