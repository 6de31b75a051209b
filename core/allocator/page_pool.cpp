// page_pool.cpp - see page_pool.h.
#include "allocator/page_pool.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace luma::core {

Reservation PagePool::map(Pool p, std::uintptr_t addr, std::size_t bytes, std::size_t* made) noexcept {
  *made = 0;
  const std::size_t pages = bytes / page_;
  // Which spare pages serve (p's own first, from the back so removal is cheap), and how
  // much new memory the rest needs.
  std::vector<std::size_t> use;
  std::vector<std::uintptr_t> done;
  try {
    use.reserve(std::min(pages, spare_.size()));
    for (int pass = 0; pass < 2 && use.size() < pages; ++pass)
      for (std::size_t i = spare_.size(); i-- > 0 && use.size() < pages;)
        if ((spare_[i].pool == p) == (pass == 0)) use.push_back(i);
    done.reserve(pages);
  } catch (...) {
    return Reservation::out_of_memory();
  }
  const std::size_t fresh = pages - use.size();
  std::uint64_t created = 0;
  if (fresh != 0) {
    const Device::Memory m = dev_.create_memory(fresh * page_);
    if (m.handle == 0) return m.error == 0 ? Reservation::out_of_memory() : Reservation::failed(m.error);
    created = m.handle;
    try {
      memories_.emplace(created, Memory{fresh * page_, 0});
    } catch (...) {
      dev_.release_memory(created, fresh * page_);
      return Reservation::out_of_memory();
    }
  }
  // Map page by page; undo everything on the first failure (host or device).
  int error = 0;
  auto undo = [&] {
    for (std::uintptr_t a : done) {
      dev_.unmap_memory(reinterpret_cast<void*>(a), page_);
      pages_.erase(a);
    }
    if (created != 0) {
      dev_.release_memory(created, fresh * page_);
      memories_.erase(created);
    }
  };
  for (std::size_t k = 0; k < pages; ++k) {
    const std::uintptr_t a = addr + k * page_;
    const Page pg = k < use.size() ? spare_[use[k]].page : Page{created, (k - use.size()) * page_};
    try {
      pages_.emplace(a, pg);
    } catch (...) {
      undo();
      return Reservation::out_of_memory();
    }
    error = dev_.map_memory(reinterpret_cast<void*>(a), pg.memory, pg.offset, page_);
    if (error != 0) {
      pages_.erase(a);
      undo();
      return Reservation::failed(error);
    }
    done.push_back(a);
  }
  // Committed: the spare pages used leave the spare list, the new memory is recorded.
  std::sort(use.begin(), use.end(), std::greater<>());
  for (std::size_t i : use) {
    const Spare s = spare_[i];
    spare_bytes_[static_cast<std::size_t>(s.pool)] -= page_;
    ++memories_.find(s.page.memory)->second.mapped_pages;
    spare_[i] = spare_.back();
    spare_.pop_back();
  }
  if (created != 0) {
    memories_.find(created)->second.mapped_pages = fresh;
    *made = fresh * page_;
  }
  return {reinterpret_cast<void*>(addr), 0};
}

std::size_t PagePool::unmap(Pool p, std::uintptr_t addr, std::size_t bytes) noexcept {
  std::size_t done = 0;
  for (; done < bytes; done += page_) {
    const auto it = pages_.find(addr + done);
    if (it == pages_.end()) break;  // (never: the allocator unmaps only mapped pages)
    try {
      spare_.reserve(spare_.size() + 1);
    } catch (...) {
      break;
    }
    if (!dev_.unmap_memory(reinterpret_cast<void*>(addr + done), page_)) break;
    spare_.push_back({it->second, p});
    spare_bytes_[static_cast<std::size_t>(p)] += page_;
    --memories_.find(it->second.memory)->second.mapped_pages;
    pages_.erase(it);
  }
  return done;
}

PagePool::Trimmed PagePool::trim() noexcept {
  Trimmed t;
  if (spare_.empty()) return t;
  for (auto it = memories_.begin(); it != memories_.end();) {
    if (it->second.mapped_pages != 0 || !dev_.release_memory(it->first, it->second.bytes)) {
      ++it;
      continue;
    }
    const std::uint64_t gone = it->first;
    std::erase_if(spare_, [&](const Spare& s) {
      if (s.page.memory != gone) return false;
      spare_bytes_[static_cast<std::size_t>(s.pool)] -= page_;
      t.bytes[static_cast<std::size_t>(s.pool)] += page_;
      return true;
    });
    ++t.memories;
    it = memories_.erase(it);
  }
  return t;
}

std::size_t PagePool::forget() noexcept {
  const std::size_t n = memories_.size();
  memories_.clear();
  pages_.clear();
  spare_.clear();
  spare_bytes_ = {};
  return n;
}

std::vector<std::string> PagePool::check() const {
  std::vector<std::string> v;
  std::unordered_map<std::uint64_t, std::size_t> mapped, spared;
  for (const auto& [a, pg] : pages_) {
    if (a % page_ != 0) v.push_back(fmt::format("page pool: page {:#x} is misaligned", a));
    ++mapped[pg.memory];
  }
  std::array<std::size_t, kPools> spare_bytes{};
  for (const Spare& s : spare_) {
    ++spared[s.page.memory];
    spare_bytes[static_cast<std::size_t>(s.pool)] += page_;
  }
  if (spare_bytes != spare_bytes_) v.push_back("page pool: spare bytes per pool are miscounted");
  for (const auto& [h, m] : memories_) {
    if (mapped[h] != m.mapped_pages)
      v.push_back(fmt::format("page pool: memory {} counts {} mapped pages, {} are", h, m.mapped_pages, mapped[h]));
    if ((mapped[h] + spared[h]) * page_ != m.bytes)
      v.push_back(fmt::format("page pool: memory {} of {} bytes has {} pages mapped and {} spare", h, m.bytes,
                              mapped[h], spared[h]));
  }
  if (mapped.size() > memories_.size() || spared.size() > memories_.size()) {
    for (const auto& [h, n] : mapped)
      if (memories_.count(h) == 0) v.push_back(fmt::format("page pool: {} pages mapped from unknown memory {}", n, h));
    for (const auto& [h, n] : spared)
      if (memories_.count(h) == 0) v.push_back(fmt::format("page pool: {} spare pages of unknown memory {}", n, h));
  }
  return v;
}

}  // namespace luma::core
