// page_pool.cpp - see page_pool.h.
#include "allocator/page_pool.h"

#include <algorithm>

#include <fmt/format.h>

namespace luma::core {

std::size_t PagePool::map(std::uintptr_t addr, std::size_t bytes, std::size_t limit, std::size_t unit,
                          Reservation* why, std::size_t* made) noexcept {
  *made = 0;
  unit = std::max(unit, page_);
  // The plan: which spare memories go where (each the smallest that completes the range
  // within the limit, else the largest that fits in what is still needed), then new
  // memories of at most `unit` bytes for the rest.
  struct Step {
    std::uintptr_t at;
    std::uint64_t memory;  // 0: a new one
    std::size_t size;
    std::multimap<std::size_t, std::uint64_t>::iterator spare;
  };
  std::vector<Step> plan;
  try {
    std::vector<std::multimap<std::size_t, std::uint64_t>::iterator> taken;
    auto free_spare = [&](auto it) { return std::find(taken.begin(), taken.end(), it) == taken.end(); };
    std::size_t filled = 0;
    while (filled < bytes) {
      const std::size_t need = bytes - filled, room = limit - filled;
      auto pick = spare_.end();
      for (auto it = spare_.lower_bound(need); it != spare_.end() && it->first <= room; ++it)
        if (free_spare(it)) {
          pick = it;
          break;
        }
      if (pick == spare_.end())
        for (auto it = spare_.upper_bound(need); it != spare_.begin();)
          if (free_spare(--it)) {
            pick = it;
            break;
          }
      if (pick == spare_.end()) {  // new memories for the rest
        for (; filled < bytes; filled += plan.back().size)
          plan.push_back({addr + filled, 0, std::min(unit, bytes - filled), spare_.end()});
        break;
      }
      taken.push_back(pick);
      plan.push_back({addr + filled, pick->second, pick->first, pick});
      filled += pick->first;
    }
    memories_.reserve(memories_.size() + plan.size());
    for (const Step& s : plan) mapped_.emplace(s.at, s.memory);  // (new memories' numbers set below)
  } catch (...) {
    for (const Step& s : plan) mapped_.erase(s.at);
    *why = Reservation::out_of_memory();
    return 0;
  }
  // Undoes the first `done` steps' mappings, and every memory made for the plan.
  auto undo = [&](std::size_t done) {
    for (std::size_t i = 0; i < done; ++i) dev_.unmap_memory(reinterpret_cast<void*>(plan[i].at), plan[i].size);
    for (const Step& s : plan) {
      if (s.spare == spare_.end() && s.memory != 0) dev_.release_memory(s.memory, s.size);
      mapped_.erase(s.at);
    }
  };
  // Spare memories this map does not take go back before new memory is made, so the
  // device never holds both (they would be trimmed after the growth anyway).
  if (std::any_of(plan.begin(), plan.end(), [&](const Step& s) { return s.spare == spare_.end(); }))
    release_spare_except(plan);
  for (Step& s : plan) {
    if (s.spare != spare_.end()) continue;
    const Device::Memory m = dev_.create_memory(s.size);
    if (m.handle == 0) {
      undo(0);
      *why = m.error == 0 ? Reservation::out_of_memory() : Reservation::failed(m.error);
      return 0;
    }
    s.memory = m.handle;
    mapped_[s.at] = m.handle;
  }
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const int error = dev_.map_memory(reinterpret_cast<void*>(plan[i].at), plan[i].memory, 0, plan[i].size);
    if (error != 0) {
      undo(i);
      *why = Reservation::failed(error);
      return 0;
    }
  }
  // Committed. The new memories' records: an unordered_map node can fail to be made even
  // with buckets reserved, so all of them first, and everything undone if one fails.
  try {
    for (const Step& s : plan)
      if (s.spare == spare_.end()) memories_.emplace(s.memory, Memory{s.size, s.at, Pool::small});
  } catch (...) {
    for (const Step& s : plan)
      if (s.spare == spare_.end()) memories_.erase(s.memory);
    undo(plan.size());
    *why = Reservation::out_of_memory();
    return 0;
  }
  std::size_t total = 0;
  for (const Step& s : plan) {
    total += s.size;
    if (s.spare == spare_.end()) {
      *made += s.size;
      ++made_;
      continue;
    }
    Memory& m = memories_.find(s.memory)->second;
    spare_bytes_[static_cast<std::size_t>(m.counted)] -= m.bytes;
    m.at = s.at;
    spare_.erase(s.spare);
  }
  mapped_bytes_ += total;
  return total;
}

PagePool::Mapping PagePool::mapping_from(std::uintptr_t addr) const noexcept {
  const auto it = mapped_.lower_bound(addr);
  if (it == mapped_.end()) return {};
  return {it->first, memories_.find(it->second)->second.bytes};
}

bool PagePool::unmap(Pool p, std::uintptr_t start) noexcept {
  const auto it = mapped_.find(start);
  if (it == mapped_.end()) return false;
  Memory& m = memories_.find(it->second)->second;
  std::multimap<std::size_t, std::uint64_t>::iterator slot;
  try {
    slot = spare_.emplace(m.bytes, it->second);
  } catch (...) {
    return false;
  }
  if (!dev_.unmap_memory(reinterpret_cast<void*>(start), m.bytes)) {
    spare_.erase(slot);
    return false;
  }
  m.at = 0;
  m.counted = p;
  spare_bytes_[static_cast<std::size_t>(p)] += m.bytes;
  mapped_bytes_ -= m.bytes;
  mapped_.erase(it);
  return true;
}

template <class Plan>
void PagePool::release_spare_except(const Plan& plan) noexcept {
  for (auto it = spare_.begin(); it != spare_.end();) {
    const bool taken = std::any_of(plan.begin(), plan.end(), [&](const auto& s) { return s.spare == it; });
    const auto m = memories_.find(it->second);
    if (taken || !dev_.release_memory(it->second, m->second.bytes)) {
      ++it;
      continue;
    }
    spare_bytes_[static_cast<std::size_t>(m->second.counted)] -= m->second.bytes;
    ++released_;
    memories_.erase(m);
    it = spare_.erase(it);
  }
}

PagePool::Trimmed PagePool::trim() noexcept {
  Trimmed t;
  for (auto it = spare_.begin(); it != spare_.end();) {
    const auto m = memories_.find(it->second);
    if (!dev_.release_memory(it->second, m->second.bytes)) {
      ++it;
      continue;
    }
    const auto q = static_cast<std::size_t>(m->second.counted);
    spare_bytes_[q] -= m->second.bytes;
    t.bytes[q] += m->second.bytes;
    ++t.memories;
    ++released_;
    memories_.erase(m);
    it = spare_.erase(it);
  }
  return t;
}

std::size_t PagePool::forget() noexcept {
  const std::size_t n = memories_.size();
  memories_.clear();
  mapped_.clear();
  spare_.clear();
  mapped_bytes_ = 0;
  spare_bytes_ = {};
  return n;
}

bool PagePool::covered(std::uintptr_t addr, std::size_t bytes) const noexcept {
  auto it = mapped_.upper_bound(addr);
  if (it == mapped_.begin()) return false;
  --it;
  std::uintptr_t end = it->first;
  for (; it != mapped_.end() && it->first == end; ++it) {  // adjacent mappings
    end += memories_.find(it->second)->second.bytes;
    if (end >= addr + bytes) return true;
  }
  return false;
}

std::vector<std::string> PagePool::check() const {
  std::vector<std::string> v;
  std::size_t mapped = 0, spared = 0;
  std::array<std::size_t, kPools> spare_bytes{};
  std::uintptr_t prev_end = 0;
  for (const auto& [at, h] : mapped_) {
    const auto m = memories_.find(h);
    if (m == memories_.end()) {
      v.push_back(fmt::format("page pool: mapping {:#x} of unknown memory {}", at, h));
      continue;
    }
    if (m->second.at != at) v.push_back(fmt::format("page pool: memory {} is mapped at {:#x}, says {:#x}", h, at, m->second.at));
    if (at % page_ != 0 || m->second.bytes % page_ != 0 || m->second.bytes == 0)
      v.push_back(fmt::format("page pool: mapping {:#x} is not whole pages", at));
    if (at < prev_end) v.push_back(fmt::format("page pool: mapping {:#x} overlaps the one before", at));
    prev_end = at + m->second.bytes;
    mapped += m->second.bytes;
  }
  for (const auto& [size, h] : spare_) {
    const auto m = memories_.find(h);
    if (m == memories_.end() || m->second.at != 0 || m->second.bytes != size) {
      v.push_back(fmt::format("page pool: spare memory {} is wrong", h));
      continue;
    }
    spared += size;
    spare_bytes[static_cast<std::size_t>(m->second.counted)] += size;
  }
  if (mapped != mapped_bytes_) v.push_back(fmt::format("page pool: {} bytes mapped, counted {}", mapped, mapped_bytes_));
  if (spare_bytes != spare_bytes_ || spared != spare_bytes_[0] + spare_bytes_[1])
    v.push_back("page pool: spare bytes per pool are miscounted");
  if (mapped_.size() + spare_.size() != memories_.size())
    v.push_back(fmt::format("page pool: {} memories, {} mapped and {} spare", memories_.size(), mapped_.size(), spare_.size()));
  return v;
}

}  // namespace luma::core
