// pickle_reader.h - a restricted reader of Python pickles (protocols 2 to 5): the data
// opcodes Python's pickler (and PyTorch's C++ pickler) write for dicts, lists, tuples,
// str, bytes, int, float, bool and None, and the memo. Nothing is ever executed: every
// opcode that names or calls a Python object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST,
// OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT*) and every other opcode outside the
// list below is refused with a PickleError naming it and its byte offset.
//
// Read: PROTO (2-5, first), FRAME, STOP; MARK; EMPTY_DICT, SETITEM, SETITEMS; EMPTY_LIST,
// APPEND, APPENDS; EMPTY_TUPLE, TUPLE, TUPLE1, TUPLE2, TUPLE3; BININT, BININT1, BININT2,
// LONG1, LONG4; BINFLOAT; SHORT_BINUNICODE, BINUNICODE, BINUNICODE8; SHORT_BINBYTES,
// BINBYTES, BINBYTES8; NONE, NEWTRUE, NEWFALSE; MEMOIZE, BINPUT, LONG_BINPUT, BINGET,
// LONG_BINGET. That is all `pickle.dump` writes for such values at protocols 2 to 5
// (Lib/pickle.py: save_dict, save_list, save_tuple, save_long, save_float, save_str,
// save_bytes, framing) and all torch::jit::Pickler writes for the untagged containers of
// torch/csrc/cuda/memory_snapshot.cpp.
//
// Bounds, so that a hostile file can exhaust neither the memory nor the stack:
//  - every length is checked against the bytes left before anything is allocated;
//  - values nest at most PickleLimits::max_depth deep (the value tree is walked and freed
//    recursively; the reader itself never recurses);
//  - the tree's estimated size stays under PickleLimits::max_bytes;
//  - a container cannot be changed once it is inside another one (Python's pickler
//    completes each before it is appended, and a tuple never changes), so the tree is
//    acyclic: a value the memo shares is shared, never copied.
// Integers must fit an int64 or a uint64; dict keys must be str or int. Duplicate keys
// are kept; lookups take the last one, as Python's dict does. Bytes after STOP are not read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace luma::core {

class PickleError : public std::runtime_error {
 public:
  PickleError(std::uint64_t offset, const std::string& what);
  std::uint64_t offset() const noexcept { return offset_; }  // of the opcode at fault

 private:
  std::uint64_t offset_;
};

struct PickleLimits {
  std::uint32_t max_depth = 64;  // containers inside containers (a snapshot needs 7)
  // The value tree's estimated bytes; 0: 32 bytes per input byte plus 64 MiB.
  std::uint64_t max_bytes = 0;
};

class PickleValue {
 public:
  enum class Kind : std::uint8_t { none, boolean, integer, real, string, bytes, list, tuple, dict };
  using Items = std::vector<PickleValue>;
  using Entries = std::vector<std::pair<PickleValue, PickleValue>>;

  PickleValue() = default;  // None
  static PickleValue boolean(bool b);
  static PickleValue integer(std::int64_t v);
  static PickleValue unsigned_integer(std::uint64_t v);
  static PickleValue real(double v);

  Kind kind() const noexcept { return kind_; }
  bool is(Kind k) const noexcept { return kind_ == k; }
  bool is_container() const noexcept { return kind_ == Kind::list || kind_ == Kind::tuple || kind_ == Kind::dict; }

  // Each accessor asks for its kind (std::logic_error otherwise: a caller's bug).
  bool as_bool() const;
  std::optional<std::int64_t> as_int() const;    // an integer that fits an int64
  std::optional<std::uint64_t> as_uint() const;  // a non-negative integer that fits a uint64
  double as_real() const;
  const std::string& as_string() const;  // str (UTF-8 as written, unchecked) or bytes
  const Items& items() const;            // list or tuple
  const Entries& entries() const;        // dict, in the order written
  // A dict's value for the str key `key` (the last one written), or nullptr.
  const PickleValue* find(std::string_view key) const;
  // A container or string shared through the memo is one object: its identity (nullptr for
  // numbers, booleans and None), for callers that cache what they made of it.
  const void* identity() const noexcept { return node_.get(); }
  // How many containers deep the value is (0 for a scalar or a string).
  std::uint32_t depth() const noexcept;

  static const char* kind_name(Kind k) noexcept;  // "dict", "int", ...
  static const char* kind_phrase(Kind k) noexcept;  // "a dict", "an int", "None", ...

  struct Node;  // the shared storage of strings and containers (pickle_reader.cpp)

 private:
  friend class PickleParser;
  Kind kind_ = Kind::none;
  bool above_int64_ = false;  // an integer in (INT64_MAX, UINT64_MAX], kept in u_
  union {
    bool b_;
    std::int64_t i_;
    std::uint64_t u_;
    double d_ = 0;
  };
  std::shared_ptr<Node> node_;
};

struct PickleResult {
  PickleValue value;
  int protocol = 0;
  std::uint64_t end = 0;  // the offset just past STOP
};

// Reads the pickle at the start of `bytes`; throws PickleError.
PickleResult parse_pickle(std::string_view bytes, const PickleLimits& limits = {});

// The opcode's name ("GLOBAL"), or nullptr for a byte that is no opcode.
const char* pickle_opcode_name(unsigned char op) noexcept;

}  // namespace luma::core
