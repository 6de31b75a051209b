// config.cpp - the LUMA_CONF parser: a table of keys, each with how to parse and where to
// store its value. Errors are collected, never thrown; a bad key keeps its old value.
#include "settings/config.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <charconv>
#include <functional>
#include <limits>

#include <fmt/format.h>

namespace luma::core {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

enum class Kind { size, boolean, free_sync, fraction, name };

struct Key {
  std::string_view name;
  Kind kind;
  // Where the value goes; sizes take bytes, booleans 0/1, free_sync its enum value.
  std::function<void(Settings&, std::uint64_t)> store;
  std::function<std::uint64_t(const Settings&)> load;
  // Kind::name only: the text value (store/load above are unused).
  std::function<void(Settings&, std::string_view)> store_text = {};
  std::function<std::string(const Settings&)> load_text = {};
};

#define LUMA_SIZE_KEY(field)                                                             \
  Key {                                                                                  \
    #field, Kind::size,                                                                  \
        [](Settings& s, std::uint64_t v) { s.allocator.field = static_cast<std::size_t>(v); }, \
        [](const Settings& s) { return static_cast<std::uint64_t>(s.allocator.field); }   \
  }

const std::vector<Key>& keys() {
  static const std::vector<Key> table = {
      LUMA_SIZE_KEY(alignment),
      LUMA_SIZE_KEY(min_split),
      LUMA_SIZE_KEY(min_segment),
      LUMA_SIZE_KEY(small_size),
      LUMA_SIZE_KEY(small_segment),
      LUMA_SIZE_KEY(large_segment),
      LUMA_SIZE_KEY(min_large_alloc),
      LUMA_SIZE_KEY(large_round),
      LUMA_SIZE_KEY(max_split_size),
      Key{"release_on_oom", Kind::boolean,
          [](Settings& s, std::uint64_t v) { s.allocator.release_on_oom = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.allocator.release_on_oom; }},
      Key{"release_free_segments", Kind::boolean,
          [](Settings& s, std::uint64_t v) { s.allocator.release_free_segments = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.allocator.release_free_segments; }},
      Key{"expandable_segments", Kind::boolean,
          [](Settings& s, std::uint64_t v) { s.allocator.expandable_segments = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.allocator.expandable_segments; }},
      Key{"free_sync", Kind::free_sync,
          [](Settings& s, std::uint64_t v) { s.free_sync = static_cast<FreeSync>(v); },
          [](const Settings& s) -> std::uint64_t { return static_cast<std::uint64_t>(s.free_sync); }},
      Key{"report_cached_as_free", Kind::boolean,
          [](Settings& s, std::uint64_t v) { s.report_cached_as_free = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.report_cached_as_free; }},
      Key{"caching", Kind::boolean, [](Settings& s, std::uint64_t v) { s.caching = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.caching; }},
      Key{"program_cache", Kind::boolean,
          [](Settings& s, std::uint64_t v) { s.program_cache = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.program_cache; }},
      Key{"stream_ordered_reuse", Kind::boolean,
          [](Settings& s, std::uint64_t v) { s.stream_ordered_reuse = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.stream_ordered_reuse; }},
      Key{"ipc_own_segment", Kind::size,
          [](Settings& s, std::uint64_t v) { s.ipc_own_segment = v; },
          [](const Settings& s) -> std::uint64_t { return s.ipc_own_segment; }},
      // Memory limits: the fraction travels through store/load as the double's bits.
      Key{"memory_limit", Kind::size, [](Settings& s, std::uint64_t v) { s.memory_limit = v; },
          [](const Settings& s) { return s.memory_limit; }},
      Key{"memory_fraction", Kind::fraction,
          [](Settings& s, std::uint64_t v) { s.memory_fraction = std::bit_cast<double>(v); },
          [](const Settings& s) { return std::bit_cast<std::uint64_t>(s.memory_fraction); }},
      Key{"limit_group", Kind::name, nullptr, nullptr,
          [](Settings& s, std::string_view v) { s.limit_group = std::string(v); },
          [](const Settings& s) { return s.limit_group; }},
      Key{"host_cache", Kind::boolean, [](Settings& s, std::uint64_t v) { s.host_cache = v != 0; },
          [](const Settings& s) -> std::uint64_t { return s.host_cache; }},
      Key{"host_cache_limit", Kind::size,
          [](Settings& s, std::uint64_t v) { s.host_cache_limit = v; },
          [](const Settings& s) { return s.host_cache_limit; }},
  };
  return table;
}
#undef LUMA_SIZE_KEY

}  // namespace

const char* free_sync_name(FreeSync f) noexcept {
  switch (f) {
    case FreeSync::event: return "event";
    case FreeSync::none: return "none";
    case FreeSync::device: return "device";
  }
  return "event";
}

namespace {

std::optional<std::uint64_t> parse_uint(std::string_view text) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size()) return std::nullopt;
  return v;
}

// "0.5", "1", "0.25": a fraction 0 < f <= 1 (no exponent-free rule: from_chars decides
// what a number is, and anything it reads that is not in (0, 1] is refused).
std::optional<double> parse_fraction(std::string_view text) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size() || !std::isfinite(v) || v <= 0 || v > 1)
    return std::nullopt;
  return v;
}

}  // namespace

bool valid_limit_group(std::string_view name) {
  if (name.empty() || name.size() > kMaxLimitGroupName) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return name != "." && name != "..";
}

std::optional<std::uint64_t> memory_limit_for(const Settings& s, std::uint64_t device_total) {
  std::optional<std::uint64_t> limit;
  if (s.memory_limit != 0) limit = s.memory_limit;
  if (s.memory_fraction > 0) {
    // Rounded down: the limit never exceeds the fraction, nor the device (compared before
    // converting back, so a product that rounds up to 2^64 is never converted).
    const long double bytes =
        std::floor(static_cast<long double>(device_total) * s.memory_fraction);
    const std::uint64_t share = bytes >= static_cast<long double>(device_total)
                                    ? device_total
                                    : static_cast<std::uint64_t>(bytes);
    limit = limit ? std::min(*limit, share) : share;
  }
  return limit;
}

std::optional<std::uint64_t> parse_size(std::string_view text, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<std::uint64_t> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return fail("expected a size: digits with an optional K, M or G suffix");
  auto number = parse_uint(text.substr(0, digits));
  if (!number) return fail("number too large");
  std::string_view suffix = text.substr(digits);
  unsigned shift = 0;
  if (suffix.empty() || iequals(suffix, "b")) {
    shift = 0;
  } else if (iequals(suffix, "k") || iequals(suffix, "kb") || iequals(suffix, "kib")) {
    shift = 10;
  } else if (iequals(suffix, "m") || iequals(suffix, "mb") || iequals(suffix, "mib")) {
    shift = 20;
  } else if (iequals(suffix, "g") || iequals(suffix, "gb") || iequals(suffix, "gib")) {
    shift = 30;
  } else {
    return fail(fmt::format("unknown size suffix '{}' (use K, M or G)", suffix));
  }
  if (shift && *number > (std::numeric_limits<std::uint64_t>::max() >> shift))
    return fail("size too large");
  return *number << shift;
}

std::optional<bool> parse_bool(std::string_view text) {
  text = trim(text);
  for (auto t : {"1", "true", "yes", "on"})
    if (iequals(text, t)) return true;
  for (auto f : {"0", "false", "no", "off"})
    if (iequals(text, f)) return false;
  return std::nullopt;
}

namespace {

// The sizes that must be multiples of the alignment (a block's address and size are).
struct AlignedSize {
  std::string_view name;
  std::size_t AllocatorOptions::*field;
};
constexpr AlignedSize kAlignedSizes[] = {
    {"min_split", &AllocatorOptions::min_split},
    {"min_segment", &AllocatorOptions::min_segment},
    {"small_size", &AllocatorOptions::small_size},
    {"small_segment", &AllocatorOptions::small_segment},
    {"large_segment", &AllocatorOptions::large_segment},
    {"large_round", &AllocatorOptions::large_round},
};

bool is_pow2(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }

// `set`: the keys the user gave; nullptr: all of them.
std::vector<std::string> check_relations(const AllocatorOptions& o,
                                         const std::vector<std::string_view>* set) {
  std::vector<std::string> errors;
  auto user_set = [&](std::string_view key) {
    return !set || std::find(set->begin(), set->end(), key) != set->end();
  };
  // "name value", with "(default)" when the user did not set it.
  auto named = [&](std::string_view key, std::size_t v) {
    return fmt::format("{} {}{}", key, v, user_set(key) ? "" : " (default)");
  };
  // lhs OP rhs must hold; stated with the key the user set as its subject.
  enum class Op { ge, gt };
  auto need = [&](std::string_view lhs, std::size_t l, Op op, std::string_view rhs,
                  std::size_t r, std::string_view why = {}) {
    if (op == Op::ge ? l >= r : l > r) return;
    const char* word = op == Op::ge ? ">=" : ">";
    const char* flipped = op == Op::ge ? "<=" : "<";
    std::string text = !user_set(lhs) && user_set(rhs)
                           ? fmt::format("{} must be {} {}", named(rhs, r), flipped, named(lhs, l))
                           : fmt::format("{} must be {} {}", named(lhs, l), word, named(rhs, r));
    if (!why.empty()) text += fmt::format(" ({})", why);
    // Both defaults: another key the user set moved them (the alignment rounds them up).
    if (!user_set(lhs) && !user_set(rhs))
      text += fmt::format(": the defaults do not fit the keys given; set {} or {}", lhs, rhs);
    errors.push_back(std::move(text));
  };
  if (!is_pow2(o.alignment) || o.alignment < 256)
    errors.push_back(fmt::format("alignment {} must be a power of two >= 256 (cudaMalloc's "
                                 "guarantee)", o.alignment));
  if (is_pow2(o.alignment)) {
    for (const AlignedSize& a : kAlignedSizes) {
      const std::size_t v = o.*a.field;
      if (v % o.alignment == 0) continue;
      if (user_set(a.name) || !user_set("alignment"))
        errors.push_back(fmt::format("{} must be a multiple of {}", named(a.name, v),
                                     named("alignment", o.alignment)));
      else
        errors.push_back(fmt::format("alignment {} must divide {}: set {} too", o.alignment,
                                     named(a.name, v), a.name));
    }
  }
  if (o.min_split == 0) errors.push_back("min_split must be > 0");
  if (o.min_segment == 0) errors.push_back("min_segment must be > 0");
  if (o.large_round == 0) errors.push_back("large_round must be > 0");
  need("small_segment", o.small_segment, Op::ge, "small_size", o.small_size);
  need("large_segment", o.large_segment, Op::gt, "small_size", o.small_size);
  need("min_large_alloc", o.min_large_alloc, Op::gt, "small_size", o.small_size);
  need("large_segment", o.large_segment, Op::ge, "min_large_alloc", o.min_large_alloc,
       "requests below min_large_alloc must fit in one");
  // PyTorch refuses max_split_size_mb <= 20 (its large segment) for the same reason: a
  // block taken from a large segment would then be too big to split, every block would
  // be "oversize", and freed blocks would land where no ordinary request looks, so the
  // cache would stop reusing memory and grow until out of memory.
  need("max_split_size", o.max_split_size, Op::gt, "large_segment", o.large_segment,
       "smaller, no block of a large segment could be split or reused");
  return errors;
}

}  // namespace

std::vector<std::string> validate(const AllocatorOptions& options) {
  return check_relations(options, nullptr);
}

std::vector<std::string> validate(const AllocatorOptions& options,
                                  const std::vector<std::string_view>& set) {
  return check_relations(options, &set);
}

ParseResult parse_settings(std::string_view text, const Settings& base) {
  ParseResult result{base, {}};
  std::vector<std::string_view> set;  // the keys `text` sets (their plain names)
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) {
      if (comma >= text.size()) break;
      continue;
    }
    std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      result.errors.push_back(fmt::format("'{}': expected key:value", item));
      continue;
    }
    std::string_view name = trim(item.substr(0, colon));
    std::string_view value = trim(item.substr(colon + 1));
    bool in_mib = false;
    const Key* key = nullptr;
    for (const Key& k : keys()) {
      if (name == k.name) key = &k;
      if (k.kind == Kind::size && name.size() == k.name.size() + 3 &&
          name.substr(0, k.name.size()) == k.name && name.substr(k.name.size()) == "_mb") {
        key = &k;
        in_mib = true;
      }
    }
    if (!key) {
      result.errors.push_back(fmt::format("unknown key '{}'", name));
      continue;
    }
    // Named as set even when its value is bad: a message then blames it, not a default.
    set.push_back(key->name);
    switch (key->kind) {
      case Kind::size: {
        std::string why;
        std::uint64_t bytes = 0;
        bool ok = false;
        if (in_mib) {
          auto mib = parse_uint(value);
          ok = mib && *mib <= (std::numeric_limits<std::uint64_t>::max() >> 20);
          if (ok) bytes = *mib << 20;
          else why = "expected a whole number of MiB";
        } else if (auto v = parse_size(value, &why)) {
          ok = true;
          bytes = *v;
        }
        if (ok && bytes > std::numeric_limits<std::size_t>::max()) {
          ok = false;
          why = "size too large";
        }
        if (!ok) {
          result.errors.push_back(fmt::format("{}: bad value '{}': {}", name, value, why));
          continue;
        }
        key->store(result.settings, bytes);
        break;
      }
      case Kind::boolean: {
        auto b = parse_bool(value);
        if (!b) {
          result.errors.push_back(
              fmt::format("{}: bad value '{}': expected true or false", name, value));
          continue;
        }
        key->store(result.settings, *b ? 1 : 0);
        break;
      }
      case Kind::free_sync: {
        std::optional<FreeSync> f;
        for (FreeSync c : {FreeSync::event, FreeSync::none, FreeSync::device})
          if (iequals(value, free_sync_name(c))) f = c;
        if (!f) {
          result.errors.push_back(fmt::format(
              "{}: bad value '{}': expected event, none or device", name, value));
          continue;
        }
        key->store(result.settings, static_cast<std::uint64_t>(*f));
        break;
      }
      case Kind::fraction: {
        auto f = parse_fraction(value);
        if (!f) {
          result.errors.push_back(fmt::format(
              "{}: bad value '{}': expected a fraction of the device's memory, 0 < f <= 1 "
              "(e.g. 0.5)", name, value));
          continue;
        }
        key->store(result.settings, std::bit_cast<std::uint64_t>(*f));
        break;
      }
      case Kind::name: {
        if (!valid_limit_group(value)) {
          result.errors.push_back(fmt::format(
              "{}: bad value '{}': expected a name of 1 to {} letters, digits, '_', '.' or '-'",
              name, value, kMaxLimitGroupName));
          continue;
        }
        key->store_text(result.settings, value);
        break;
      }
    }
  }
  // Relations between sizes: if the result is inconsistent, report it and fall back to the
  // base allocator options as a whole (half-applied sizes could break the pool rules).
  // Defaults follow the alignment: the sizes that must be its multiples and were not set
  // are rounded up to one (the default min_split, 256, becomes 512 with alignment:512).
  AllocatorOptions& a = result.settings.allocator;
  if (is_pow2(a.alignment) && a.alignment >= 256) {
    for (const AlignedSize& k : kAlignedSizes) {
      std::size_t& v = a.*k.field;
      if (std::find(set.begin(), set.end(), k.name) != set.end() || v % a.alignment == 0)
        continue;
      if (v <= std::numeric_limits<std::size_t>::max() - a.alignment)
        v = (v / a.alignment + 1) * a.alignment;
    }
  }
  auto problems = validate(result.settings.allocator, set);
  if (!problems.empty()) {
    for (auto& p : problems) result.errors.push_back(p);
    result.settings.allocator = base.allocator;
  }
  return result;
}

std::string format_settings(const Settings& s) {
  std::string out;
  for (const Key& k : keys()) {
    // Unset limit keys are left out (an empty name or a zero fraction is no valid value).
    if (k.kind == Kind::name && k.load_text(s).empty()) continue;
    if (k.kind == Kind::fraction && std::bit_cast<double>(k.load(s)) <= 0) continue;
    if (!out.empty()) out += ',';
    if (k.kind == Kind::name) {
      out += fmt::format("{}:{}", k.name, k.load_text(s));
      continue;
    }
    std::uint64_t v = k.load(s);
    switch (k.kind) {
      case Kind::size:
        out += fmt::format("{}:{}", k.name, v);
        break;
      case Kind::boolean:
        out += fmt::format("{}:{}", k.name, v ? "true" : "false");
        break;
      case Kind::free_sync:
        out += fmt::format("{}:{}", k.name, free_sync_name(static_cast<FreeSync>(v)));
        break;
      case Kind::fraction:
        out += fmt::format("{}:{}", k.name, std::bit_cast<double>(v));  // shortest exact form
        break;
      case Kind::name:
        break;
    }
  }
  return out;
}

std::vector<std::string> settings_keys() {
  std::vector<std::string> names;
  for (const Key& k : keys()) {
    names.emplace_back(k.name);
    if (k.kind == Kind::size) names.push_back(std::string(k.name) + "_mb");
  }
  return names;
}

}  // namespace luma::core
