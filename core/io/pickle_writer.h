// pickle_writer.h - writes a Python pickle (protocol 2) using only the opcodes PyTorch's
// memory_viz page unpickles: PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS,
// BININT1/BININT2/BININT, LONG1, BINFLOAT, BINUNICODE, NEWTRUE/NEWFALSE, TUPLE2,
// BINPUT/LONG_BINPUT, BINGET/LONG_BINGET, STOP. No NONE. The caller builds containers with
// begin_*/end_* pairs; each end_* emits the batch of its items (SETITEMS / APPENDS), as
// Python's own pickler does, in batches of 1000 (the viewer appends a batch with one
// spread call: one batch of 300,000 items would overflow its call stack).
// Repeated values are written once and referred to by memo index, as Python's pickler
// does: key() for the strings every entry repeats, end_list_memoized() / memo_get() for
// a list shared by many entries (a call stack's frames).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace luma::core {

class PickleWriter {
 public:
  explicit PickleWriter(std::ostream& out);
  void begin_dict();   // then key, value, key, value...
  void end_dict();
  void begin_list();
  void end_list();
  void integer(std::int64_t v);
  void unsigned_integer(std::uint64_t v);
  void real(double v);
  void text(std::string_view s);
  void boolean(bool v);
  void pair(std::int64_t a, std::int64_t b);  // a 2-tuple of ints
  // A string written once, then fetched from the memo (dict keys, action names).
  void key(std::string_view s);
  // end_list, keeping the list in the memo; returns its index for memo_get.
  std::uint32_t end_list_memoized();
  void memo_get(std::uint32_t index);  // the memoized value again (the same object)
  void finish();                              // STOP

 private:
  void item_done();
  std::uint32_t memo_put();  // the value on top of the stack; no item of its own
  struct Open {
    bool dict;
    std::uint64_t pending;  // items (or key+value halves) since the last MARK
  };
  std::ostream& out_;
  std::vector<Open> stack_;
  std::uint32_t next_memo_ = 0;
  std::unordered_map<std::string, std::uint32_t> keys_;
};

}  // namespace luma::core
