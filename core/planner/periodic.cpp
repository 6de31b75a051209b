// periodic.cpp - see periodic.h.
//
// Detection: for each candidate period P the pairs (k, k + P) are compared from the end of
// the sequence backwards until the first that does not repeat; W(P) is just after it. A
// multiple of the best period so far starts its scan at that period's warm-up (a sequence
// with period P from W has period mP from W too), so the multiples of the true period cost
// only what they add. Candidates stop at the best W + P so far and at half the sequence.
//
// Cyclic model (conservative): with the cut at W', an iteration's window is [W' + tP,
// W' + (t+1)P). A period slot freed before the window ends lives [W' + r, W' + r + d) and
// only ever meets the slots of its own iteration; one live across the cut (r + d > P) is
// given the whole window, so it shares bytes with no other period slot (its own next
// instance starts after it was freed, since d <= P). A warm-up allocation freed before W'
// keeps its lifetime; one live at W' keeps its bytes to the end. The cut's phase is chosen
// where the fewest bytes are live across it, which is what the model pays for.
#include "planner/periodic.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "planner/plan_checker.h"

namespace luma::core {
namespace {

// Whether allocation k fails to repeat at k + P (see find_period's contract).
bool breaks(const AllocationSequence& s, std::size_t k, std::size_t p) noexcept {
  const std::size_t n = s.count();
  const std::size_t j = k + p;
  if (s.key[k] != s.key[j]) return true;
  if (s.free_at[k] > j) return true;  // still live when its next instance comes
  const std::uint64_t expected = s.free_at[k] + p;
  if (expected < n) return s.free_at[j] != expected;
  return s.free_at[j] < n;  // its free falls after the end: it must not come earlier
}

}  // namespace

AllocationSequence allocation_sequence(const std::vector<Lifetime>& lifetimes,
                                       const std::vector<std::uint64_t>& keys) {
  const std::size_t n = lifetimes.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lifetimes[a].lower < lifetimes[b].lower; });
  std::vector<std::uint64_t> lowers(n);
  for (std::size_t i = 0; i < n; ++i) lowers[i] = lifetimes[order[i]].lower;
  AllocationSequence s;
  s.key.resize(n);
  s.size.resize(n);
  s.free_at.resize(n);
  s.input = order;
  for (std::size_t i = 0; i < n; ++i) {
    const Lifetime& l = lifetimes[order[i]];
    s.key[i] = keys.empty() ? l.size : keys[order[i]];
    s.size[i] = l.size;
    // Frees come before allocations at the same time (the planner's rule), so the free
    // happens after exactly the allocations whose lower is below its upper.
    const auto f = static_cast<std::uint64_t>(std::lower_bound(lowers.begin(), lowers.end(), l.upper) - lowers.begin());
    // An empty lifetime (a planner CSV may have one) counts as freed before the next one.
    s.free_at[i] = std::max<std::uint64_t>(f, i + 1);
  }
  return s;
}

PeriodSearch find_period(const AllocationSequence& s, std::uint64_t budget) {
  PeriodSearch out;
  const std::size_t n = s.count();
  std::uint64_t best = ~std::uint64_t{0};  // best W + P
  Period best_period;
  for (std::size_t p = 1; p * plan::kMinPeriodRepeats <= n && p < best; ++p) {
    // [i, n - p) is known to repeat; extend it downwards.
    std::size_t i = n - p;
    if (out.found && p % best_period.period == 0) i = std::min<std::size_t>(i, best_period.warmup);
    while (i > 0) {
      if (++out.comparisons > budget) {
        out.budget_exhausted = true;
        return out;
      }
      if (breaks(s, i - 1, p)) break;
      --i;
    }
    if (n - i < plan::kMinPeriodRepeats * p) continue;
    if (i + p < best) {
      best = i + p;
      best_period = {i, p};
      out.found = best_period;
    }
  }
  return out;
}

PeriodicPlan plan_periodic(const std::vector<Lifetime>& lifetimes, const AllocationSequence& s,
                           const Period& period, Strategy strategy, const SearchOptions& search) {
  const std::size_t n = s.count();
  const std::size_t w = period.warmup;
  const std::size_t p = period.period;
  if (p == 0 || w + plan::kMinPeriodRepeats * p > n)
    throw std::logic_error("plan_periodic: the period does not fit the sequence");

  // Free distance of each period position (from the first iteration, which repeats).
  std::vector<std::uint64_t> d(p);
  for (std::size_t x = 0; x < p; ++x) d[x] = s.free_at[w + x] - (w + x);

  // Bytes live across a cut before allocation w + c, for each phase c: a period slot at x
  // lives over the open interval (x, x + d) of cut positions (taken mod P); a warm-up
  // allocation freed inside the first iteration, at f, is live across cuts c < f - w.
  std::vector<std::int64_t> diff(2 * p + 1, 0);
  for (std::size_t x = 0; x < p; ++x) {
    if (d[x] < 2) continue;
    diff[x + 1] += static_cast<std::int64_t>(s.size[w + x]);
    diff[x + d[x]] -= static_cast<std::int64_t>(s.size[w + x]);
  }
  std::vector<std::int64_t> warm(p + 1, 0);
  for (std::size_t i = 0; i < w; ++i) {
    const std::uint64_t f = s.free_at[i];
    if (f > w && f < w + p) {
      warm[0] += static_cast<std::int64_t>(s.size[i]);
      warm[f - w] -= static_cast<std::int64_t>(s.size[i]);
    }
  }
  std::vector<std::int64_t> live(2 * p, 0);
  std::int64_t run = 0;
  for (std::size_t y = 0; y < 2 * p; ++y) live[y] = (run += diff[y]);
  std::size_t phase = 0;
  std::int64_t least = -1;
  std::int64_t warm_run = 0;
  for (std::size_t c = 0; c < p; ++c) {
    warm_run += warm[c];
    const std::int64_t cost = live[c] + live[c + p] + warm_run;
    if (least < 0 || cost < least) {
      least = cost;
      phase = c;
    }
  }

  PeriodicPlan out;
  out.detected_warmup = w;
  out.warmup = w + phase;
  out.period = p;
  out.captured_iterations = (n - out.warmup) / p;
  out.boundary_bytes = static_cast<std::uint64_t>(least);
  const std::uint64_t wp = out.warmup;
  const std::uint64_t end = wp + p;  // the window's end: "live through the whole window"
  auto slot_from = [&](std::size_t k, std::uint64_t lower, std::uint64_t upper) {
    Lifetime l = lifetimes[s.input[k]];
    l.lower = lower;
    l.upper = upper;
    l.size = s.size[k];
    out.slots.push_back(std::move(l));
    out.slot_input.push_back(s.input[k]);
    out.slot_key.push_back(s.key[k]);
  };
  for (std::size_t k = 0; k < wp; ++k) {
    const std::uint64_t f = s.free_at[k];
    slot_from(k, k, f <= wp ? f : end);
  }
  for (std::size_t r = 0; r < p; ++r) {
    const std::uint64_t dist = d[(phase + r) % p];
    const std::size_t k = wp + r;
    if (r + dist > p) slot_from(k, wp, end);  // live across the cut: the whole window
    else slot_from(k, k, k + dist);
  }
  out.report = plan_lifetimes(out.slots, strategy, search);
  std::vector<std::string> bad = check_periodic_plan(s, out);
  if (!bad.empty()) throw std::logic_error("periodic plan failed its check: " + bad.front());
  return out;
}

std::vector<std::string> check_periodic_plan(const AllocationSequence& s, const PeriodicPlan& plan,
                                             std::uint64_t iterations) {
  std::vector<std::string> bad;
  const std::size_t n = s.count();
  const std::uint64_t wp = plan.warmup;
  const std::uint64_t p = plan.period;
  const std::vector<std::uint64_t>& offsets = plan.report.chosen.offsets;
  if (p == 0 || plan.slots.size() != wp + p || offsets.size() != plan.slots.size()) {
    bad.push_back("the plan does not hold warm-up + one period of slots");
    return bad;
  }
  auto slot_of = [&](std::uint64_t k) { return k < wp ? k : wp + (k - wp) % p; };
  auto with_prefix = [&](const std::string& prefix, const std::vector<std::string>& lines) {
    for (const std::string& l : lines) bad.push_back(prefix + l);
  };

  // The captured run, every allocation at its slot's offset with its real lifetime.
  std::vector<Lifetime> run(n);
  Plan run_plan;
  run_plan.offsets.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t slot = slot_of(k);
    if (s.key[k] != plan.slot_key[slot]) {
      bad.push_back("captured run: allocation " + std::to_string(k) + " asks for " + std::to_string(s.key[k]) +
                    " bytes, its slot " + std::to_string(slot) + " for " + std::to_string(plan.slot_key[slot]));
      return bad;
    }
    run[k].id = std::to_string(k);
    run[k].lower = k;
    run[k].upper = s.free_at[k];
    run[k].size = plan.slots[slot].size;
    run[k].alignment = plan.slots[slot].alignment;
    run_plan.offsets[k] = offsets[slot];
  }
  run_plan.arena = arena_of(run, run_plan.offsets);
  with_prefix("captured run: ", check_plan(run, run_plan));

  // The period repeated: each instance with its true lifetime (not the model's).
  std::vector<Lifetime> unrolled;
  Plan unrolled_plan;
  const std::uint64_t end = wp + (iterations + 1) * p;
  for (std::uint64_t k = 0; k < wp; ++k) {
    Lifetime l = plan.slots[k];
    if (l.upper > wp) l.upper = end;  // live at W': its bytes are its own to the end
    unrolled.push_back(l);
    unrolled_plan.offsets.push_back(offsets[k]);
  }
  // Slot r's free distance, from its instance in the detected first iteration (which lies
  // where the search verified the repetition; later instances may be cut by the end).
  const std::uint64_t w = plan.detected_warmup;
  const std::uint64_t phase = wp - w;
  if (wp < w || w + 2 * p > n) {
    bad.push_back("the warm-up and period do not fit the captured run");
    return bad;
  }
  for (std::uint64_t t = 0; t < iterations; ++t) {
    for (std::uint64_t r = 0; r < p; ++r) {
      const std::uint64_t k = wp + t * p + r;
      const std::uint64_t first = w + (phase + r) % p;
      Lifetime l = plan.slots[wp + r];
      l.id = plan.slots[wp + r].id + "@" + std::to_string(t);
      l.lower = k;
      l.upper = k + (s.free_at[first] - first);
      unrolled.push_back(l);
      unrolled_plan.offsets.push_back(offsets[wp + r]);
    }
  }
  unrolled_plan.arena = arena_of(unrolled, unrolled_plan.offsets);
  with_prefix("repeated period: ", check_plan(unrolled, unrolled_plan));
  if (arena_of(plan.slots, offsets) > plan.report.chosen.arena)
    bad.push_back("the slots end beyond the plan's arena");
  return bad;
}

}  // namespace luma::core
