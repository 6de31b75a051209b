// free_path.cpp - the free path rule (see free_path.h).
#include "free_path/free_path.h"

namespace luma::core {

const char* free_path_name(FreePath path) noexcept {
  switch (path) {
    case FreePath::at_once: return "at-once";
    case FreePath::legacy: return "legacy";
    case FreePath::fenced: return "fenced";
  }
  return "fenced";
}

std::optional<FreePath> parse_free_path(std::string_view name) noexcept {
  for (FreePath p : {FreePath::at_once, FreePath::legacy, FreePath::fenced})
    if (name == free_path_name(p)) return p;
  return std::nullopt;
}

const char* free_path_fact_text(FreePathFact fact) noexcept {
  switch (fact) {
    case FreePathFact::second_thread: return "a second thread uses CUDA";
    case FreePathFact::blocking_stream: return "the program made a blocking stream";
    case FreePathFact::second_context: return "a second CUDA context is in use";
    case FreePathFact::unordered_stream: return "the program made a non-blocking stream (or a green context's)";
    case FreePathFact::capture: return "a stream capture began";
  }
  return "";
}

FreePathDecision decide_free_path(const FreePathFacts& f) noexcept {
  if (!f.reuse_allowed) return {FreePath::fenced, "stream_ordered_reuse is off"};
  // What leaves the legacy stream's order: another context has its own legacy stream; a
  // non-blocking stream does not wait for the legacy stream; a capture records work that
  // runs later, outside any order the program's calls show.
  for (FreePathFact fact : {FreePathFact::second_context, FreePathFact::unordered_stream, FreePathFact::capture})
    if (f.has(fact)) return {FreePath::fenced, free_path_fact_text(fact)};
  // What leaves one stream's order but stays in the legacy stream's: another thread's
  // per-thread default stream, a blocking stream (both synchronize with the legacy stream).
  for (FreePathFact fact : {FreePathFact::second_thread, FreePathFact::blocking_stream})
    if (f.has(fact)) return {FreePath::legacy, free_path_fact_text(fact)};
  return {FreePath::at_once, "one thread, one context, no stream of the program's own"};
}

}  // namespace luma::core
