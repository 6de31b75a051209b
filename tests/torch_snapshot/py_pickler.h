// py_pickler.h - a small pickler for the tests, writing what Python's pickle.dump writes
// (Lib/pickle.py) for None, bool, int, float, str, bytes, tuple, list and dict at protocols
// 2 to 5: PROTO; FRAME at protocol 4 and above (one frame per 64 KiB, as Python's framer);
// the memo (MEMOIZE from protocol 4, BINPUT / LONG_BINPUT before) for strings, bytes and
// containers, shared by object identity (a Py copied is the same object; strings equal in
// value are shared too, as the interned keys of PyTorch's dicts are); containers in batches
// of 1000 with APPEND / SETITEM for a batch of one. The tests build snapshots with it, and
// bytes of their own to break the reader.
#pragma once

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace luma::test {

struct Py {
  struct None {};
  struct Bytes {
    std::string b;
  };
  struct Tuple {
    std::vector<Py> items;
  };
  struct List {
    std::vector<Py> items;
  };
  struct Dict {
    std::vector<std::pair<Py, Py>> entries;
  };
  using Data = std::variant<None, bool, std::int64_t, std::uint64_t, double, std::string, Bytes, Tuple, List, Dict>;
  std::shared_ptr<Data> data = std::make_shared<Data>(None{});

  Py() = default;
  Py(bool b) : data(std::make_shared<Data>(b)) {}
  Py(int v) : data(std::make_shared<Data>(std::int64_t{v})) {}
  Py(std::int64_t v) : data(std::make_shared<Data>(v)) {}
  Py(std::uint64_t v) : data(std::make_shared<Data>(v)) {}
  Py(double v) : data(std::make_shared<Data>(v)) {}
  Py(const char* s) : data(std::make_shared<Data>(std::string(s))) {}
  Py(std::string s) : data(std::make_shared<Data>(std::move(s))) {}

  static Py bytes(std::string b) { return make(Bytes{std::move(b)}); }
  static Py tuple(std::vector<Py> items) { return make(Tuple{std::move(items)}); }
  static Py list(std::vector<Py> items = {}) { return make(List{std::move(items)}); }
  static Py dict(std::vector<std::pair<Py, Py>> entries = {}) { return make(Dict{std::move(entries)}); }
  static Py make(Data d) {
    Py p;
    p.data = std::make_shared<Data>(std::move(d));
    return p;
  }
  // Adds to a list or dict made above (before it is pickled).
  void append(Py v) { std::get<List>(*data).items.push_back(std::move(v)); }
  void set(Py k, Py v) { std::get<Dict>(*data).entries.emplace_back(std::move(k), std::move(v)); }
};

class PyPickler {
 public:
  explicit PyPickler(int protocol) : proto_(protocol) {}

  std::string dump(const Py& v) {
    out_.clear();
    frame_.clear();
    memo_.clear();
    strings_.clear();
    out_ += '\x80';
    out_ += static_cast<char>(proto_);
    save(v);
    op('.');
    commit_frame(true);
    return out_;
  }

 private:
  void op(char c) { frame_ += c; }
  void raw(const std::string& s) { frame_ += s; }
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) frame_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  // At an opcode boundary: Python's framer commits a frame once it holds 64 KiB.
  void commit_frame(bool force = false) {
    if (proto_ < 4) {
      out_ += frame_;
      frame_.clear();
      return;
    }
    if (frame_.size() >= 64 * 1024 || (force && !frame_.empty())) {
      if (frame_.size() >= 4) {  // _FRAME_SIZE_MIN
        out_ += '\x95';
        for (int i = 0; i < 8; ++i) out_ += static_cast<char>((frame_.size() >> (8 * i)) & 0xff);
      }
      out_ += frame_;
      frame_.clear();
    }
  }
  void memoize(const void* id) {
    const auto index = static_cast<std::uint32_t>(memo_.size());
    memo_[id] = index;
    if (proto_ >= 4) {
      op('\x94');
    } else if (index < 256) {
      op('q');
      le(index, 1);
    } else {
      op('r');
      le(index, 4);
    }
  }
  bool get(const void* id) {
    const auto it = memo_.find(id);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      op('h');
      le(it->second, 1);
    } else {
      op('j');
      le(it->second, 4);
    }
    return true;
  }
  void save_int(std::int64_t v) {
    if (v >= 0 && v <= 0xff) {
      op('K');
      le(static_cast<std::uint64_t>(v), 1);
    } else if (v >= 0 && v <= 0xffff) {
      op('M');
      le(static_cast<std::uint64_t>(v), 2);
    } else if (v >= -0x80000000LL && v <= 0x7fffffffLL) {
      op('J');
      le(static_cast<std::uint64_t>(v), 4);
    } else {
      // encode_long: the fewest bytes of two's complement that keep the sign
      std::string bytes;
      std::int64_t x = v;
      for (;;) {
        bytes += static_cast<char>(x & 0xff);
        const bool sign = (bytes.back() & 0x80) != 0;
        x >>= 8;  // arithmetic shift
        if ((x == 0 && !sign) || (x == -1 && sign)) break;
      }
      op('\x8a');
      le(bytes.size(), 1);
      raw(bytes);
    }
  }
  void save_uint(std::uint64_t v) {
    if (v <= 0x7fffffffffffffffULL) return save_int(static_cast<std::int64_t>(v));
    op('\x8a');
    le(9, 1);
    le(v, 8);
    frame_ += '\0';
  }
  void save(const Py& v) {
    const void* id = v.data.get();
    struct Visitor {
      PyPickler& p;
      const void* id;
      void operator()(const Py::None&) { p.op('N'); }
      void operator()(bool b) { p.op(b ? '\x88' : '\x89'); }
      void operator()(std::int64_t i) { p.save_int(i); }
      void operator()(std::uint64_t u) { p.save_uint(u); }
      void operator()(double d) {
        p.op('G');
        const auto bits = std::bit_cast<std::uint64_t>(d);
        for (int i = 7; i >= 0; --i) p.frame_ += static_cast<char>((bits >> (8 * i)) & 0xff);
      }
      void operator()(const std::string& s) {
        const auto it = p.strings_.find(s);  // an equal string: the same (interned) object
        if (it != p.strings_.end() && p.get(it->second)) return;
        if (p.get(id)) return;
        if (p.proto_ >= 4 && s.size() <= 0xff) {
          p.op('\x8c');
          p.le(s.size(), 1);
        } else {
          p.op('X');
          p.le(s.size(), 4);
        }
        p.raw(s);
        p.strings_[s] = id;
        p.memoize(id);
      }
      void operator()(const Py::Bytes& b) {
        if (p.proto_ < 3) throw std::logic_error("bytes need protocol 3 (protocol 2 writes a REDUCE)");
        if (p.get(id)) return;
        if (b.b.size() <= 0xff) {
          p.op('C');
          p.le(b.b.size(), 1);
        } else {
          p.op('B');
          p.le(b.b.size(), 4);
        }
        p.raw(b.b);
        p.memoize(id);
      }
      void operator()(const Py::Tuple& t) {
        if (p.get(id)) return;
        if (t.items.empty()) {
          p.op(')');
          return;  // Python keeps the empty tuple out of the memo
        }
        if (t.items.size() <= 3) {
          for (const Py& i : t.items) p.save(i);
          p.op(static_cast<char>(0x84 + t.items.size()));
        } else {
          p.op('(');
          for (const Py& i : t.items) p.save(i);
          p.op('t');
        }
        p.memoize(id);
      }
      void operator()(const Py::List& l) {
        if (p.get(id)) return;
        p.op(']');
        p.memoize(id);
        for (std::size_t at = 0; at < l.items.size(); at += 1000) {
          const std::size_t n = std::min<std::size_t>(1000, l.items.size() - at);
          if (n > 1) p.op('(');
          for (std::size_t i = at; i < at + n; ++i) p.save(l.items[i]);
          p.op(n > 1 ? 'e' : 'a');
        }
      }
      void operator()(const Py::Dict& d) {
        if (p.get(id)) return;
        p.op('}');
        p.memoize(id);
        for (std::size_t at = 0; at < d.entries.size(); at += 1000) {
          const std::size_t n = std::min<std::size_t>(1000, d.entries.size() - at);
          if (n > 1) p.op('(');
          for (std::size_t i = at; i < at + n; ++i) {
            p.save(d.entries[i].first);
            p.save(d.entries[i].second);
          }
          p.op(n > 1 ? 'u' : 's');
        }
      }
    };
    std::visit(Visitor{*this, id}, *v.data);
    commit_frame();
  }

  int proto_;
  std::string out_, frame_;
  std::map<const void*, std::uint32_t> memo_;
  std::map<std::string, const void*> strings_;
};

inline std::string pickle_dump(const Py& v, int protocol = 4) { return PyPickler(protocol).dump(v); }

}  // namespace luma::test
