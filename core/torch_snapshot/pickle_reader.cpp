// pickle_reader.cpp - the restricted pickle reader (see pickle_reader.h).
#include "torch_snapshot/pickle_reader.h"

#include <bit>
#include <cstring>
#include <limits>
#include <variant>

#include <fmt/format.h>

namespace luma::core {

struct PickleValue::Node {
  std::variant<std::string, Items, Entries> data;
  std::uint32_t depth = 0;  // containers deep, this one included (0: a string)
  bool sealed = false;      // inside another container: never changed again
};

PickleError::PickleError(std::uint64_t offset, const std::string& what)
    : std::runtime_error(fmt::format("byte {}: {}", offset, what)), offset_(offset) {}

PickleValue PickleValue::boolean(bool b) {
  PickleValue v;
  v.kind_ = Kind::boolean;
  v.b_ = b;
  return v;
}

PickleValue PickleValue::integer(std::int64_t i) {
  PickleValue v;
  v.kind_ = Kind::integer;
  v.i_ = i;
  return v;
}

PickleValue PickleValue::unsigned_integer(std::uint64_t u) {
  if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return integer(static_cast<std::int64_t>(u));
  PickleValue v;
  v.kind_ = Kind::integer;
  v.above_int64_ = true;
  v.u_ = u;
  return v;
}

PickleValue PickleValue::real(double d) {
  PickleValue v;
  v.kind_ = Kind::real;
  v.d_ = d;
  return v;
}

namespace {

[[noreturn]] void wrong_kind(const char* wanted, PickleValue::Kind got) {
  throw std::logic_error(fmt::format("pickle value: asked for {}, it is {}", wanted, PickleValue::kind_phrase(got)));
}

}  // namespace

bool PickleValue::as_bool() const {
  if (kind_ != Kind::boolean) wrong_kind("bool", kind_);
  return b_;
}

std::optional<std::int64_t> PickleValue::as_int() const {
  if (kind_ != Kind::integer) wrong_kind("int", kind_);
  if (above_int64_) return std::nullopt;
  return i_;
}

std::optional<std::uint64_t> PickleValue::as_uint() const {
  if (kind_ != Kind::integer) wrong_kind("int", kind_);
  if (above_int64_) return u_;
  if (i_ < 0) return std::nullopt;
  return static_cast<std::uint64_t>(i_);
}

double PickleValue::as_real() const {
  if (kind_ != Kind::real) wrong_kind("float", kind_);
  return d_;
}

const std::string& PickleValue::as_string() const {
  if (kind_ != Kind::string && kind_ != Kind::bytes) wrong_kind("str", kind_);
  return std::get<std::string>(node_->data);
}

const PickleValue::Items& PickleValue::items() const {
  if (kind_ != Kind::list && kind_ != Kind::tuple) wrong_kind("list", kind_);
  return std::get<Items>(node_->data);
}

const PickleValue::Entries& PickleValue::entries() const {
  if (kind_ != Kind::dict) wrong_kind("dict", kind_);
  return std::get<Entries>(node_->data);
}

const PickleValue* PickleValue::find(std::string_view key) const {
  const Entries& e = entries();
  for (auto it = e.rbegin(); it != e.rend(); ++it) {
    if (it->first.kind_ == Kind::string && std::get<std::string>(it->first.node_->data) == key) return &it->second;
  }
  return nullptr;
}

std::uint32_t PickleValue::depth() const noexcept { return node_ ? node_->depth : 0; }

const char* PickleValue::kind_name(Kind k) noexcept {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::real: return "float";
    case Kind::string: return "str";
    case Kind::bytes: return "bytes";
    case Kind::list: return "list";
    case Kind::tuple: return "tuple";
    case Kind::dict: return "dict";
  }
  return "?";
}

const char* PickleValue::kind_phrase(Kind k) noexcept {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "a bool";
    case Kind::integer: return "an int";
    case Kind::real: return "a float";
    case Kind::string: return "a str";
    case Kind::bytes: return "a bytes";
    case Kind::list: return "a list";
    case Kind::tuple: return "a tuple";
    case Kind::dict: return "a dict";
  }
  return "?";
}

const char* pickle_opcode_name(unsigned char op) noexcept {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// The reader: a loop over opcodes with the stack, the marks and the memo as vectors (it
// never recurses).
class PickleParser {
 public:
  PickleParser(std::string_view bytes, const PickleLimits& limits) : in_(bytes), limits_(limits) {
    budget_ = limits.max_bytes != 0 ? limits.max_bytes : 32 * static_cast<std::uint64_t>(bytes.size()) + (64u << 20);
  }

  PickleResult run();

 private:
  using Kind = PickleValue::Kind;
  static constexpr std::uint64_t kNodeBytes = sizeof(PickleValue::Node) + 32;  // and its control block

  [[noreturn]] void fail(const std::string& what) const { throw PickleError(op_at_, what); }
  std::string op_text(unsigned char op) const {
    const char* name = pickle_opcode_name(op);
    return name ? fmt::format("{} (0x{:02x})", name, op) : fmt::format("0x{:02x}", op);
  }

  // The next n bytes of the opcode's argument.
  std::string_view take(std::uint64_t n) {
    if (n > in_.size() - pos_)
      fail(fmt::format("{} needs {} more byte{}, the file has {}: truncated or damaged", op_text(op_), n,
                       n == 1 ? "" : "s", in_.size() - pos_));
    const std::string_view s = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  std::uint64_t le(std::size_t n) {
    const std::string_view s = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return v;
  }

  void spend(std::uint64_t bytes) {
    used_ += bytes;
    if (used_ > budget_)
      fail(fmt::format("the values read so far would take more than {} bytes of memory (the reader's limit)",
                       budget_));
  }
  void push(PickleValue v) {
    spend(sizeof(PickleValue));
    stack_.push_back(std::move(v));
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::size_t pop_mark() {
    if (marks_.empty()) fail(op_text(op_) + " without a MARK before it");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  PickleValue make_text(Kind kind, std::string_view s) {
    spend(kNodeBytes + s.size());
    PickleValue v;
    v.kind_ = kind;
    v.node_ = std::make_shared<PickleValue::Node>();
    v.node_->data.emplace<std::string>(s);
    return v;
  }
  PickleValue make_container(Kind kind) {
    spend(kNodeBytes);
    PickleValue v;
    v.kind_ = kind;
    v.node_ = std::make_shared<PickleValue::Node>();
    if (kind == Kind::dict)
      v.node_->data.emplace<PickleValue::Entries>();
    else
      v.node_->data.emplace<PickleValue::Items>();
    v.node_->depth = 1;
    return v;
  }

  // `child` goes into `parent` (a container being built): sealed from now on, and the
  // parent's depth follows it.
  void adopt(PickleValue::Node& parent, const PickleValue& child) {
    if (!child.node_) return;
    if (child.node_.get() == &parent) fail(op_text(op_) + " puts a container inside itself");
    child.node_->sealed = true;
    if (child.node_->depth + 1 > parent.depth) {
      if (child.node_->depth + 1 > limits_.max_depth)
        fail(fmt::format("values nest more than {} containers deep (the reader's limit)", limits_.max_depth));
      parent.depth = child.node_->depth + 1;
    }
  }
  // The list or dict just below the values an APPEND(S) / SETITEM(S) adds (stack_[from..]):
  // it must be in the current MARK's part of the stack, and still open.
  PickleValue::Node& target(std::size_t from, Kind want) {
    if (from == 0 || from - 1 < floor()) fail(op_text(op_) + " with no list or dict to add to");
    PickleValue& t = stack_[from - 1];
    if (t.kind_ != want)
      fail(fmt::format("{} adds to {}, not {}", op_text(op_), PickleValue::kind_phrase(t.kind_),
                       PickleValue::kind_phrase(want)));
    if (t.node_->sealed) fail(op_text(op_) + " changes a container that is already inside another one");
    return *t.node_;
  }

  void check_key(const PickleValue& key) {
    if (key.kind_ != Kind::string && key.kind_ != Kind::integer)
      fail(fmt::format("a dict key is {} (only str and int keys are read)", PickleValue::kind_phrase(key.kind_)));
  }

  void add_items(std::size_t from, Kind want) {
    // stack_[from..] are the new items; stack_[from-1] the container.
    PickleValue::Node& t = target(from, want);
    const std::size_t n = stack_.size() - from;
    if (want == Kind::list) {
      auto& items = std::get<PickleValue::Items>(t.data);
      for (std::size_t i = from; i < stack_.size(); ++i) adopt(t, stack_[i]);
      items.insert(items.end(), std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(from)),
                   std::make_move_iterator(stack_.end()));
    } else {
      if (n % 2 != 0) fail(fmt::format("{} with an odd number of values ({}): a key without its value", op_text(op_), n));
      auto& entries = std::get<PickleValue::Entries>(t.data);
      spend(n / 2 * sizeof(PickleValue));  // a pair takes two values' room
      for (std::size_t i = from; i < stack_.size(); i += 2) {
        check_key(stack_[i]);
        adopt(t, stack_[i + 1]);
        entries.emplace_back(std::move(stack_[i]), std::move(stack_[i + 1]));
      }
    }
    stack_.resize(from);
  }

  PickleValue make_tuple(std::size_t from) {
    PickleValue v = make_container(Kind::tuple);
    auto& items = std::get<PickleValue::Items>(v.node_->data);
    for (std::size_t i = from; i < stack_.size(); ++i) adopt(*v.node_, stack_[i]);
    items.assign(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(from)),
                 std::make_move_iterator(stack_.end()));
    stack_.resize(from);
    return v;
  }

  PickleValue make_long(std::string_view bytes) {
    // Little-endian two's complement, any length as long as the value fits an int64 or a
    // uint64 (the bytes past the eighth are only sign: 0x00, or 0xff for a negative).
    if (bytes.empty()) return PickleValue::integer(0);
    const bool negative = (static_cast<unsigned char>(bytes.back()) & 0x80) != 0;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      const auto b = static_cast<unsigned char>(bytes[i]);
      if (i < 8) {
        v |= static_cast<std::uint64_t>(b) << (8 * i);
      } else if (b != (negative ? 0xff : 0x00)) {
        fail(fmt::format("{}: an integer of {} bytes does not fit 64 bits", op_text(op_), bytes.size()));
      }
    }
    if (bytes.size() < 8 && negative) v |= ~std::uint64_t{0} << (8 * bytes.size());  // sign-extend
    if (negative) {
      // fits an int64 only if bit 63 is set (it is, after sign extension, unless 8+ bytes
      // with a clear top bit and 0xff above: out of range)
      if ((v >> 63) == 0) fail(fmt::format("{}: a negative integer below the int64 range", op_text(op_)));
      return PickleValue::integer(static_cast<std::int64_t>(v));
    }
    if (bytes.size() >= 8) return PickleValue::unsigned_integer(v);
    return PickleValue::integer(static_cast<std::int64_t>(v));
  }

  // The memo: index -> value, as Python's dict memo (MEMOIZE stores at the number of
  // values stored so far).
  void memo_put(std::uint64_t index) {
    if (stack_.size() <= floor()) fail(op_text(op_) + " with no value to keep (the stack is empty)");
    // Python writes 0, 1, 2, ...: an index never exceeds the bytes read so far.
    if (index > pos_) fail(fmt::format("{}: memo index {} is out of range", op_text(op_), index));
    const auto i = static_cast<std::size_t>(index);
    if (i >= memo_.size()) {
      spend((i + 1 - memo_.size()) * (sizeof(PickleValue) + 1));
      memo_.resize(i + 1);
      memo_stored_.resize(i + 1, false);
    }
    if (!memo_stored_[i]) ++memo_count_;
    memo_stored_[i] = true;
    memo_[i] = stack_.back();
  }
  void memo_get(std::uint64_t index) {
    if (index >= memo_.size() || !memo_stored_[static_cast<std::size_t>(index)])
      fail(fmt::format("{}: memo index {} was never stored", op_text(op_), index));
    push(memo_[static_cast<std::size_t>(index)]);
  }

  std::string_view in_;
  PickleLimits limits_;
  std::uint64_t budget_ = 0;
  std::uint64_t used_ = 0;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;
  unsigned char op_ = 0;
  std::vector<PickleValue> stack_;
  std::vector<std::size_t> marks_;
  std::vector<PickleValue> memo_;
  std::vector<bool> memo_stored_;
  std::size_t memo_count_ = 0;
};

PickleResult PickleParser::run() {
  PickleResult result;
  if (in_.empty()) throw PickleError(0, "empty input: not a pickle");
  if (static_cast<unsigned char>(in_[0]) != 0x80 || in_.size() < 2)
    throw PickleError(0, "not a pickle of protocol 2 to 5 (it does not start with the PROTO opcode 0x80)");
  for (;;) {
    op_at_ = pos_;
    if (pos_ >= in_.size())
      fail("the pickle ends without STOP: truncated");
    op_ = static_cast<unsigned char>(in_[pos_++]);
    switch (op_) {
      case 0x80: {  // PROTO
        const auto p = static_cast<unsigned char>(take(1)[0]);
        if (p < 2 || p > 5) fail(fmt::format("protocol {} (this reader reads protocols 2 to 5)", p));
        if (op_at_ == 0) result.protocol = p;
        break;
      }
      case 0x95: {  // FRAME: a length the opcodes that follow are grouped in; only checked
        const std::uint64_t n = le(8);
        if (n > in_.size() - pos_)
          fail(fmt::format("FRAME (0x95) of {} bytes, the file has {} left: truncated", n, in_.size() - pos_));
        break;
      }
      case '.': {  // STOP
        if (!marks_.empty()) fail("STOP with a MARK still open");
        if (stack_.size() != 1)
          fail(fmt::format("STOP with {} values on the stack (a pickle holds one)", stack_.size()));
        result.value = std::move(stack_.back());
        stack_.clear();
        result.end = pos_;
        return result;
      }
      case '(':  // MARK
        spend(sizeof(std::size_t));
        marks_.push_back(stack_.size());
        break;
      case '}': push(make_container(Kind::dict)); break;
      case ']': push(make_container(Kind::list)); break;
      case ')': push(make_container(Kind::tuple)); break;
      case 'a': {  // APPEND
        if (stack_.size() < floor() + 1) fail("APPEND (0x61) with no value to append");
        add_items(stack_.size() - 1, Kind::list);
        break;
      }
      case 'e': add_items(pop_mark(), Kind::list); break;  // APPENDS
      case 's': {  // SETITEM
        if (stack_.size() < floor() + 2) fail("SETITEM (0x73) without a key and a value");
        add_items(stack_.size() - 2, Kind::dict);
        break;
      }
      case 'u': add_items(pop_mark(), Kind::dict); break;  // SETITEMS
      case 't': push(make_tuple(pop_mark())); break;       // TUPLE
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1 TUPLE2 TUPLE3
        const std::size_t n = op_ - 0x84u;
        if (stack_.size() < floor() + n) fail(fmt::format("{} with fewer than {} values", op_text(op_), n));
        push(make_tuple(stack_.size() - n));
        break;
      }
      case 'J': push(PickleValue::integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4))))); break;
      case 'K': push(PickleValue::integer(static_cast<std::int64_t>(le(1)))); break;
      case 'M': push(PickleValue::integer(static_cast<std::int64_t>(le(2)))); break;
      case 0x8a: {  // LONG1
        const std::uint64_t n = le(1);
        push(make_long(take(n)));
        break;
      }
      case 0x8b: {  // LONG4: a signed length
        const auto n = static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4)));
        if (n < 0) fail(fmt::format("LONG4 (0x8b) with a negative length {}", n));
        push(make_long(take(static_cast<std::uint64_t>(n))));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE 754 double
        const std::string_view s = take(8);
        std::uint64_t bits = 0;
        for (char c : s) bits = (bits << 8) | static_cast<unsigned char>(c);
        push(PickleValue::real(std::bit_cast<double>(bits)));
        break;
      }
      case 0x8c: push(make_text(Kind::string, take(le(1)))); break;  // SHORT_BINUNICODE
      case 'X': push(make_text(Kind::string, take(le(4)))); break;   // BINUNICODE
      case 0x8d: push(make_text(Kind::string, take(le(8)))); break;  // BINUNICODE8
      case 'C': push(make_text(Kind::bytes, take(le(1)))); break;    // SHORT_BINBYTES
      case 'B': push(make_text(Kind::bytes, take(le(4)))); break;    // BINBYTES
      case 0x8e: push(make_text(Kind::bytes, take(le(8)))); break;   // BINBYTES8
      case 'N': push(PickleValue()); break;
      case 0x88: push(PickleValue::boolean(true)); break;
      case 0x89: push(PickleValue::boolean(false)); break;
      case 0x94: memo_put(memo_count_); break;         // MEMOIZE
      case 'q': memo_put(le(1)); break;                 // BINPUT
      case 'r': memo_put(le(4)); break;                 // LONG_BINPUT
      case 'h': memo_get(le(1)); break;  // BINGET
      case 'j': memo_get(le(4)); break;  // LONG_BINGET
      default: {
        const char* name = pickle_opcode_name(op_);
        if (!name) fail(fmt::format("0x{:02x} is not a pickle opcode: damaged, or not a pickle", op_));
        fail(fmt::format("opcode {} is not read: a PyTorch snapshot holds only dicts, lists, tuples, str, "
                         "bytes, numbers, booleans and None, and this reader runs nothing a pickle names",
                         op_text(op_)));
      }
    }
  }
}

PickleResult parse_pickle(std::string_view bytes, const PickleLimits& limits) {
  return PickleParser(bytes, limits).run();
}

}  // namespace luma::core
