// pickle_writer.h - writes a Python pickle (protocol 2) using only the opcodes PyTorch's
// memory_viz page unpickles: PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS,
// BININT1/BININT2/BININT, LONG1, BINFLOAT, BINUNICODE, TUPLE2, STOP. No NONE and no
// booleans (the viewer reads 0/1 the same way). The caller builds containers with
// begin_*/end_* pairs; each end_* emits the batch of its items (SETITEMS / APPENDS), as
// Python's own pickler does, in batches of 1000.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <vector>

namespace luma::tools {

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
  void pair(std::int64_t a, std::int64_t b);  // a 2-tuple of ints
  void finish();                              // STOP

 private:
  void item_done();
  struct Open {
    bool dict;
    std::uint64_t pending;  // items (or key+value halves) since the last MARK
  };
  std::ostream& out_;
  std::vector<Open> stack_;
};

}  // namespace luma::tools
