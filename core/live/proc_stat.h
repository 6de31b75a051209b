// proc_stat.h - what /proc/PID/stat says about a process that tells it apart from any
// other that gets the same pid later: its state and its start time. Both shared-memory
// tables that outlive a killed process (a limit_group's member slots, a live record)
// judge liveness with it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace luma::core::live {

struct ProcStat {
  char state = 0;               // field 3: R, S, D, Z (zombie), X (dead), ...
  std::uint64_t start_time = 0;  // field 22: clock ticks since boot
};

// Fields 3 and 22 of a /proc/PID/stat line. The command name (field 2) may hold spaces
// and parentheses: fields are counted after its last ')'. nullopt when malformed.
std::optional<ProcStat> parse_proc_stat(std::string_view line) noexcept;

// /proc/PID/stat read and parsed; nullopt when the process is gone (or pid is 0).
std::optional<ProcStat> read_proc_stat(unsigned pid) noexcept;

// Whether the process that had `start_time` still runs as pid: its stat is readable, it
// is not a zombie or dead (an exited process's memory is freed), and the start time is
// the same (else the pid was reused).
bool process_alive(unsigned pid, std::uint64_t start_time) noexcept;

// Whether process pid still maps [address, address + bytes) from the file (dev, ino):
// /proc/PID/map_files/<from>-<to> resolves to that file. A process that exec'd another
// program keeps its pid and start time but no longer maps it. nullopt when it cannot be
// told (no map_files, or no permission to look: Linux before 4.3, a restricted /proc).
std::optional<bool> process_maps_file(unsigned pid, std::uint64_t address, std::uint64_t bytes, dev_t dev,
                                      ino_t ino) noexcept;

}  // namespace luma::core::live
