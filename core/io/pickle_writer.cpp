// pickle_writer.cpp - the opcodes, little-endian as pickle defines them (BINFLOAT is the
// one big-endian field).
#include "io/pickle_writer.h"

#include <bit>
#include <cstring>

#include "io/utf8_text.h"

namespace luma::core {

namespace {
constexpr char PROTO = '\x80', EMPTY_DICT = '}', EMPTY_LIST = ']', MARK = '(',
               SETITEMS = 'u', APPENDS = 'e', BININT = 'J', BININT1 = 'K', BININT2 = 'M',
               LONG1 = '\x8a', BINFLOAT = 'G', BINUNICODE = 'X', TUPLE2 = '\x86', STOP = '.',
               NEWTRUE = '\x88', NEWFALSE = '\x89', BINPUT = 'q', LONG_BINPUT = 'r',
               BINGET = 'h', LONG_BINGET = 'j';
constexpr std::uint64_t kBatch = 1000;  // Python's pickler batches SETITEMS/APPENDS so

void put_le(std::ostream& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.put(static_cast<char>((v >> (8 * i)) & 0xFF));
}
}  // namespace

PickleWriter::PickleWriter(std::ostream& out) : out_(out) {
  out_.put(PROTO);
  out_.put('\x02');
}

void PickleWriter::begin_dict() {
  out_.put(EMPTY_DICT);
  out_.put(MARK);
  stack_.push_back({true, 0});
}

void PickleWriter::begin_list() {
  out_.put(EMPTY_LIST);
  out_.put(MARK);
  stack_.push_back({false, 0});
}

void PickleWriter::end_dict() {
  out_.put(SETITEMS);
  stack_.pop_back();
  item_done();
}

void PickleWriter::end_list() {
  out_.put(APPENDS);
  stack_.pop_back();
  item_done();
}

void PickleWriter::item_done() {
  if (stack_.empty()) return;
  Open& o = stack_.back();
  ++o.pending;
  const std::uint64_t per_batch = o.dict ? 2 * kBatch : kBatch;
  if (o.pending == per_batch) {
    out_.put(o.dict ? SETITEMS : APPENDS);
    out_.put(MARK);
    o.pending = 0;
  }
}

void PickleWriter::integer(std::int64_t v) {
  if (v >= 0 && v < 256) {
    out_.put(BININT1);
    put_le(out_, static_cast<std::uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    out_.put(BININT2);
    put_le(out_, static_cast<std::uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.put(BININT);
    put_le(out_, static_cast<std::uint64_t>(v), 4);
  } else {
    // LONG1: the shortest two's-complement little-endian form.
    out_.put(LONG1);
    int n = 8;
    while (n > 1) {
      const std::int64_t top = v >> (8 * (n - 1) - 1);
      if (top != 0 && top != -1) break;
      --n;
    }
    out_.put(static_cast<char>(n));
    put_le(out_, static_cast<std::uint64_t>(v), n);
  }
  item_done();
}

void PickleWriter::unsigned_integer(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(INT64_MAX)) {
    integer(static_cast<std::int64_t>(v));
    return;
  }
  out_.put(LONG1);
  out_.put('\x09');  // 9 bytes: the value and a zero sign byte
  put_le(out_, v, 8);
  out_.put('\0');
  item_done();
}

void PickleWriter::real(double v) {
  out_.put(BINFLOAT);
  const auto bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) out_.put(static_cast<char>((bits >> (8 * i)) & 0xFF));
  item_done();
}

void PickleWriter::text(std::string_view raw) {
  // BINUNICODE is UTF-8: pickle.load raises on anything else (a path in Latin-1).
  const std::string s = valid_utf8(raw);
  out_.put(BINUNICODE);
  put_le(out_, s.size(), 4);
  out_.write(s.data(), static_cast<std::streamsize>(s.size()));
  item_done();
}

void PickleWriter::pair(std::int64_t a, std::int64_t b) {
  // The two items are not container items of the enclosing dict/list by themselves.
  stack_.push_back({false, 0});
  integer(a);
  integer(b);
  stack_.pop_back();
  out_.put(TUPLE2);
  item_done();
}

void PickleWriter::boolean(bool v) {
  out_.put(v ? NEWTRUE : NEWFALSE);
  item_done();
}

std::uint32_t PickleWriter::memo_put() {
  // Before item_done: a batch boundary emits MARK, and Python's BINPUT after a MARK
  // would find an empty stack.
  const std::uint32_t index = next_memo_++;
  if (index < 256) {
    out_.put(BINPUT);
    put_le(out_, index, 1);
  } else {
    out_.put(LONG_BINPUT);
    put_le(out_, index, 4);
  }
  return index;
}

void PickleWriter::memo_get(std::uint32_t index) {
  if (index < 256) {
    out_.put(BINGET);
    put_le(out_, index, 1);
  } else {
    out_.put(LONG_BINGET);
    put_le(out_, index, 4);
  }
  item_done();
}

void PickleWriter::key(std::string_view s) {
  auto it = keys_.find(std::string(s));
  if (it != keys_.end()) {
    memo_get(it->second);
    return;
  }
  const std::string v = valid_utf8(s);
  out_.put(BINUNICODE);
  put_le(out_, v.size(), 4);
  out_.write(v.data(), static_cast<std::streamsize>(v.size()));
  keys_.emplace(std::string(s), memo_put());
  item_done();
}

std::uint32_t PickleWriter::end_list_memoized() {
  out_.put(APPENDS);
  stack_.pop_back();
  const std::uint32_t index = memo_put();
  item_done();
  return index;
}

void PickleWriter::finish() { out_.put(STOP); }

}  // namespace luma::core
