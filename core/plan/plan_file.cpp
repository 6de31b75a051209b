// plan_file.cpp - the plan file as JSON (nlohmann, header-only): writer and validating
// reader. Every check names the field by its path, so a hand-edited plan says exactly which
// number is wrong.
#include "plan/plan_file.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/output_file.h"

namespace luma::core {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Where a value sits in the document: "devices[0].allocations[12].offset".
class Where {
 public:
  Where(const std::string& source, std::string path) : source_(source), path_(std::move(path)) {}
  Where operator[](std::string_view key) const {
    return Where(source_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
  }
  Where operator[](std::size_t index) const { return Where(source_, fmt::format("{}[{}]", path_, index)); }

  [[noreturn]] void fail(const std::string& what) const {
    throw PlanFileError(path_.empty() ? fmt::format("{}: {}", source_, what)
                                      : fmt::format("{}: {}: {}", source_, path_, what));
  }

 private:
  const std::string& source_;
  std::string path_;
};

const char* type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a fractional number";
    default: return "an unsupported value";
  }
}

const Json& member(const Json& obj, std::string_view key, const Where& at) {
  auto it = obj.find(key);
  if (it == obj.end()) at.fail(fmt::format("the field '{}' is missing", key));
  return *it;
}

const Json* optional_member(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const Json& expect_object(const Json& j, const Where& at) {
  if (!j.is_object()) at.fail(fmt::format("must be an object, not {}", type_name(j)));
  return j;
}

const Json& expect_array(const Json& j, const Where& at) {
  if (!j.is_array()) at.fail(fmt::format("must be an array, not {}", type_name(j)));
  return j;
}

std::string as_string(const Json& j, const Where& at) {
  if (!j.is_string()) at.fail(fmt::format("must be a string, not {}", type_name(j)));
  return j.get<std::string>();
}

std::uint64_t as_uint(const Json& j, const Where& at, std::uint64_t max = ~std::uint64_t{0}) {
  std::uint64_t v = 0;
  if (j.is_number_unsigned()) {
    v = j.get<std::uint64_t>();
  } else if (j.is_number_integer()) {
    const auto s = j.get<std::int64_t>();
    if (s < 0) at.fail(fmt::format("{} is negative", s));
    v = static_cast<std::uint64_t>(s);
  } else {
    at.fail(fmt::format("must be a non-negative integer, not {}", type_name(j)));
  }
  if (v > max) at.fail(fmt::format("{} is larger than {}", v, max));
  return v;
}

std::uint64_t uint_field(const Json& obj, std::string_view key, const Where& at,
                         std::uint64_t max = ~std::uint64_t{0}) {
  return as_uint(member(obj, key, at), at[key], max);
}

RunFingerprint read_fingerprint(const Json& j, const Where& at) {
  expect_object(j, at);
  RunFingerprint f;
  f.executable = as_string(member(j, "executable", at), at["executable"]);
  const Json& args = expect_array(member(j, "arguments", at), at["arguments"]);
  for (std::size_t i = 0; i < args.size(); ++i) f.arguments.push_back(as_string(args[i], at["arguments"][i]));
  const Json& devs = expect_array(member(j, "devices", at), at["devices"]);
  std::set<std::uint32_t> seen;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    const Where d = at["devices"][i];
    expect_object(devs[i], d);
    FingerprintDevice fd;
    fd.index = static_cast<std::uint32_t>(uint_field(devs[i], "index", d, 0xffffffffu));
    fd.name = as_string(member(devs[i], "name", d), d["name"]);
    if (const Json* t = optional_member(devs[i], "total_bytes")) fd.total_bytes = as_uint(*t, d["total_bytes"]);
    if (!seen.insert(fd.index).second) d["index"].fail(fmt::format("device {} is listed twice", fd.index));
    f.devices.push_back(std::move(fd));
  }
  return f;
}

PlannedAllocation read_allocation(const Json& j, std::size_t k, const DevicePlanFile& dev, const Where& at) {
  expect_object(j, at);
  const std::uint64_t id = uint_field(j, "id", at);
  if (id != k)
    at["id"].fail(fmt::format("is {}, expected {}: allocations must be listed in sequence order, "
                              "numbered from 0", id, k));
  PlannedAllocation a;
  a.size = uint_field(j, "size", at, plan::kMaxPlanBytes);
  if (a.size == 0) at["size"].fail("is 0: every planned allocation holds at least one byte");
  a.offset = uint_field(j, "offset", at, plan::kMaxPlanBytes);
  if (a.offset % dev.alignment != 0)
    at["offset"].fail(fmt::format("{} is not a multiple of the device's alignment {}", a.offset, dev.alignment));
  if (a.offset + a.size > dev.arena)  // both <= 2^62: no overflow
    at["offset"].fail(fmt::format("{} + size {} ends beyond the arena of {} bytes", a.offset, a.size, dev.arena));
  a.requested = a.size;
  if (const Json* r = optional_member(j, "requested")) {
    a.requested = as_uint(*r, at["requested"]);
    if (a.requested == 0) at["requested"].fail("is 0: no program allocation asks for 0 bytes");
    if (a.requested > a.size)
      at["requested"].fail(fmt::format("{} is more than the {} bytes placed", a.requested, a.size));
  }
  a.name = std::to_string(k);
  if (const Json* n = optional_member(j, "name")) a.name = as_string(*n, at["name"]);
  if (const Json* l = optional_member(j, "lower")) a.lower = as_uint(*l, at["lower"]);
  if (const Json* u = optional_member(j, "upper")) a.upper = as_uint(*u, at["upper"]);
  if (optional_member(j, "lower") != nullptr && optional_member(j, "upper") != nullptr && a.upper < a.lower)
    at["upper"].fail(fmt::format("{} is below lower {}", a.upper, a.lower));
  return a;
}

DevicePlanFile read_device(const Json& j, const Where& at) {
  expect_object(j, at);
  DevicePlanFile d;
  d.device = static_cast<int>(uint_field(j, "device", at, static_cast<std::uint64_t>(plan::kMaxPlanDevice)));
  d.arena = uint_field(j, "arena", at, plan::kMaxPlanBytes);
  d.alignment = uint_field(j, "alignment", at, plan::kMaxPlanAlignment);
  if (!std::has_single_bit(d.alignment) || d.alignment < plan::kMinReplayAlignment)
    at["alignment"].fail(fmt::format(
        "{} is not a power of two of at least {} (a plan made from a planner CSV cannot be "
        "replayed: device pointers must keep cudaMalloc's alignment)",
        d.alignment, plan::kMinReplayAlignment));
  if (const Json* lb = optional_member(j, "lower_bound")) d.lower_bound = as_uint(*lb, at["lower_bound"]);
  if (const Json* s = optional_member(j, "strategy")) d.strategy = as_string(*s, at["strategy"]);
  if (const Json* ss = optional_member(j, "strategies")) {
    expect_array(*ss, at["strategies"]);
    for (std::size_t i = 0; i < ss->size(); ++i) {
      const Where w = at["strategies"][i];
      const Json& s = expect_object((*ss)[i], w);
      StrategyResult r;
      r.strategy = as_string(member(s, "strategy", w), w["strategy"]);
      r.arena = uint_field(s, "arena", w);
      const Json& secs = member(s, "seconds", w);
      if (!secs.is_number()) w["seconds"].fail(fmt::format("must be a number, not {}", type_name(secs)));
      r.seconds = secs.get<double>();
      d.strategies.push_back(std::move(r));
    }
  }
  const Json& allocs = expect_array(member(j, "allocations", at), at["allocations"]);
  d.allocations.reserve(allocs.size());  // bounded by the file: each entry is many bytes of it
  for (std::size_t k = 0; k < allocs.size(); ++k)
    d.allocations.push_back(read_allocation(allocs[k], k, d, at["allocations"][k]));
  if (const Json* p = optional_member(j, "periodic")) {
    const Where w = at["periodic"];
    expect_object(*p, w);
    PeriodicLayout l;
    l.warmup = uint_field(*p, "warmup", w);
    l.period = uint_field(*p, "period", w);
    if (l.period == 0) w["period"].fail("is 0: a period holds at least one allocation");
    if (l.warmup > d.allocations.size() || d.allocations.size() - l.warmup != l.period)
      w.fail(fmt::format("warmup {} + period {} must equal the {} allocations listed", l.warmup, l.period,
                         d.allocations.size()));
    if (const Json* v = optional_member(*p, "detected_warmup")) l.detected_warmup = as_uint(*v, w["detected_warmup"]);
    if (const Json* v = optional_member(*p, "captured_iterations"))
      l.captured_iterations = as_uint(*v, w["captured_iterations"]);
    if (const Json* v = optional_member(*p, "boundary_bytes")) l.boundary_bytes = as_uint(*v, w["boundary_bytes"]);
    d.periodic = l;
  }
  if (const Json* f = optional_member(j, "fence_slack")) {
    const Where w = at["fence_slack"];
    expect_object(*f, w);
    FenceSlackLayout l;
    l.allocations = uint_field(*f, "allocations", w);
    if (const Json* v = optional_member(*f, "run_lower_bound")) l.run_lower_bound = as_uint(*v, w["run_lower_bound"]);
    if (const Json* v = optional_member(*f, "selective")) {
      if (!v->is_boolean()) w["selective"].fail(fmt::format("must be true or false, not {}", type_name(*v)));
      l.selective = v->get<bool>();
    }
    d.fence_slack = l;
  }
  return d;
}

PlanFile read_document(const Json& doc, const Where& at) {
  if (!doc.is_object()) at.fail(fmt::format("a plan file is a JSON object, this is {}", type_name(doc)));
  if (const Json* f = optional_member(doc, "format")) {
    if (as_string(*f, at["format"]) != plan::kFormatName)
      at["format"].fail(fmt::format("is '{}', not '{}'", f->get<std::string>(), plan::kFormatName));
  }
  const Json* v = optional_member(doc, "version");
  if (v == nullptr)
    at.fail("no 'version' field: not a plan file of a luma that replays plans (make it again with "
            "luma plan -o)");
  const std::uint64_t version = as_uint(*v, at["version"]);
  if (version != plan::kFormatVersion)
    at["version"].fail(fmt::format("plan format {} is not the {} this luma reads", version, plan::kFormatVersion));
  PlanFile p;
  if (const Json* in = optional_member(doc, "input")) p.input = as_string(*in, at["input"]);
  if (const Json* fp = optional_member(doc, "fingerprint")) p.fingerprint = read_fingerprint(*fp, at["fingerprint"]);
  const Json& devs = expect_array(member(doc, "devices", at), at["devices"]);
  std::set<int> seen;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    DevicePlanFile d = read_device(devs[i], at["devices"][i]);
    if (!seen.insert(d.device).second)
      at["devices"][i]["device"].fail(fmt::format("device {} has a plan already", d.device));
    p.devices.push_back(std::move(d));
  }
  return p;
}

OrderedJson fingerprint_json(const RunFingerprint& f) {
  OrderedJson j;
  j["executable"] = f.executable;
  j["arguments"] = f.arguments;
  j["devices"] = OrderedJson::array();
  for (const FingerprintDevice& d : f.devices)
    j["devices"].push_back({{"index", d.index}, {"name", d.name}, {"total_bytes", d.total_bytes}});
  return j;
}

}  // namespace

double arena_over_lower_bound(std::uint64_t arena, std::uint64_t lower_bound) noexcept {
  if (lower_bound == 0) return arena == 0 ? 1.0 : 0.0;
  return static_cast<double>(arena) / static_cast<double>(lower_bound);
}

const DevicePlanFile* PlanFile::find_device(int device) const noexcept {
  for (const DevicePlanFile& d : devices)
    if (d.device == device) return &d;
  return nullptr;
}

PlanFile parse_plan_file(std::string_view text, const std::string& source) {
  const Where top(source, "");
  if (text.size() > plan::kMaxPlanFileBytes)
    top.fail(fmt::format("{} bytes: larger than the {} bytes a plan file may have", text.size(),
                         plan::kMaxPlanFileBytes));
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // nlohmann's message names the line and column; drop its "[json.exception...] " tag.
    std::string what = e.what();
    if (const std::size_t p = what.find("] "); what.rfind("[json.", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    top.fail("not valid JSON: " + what);
  } catch (const std::bad_alloc&) {
    top.fail("not enough host memory to read it");
  }
  try {
    return read_document(doc, top);
  } catch (const Json::exception& e) {  // a type nlohmann refused that a check above missed
    top.fail(std::string("unexpected value: ") + e.what());
  }
}

PlanFile read_plan_file(const std::string& path) {
  // A directory opens as a stream on Linux and reports a meaningless size.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw PlanFileError(path + ": cannot read the plan file: is a directory");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw PlanFileError(fmt::format("{}: cannot open the plan file: {}", path, std::strerror(errno)));
  const std::streamoff size = in.tellg();
  if (size < 0) throw PlanFileError(path + ": cannot read the plan file");
  if (static_cast<std::uint64_t>(size) > plan::kMaxPlanFileBytes)
    throw PlanFileError(fmt::format("{}: {} bytes: larger than the {} bytes a plan file may have", path, size,
                                    plan::kMaxPlanFileBytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), size);
  if (in.gcount() != size) throw PlanFileError(path + ": read error");
  return parse_plan_file(text, path);
}

std::string format_plan_file(const PlanFile& plan) {
  OrderedJson doc;
  doc["format"] = plan::kFormatName;
  doc["version"] = plan::kFormatVersion;
  doc["input"] = plan.input;
  if (plan.fingerprint) doc["fingerprint"] = fingerprint_json(*plan.fingerprint);
  doc["devices"] = OrderedJson::array();
  for (const DevicePlanFile& d : plan.devices) {
    OrderedJson dev;
    dev["device"] = d.device;
    dev["arena"] = d.arena;
    dev["alignment"] = d.alignment;
    dev["lower_bound"] = d.lower_bound;
    dev["arena_over_lower_bound"] = arena_over_lower_bound(d.arena, d.lower_bound);
    dev["strategy"] = d.strategy;
    dev["strategies"] = OrderedJson::array();
    for (const StrategyResult& r : d.strategies)
      dev["strategies"].push_back({{"strategy", r.strategy}, {"arena", r.arena}, {"seconds", r.seconds}});
    if (d.periodic) {
      const PeriodicLayout& l = *d.periodic;
      dev["periodic"] = {{"warmup", l.warmup},
                         {"period", l.period},
                         {"detected_warmup", l.detected_warmup},
                         {"captured_iterations", l.captured_iterations},
                         {"boundary_bytes", l.boundary_bytes}};
    }
    if (d.fence_slack) {
      const FenceSlackLayout& l = *d.fence_slack;
      dev["fence_slack"] = {{"allocations", l.allocations},
                            {"run_lower_bound", l.run_lower_bound},
                            {"selective", l.selective},
                            {"arena_over_run_lower_bound", arena_over_lower_bound(d.arena, l.run_lower_bound)}};
    }
    auto& allocs = dev["allocations"] = OrderedJson::array();
    for (std::size_t k = 0; k < d.allocations.size(); ++k) {
      const PlannedAllocation& a = d.allocations[k];
      allocs.push_back({{"id", k},
                        {"name", a.name},
                        {"requested", a.requested},
                        {"size", a.size},
                        {"offset", a.offset},
                        {"lower", a.lower},
                        {"upper", a.upper}});
    }
    doc["devices"].push_back(std::move(dev));
  }
  return doc.dump(1) + "\n";
}

void write_plan_file(const std::string& path, const PlanFile& plan) {
  // Through a temporary and a rename: a failed write never leaves half a plan.
  write_output_file(path, format_plan_file(plan));
}

}  // namespace luma::core
