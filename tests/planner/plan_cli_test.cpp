// plan_cli_test.cpp - `luma plan` end to end: runs the built luma program (LUMA_EXE, from
// meson) on MiniMalloc's example and on bad input, checking exit codes (0 ok, 1 failure,
// 2 usage) and the files it writes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "planner/input/lifetime_reader.h"
#include "planner/plan_checker.h"

namespace {

namespace fs = std::filesystem;

struct LumaRun {
  int code;
  std::string output;  // stdout and stderr
};

LumaRun luma(const std::string& args) {
  std::string cmd = std::string(LUMA_EXE) + " " + args + " 2>&1";
  LumaRun r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("luma-plan-cli-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::string example() { return (fs::path(LUMA_MINIMALLOC_DIR) / "example.12.csv").string(); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PlanCli, PlansTheExampleAndWritesItsFiles) {
  if (!fs::exists(example())) GTEST_SKIP() << "no " << example();
  fs::path json = scratch("plan.json"), csv = scratch("plan.csv"), svg = scratch("plan.svg");
  LumaRun r = luma("plan " + example() + " -o " + json.string() + " --csv " + csv.string() +
               " --svg " + svg.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("lower bound 12 B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tlsf"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("arena 12 B, 1.0000 x LB"), std::string::npos) << r.output;

  auto doc = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(doc["devices"].size(), 1u);
  EXPECT_EQ(doc["devices"][0]["arena"], 12);
  EXPECT_EQ(doc["devices"][0]["lower_bound"], 12);
  ASSERT_EQ(doc["devices"][0]["allocations"].size(), 5u);
  EXPECT_EQ(doc["devices"][0]["allocations"][0]["name"], "b1");

  std::string text = slurp(csv);
  EXPECT_EQ(text.substr(0, text.find('\n')), "id,lower,upper,size,offset");
  // The CSV's offsets form a valid plan of the example.
  std::vector<luma::core::Lifetime> lts =
      luma::core::read_lifetimes_file(example(), luma::core::builtin_readers());
  luma::core::Plan plan;
  std::istringstream rows(text);
  std::string line;
  std::getline(rows, line);
  while (std::getline(rows, line)) plan.offsets.push_back(std::stoull(line.substr(line.rfind(',') + 1)));
  plan.arena = luma::core::arena_of(lts, plan.offsets);
  EXPECT_EQ(plan.arena, 12u);
  EXPECT_TRUE(luma::core::check_plan(lts, plan).empty());
  EXPECT_NE(slurp(svg).find("<svg"), std::string::npos);
}

TEST(PlanCli, EveryStrategyRuns) {
  if (!fs::exists(example())) GTEST_SKIP() << "no " << example();
  for (const char* s : {"tlsf", "greedy", "best"})
    EXPECT_EQ(luma(std::string("plan --strategy ") + s + " " + example()).code, 0) << s;
}

TEST(PlanCli, UsageErrorsExitWith2) {
  EXPECT_EQ(luma("plan").code, 2);
  EXPECT_EQ(luma("plan x.csv --strategy fastest").code, 2);
  EXPECT_EQ(luma("plan x.csv --time-limit -1").code, 2);
  EXPECT_EQ(luma("plan x.csv --bogus").code, 2);
  EXPECT_EQ(luma("frobnicate").code, 2);
  EXPECT_EQ(luma("").code, 2);
}

TEST(PlanCli, HelpExitsWith0) {
  LumaRun r = luma("plan --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("--strategy"), std::string::npos) << r.output;
  EXPECT_EQ(luma("--help").code, 0);
}

TEST(PlanCli, BadInputExitsWith1AndSaysWhy) {
  fs::path bad = scratch("bad.csv");
  std::ofstream(bad) << "id,lower,upper,size\n0,0,1,4\n1,0,zz,4\n";
  LumaRun r = luma("plan " + bad.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find(bad.string() + ":3: upper is not an unsigned integer"), std::string::npos)
      << r.output;

  fs::path odd = scratch("odd.txt");
  std::ofstream(odd) << "something else\n";
  r = luma("plan " + odd.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("unrecognised input format"), std::string::npos) << r.output;

  r = luma("plan /nonexistent/in.csv");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("cannot open"), std::string::npos) << r.output;

  if (fs::exists(example())) {
    r = luma("plan " + example() + " --device 3");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.output.find("no buffers on device 3"), std::string::npos) << r.output;
  }
}

// An output naming the input (directly, through a link, or spelt differently) is refused
// before anything is written: the input is still there, byte for byte.
TEST(PlanCli, RefusesToWriteOverItsInput) {
  const std::string text = "id,lower,upper,size\n0,0,2,4\n1,1,3,8\n";
  fs::path in = scratch("self.csv");
  std::ofstream(in) << text;
  fs::path link = scratch("self-link.csv");
  fs::remove(link);
  fs::create_symlink(in, link);
  const std::string other_spelling = (in.parent_path() / "." / in.filename()).string();
  for (const std::string option : {"-o", "--csv", "--svg"}) {
    for (const std::string& out : {in.string(), link.string(), other_spelling}) {
      LumaRun r = luma("plan " + in.string() + " " + option + " " + out);
      EXPECT_EQ(r.code, 1) << option << " " << out << ": " << r.output;
      EXPECT_NE(r.output.find("the output " + out + " is the input " + in.string()), std::string::npos)
          << r.output;
      EXPECT_EQ(slurp(in), text) << option << " " << out;
      EXPECT_TRUE(fs::is_symlink(link));
    }
  }
  // Two outputs naming one file are refused too.
  fs::path twice = scratch("twice.out");
  LumaRun r = luma("plan " + in.string() + " -o " + twice.string() + " --csv " + twice.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("are the same file"), std::string::npos) << r.output;
}

// The plan files go through a temporary and a rename: a link as the output keeps being a
// link (its target gets the plan), and a file named like the old fixed temporary is left
// alone.
TEST(PlanCli, WritesThroughLinksAndLeavesOtherFilesAlone) {
  fs::path in = scratch("in.csv");
  std::ofstream(in) << "id,lower,upper,size\n0,0,2,4\n1,1,3,8\n";
  fs::path target = scratch("target.json"), link = scratch("link.json"), mine = scratch("link.json.tmp");
  fs::remove(target);
  fs::remove(link);
  std::ofstream(target) << "old";
  fs::create_symlink(target, link);
  std::ofstream(mine) << "mine";
  fs::path csv = scratch("plan-out.csv");
  std::ofstream(csv) << "old csv, longer than nothing";
  LumaRun r = luma("plan " + in.string() + " -o " + link.string() + " --csv " + csv.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(nlohmann::json::parse(slurp(target))["devices"][0]["arena"], 12);
  EXPECT_EQ(slurp(mine), "mine");
  EXPECT_EQ(slurp(csv).substr(0, 26), "id,lower,upper,size,offset");
  // No temporary is left behind in the folder.
  for (const auto& entry : fs::directory_iterator(in.parent_path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  // Standard output is the table's: `-o -` is refused.
  r = luma("plan " + in.string() + " -o -");
  EXPECT_EQ(r.code, 1) << r.output;
}

// A directory is named as one; a pipe is read once, whole, so the format check does not
// eat the first bytes of what the reader then sees.
TEST(PlanCli, DirectoriesAndPipes) {
  fs::path dir = scratch("a-directory");
  fs::create_directories(dir);
  LumaRun r = luma("plan " + dir.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find(dir.string() + ": is a directory"), std::string::npos) << r.output;

  fs::path in = scratch("piped.csv");
  std::ofstream(in) << "id,lower,upper,size\n0,0,2,4\n1,1,3,8\n";
  fs::path fifo = scratch("plan.fifo");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = luma("plan " + fifo.string() + " & cat " + in.string() + " > " + fifo.string() + "; wait $!");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("lower bound 12 B"), std::string::npos) << r.output;
}

// Buffer ids are the input's text: the SVG escapes them and stays well-formed XML.
TEST(PlanCli, SvgEscapesBufferIds) {
  fs::path in = scratch("xml.csv"), svg = scratch("xml.svg");
  std::ofstream(in) << "id,lower,upper,size\n<b>&\"x',0,2,4\nplain,1,3,8\n";
  LumaRun r = luma("plan " + in.string() + " --svg " + svg.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string text = slurp(svg);
  EXPECT_NE(text.find("<title>&lt;b&gt;&amp;&quot;x&apos;: 4 B"), std::string::npos) << text;
  EXPECT_EQ(text.find("<b>"), std::string::npos);
  // Well-formed: Python's XML parser reads it (python3 is what the suite runs anyway).
  LumaRun parse{-1, ""};
  const std::string cmd = "python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' " +
                          svg.string() + " 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) parse.output.append(buf, n);
    const int status = pclose(p);
    parse.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  EXPECT_EQ(parse.code, 0) << parse.output;
}

}  // namespace

namespace {

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A picture of 300,000 buffers was 18 MB: --svg-max-buffers keeps the largest N, and
// --svg-from/--svg-to a window of the run; the title says what was left out.
TEST(PlanCli, SvgDrawsAtMostNBuffersAndAWindow) {
  fs::path in = scratch("many.csv"), svg = scratch("many.svg");
  {
    std::ofstream f(in);
    f << "id,lower,upper,size\n";
    for (int i = 0; i < 10; ++i) f << "b" << i << "," << i << "," << i + 2 << "," << 100 * (i + 1) << "\n";
  }
  LumaRun r = luma("plan " + in.string() + " --svg " + svg.string() + " --svg-max-buffers 3");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string text = slurp(svg);
  EXPECT_EQ(count_of(text, "<title>"), 3u) << text;
  for (const char* largest : {"<title>b9:", "<title>b8:", "<title>b7:"})
    EXPECT_NE(text.find(largest), std::string::npos) << largest;
  EXPECT_NE(text.find("3 of 10 buffers drawn (the largest)"), std::string::npos) << text;

  // Events 5..6: b4 [4,6), b5 [5,7), b6 [6,8) are live then.
  r = luma("plan " + in.string() + " --svg " + svg.string() + " --svg-from 5 --svg-to 6");
  ASSERT_EQ(r.code, 0) << r.output;
  text = slurp(svg);
  EXPECT_EQ(count_of(text, "<title>"), 3u) << text;
  for (const char* live : {"<title>b4:", "<title>b5:", "<title>b6:"})
    EXPECT_NE(text.find(live), std::string::npos) << live;

  r = luma("plan " + in.string() + " --svg " + svg.string() + " --svg-from 7 --svg-to 6");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--svg-from is after --svg-to"), std::string::npos) << r.output;
}

}  // namespace
