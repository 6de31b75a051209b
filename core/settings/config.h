// config.h - one parser for LUMA_CONF-style settings: "key:value,key:value" like
// PYTORCH_CUDA_ALLOC_CONF. Sizes are plain bytes or carry a K/M/G suffix (KiB/MiB/GiB, an
// optional trailing B or iB); every size key also has a "<key>_mb" form in MiB.
// An unknown key or malformed value is an error that names it; parsing goes on with the
// other keys, and the bad one keeps its previous value. Never throws, never aborts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/constants.h"

namespace luma::core {

// What a free must guarantee before the block is handed out again (see README).
enum class FreeSync : std::uint8_t {
  event,   // record an event on every stream that may use the block; reuse once done
  none,    // reuse at once: correct only for programs that use one stream
  device,  // synchronize the device on every free: always correct, slowest
};
// "event", "none", "device": the name LUMA_CONF takes and the statistics print.
const char* free_sync_name(FreeSync f) noexcept;

struct Settings {
  AllocatorOptions allocator;
  FreeSync free_sync = FreeSync::event;
  // cuMemGetInfo reports memory the cache holds but does not use as free.
  bool report_cached_as_free = true;
  // Serve allocations from the cache at all (false: every call goes to the driver, luma
  // only counts and traces).
  bool caching = true;
  // Allocations of this many bytes or more get a driver allocation of their own, uncached,
  // so the pointer is its allocation's start: for programs that export the pointer they
  // allocated and use the peer's opened pointer as the buffer (CUDA's simpleIPC). 0: off.
  std::uint64_t ipc_own_segment = 0;
  // A program whose own caching allocator owns its segments (PyTorch's, unless
  // PYTORCH_NO_CUDA_MEMORY_CACHING is set) is recognised, and each of its allocations gets
  // a segment of its own (counted, traced and limited, not cached again): the program
  // exports its segments' starts for IPC, and a cache on top of a cache only holds more
  // (docs/architecture.md, "A cache under a cache"). false: luma caches them anyway.
  bool program_cache = true;
  // With free_sync:event, while every use of the process's device memory is in the order
  // of one stream (one context, no stream of the program's own, no per-thread default
  // stream), a freed block is reused at once, with no fence (docs/architecture.md,
  // "Stream-ordered reuse"). false: always fence.
  bool stream_ordered_reuse = true;
  // Memory limits (docs/settings.md, "Memory limits"): the most bytes luma reserves from
  // each device. memory_limit in bytes (0: none); memory_fraction of the device's total
  // (0: none; else 0 < f <= 1); both set: the smaller applies. limit_group: the name of a
  // limit shared by every process that gives the same name (empty: the process's own).
  std::uint64_t memory_limit = 0;
  double memory_fraction = 0;
  std::string limit_group;
  // Pinned host memory (cuMemHostAlloc, cuMemAllocHost) served from luma's cache
  // (core/host_cache/); host_cache_limit bounds the bytes held in freed blocks.
  bool host_cache = true;
  std::uint64_t host_cache_limit = std::uint64_t{1} << 30;
};

// The longest limit_group name; names are [A-Za-z0-9_.-]{1,64} (they become part of a
// shared-memory object's name).
inline constexpr std::size_t kMaxLimitGroupName = 64;

// Whether name is a valid limit_group name (see above).
bool valid_limit_group(std::string_view name);

// The limit in bytes for a device of `device_total` bytes under `settings`, or nullopt
// when neither memory_limit nor memory_fraction is set.
std::optional<std::uint64_t> memory_limit_for(const Settings& settings,
                                              std::uint64_t device_total);

struct ParseResult {
  Settings settings;
  std::vector<std::string> errors;  // one line each, naming the key and the bad value
};

// Parses `text` over `base`. Empty text gives `base` unchanged and no errors.
// Sizes that must be multiples of the alignment and that `text` does not set follow an
// alignment it sets: they are rounded up to multiples of it (alignment:512 makes the
// default min_split 512), so that setting one key never makes a default invalid.
ParseResult parse_settings(std::string_view text, const Settings& base = {});

// Checks the relations between options (alignment a power of two, min_split a multiple of
// it, pools and segment sizes ordered); returns one message per violation. `set` names the
// keys the user gave: a message about a relation between a key the user set and one left
// at its default names the one the user set first and calls the other a default. Without
// `set`, every key counts as set.
std::vector<std::string> validate(const AllocatorOptions& options);
std::vector<std::string> validate(const AllocatorOptions& options,
                                  const std::vector<std::string_view>& set);

// "123", "4K", "2MiB", "1.5G" is not accepted (sizes are integers). nullopt on error with
// the reason in *error.
std::optional<std::uint64_t> parse_size(std::string_view text, std::string* error = nullptr);
std::optional<bool> parse_bool(std::string_view text);

// The settings as "key:value" pairs (for trace headers and statistics).
std::string format_settings(const Settings& settings);

// Names of every key parse_settings accepts, for documentation and tests.
std::vector<std::string> settings_keys();

}  // namespace luma::core
