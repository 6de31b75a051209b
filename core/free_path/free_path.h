// free_path.h - the one rule for how luma makes a freed block reusable, decided from what
// the program has shown: used by libluma.so (shim/device/stream_order.h feeds it what the hooks
// observe) and by `luma simulate` (core/simulate feeds it what a recording shows), so that
// the model takes the path the library takes (docs/architecture.md, "Stream-ordered reuse",
// has why each path is safe).
//
// Three paths, from the cheapest:
//   at-once  a freed block is reusable as soon as it is freed: every use of device memory
//            is in one stream's order (one thread, one context, no stream of the program's).
//   legacy   frees are batched into epochs, and an epoch's blocks are reusable once one
//            barrier on the legacy stream was issued after them: every stream of the
//            program's takes part in the legacy stream's synchronization (several threads,
//            blocking streams), still one context.
//   fenced   frees are batched into epochs closed by a fence (an event per stream), and an
//            epoch's blocks are reusable once the GPU has passed the fence.
// Facts only accumulate: a path, once left, is never taken again in a process (a thread
// that ended still left work on its per-thread stream; a stream destroyed may still run).
// The rule applies with free_sync:event; free_sync:none never fences and free_sync:device
// synchronizes at each free (settings/config.h), whatever the facts.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace luma::core {

enum class FreePath : std::uint8_t { at_once, legacy, fenced };

// "at-once", "legacy", "fenced": the names `luma simulate --free-path` takes.
const char* free_path_name(FreePath path) noexcept;
std::optional<FreePath> parse_free_path(std::string_view name) noexcept;

// One kind of thing a program can show that narrows its free path.
enum class FreePathFact : std::uint8_t {
  second_thread,     // a second thread made a context current (or used CUDA)
  blocking_stream,   // the program made a stream that synchronizes with the legacy stream
  second_context,    // a second context is in use
  unordered_stream,  // a non-blocking stream, or a green context's stream
  capture,           // a stream capture began
};
inline constexpr unsigned kFreePathFactCount = 5;
// What the fact is, in a sentence's words ("a second thread uses CUDA").
const char* free_path_fact_text(FreePathFact fact) noexcept;

// What the program has shown so far, and whether stream-ordered reuse is allowed at all
// (LUMA_CONF stream_ordered_reuse).
struct FreePathFacts {
  bool reuse_allowed = true;
  std::uint8_t seen = 0;  // bit per FreePathFact

  bool has(FreePathFact f) const noexcept { return (seen >> static_cast<unsigned>(f)) & 1u; }
  void add(FreePathFact f) noexcept { seen = static_cast<std::uint8_t>(seen | (1u << static_cast<unsigned>(f))); }
  bool operator==(const FreePathFacts&) const = default;
};

struct FreePathDecision {
  FreePath path = FreePath::fenced;
  // Why: the fact that decided it (a sentence fragment, static storage), or what allowed
  // the cheapest path.
  const char* why = "";
};

// The rule. Fenced when reuse is not allowed, or on a second context, an unordered stream
// or a capture; else legacy on a second thread or a blocking stream; else at once.
FreePathDecision decide_free_path(const FreePathFacts& facts) noexcept;

}  // namespace luma::core
