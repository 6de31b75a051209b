// live_record_test.cpp - the live-statistics record (core/live/, docs/live-record.md): its
// layout and file name, the writer's figures from allocator events, the reader's
// refusals, the sequence lock under a concurrent writer, the rows and tables of `luma
// top`, /proc/PID/stat, and the trust check of shared files.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.h"
#include "host_device.h"
#include "io/file_trust.h"
#include "live/live_reader.h"
#include "live/live_record.h"
#include "live/live_view.h"
#include "live/live_writer.h"
#include "live/proc_stat.h"
#include "replay/context_allocator.h"

namespace luma::core::live {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

// A record's memory, zeroed as a new file's is.
struct Memory {
  alignas(64) unsigned char bytes[kRecordBytes] = {};
  void* base() { return bytes; }
};

RecordIdentity identity() {
  RecordIdentity id;
  id.pid = 4242;
  id.uid = 1000;
  id.start_time = 123456;
  id.created_unix_ns = 1;
  id.map_address = 0x7f0000000000;
  id.map_bytes = 12288;
  id.exe = "train";
  id.command = "python train.py --epochs 1";
  id.group = "job-1";
  return id;
}

ReadResult read(Memory& m) { return read_record(m.base(), kRecordBytes); }

TEST(LiveRecordLayout, IsTheSpecifiedOne) {
  // docs/live-record.md states these offsets; a change here is a new layout version.
  EXPECT_EQ(sizeof(Header), 512u);
  EXPECT_EQ(sizeof(Slot), 128u);
  EXPECT_EQ(offsetof(Header, pid), 24u);
  EXPECT_EQ(offsetof(Header, start_time), 32u);
  EXPECT_EQ(offsetof(Header, map_address), 48u);
  EXPECT_EQ(offsetof(Header, slots_used), 68u);
  EXPECT_EQ(offsetof(Slot, seq), 0u);
  EXPECT_EQ(offsetof(Slot, device), 8u);
  EXPECT_EQ(offsetof(Slot, pending_free_bytes), 48u);
  EXPECT_EQ(offsetof(Slot, limit_bytes), 56u);
  EXPECT_EQ(kRecordBytes, 512u + 64u * 128u);
  EXPECT_EQ(std::memcmp(&kMagic, "lumalive", 8), 0);
}

TEST(LiveRecordName, HoldsTheUserAndThePid) {
  EXPECT_EQ(record_file_name(1000, 4242), "luma-live.1000.4242");
  const auto n = parse_record_file_name("luma-live.1000.4242");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->uid, 1000u);
  EXPECT_EQ(n->pid, 4242u);
  for (const char* other : {"luma-live.1000", "luma-live.1000.4242.tmp", ".luma-live.1000.4242.tmp",
                            "luma-live.01000.4242", "luma-live.1000.-1", "luma-live..4242", "luma.job.1000",
                            "luma-live.1000.4242x", "luma-live.1000.99999999999"})
    EXPECT_FALSE(parse_record_file_name(other)) << other;
}

TEST(LiveRecord, ALaidOutRecordReadsBackItsIdentity) {
  Memory m;
  init_record(m.base(), identity());
  ReadResult r = read(m);
  ASSERT_EQ(r.status, ReadStatus::ok) << r.error;
  EXPECT_EQ(r.record.state, RecordState::making);
  publish_record(m.base());
  r = read(m);
  EXPECT_EQ(r.record.state, RecordState::live);
  EXPECT_EQ(r.record.version, kVersion);
  EXPECT_EQ(r.record.pid, 4242u);
  EXPECT_EQ(r.record.uid, 1000u);
  EXPECT_EQ(r.record.start_time, 123456u);
  EXPECT_EQ(r.record.map_address, 0x7f0000000000u);
  EXPECT_EQ(r.record.map_bytes, 12288u);
  EXPECT_EQ(r.record.exe, "train");
  EXPECT_EQ(r.record.command, "python train.py --epochs 1");
  EXPECT_EQ(r.record.group, "job-1");
  EXPECT_TRUE(r.record.slots.empty());
  close_record(m.base());
  EXPECT_EQ(read(m).record.state, RecordState::closed);
}

TEST(LiveRecord, LongTextIsCutToItsField) {
  Memory m;
  RecordIdentity id = identity();
  id.exe = std::string(200, 'e');
  id.command = std::string(1000, 'c');
  init_record(m.base(), id);
  ReadResult r = read(m);
  EXPECT_EQ(r.record.exe, std::string(kExeBytes - 1, 'e'));
  EXPECT_EQ(r.record.command, std::string(kCommandBytes - 1, 'c'));
}

// The caching allocator's slot (set_live_writer) shows, after every call, what its
// statistics say: allocated, reserved and their peaks, the bytes freed whose fence is
// pending (active but no longer allocated), the OOMs; a lost context's memory reads 0.
TEST(LiveSlotWriter, TheCachingAllocatorsSlotShowsItsStatistics) {
  Memory m;
  init_record(m.base(), identity());
  HostDevice dev(64 * MiB);
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  CachingAllocator a(dev, 0);
  SlotWriter w;
  w.bind(m.base(), 0, 0, std::nullopt, false);
  a.set_live_writer(&w);
  auto same = [&](const char* when) {
    const SlotValues s = read(m).record.slots.at(0);
    const DeviceStats d = a.stats();
    EXPECT_EQ(s.allocated_bytes, static_cast<std::uint64_t>(d.allocated_bytes.all.current)) << when;
    EXPECT_EQ(s.peak_allocated_bytes, static_cast<std::uint64_t>(d.allocated_bytes.all.peak)) << when;
    EXPECT_EQ(s.reserved_bytes, static_cast<std::uint64_t>(d.reserved_bytes.all.current)) << when;
    EXPECT_EQ(s.peak_reserved_bytes, static_cast<std::uint64_t>(d.reserved_bytes.all.peak)) << when;
    EXPECT_EQ(s.pending_free_bytes,
              static_cast<std::uint64_t>(d.active_bytes.all.current - d.allocated_bytes.all.current))
        << when;
    EXPECT_EQ(s.oom_count, d.num_ooms) << when;
    return s;
  };
  void* p = a.allocate(1000).ptr;
  void* q = a.allocate(3 * MiB).ptr;
  ASSERT_TRUE(p && q);
  SlotValues s = same("two allocations");
  EXPECT_EQ(s.allocated_bytes, 1024 + 3 * MiB);
  EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
  ASSERT_EQ(a.free(q), FreeStatus::ok);
  s = same("a free whose fence is pending");
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.pending_free_bytes, 3 * MiB);
  dev.complete_all_fences();
  void* r = a.allocate(512).ptr;  // polls the fences: the free completes
  ASSERT_TRUE(r);
  s = same("after the fence");
  EXPECT_EQ(s.pending_free_bytes, 0u);
  EXPECT_EQ(a.allocate(128 * MiB).status, AllocStatus::out_of_memory);
  s = same("an out-of-memory error");
  EXPECT_EQ(s.oom_count, 1u);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  ASSERT_EQ(a.free(r), FreeStatus::ok);
  dev.complete_all_fences();
  a.empty_cache();
  s = same("empty_cache");
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_GT(s.peak_reserved_bytes, 0u);
  void* t = a.allocate(4096).ptr;
  ASSERT_TRUE(t);
  a.drop_device_memory();
  s = same("the context's memory gone");
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
}

// With a plan, the arena and the cache each keep a slot of their own (two locks, one
// writer per slot): the arena's follows its events; once the program leaves the plan the
// cache's slot shows what the cache serves.
TEST(LiveSlotWriter, APlansArenaAndTheCacheKeepOneSlotEach) {
  Memory m;
  init_record(m.base(), identity());
  DevicePlanFile d;
  d.device = 0;
  d.alignment = 256;
  for (int i = 0; i < 2; ++i) {  // two 4 KiB blocks, one after the other, both at offset 0
    PlannedAllocation a;
    a.name = std::to_string(i);
    a.requested = 4000;
    a.size = 4096;
    a.offset = 0;
    d.allocations.push_back(a);
  }
  d.arena = 4096;
  PlanFile plan;
  plan.devices.push_back(d);
  HostDevice dev;
  ContextAllocator a(dev, 0, {}, &plan);
  ASSERT_TRUE(a.has_plan());
  SlotWriter cache, arena;
  cache.bind(m.base(), 0, 0, std::nullopt, false);
  arena.bind(m.base(), 1, 0, std::nullopt, false);
  a.set_live_writers(&cache, &arena);
  void* p = a.allocate(4000).ptr;
  ASSERT_NE(p, nullptr);
  std::vector<SlotValues> s = read(m).record.slots;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].allocated_bytes, 4096u);
  EXPECT_EQ(s[1].reserved_bytes, 4096u);
  EXPECT_EQ(s[0].allocated_bytes, 0u);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  void* q = a.allocate(100000).ptr;  // not the plan's next size: the cache serves from now on
  ASSERT_NE(q, nullptr);
  s = read(m).record.slots;
  EXPECT_EQ(s[1].allocated_bytes, 0u);
  EXPECT_EQ(s[0].allocated_bytes, 100096u);
  EXPECT_GE(s[0].reserved_bytes, 100096u);
  const std::vector<DeviceRow> rows = device_rows(read(m).record);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].allocated_bytes, 100096u);
  EXPECT_EQ(rows[0].reserved_bytes, a.stats().reserved_bytes.all.current);
}

// The figures follow the allocator's events (plan replay's arena keeps its slot so): alloc and free_requested move allocated,
// free_requested and free_completed pending, reserve and release reserved, oom the count.
TEST(LiveSlotWriter, FollowsTheAllocatorsEvents) {
  Memory m;
  init_record(m.base(), identity());
  ASSERT_EQ(next_free_slot(m.base()), 0u);
  SlotWriter w;
  w.bind(m.base(), 0, 3, 64 * MiB, true);
  EXPECT_EQ(next_free_slot(m.base()), 1u);
  w.on_event(EventKind::segment_reserve, 20 * MiB);
  w.on_event(EventKind::alloc, 4 * MiB);
  w.on_event(EventKind::alloc, 6 * MiB);
  w.on_event(EventKind::free_requested, 4 * MiB);
  w.on_event(EventKind::oom, 0);
  w.on_event(EventKind::empty_cache, 123);  // changes nothing
  ReadResult r = read(m);
  ASSERT_EQ(r.status, ReadStatus::ok) << r.error;
  ASSERT_EQ(r.record.slots.size(), 1u);
  SlotValues s = r.record.slots[0];
  EXPECT_EQ(s.device, 3);
  EXPECT_EQ(s.flags, kSlotInUse | kSlotHasLimit | kSlotGroupLimit);
  EXPECT_EQ(s.allocated_bytes, 6 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, 10 * MiB);
  EXPECT_EQ(s.pending_free_bytes, 4 * MiB);
  EXPECT_EQ(s.reserved_bytes, 20 * MiB);
  EXPECT_EQ(s.peak_reserved_bytes, 20 * MiB);
  EXPECT_EQ(s.limit_bytes, 64 * MiB);
  EXPECT_EQ(s.oom_count, 1u);
  w.on_event(EventKind::free_completed, 4 * MiB);
  w.on_event(EventKind::free_requested, 6 * MiB);
  w.on_event(EventKind::free_completed, 6 * MiB);
  w.on_event(EventKind::segment_release, 20 * MiB);
  s = read(m).record.slots[0];
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.pending_free_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 20 * MiB);
}

TEST(LiveSlotWriter, NoLimitNoLimitFlags) {
  Memory m;
  init_record(m.base(), identity());
  SlotWriter w;
  w.bind(m.base(), 0, 0, std::nullopt, true);
  const SlotValues s = read(m).record.slots.at(0);
  EXPECT_EQ(s.flags, kSlotInUse);
  EXPECT_EQ(s.limit_bytes, 0u);
}

// A destroyed context's slot, taken over by its device's next allocator: the peaks and
// the OOM count are the device's history, and the new figures continue from them.
TEST(LiveSlotWriter, ATakenOverSlotKeepsTheDevicesHistory) {
  Memory m;
  init_record(m.base(), identity());
  SlotWriter first;
  first.bind(m.base(), 0, 1, std::nullopt, false);
  first.on_event(EventKind::segment_reserve, 8 * MiB);
  first.on_event(EventKind::alloc, 8 * MiB);
  first.on_event(EventKind::oom, 0);
  // The context's memory goes (drop_device_memory's events), then the slot is released.
  first.on_event(EventKind::free_requested, 8 * MiB);
  first.on_event(EventKind::free_completed, 8 * MiB);
  first.on_event(EventKind::segment_release, 8 * MiB);
  SlotWriter next;
  next.bind(m.base(), 0, 1, 32 * MiB, false);
  next.on_event(EventKind::segment_reserve, 2 * MiB);
  next.on_event(EventKind::oom, 0);
  ReadResult r = read(m);
  ASSERT_EQ(r.record.slots.size(), 1u);
  const SlotValues s = r.record.slots[0];
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.peak_reserved_bytes, 8 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, 8 * MiB);
  EXPECT_EQ(s.oom_count, 2u);
  EXPECT_EQ(s.limit_bytes, 32 * MiB);
  EXPECT_EQ(next_free_slot(m.base()), 1u);
}

TEST(LiveSlotWriter, AllSlotsClaimedNoneIsFree) {
  Memory m;
  init_record(m.base(), identity());
  std::vector<SlotWriter> w(kSlots);
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    ASSERT_EQ(next_free_slot(m.base()), i);
    w[i].bind(m.base(), i, static_cast<int>(i % 4), std::nullopt, false);
  }
  EXPECT_FALSE(next_free_slot(m.base()));
  EXPECT_EQ(read(m).record.slots.size(), kSlots);
}

TEST(LiveSlotWriter, UnboundWritesNothing) {
  SlotWriter w;
  EXPECT_FALSE(w.bound());
  w.on_event(EventKind::alloc, 1);  // no slot: no crash, nothing to see
}

// Every damage is refused with what is wrong; never misread.
TEST(LiveReader, RefusesWhatIsNotARecordOfThisLayout) {
  Memory m;
  init_record(m.base(), identity());
  publish_record(m.base());
  auto* h = static_cast<Header*>(m.base());
  auto refused = [&](std::size_t size, const char* phrase) {
    const ReadResult r = read_record(m.base(), size);
    EXPECT_EQ(r.status, ReadStatus::damaged);
    EXPECT_NE(r.error.find(phrase), std::string::npos) << r.error;
  };
  refused(0, "less than a record's header");
  refused(100, "less than a record's header");
  refused(kRecordBytes - 1, "less than a record (");
  h->magic = 0x1234;
  refused(kRecordBytes, "bad magic number");
  h->magic = kMagic;
  h->version = kVersion + 1;
  refused(kRecordBytes, "layout version 2, this luma reads 1");
  h->version = kVersion;
  h->slot_bytes = 64;
  refused(kRecordBytes, "sizes of another");
  h->slot_bytes = sizeof(Slot);
  h->state.store(7);
  refused(kRecordBytes, "unknown state 7");
  h->state.store(1);
  h->slots_used.store(kSlots + 1);
  refused(kRecordBytes, "claims 65 slots");
  h->slots_used.store(0);
  EXPECT_EQ(read(m).status, ReadStatus::ok);
}

// A writer stopped in the middle of an update (SIGSTOP, a debugger) leaves its sequence
// number odd: the reader gives up on the record, saying so, rather than wait or misread.
TEST(LiveReader, ASlotLeftMidUpdateIsBusy) {
  Memory m;
  init_record(m.base(), identity());
  SlotWriter w;
  w.bind(m.base(), 0, 0, std::nullopt, false);
  slot_at(m.base(), 0)->seq.fetch_add(1);
  const ReadResult r = read_record(m.base(), kRecordBytes, std::chrono::milliseconds(50));
  EXPECT_EQ(r.status, ReadStatus::busy);
  EXPECT_NE(r.error.find("has slot 0 mid-update"), std::string::npos) << r.error;
}

// The sequence lock: a reader copying while the writer changes two figures together
// never sees one changed and not the other. The writer cycles alloc(n), free_requested(n),
// free_completed(n) with n growing: at every update's end either allocated or pending is
// 0, and the peak (a new one at every alloc) is at least the allocated bytes; a torn copy
// shows both non-zero (allocated read before the free's stores, pending after them), or
// the new allocated bytes with the old peak. (Without the sequence numbers' check, tears
// show in some runs only: the windows are a few nanoseconds wide.)
TEST(LiveReader, ACopyIsNeverTornByAConcurrentWriter) {
  Memory m;
  init_record(m.base(), identity());
  SlotWriter w;
  w.bind(m.base(), 0, 0, std::nullopt, false);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint64_t n = 1; !stop.load(std::memory_order_relaxed); ++n) {
      w.on_event(EventKind::alloc, n);
      w.on_event(EventKind::free_requested, n);
      w.on_event(EventKind::free_completed, n);
    }
  });
  std::size_t reads = 0, torn = 0, busy = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until || reads < 1000) {
    const ReadResult r = read(m);
    if (r.status == ReadStatus::busy) {
      ++busy;
      continue;
    }
    ASSERT_EQ(r.status, ReadStatus::ok) << r.error;
    const SlotValues& s = r.record.slots.at(0);
    if ((s.allocated_bytes != 0 && s.pending_free_bytes != 0) || s.peak_allocated_bytes < s.allocated_bytes)
      ++torn;
    ++reads;
  }
  stop.store(true);
  writer.join();
  EXPECT_EQ(torn, 0u) << "of " << reads << " copies";
  EXPECT_EQ(busy, 0u) << "a running writer never keeps a slot mid-update for a second";
}

RecordView record_with(std::vector<SlotValues> slots, unsigned pid = 10, std::string group = "") {
  RecordView r;
  r.pid = pid;
  r.exe = "prog";
  r.command = "prog hold";
  r.group = std::move(group);
  r.state = RecordState::live;
  r.slots = std::move(slots);
  return r;
}

SlotValues slot(int device, std::uint64_t allocated, std::uint64_t reserved, std::uint64_t peak_reserved,
                std::uint32_t flags = kSlotInUse, std::uint64_t limit = 0) {
  SlotValues s;
  s.device = device;
  s.flags = flags;
  s.allocated_bytes = allocated;
  s.peak_allocated_bytes = allocated;
  s.reserved_bytes = reserved;
  s.peak_reserved_bytes = peak_reserved;
  s.limit_bytes = limit;
  return s;
}

// Two contexts of one device are one row: currents and counts add up; a peak is the larger
// of the peaks and of the summed current (contexts that followed one another).
TEST(LiveView, ADevicesSlotsAreOneRow) {
  SlotValues a = slot(0, 1 * MiB, 4 * MiB, 10 * MiB);
  a.oom_count = 2;
  a.pending_free_bytes = 1 * MiB;
  SlotValues b = slot(0, 2 * MiB, 8 * MiB, 8 * MiB);
  b.oom_count = 1;
  const SlotValues c = slot(1, 3 * MiB, 6 * MiB, 6 * MiB);
  std::vector<DeviceRow> rows = device_rows(record_with({a, c, b}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].device, 0);
  EXPECT_EQ(rows[0].allocated_bytes, 3 * MiB);
  EXPECT_EQ(rows[0].reserved_bytes, 12 * MiB);
  EXPECT_EQ(rows[0].peak_reserved_bytes, 12 * MiB);  // the summed current beats either peak
  EXPECT_EQ(rows[0].pending_free_bytes, 1 * MiB);
  EXPECT_EQ(rows[0].oom_count, 3u);
  EXPECT_FALSE(rows[0].limit_bytes);
  EXPECT_EQ(rows[1].device, 1);
  EXPECT_EQ(rows[1].reserved_bytes, 6 * MiB);
  EXPECT_EQ(rows[0].pid, 10u);
  EXPECT_EQ(rows[0].exe, "prog");
}

TEST(LiveView, RowsAreSortedByReservedThenPidAndDevice) {
  std::vector<DeviceRow> rows;
  for (const auto& [pid, dev, reserved] : std::vector<std::tuple<unsigned, int, std::uint64_t>>{
           {3, 0, 1 * MiB}, {1, 1, 5 * MiB}, {2, 0, 5 * MiB}, {1, 0, 5 * MiB}, {4, 0, 9 * MiB}}) {
    DeviceRow r;
    r.pid = pid;
    r.device = dev;
    r.reserved_bytes = reserved;
    rows.push_back(r);
  }
  sort_rows(rows);
  std::vector<std::pair<unsigned, int>> order;
  for (const DeviceRow& r : rows) order.emplace_back(r.pid, r.device);
  EXPECT_EQ(order, (std::vector<std::pair<unsigned, int>>{{4, 0}, {1, 0}, {1, 1}, {2, 0}, {3, 0}}));
}

// A group's budget and what its members reserve under it, per device; a process limit
// outside any group is no group's.
TEST(LiveView, GroupsAddUpTheirMembers) {
  const std::uint32_t grouped = kSlotInUse | kSlotHasLimit | kSlotGroupLimit;
  std::vector<DeviceRow> rows;
  for (const RecordView& r :
       {record_with({slot(0, 1 * MiB, 2 * MiB, 2 * MiB, grouped, 64 * MiB)}, 1, "job"),
        record_with({slot(0, 3 * MiB, 4 * MiB, 4 * MiB, grouped, 64 * MiB),
                     slot(1, 0, 1 * MiB, 1 * MiB, grouped, 64 * MiB)}, 2, "job"),
        record_with({slot(0, 1 * MiB, 8 * MiB, 8 * MiB, kSlotInUse | kSlotHasLimit, 16 * MiB)}, 3)}) {
    const std::vector<DeviceRow> mine = device_rows(r);
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  const std::vector<GroupRow> groups = group_rows(rows);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].group, "job");
  EXPECT_EQ(groups[0].device, 0);
  EXPECT_EQ(groups[0].budget_bytes, 64 * MiB);
  EXPECT_EQ(groups[0].reserved_bytes, 6 * MiB);
  EXPECT_EQ(groups[0].members, 2u);
  EXPECT_EQ(groups[1].device, 1);
  EXPECT_EQ(groups[1].members, 1u);
  sort_rows(rows);
  const std::string text = format_top_text(rows, groups, TopFormat{true});
  EXPECT_NE(text.find("3 processes under luma: 15728640 reserved, 5242880 allocated"), std::string::npos) << text;
  EXPECT_NE(text.find("group job on device 0: 6291456 reserved of its 67108864 budget by 2 processes"),
            std::string::npos)
      << text;
  // The largest reserved first: process 3 (8 MiB), with its own limit and no group.
  const std::size_t first_row = text.find('\n', text.find("OOMS")) + 1;
  const std::string row = text.substr(first_row, text.find('\n', first_row) - first_row);
  EXPECT_EQ(row.substr(0, 8), "       3") << text;
  EXPECT_NE(row.find(" 8388608 "), std::string::npos) << row;
  EXPECT_NE(row.find(" 16777216 "), std::string::npos) << row;
  EXPECT_NE(row.find(" - "), std::string::npos) << "no group: " << row;
  const std::string human = format_top_text(rows, groups, TopFormat{false});
  EXPECT_NE(human.find("8.0 MiB"), std::string::npos) << human;
}

TEST(LiveView, JsonHoldsEveryRowGroupAndSkippedFile) {
  std::vector<DeviceRow> rows = device_rows(record_with(
      {slot(0, 1 * MiB, 2 * MiB, 2 * MiB, kSlotInUse | kSlotHasLimit | kSlotGroupLimit, 64 * MiB)}, 7, "job"));
  const std::vector<DeviceRow> unlimited = device_rows(record_with({slot(2, 5, 6, 7)}, 8));
  rows.insert(rows.end(), unlimited.begin(), unlimited.end());
  const auto j = nlohmann::json::parse(
      format_top_json(rows, group_rows(rows), {{"/dev/shm/luma-live.0.1", "is writable by others (mode 0666)"}}));
  EXPECT_EQ(j["processes"], 2);
  ASSERT_EQ(j["rows"].size(), 2u);
  const auto& r = j["rows"][0];
  EXPECT_EQ(r["pid"], 7);
  EXPECT_EQ(r["device"], 0);
  EXPECT_EQ(r["command"], "prog hold");
  EXPECT_EQ(r["exe"], "prog");
  EXPECT_EQ(r["allocated_bytes"], 1 * MiB);
  EXPECT_EQ(r["reserved_bytes"], 2 * MiB);
  EXPECT_EQ(r["peak_reserved_bytes"], 2 * MiB);
  EXPECT_EQ(r["peak_allocated_bytes"], 1 * MiB);
  EXPECT_EQ(r["pending_free_bytes"], 0);
  EXPECT_EQ(r["limit_bytes"], 64 * MiB);
  EXPECT_EQ(r["group"], "job");
  EXPECT_EQ(r["group_limit"], true);
  EXPECT_EQ(r["oom_count"], 0);
  EXPECT_TRUE(j["rows"][1]["limit_bytes"].is_null());
  EXPECT_EQ(j["groups"][0]["budget_bytes"], 64 * MiB);
  EXPECT_EQ(j["skipped"][0]["reason"], "is writable by others (mode 0666)");
}

TEST(ProcStat, ReadsStateAndStartTimeAfterTheCommandName) {
  // A command name with spaces and parentheses of its own: fields count after the last ')'.
  const char* line =
      "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
  const auto s = parse_proc_stat(line);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->start_time, 987654u);
  EXPECT_FALSE(parse_proc_stat("4242 (a) S 1 2 3"));
  EXPECT_FALSE(parse_proc_stat("no parenthesis"));
  EXPECT_FALSE(parse_proc_stat(""));
}

TEST(ProcStat, ThisProcessIsAliveUnderItsOwnStartTimeOnly) {
  const auto self = read_proc_stat(static_cast<unsigned>(getpid()));
  ASSERT_TRUE(self);
  EXPECT_TRUE(process_alive(static_cast<unsigned>(getpid()), self->start_time));
  EXPECT_FALSE(process_alive(static_cast<unsigned>(getpid()), self->start_time + 1)) << "a reused pid";
  EXPECT_FALSE(process_alive(0, 0));
  EXPECT_FALSE(read_proc_stat(0));
}

TEST(FileTrust, OnlyThisUsersOwnFileThatNobodyElseMayWrite) {
  struct stat st {};
  st.st_mode = S_IFREG | 0600;
  st.st_uid = 1000;
  EXPECT_EQ(untrusted_file_reason(st, 1000), "");
  st.st_mode = S_IFREG | 0644;
  EXPECT_EQ(untrusted_file_reason(st, 1000), "") << "others may read it, not write it";
  EXPECT_EQ(untrusted_file_reason(st, 0), "is owned by uid 1000, not 0");
  st.st_mode = S_IFREG | 0666;
  EXPECT_EQ(untrusted_file_reason(st, 1000), "is writable by others (mode 0666)");
  st.st_mode = S_IFREG | 0620;
  EXPECT_EQ(untrusted_file_reason(st, 1000), "is writable by its group (mode 0620)");
  st.st_mode = S_IFLNK | 0777;
  EXPECT_EQ(untrusted_file_reason(st, 1000), "is not a regular file");
  st.st_mode = S_IFIFO | 0600;
  EXPECT_EQ(untrusted_file_reason(st, 1000), "is not a regular file");
}

}  // namespace
}  // namespace luma::core::live
