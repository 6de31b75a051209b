// pickle_reader_test.cpp - core/torch_snapshot/pickle_reader.h: every value kind read back
// from what Python's pickler writes (py_pickler.h) at protocols 2 to 5, the memo shared and
// not copied, and the refusals: opcodes that name or call objects (with their byte
// offset), damaged and truncated input at every length, huge length fields, deep nesting,
// containers changed after use, the memory budget.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "py_pickler.h"
#include "torch_snapshot/pickle_reader.h"

namespace luma::core {
namespace {

using test::Py;
using test::pickle_dump;
using Kind = PickleValue::Kind;

// The message of the PickleError parsing `bytes` throws ("" if none).
std::string refusal(const std::string& bytes, const PickleLimits& limits = {}) {
  try {
    (void)parse_pickle(bytes, limits);
  } catch (const PickleError& e) {
    return e.what();
  }
  return "";
}

std::string with_proto(const std::string& body, int protocol = 2) {
  return std::string("\x80") + static_cast<char>(protocol) + body;
}
// A literal's bytes, NULs included.
template <std::size_t N>
std::string with_proto(const char (&body)[N], int protocol = 2) {
  return with_proto(std::string(body, N - 1), protocol);
}

TEST(PickleReader, ReadsEveryKindAtEveryProtocol) {
  const std::int64_t i64min = std::numeric_limits<std::int64_t>::min();
  const std::int64_t i64max = std::numeric_limits<std::int64_t>::max();
  const std::uint64_t u64max = std::numeric_limits<std::uint64_t>::max();
  const std::vector<std::int64_t> ints = {0,          1,           255,        256,     65535, 65536,
                                          -1,         -256,        -32768,     -2147483648LL,
                                          2147483647, 2147483648LL, -2147483649LL, i64min, i64max,
                                          1700000000000001LL, -1700000000000001LL, 128, -128, -129};
  for (int protocol = 2; protocol <= 5; ++protocol) {
    SCOPED_TRACE(protocol);
    Py list = Py::list();
    for (std::int64_t v : ints) list.append(Py(v));
    list.append(Py(u64max));
    list.append(Py(std::uint64_t{1} << 63));
    Py top = Py::dict({{"none", Py()},
                       {"yes", Py(true)},
                       {"no", Py(false)},
                       {"pi", Py(3.25)},
                       {"neg", Py(-0.5)},
                       {"text", "h\xc3\xa9llo"},
                       {"long", std::string(300, 'x')},
                       {"ints", list},
                       {"t0", Py::tuple({})},
                       {"t1", Py::tuple({1})},
                       {"t3", Py::tuple({1, 2, "three"})},
                       {"t5", Py::tuple({1, 2, 3, 4, 5})},
                       {Py(7), "int key"}});
    if (protocol >= 3) top.set("raw", Py::bytes(std::string("\0\x01\xff", 3)));
    const PickleResult r = parse_pickle(pickle_dump(top, protocol));
    EXPECT_EQ(r.protocol, protocol);
    const PickleValue& v = r.value;
    ASSERT_TRUE(v.is(Kind::dict));
    EXPECT_TRUE(v.find("none")->is(Kind::none));
    EXPECT_TRUE(v.find("yes")->as_bool());
    EXPECT_FALSE(v.find("no")->as_bool());
    EXPECT_EQ(v.find("pi")->as_real(), 3.25);
    EXPECT_EQ(v.find("neg")->as_real(), -0.5);
    EXPECT_EQ(v.find("text")->as_string(), "h\xc3\xa9llo");
    EXPECT_EQ(v.find("long")->as_string(), std::string(300, 'x'));
    const auto& items = v.find("ints")->items();
    ASSERT_EQ(items.size(), ints.size() + 2);
    for (std::size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(items[i].as_int(), ints[i]) << i;
    EXPECT_EQ(items[ints.size()].as_uint(), u64max);
    EXPECT_FALSE(items[ints.size()].as_int().has_value());
    EXPECT_EQ(items[ints.size() + 1].as_uint(), std::uint64_t{1} << 63);
    EXPECT_FALSE(items[0].as_uint() == std::nullopt);
    EXPECT_EQ(items[6].as_uint(), std::nullopt);  // -1
    EXPECT_TRUE(v.find("t0")->is(Kind::tuple));
    EXPECT_TRUE(v.find("t0")->items().empty());
    EXPECT_EQ(v.find("t1")->items().at(0).as_int(), 1);
    EXPECT_EQ(v.find("t3")->items().at(2).as_string(), "three");
    EXPECT_EQ(v.find("t5")->items().size(), 5u);
    const auto& seven = v.entries().at(12);
    ASSERT_TRUE(seven.first.is(Kind::integer));
    EXPECT_EQ(seven.first.as_int(), 7);
    EXPECT_EQ(seven.second.as_string(), "int key");
    if (protocol >= 3) {
      EXPECT_TRUE(v.find("raw")->is(Kind::bytes));
      EXPECT_EQ(v.find("raw")->as_string(), std::string("\0\x01\xff", 3));
    }
  }
}

TEST(PickleReader, BigContainersComeInBatchesAndLongInputInFrames) {
  Py list = Py::list();
  Py dict = Py::dict();
  for (int i = 0; i < 2501; ++i) {
    list.append(Py(std::string(40, static_cast<char>('a' + i % 26)) + std::to_string(i)));
    dict.set(Py(i), Py(i * 2));
  }
  const std::string bytes = pickle_dump(Py::tuple({list, dict}), 4);
  ASSERT_GT(bytes.size(), 100000u);  // two frames at least
  const PickleValue v = parse_pickle(bytes).value;
  ASSERT_EQ(v.items().at(0).items().size(), 2501u);
  EXPECT_EQ(v.items().at(0).items().at(2500).as_string(), std::string(40, 'a' + 2500 % 26) + "2500");
  ASSERT_EQ(v.items().at(1).entries().size(), 2501u);
  EXPECT_EQ(v.items().at(1).entries().at(1234).second.as_int(), 2468);
}

TEST(PickleReader, TheMemoSharesAValueAndDoesNotCopyIt) {
  Py frames = Py::list({Py::dict({{"filename", "a.py"}, {"line", 3}})});
  Py top = Py::list({Py::dict({{"frames", frames}}), Py::dict({{"frames", frames}})});
  for (int protocol : {2, 4}) {
    const PickleValue v = parse_pickle(pickle_dump(top, protocol)).value;
    const PickleValue* a = v.items().at(0).find("frames");
    const PickleValue* b = v.items().at(1).find("frames");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->identity(), b->identity()) << protocol;
    EXPECT_NE(a->identity(), nullptr);
    EXPECT_EQ(v.depth(), 4u);  // list > dict > list > dict
  }
}

TEST(PickleReader, DuplicateKeysReadAsPythonsDictTheLastOneCounts) {
  const PickleValue v = parse_pickle(pickle_dump(Py::dict({{"k", 1}, {"k", 2}}), 2)).value;
  EXPECT_EQ(v.find("k")->as_int(), 2);
  EXPECT_EQ(v.find("other"), nullptr);
}

TEST(PickleReader, RefusesEveryOpcodeThatNamesOrCallsAnObjectWithItsOffset) {
  // Each after "PROTO 2, EMPTY_LIST": the opcode sits at byte 3.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"c", "GLOBAL"},     {"\x93", "STACK_GLOBAL"}, {"R", "REDUCE"},     {"b", "BUILD"},
      {"i", "INST"},       {"o", "OBJ"},             {"\x81", "NEWOBJ"},  {"\x92", "NEWOBJ_EX"},
      {"P", "PERSID"},     {"Q", "BINPERSID"},       {"\x82", "EXT1"},    {"\x83", "EXT2"},
      {"\x84", "EXT4"},    {"S", "STRING"},          {"V", "UNICODE"},    {"I", "INT"},
      {"0", "POP"},        {"2", "DUP"},             {"\x8f", "EMPTY_SET"}, {"\x97", "NEXT_BUFFER"},
  };
  for (const auto& [op, name] : cases) {
    const std::string why = refusal(with_proto("]" + op + "os\nsystem\n"));
    EXPECT_NE(why.find("byte 3:"), std::string::npos) << name << ": " << why;
    EXPECT_NE(why.find(name), std::string::npos) << name << ": " << why;
    EXPECT_NE(why.find("is not read"), std::string::npos) << name << ": " << why;
  }
  // What a pickle of an object really looks like: refused at its first opcode.
  const std::string global = with_proto("cbuiltins\neval\n(X\x02\x00\x00\x00" "1+t" "R.");
  const std::string why = refusal(global);
  EXPECT_NE(why.find("byte 2: opcode GLOBAL (0x63)"), std::string::npos) << why;
  EXPECT_NE(refusal(with_proto("\xfe")).find("0xfe is not a pickle opcode"), std::string::npos);
}

TEST(PickleReader, RefusesWhatIsNotAPickleOfProtocolTwoToFive) {
  EXPECT_NE(refusal("").find("empty"), std::string::npos);
  EXPECT_NE(refusal("id,lower,upper,size\n").find("PROTO"), std::string::npos);
  EXPECT_NE(refusal("(lp0\n.").find("PROTO"), std::string::npos);  // protocol 0
  EXPECT_NE(refusal("\x80\x01N.").find("protocol 1"), std::string::npos);
  EXPECT_NE(refusal("\x80\x06N.").find("protocol 6"), std::string::npos);
  EXPECT_NE(refusal(with_proto("NN.")).find("STOP with 2 values"), std::string::npos);
  EXPECT_NE(refusal(with_proto("(N.")).find("MARK still open"), std::string::npos);
  EXPECT_NE(refusal(with_proto(".")).find("STOP with 0 values"), std::string::npos);
  EXPECT_EQ(refusal(with_proto("N.trailing bytes are not read")), "");
}

TEST(PickleReader, EveryTruncationOfAValidPickleIsAnErrorNeverACrash) {
  Py entry = Py::dict({{"action", "alloc"}, {"addr", Py(std::int64_t{0x7f0000001000})}, {"size", 4000},
                       {"frames", Py::list({Py::dict({{"filename", "x.py"}, {"line", 1}, {"name", "f"}})})},
                       {"pool", Py::tuple({0, 0})}, {"r", Py(0.5)}, {"ok", Py(true)}, {"n", Py()}});
  for (int protocol = 2; protocol <= 5; ++protocol) {
    const std::string bytes = pickle_dump(Py::list({entry, entry}), protocol);
    ASSERT_EQ(refusal(bytes), "");
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      const std::string why = refusal(bytes.substr(0, n));
      EXPECT_FALSE(why.empty()) << "protocol " << protocol << ", first " << n << " bytes";
    }
  }
}

TEST(PickleReader, AHugeLengthIsRefusedBeforeAnythingIsAllocated) {
  const std::vector<std::string> cases = {
      with_proto("X\xff\xff\xff\xff" "abc"),                          // BINUNICODE 4 GiB
      with_proto("\x8d\xff\xff\xff\xff\xff\xff\xff\x7f" "abc", 4),    // BINUNICODE8 2^63
      with_proto("\x8e\x00\x00\x00\x00\x00\x00\x01\x00" "abc", 4),    // BINBYTES8
      with_proto("B\x00\x00\x00\x10" "abc", 3),                       // BINBYTES 256 MiB
      with_proto("\x8b\xff\xff\xff\x7f" "abc"),                       // LONG4 2 GiB
      with_proto("\x95\xff\xff\xff\xff\xff\xff\xff\xff" "N.", 4),     // FRAME 2^64-1
  };
  for (const std::string& c : cases) {
    const std::string why = refusal(c);
    EXPECT_TRUE(why.find("truncated") != std::string::npos) << why;
  }
  EXPECT_NE(refusal(with_proto("\x8b\xff\xff\xff\xff")).find("negative length"), std::string::npos);
}

TEST(PickleReader, DeepNestingIsRefusedAtTheLimit) {
  // n lists, each appended into the one below: n deep, built without recursion.
  auto nested = [](int n) { return with_proto(std::string(n, ']') + std::string(n - 1, 'a') + "."); };
  EXPECT_EQ(parse_pickle(nested(64)).value.depth(), 64u);
  EXPECT_NE(refusal(nested(65)).find("nest more than 64"), std::string::npos);
  EXPECT_NE(refusal(nested(100000)).find("nest more than 64"), std::string::npos);
  PickleLimits shallow;
  shallow.max_depth = 3;
  EXPECT_NE(refusal(nested(4), shallow).find("nest more than 3"), std::string::npos);
  // Through the memo: each level a LONG_BINGET of the one before in a new TUPLE1.
  auto le32 = [](std::uint32_t v) {
    std::string s;
    for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
  };
  std::string chain = "]r" + le32(0);
  for (std::uint32_t i = 0; i < 300; ++i) chain += "j" + le32(i) + "\x85" + "r" + le32(i + 1);
  const std::string why = refusal(with_proto(chain + "."));
  EXPECT_NE(why.find("nest more than 64"), std::string::npos) << why;
}

TEST(PickleReader, AContainerCannotBeChangedOnceInsideAnotherSoNoCycleCanForm) {
  // A list appended to itself.
  EXPECT_NE(refusal(with_proto("]q\x00h\x00" "a.")).find("inside itself"), std::string::npos);
  // A inside B, then B appended to A: A is sealed.
  const std::string why = refusal(with_proto("]q\x00" "]q\x01" "h\x00" "a" "h\x00" "h\x01" "a."));
  EXPECT_NE(why.find("already inside another one"), std::string::npos) << why;
  // A dict filled after it went into a list.
  const std::string late = with_proto("]}q\x00" "a" "h\x00" "K\x01K\x02s.");
  EXPECT_NE(refusal(late).find("already inside another one"), std::string::npos);
}

TEST(PickleReader, StructuralDamageIsNamed) {
  EXPECT_NE(refusal(with_proto("K\x01" "a.")).find("no list or dict"), std::string::npos);
  EXPECT_NE(refusal(with_proto("K\x01K\x02K\x03" "a.")).find("adds to an int, not a list"), std::string::npos);
  EXPECT_NE(refusal(with_proto("}(K\x01u.")).find("odd number"), std::string::npos);
  EXPECT_NE(refusal(with_proto("}(]K\x01u.")).find("dict key is a list"), std::string::npos);
  EXPECT_NE(refusal(with_proto("}()K\x01u.")).find("dict key is a tuple"), std::string::npos);
  EXPECT_NE(refusal(with_proto("e.")).find("without a MARK"), std::string::npos);
  EXPECT_NE(refusal(with_proto("h\x05.")).find("memo index 5 was never stored"), std::string::npos);
  EXPECT_NE(refusal(with_proto("Nr\xff\xff\xff\x7f.")).find("memo index 2147483647 is out of range"),
            std::string::npos);
  EXPECT_NE(refusal(with_proto("q\x00.")).find("no value to keep"), std::string::npos);
  EXPECT_NE(refusal(with_proto("K\x01\x86.")).find("fewer than 2 values"), std::string::npos);
  EXPECT_NE(refusal(with_proto("\x8a\x0a\x01\x02\x03\x04\x05\x06\x07\x08\x09\x01.")).find("does not fit 64 bits"),
            std::string::npos);
  // A mark hides the values below it from SETITEM.
  EXPECT_NE(refusal(with_proto("}(K\x01K\x02s.")).find("no list or dict"), std::string::npos);
}

TEST(PickleReader, IntegersOfAnyLengthThatFit64BitsAreRead) {
  // LONG1 with extra sign bytes (Python never writes them, but they are the same number).
  EXPECT_EQ(parse_pickle(with_proto(std::string("\x8a\x0a\x05\0\0\0\0\0\0\0\0\0.", 13))).value.as_int(), 5);
  EXPECT_EQ(parse_pickle(with_proto(std::string("\x8a\x0a\xfe\xff\xff\xff\xff\xff\xff\xff\xff\xff.", 13)))
                .value.as_int(),
            -2);
  EXPECT_EQ(parse_pickle(with_proto(std::string("\x8a\x00.", 3))).value.as_int(), 0);
  // Below INT64_MIN: refused.
  EXPECT_NE(refusal(with_proto(std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff.", 12)))
                .find("below the int64 range"),
            std::string::npos);
}

TEST(PickleReader, TheMemoryBudgetBoundsWhatAFileCanMake) {
  PickleLimits tight;
  tight.max_bytes = 4096;
  // 1000 empty lists on the stack: far more than 4 KiB of nodes.
  const std::string many = with_proto("](" + std::string(1000, ']') + "e.");
  const std::string why = refusal(many, tight);
  EXPECT_NE(why.find("more than 4096 bytes"), std::string::npos) << why;
  EXPECT_EQ(refusal(pickle_dump(Py::list({1, 2, 3}), 4), tight), "");
}

}  // namespace
}  // namespace luma::core
