// Tests of the `vtpu stress --html` page (stress/stress_html.h): the embedded data round-trips,
// hostile labels cannot close the script element, nothing is loaded from the network, bad
// documents are rejected naming the field, big documents give a bounded page, the merged maps
// keep every block and hole of the visible size, and (when Debian's chromium is installed) the
// page renders to a non-blank screenshot of the requested size.
#include "vtpu/stress/stress_html.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/stress/stress_html_assets.h"
#include "tests/stress/stress_report_fixture.h"
#include "tests/temp_path.h"

namespace vtpu {
namespace {

using Json = nlohmann::json;
using testing::make_stress_report;
using testing::StressFixtureOptions;

constexpr char kDataOpen[] = "<script type=\"application/json\" id=\"vtpu-stress-data\">";

Json latency(double median, double p99, double p99_99) {
  return {{"median", median}, {"p99", p99}, {"p99_99", p99_99}};
}

// Every summary field of the contract, with values that differ per `k`.
Json summary_fields(int k) {
  return {{"events", 10},
          {"peak_reserved_bytes", 8192 + 256 * k},
          {"peak_live_bytes", 8000},
          {"reserved_over_live", (8192.0 + 256 * k) / 8000},
          {"fragmentation_mean", 0.1 * k},
          {"fragmentation_max", 0.2 * k},
          {"false_ooms", k},
          {"true_ooms", 0},
          {"alloc_latency_ns", latency(50 + k, 200, 3000)},
          {"free_latency_ns", k == 0 ? Json(nullptr) : latency(40, 150, 2000)},
          {"events_per_second", 1.0e7 / (1 + k)},
          {"defragmentations", k},
          {"defrag_bytes_moved", 4096 * k},
          {"defrag_time_ns", 1000.0 * k},
          {"min_capacity_bytes", k == 0 ? Json(nullptr) : Json(8192)},
          {"integrity_checks", 3},
          {"integrity_failures", 0}};
}

// A hand-written document: 2 cores, bfc with and without auto-defragmentation, 3 samples, and a
// 16 KiB arena of 5 blocks per core. `label` is the label of the first used block of core 0.
Json small_report(const std::string& label = "layer3/grad") {
  Json runs = Json::array();
  for (int r = 0; r < 2; ++r) {
    Json per_core = Json::array();
    for (int c = 0; c < 2; ++c) {
      Json core = summary_fields(r);
      core["core"] = c;
      core["timeline"] = Json::array({
          {{"event", 0},
           {"t_us", 0.0},
           {"bytes_in_use", 0},
           {"bytes_reserved", 0},
           {"fragmentation", 0.0}},
          {{"event", 5},
           {"t_us", 12.5},
           {"bytes_in_use", 8192},
           {"bytes_reserved", 12288},
           {"fragmentation", 0.25}},
          {{"event", 10},
           {"t_us", 19.0},
           {"bytes_in_use", 4096},
           {"bytes_reserved", 4096},
           {"fragmentation", 0.0}},
      });
      core["worst"] = {
          {"event", 5},
          {"t_us", 12.5},
          {"fragmentation", 0.25},
          {"capacity_bytes", 16384},
          {"blocks", Json::array({
                         {{"offset", 0},
                          {"bytes", 4096},
                          {"state", "used"},
                          {"label", c == 0 ? label : "w"},
                          {"id", 17},
                          {"requested_bytes", 4000}},
                         {{"offset", 4096}, {"bytes", 1024}, {"state", "free"}},
                         {{"offset", 5120}, {"bytes", 3072}, {"state", "used"}, {"id", 18}},
                         {{"offset", 8192},
                          {"bytes", 4096},
                          {"state", "used"},
                          {"label", nullptr},
                          {"id", 19},
                          {"requested_bytes", 4096}},
                         {{"offset", 12288}, {"bytes", 4096}, {"state", "free"}},
                     })}};
      per_core.push_back(core);
    }
    runs.push_back({{"allocator", "bfc"},
                    {"auto_defragment", r == 1},
                    {"summary", summary_fields(r)},
                    {"per_core", per_core}});
  }
  return {{"format", "vtpu-stress"},
          {"version", 1},
          {"command", "vtpu stress --cores 2 --workload uniform --allocators bfc --hbm-bytes 16K"},
          {"workload",
           {{"name", "uniform"},
            {"description", "uniform 256 B..4 KiB"},
            {"seed", 1},
            {"trace_path", nullptr}}},
          {"cores", 2},
          {"hbm_bytes", 16384},
          {"under_load", false},
          {"runs", runs}};
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The text between the data element's start tag and the first "</script" after it.
std::string data_text(const std::string& page) {
  const size_t open = page.find(kDataOpen);
  EXPECT_NE(open, std::string::npos);
  if (open == std::string::npos) return {};
  const size_t start = open + sizeof(kDataOpen) - 1;
  const size_t end = lower(page).find("</script", start);
  EXPECT_NE(end, std::string::npos);
  return page.substr(start, end - start);
}

Json embedded(const std::string& page) { return Json::parse(data_text(page)); }

// The page with the data element's content removed: the page's own markup, style and script.
std::string page_without_data(const std::string& page) {
  const std::string data = data_text(page);
  std::string out = page;
  out.erase(out.find(kDataOpen) + sizeof(kDataOpen) - 1, data.size());
  return out;
}

TEST(StressHtmlTest, SmallDocumentRoundTripsExactly) {
  const Json doc = small_report();
  const std::string page = render_stress_html(doc);
  EXPECT_EQ(embedded(page), doc);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

TEST(StressHtmlTest, ScriptElementsAreBalanced) {
  const std::string page = lower(render_stress_html(small_report()));
  // One data element and one script, each opened and closed once, in that order.
  EXPECT_EQ(count(page, "<script"), 2u);
  EXPECT_EQ(count(page, "</script"), 2u);
  const size_t open1 = page.find("<script"), close1 = page.find("</script");
  const size_t open2 = page.find("<script", open1 + 1), close2 = page.find("</script", close1 + 1);
  EXPECT_LT(open1, close1);
  EXPECT_LT(close1, open2);
  EXPECT_LT(open2, close2);
  EXPECT_EQ(count(page, "<style"), 1u);
  EXPECT_EQ(count(page, "</style"), 1u);
  EXPECT_EQ(count(page, "<!--"), 0u);
  // The static markup closes what it opens.
  const std::string own = page_without_data(page);
  for (const std::string tag :
       {"html", "head", "body", "header", "main", "section", "div", "p", "pre", "details",
        "summary", "footer", "noscript", "canvas", "span", "h1", "h2"})
    EXPECT_EQ(count(own, "<" + tag + ">") + count(own, "<" + tag + " "),
              count(own, "</" + tag + ">"))
        << tag;
}

TEST(StressHtmlTest, MediumGeneratedDocumentRoundTripsExactly) {
  // 2 cores x 6 runs x 1000 samples = 12000 samples (verbatim); 300 blocks per map (no merging).
  StressFixtureOptions o;
  o.cores = 2;
  o.blocks = 300;
  const Json doc = make_stress_report(o);
  EXPECT_EQ(embedded(render_stress_html(doc)), doc);
}

TEST(StressHtmlTest, NoExternalResources) {
  Json doc = small_report("https://example.com/not-a-resource");
  doc["workload"]["description"] = "see http://example.org/";
  const std::string page = render_stress_html(doc);
  // The data may hold URLs (as text); the page itself loads nothing.
  EXPECT_NE(data_text(page).find("https://example.com"), std::string::npos);
  const std::string own = lower(page_without_data(page));
  for (const char* needle : {"http://", "https://", "//cdn", "src=", "href=", "<link", "@import",
                             "url(", "fetch(", "xmlhttprequest", "@font-face"})
    EXPECT_EQ(own.find(needle), std::string::npos) << needle;
}

TEST(StressHtmlTest, ScriptInsertsDataOnlyAsText) {
  // The only innerHTML in the page's script parses a constant, to get the SVG namespace.
  const std::string own = page_without_data(render_stress_html(small_report()));
  EXPECT_EQ(count(own, "innerHTML"), 1u);
  EXPECT_NE(own.find("t.innerHTML = '<svg></svg>'"), std::string::npos);
  EXPECT_EQ(count(own, "outerHTML"), 0u);
  EXPECT_EQ(count(own, "insertAdjacentHTML"), 0u);
  EXPECT_EQ(count(own, "document.write"), 0u);
  EXPECT_EQ(count(own, "eval("), 0u);
}

TEST(StressHtmlTest, HostileLabelsCannotCloseTheScript) {
  const std::string hostile = "</script><script>alert(1)</script>";
  Json doc = small_report(hostile);
  doc["runs"][0]["per_core"][1]["worst"]["blocks"][0]["label"] = "\"quotes' & <!-- --> </SCRIPT >";
  doc["runs"][1]["per_core"][0]["worst"]["blocks"][0]["label"] =
      "Gr\xC3\xB6\xC3\x9F"
      "e/\xE6\xB3\xA8\xE6\x84\x8F/\xF0\x9F\x94\xA5";
  doc["workload"]["name"] = "</title><script>alert(2)</script>";
  doc["command"] = "vtpu stress --label '</script>' & \"x\"";
  const std::string page = render_stress_html(doc);
  // Still exactly the page's own two script elements, and the data parses back to the input.
  EXPECT_EQ(count(lower(page), "<script"), 2u);
  EXPECT_EQ(count(lower(page), "</script"), 2u);
  EXPECT_EQ(count(page, "<!--"), 0u);
  EXPECT_EQ(count(page, hostile), 0u);
  EXPECT_EQ(count(lower(page), "<script>alert"), 0u);
  EXPECT_EQ(embedded(page), doc);
  // The title is escaped text: one </title>, the hostile one written with character references.
  EXPECT_EQ(count(page, "</title>"), 1u);
  EXPECT_NE(page.find("&#60;/title&#62;&#60;script&#62;"), std::string::npos);
  // The page is ASCII: non-ASCII labels travel as \u escapes.
  EXPECT_TRUE(std::all_of(page.begin(), page.end(),
                          [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
}

TEST(StressHtmlTest, InvalidUtf8IsReplacedNotFatal) {
  Json doc = small_report(std::string("bad\xFF\xFE label"));
  const std::string page = render_stress_html(doc);
  const Json back = embedded(page);
  const std::string label = back["runs"][0]["per_core"][0]["worst"]["blocks"][0]["label"];
  EXPECT_EQ(label.rfind("bad", 0), 0u);
  EXPECT_NE(label.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
  EXPECT_NE(label.find(" label"), std::string::npos);
  // Everything else is unchanged (core 0 of both runs carries the label).
  for (Json& run : doc["runs"]) run["per_core"][0]["worst"]["blocks"][0]["label"] = label;
  EXPECT_EQ(back, doc);
}

struct BadCase {
  std::string name;
  std::function<void(Json&)> mutate;
  std::string expected;  // a substring of the message
};

TEST(StressHtmlTest, ValidationNamesTheField) {
  const std::vector<BadCase> cases = {
      {"not an object", [](Json& d) { d = Json::array(); }, "(document): expected a JSON object"},
      {"format", [](Json& d) { d["format"] = "vtpu-trace"; },
       "format: expected \"vtpu-stress\", got \"vtpu-trace\""},
      {"version", [](Json& d) { d["version"] = 2; }, "version: expected the integer 1, got 2"},
      {"no command", [](Json& d) { d.erase("command"); }, "command: missing (expected a string)"},
      {"workload name", [](Json& d) { d["workload"].erase("name"); }, "workload.name: missing"},
      {"cores 0", [](Json& d) { d["cores"] = 0; }, "cores: expected an integer >= 1, got 0"},
      {"hbm_bytes", [](Json& d) { d["hbm_bytes"] = -1; },
       "hbm_bytes: expected a non-negative integer, got -1"},
      {"under_load", [](Json& d) { d["under_load"] = "yes"; },
       "under_load: expected true or false"},
      {"no runs", [](Json& d) { d.erase("runs"); }, "runs: missing (expected an array)"},
      {"empty runs", [](Json& d) { d["runs"] = Json::array(); }, "runs: empty"},
      {"allocator", [](Json& d) { d["runs"][1]["allocator"] = 3; },
       "runs[1].allocator: expected a string, got 3"},
      {"summary field", [](Json& d) { d["runs"][0]["summary"]["false_ooms"] = "x"; },
       "runs[0].summary.false_ooms: expected a non-negative integer or null, got \"x\""},
      {"summary missing", [](Json& d) { d["runs"][1]["summary"].erase("min_capacity_bytes"); },
       "runs[1].summary.min_capacity_bytes: missing"},
      {"latency", [](Json& d) { d["runs"][0]["summary"]["alloc_latency_ns"].erase("p99_99"); },
       "runs[0].summary.alloc_latency_ns.p99_99: missing"},
      {"fraction", [](Json& d) { d["runs"][0]["summary"]["fragmentation_max"] = 1.5; },
       "runs[0].summary.fragmentation_max: expected a number in [0, 1] or null, got 1.5"},
      {"per_core size", [](Json& d) { d["runs"][1]["per_core"].erase(1); },
       "runs[1].per_core: has 1 entries (expected one per core, cores = 2)"},
      {"duplicate core", [](Json& d) { d["runs"][0]["per_core"][1]["core"] = 0; },
       "runs[0].per_core[1].core: expected a core id"},
      {"per-core summary", [](Json& d) { d["runs"][0]["per_core"][1].erase("events_per_second"); },
       "runs[0].per_core[1].events_per_second: missing"},
      {"timeline sample",
       [](Json& d) { d["runs"][1]["per_core"][0]["timeline"][2].erase("bytes_in_use"); },
       "runs[1].per_core[0].timeline[2].bytes_in_use: missing (expected a non-negative integer)"},
      {"timeline fragmentation",
       [](Json& d) { d["runs"][0]["per_core"][0]["timeline"][1]["fragmentation"] = -0.1; },
       "runs[0].per_core[0].timeline[1].fragmentation: expected a number in [0, 1], got -0.1"},
      {"no worst", [](Json& d) { d["runs"][0]["per_core"][1].erase("worst"); },
       "runs[0].per_core[1].worst: missing"},
      {"block gap",
       [](Json& d) { d["runs"][0]["per_core"][0]["worst"]["blocks"][2]["offset"] = 6000; },
       "runs[0].per_core[0].worst.blocks[2].offset: expected 5120"},
      {"block state",
       [](Json& d) { d["runs"][0]["per_core"][0]["worst"]["blocks"][1]["state"] = "hole"; },
       "runs[0].per_core[0].worst.blocks[1].state: expected \"used\" or \"free\", got \"hole\""},
      {"block id", [](Json& d) { d["runs"][1]["per_core"][1]["worst"]["blocks"][0].erase("id"); },
       "runs[1].per_core[1].worst.blocks[0].id: missing"},
      {"requested > bytes",
       [](Json& d) { d["runs"][0]["per_core"][0]["worst"]["blocks"][0]["requested_bytes"] = 5000; },
       "runs[0].per_core[0].worst.blocks[0].requested_bytes: expected an integer in [0, bytes = "
       "4096], got 5000"},
      {"blocks short", [](Json& d) { d["runs"][0]["per_core"][0]["worst"]["blocks"].erase(4); },
       "runs[0].per_core[0].worst.blocks: cover [0, 12288) (expected [0, capacity_bytes = 16384))"},
      {"block past capacity",
       [](Json& d) { d["runs"][0]["per_core"][0]["worst"]["blocks"][4]["bytes"] = 8192; },
       "runs[0].per_core[0].worst.blocks[4].bytes: block [12288, +8192) ends past capacity_bytes "
       "16384"},
      {"label type",
       [](Json& d) { d["runs"][0]["per_core"][0]["worst"]["blocks"][0]["label"] = 7; },
       "runs[0].per_core[0].worst.blocks[0].label: expected a string or null, got 7"},
  };
  for (const BadCase& c : cases) {
    Json doc = small_report();
    c.mutate(doc);
    try {
      render_stress_html(doc);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
          << c.name << ": message \"" << e.what() << "\" lacks \"" << c.expected << "\"";
      EXPECT_NE(std::string(e.what()).find("stress report: "), std::string::npos) << c.name;
    }
  }
  // The valid variants the contract allows: null worst, null numbers, extra fields, empty timeline.
  Json ok = small_report();
  ok["runs"][0]["per_core"][1]["worst"] = nullptr;
  ok["runs"][0]["per_core"][1]["timeline"] = Json::array();
  ok["runs"][0]["summary"]["events_per_second"] = nullptr;
  ok["runs"][0]["summary"]["p50_live_bytes"] = 7000;
  ok["extra_top_level"] = {{"anything", true}};
  EXPECT_EQ(embedded(render_stress_html(ok)), ok);
}

TEST(StressHtmlTest, MergeWorstBlocksHandWorked) {
  // capacity 1000, budget 10: the last used block ends at 530, so s = ceil(530 / 10) = 53 below
  // it and max(53, ceil(1000 / 10)) = 100 past it. The 500-byte block stays; the three 10-byte
  // blocks after it merge (30 bytes, 20 used, 15 requested); the 470-byte tail stays.
  const Json worst = {
      {"event", 1},
      {"t_us", 1.0},
      {"fragmentation", 1.0 - 470.0 / 480.0},
      {"capacity_bytes", 1000},
      {"blocks",
       Json::array({{{"offset", 0},
                     {"bytes", 500},
                     {"state", "used"},
                     {"label", "a"},
                     {"id", 1},
                     {"requested_bytes", 400}},
                    {{"offset", 500}, {"bytes", 10}, {"state", "used"}, {"label", "b"}, {"id", 2}},
                    {{"offset", 510}, {"bytes", 10}, {"state", "free"}},
                    {{"offset", 520},
                     {"bytes", 10},
                     {"state", "used"},
                     {"label", "b"},
                     {"id", 3},
                     {"requested_bytes", 5}},
                    {{"offset", 530}, {"bytes", 470}, {"state", "free"}}})}};
  const Json m = merge_worst_blocks(worst, 10);
  EXPECT_EQ(m["min_block_bytes"], 53);
  EXPECT_EQ(m["labels"], Json::array({"a", "b"}));
  EXPECT_EQ(m["segments"], Json::parse(R"([[0, 500, 1, 0, 1, 400, 1, 500],
                                           [500, 30, 2, 1, null, 15, 3, 20],
                                           [530, 470, 0, -1, null, 0, 1, 0]])"));
  EXPECT_EQ(m["original_blocks"], 5);
  EXPECT_EQ(m["used_blocks"], 3);
  EXPECT_EQ(m["free_blocks"], 2);
  EXPECT_EQ(m["largest_free_bytes"], 470);
  EXPECT_EQ(m["used_bytes"], 520);
  EXPECT_EQ(m["requested_bytes"], 415);
  EXPECT_EQ(m["distinct_labels"], 2);
  EXPECT_EQ(m["top_labels"], Json::parse(R"([{"label": "a", "bytes": 500, "blocks": 1},
                                             {"label": "b", "bytes": 20, "blocks": 2}])"));
  // A budget larger than the block count keeps every block (s = 1).
  EXPECT_EQ(merge_worst_blocks(worst, 1000)["segments"].size(), 5u);
}

TEST(StressHtmlTest, TimelineColumnsKeepValues) {
  const Json t = Json::parse(R"([{"event": 0, "t_us": 0.5, "fragmentation": 0.1},
                                 {"event": 7, "t_us": 1.25, "fragmentation": 0.123456789012345, "extra": 3}])");
  EXPECT_EQ(timeline_columns(t), Json::parse(R"({"event": [0, 7], "t_us": [0.5, 1.25],
      "fragmentation": [0.1, 0.123456789012345], "extra": [null, 3]})"));
}

// Rebuilds a timeline from its columns (the inverse of timeline_columns for complete samples).
Json from_columns(const Json& columns) {
  Json out = Json::array();
  const size_t n = columns.begin()->size();
  for (size_t i = 0; i < n; ++i) {
    Json s = Json::object();
    for (auto it = columns.begin(); it != columns.end(); ++it) s[it.key()] = (*it)[i];
    out.push_back(s);
  }
  return out;
}

TEST(StressHtmlTest, BigDocumentGivesBoundedPageAndFaithfulMaps) {
  // 8 cores x 6 runs x 1000 samples; two maps of 100k used blocks, the others 2000.
  StressFixtureOptions o;
  o.cores = 8;
  o.blocks = 2000;
  o.big_map_blocks = 100000;
  const Json doc = make_stress_report(o);
  const std::string page = render_stress_html(doc);
  std::printf("big document: %zu bytes of JSON, page %zu bytes\n", doc.dump().size(), page.size());
  EXPECT_LT(page.size(), size_t{6} << 20);
  const Json back = embedded(page);
  const uint64_t share = std::max<uint64_t>(65536 / 48, 1024);
  size_t big_maps = 0;
  for (size_t r = 0; r < doc["runs"].size(); ++r) {
    for (size_t c = 0; c < 8; ++c) {
      const Json& in = doc["runs"][r]["per_core"][c];
      const Json& out = back["runs"][r]["per_core"][c];
      SCOPED_TRACE("run " + std::to_string(r) + " core " + std::to_string(c));
      // Timelines: column-wise, same values.
      ASSERT_FALSE(out.contains("timeline"));
      EXPECT_EQ(from_columns(out["timeline_columns"]), in["timeline"]);
      // Maps: merged, bounded, covering [0, capacity), exact totals.
      const Json& blocks = in["worst"]["blocks"];
      const Json& m = out["worst"]["blocks_merged"];
      ASSERT_TRUE(m.is_object());
      ASSERT_FALSE(out["worst"].contains("blocks"));
      if (blocks.size() > 50000) ++big_maps;
      const Json& segs = m["segments"];
      EXPECT_LE(segs.size(), 3 * share + 2);
      EXPECT_LT(segs.size(), blocks.size());
      uint64_t end = 0, seg_used = 0, seg_blocks = 0;
      for (const Json& s : segs) {
        EXPECT_EQ(s[0].get<uint64_t>(), end);
        end += s[1].get<uint64_t>();
        seg_used += s[7].get<uint64_t>();
        seg_blocks += s[6].get<uint64_t>();
      }
      EXPECT_EQ(end, in["worst"]["capacity_bytes"].get<uint64_t>());
      EXPECT_EQ(seg_blocks, blocks.size());
      uint64_t used = 0, largest_free = 0;
      using Key = std::pair<uint64_t, uint64_t>;
      std::set<Key> free_kept, used_kept;
      for (const Json& s : segs) {
        if (s[2] == 0 && s[6] == 1)
          free_kept.insert(Key(s[0].get<uint64_t>(), s[1].get<uint64_t>()));
        if (s[2] == 1) used_kept.insert(Key(s[0].get<uint64_t>(), s[4].get<uint64_t>()));
      }
      const uint64_t threshold = m["min_block_bytes"];
      for (const Json& b : blocks) {
        const uint64_t bytes = b["bytes"];
        if (b["state"] == "used") {
          used += bytes;
          if (bytes >= threshold) {
            EXPECT_TRUE(used_kept.count(Key(b["offset"].get<uint64_t>(), b["id"].get<uint64_t>())))
                << b.dump();
          }
        } else {
          largest_free = std::max(largest_free, bytes);
          // Every hole of the visible size is its own segment.
          if (bytes >= threshold) {
            EXPECT_TRUE(free_kept.count(Key(b["offset"].get<uint64_t>(), bytes))) << b.dump();
          }
        }
      }
      EXPECT_EQ(seg_used, used);
      EXPECT_EQ(m["used_bytes"].get<uint64_t>(), used);
      EXPECT_EQ(m["largest_free_bytes"].get<uint64_t>(), largest_free);
      EXPECT_EQ(m["original_blocks"].get<size_t>(), blocks.size());
      // Everything else is the input's.
      Json a = in, b = out;
      a.erase("timeline");
      b.erase("timeline_columns");
      a["worst"].erase("blocks");
      b["worst"].erase("blocks_merged");
      EXPECT_EQ(a, b);
    }
  }
  EXPECT_EQ(big_maps, 2u);
  Json a = doc, b = back;
  a.erase("runs");
  b.erase("runs");
  EXPECT_EQ(a, b);
}

// ---------- screenshot ----------

struct Png {
  uint32_t width = 0, height = 0;
  std::vector<std::array<uint8_t, 3>> rgb;  // row-major
};

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

// A small PNG reader for 8-bit RGB or RGBA, non-interlaced images (what Chromium writes):
// concatenated IDAT, zlib inflate, then the five scanline filters of the PNG spec (section 9).
Png read_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Png png;
  if (f.size() < 33 || f.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    ADD_FAILURE() << path << " is not a PNG";
    return png;
  }
  std::string idat;
  int bit_depth = 0, color_type = 0, interlace = 0;
  for (size_t at = 8; at + 12 <= f.size();) {
    const uint32_t len = be32(f, at);
    const std::string type = f.substr(at + 4, 4);
    if (type == "IHDR") {
      png.width = be32(f, at + 8);
      png.height = be32(f, at + 12);
      bit_depth = uint8_t(f[at + 16]);
      color_type = uint8_t(f[at + 17]);
      interlace = uint8_t(f[at + 20]);
    } else if (type == "IDAT") {
      idat += f.substr(at + 8, len);
    }
    at += 12 + len;
  }
  if (bit_depth != 8 || (color_type != 2 && color_type != 6) || interlace != 0) {
    ADD_FAILURE() << "unsupported PNG: depth " << bit_depth << ", colour type " << color_type;
    return png;
  }
  const size_t bpp = color_type == 6 ? 4 : 3, stride = png.width * bpp;
  std::vector<uint8_t> raw(png.height * (stride + 1));
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      raw_len != raw.size()) {
    ADD_FAILURE() << "cannot inflate the image data of " << path;
    return png;
  }
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  png.rgb.reserve(size_t(png.width) * png.height);
  for (uint32_t y = 0; y < png.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* line = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? cur[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          pred = 0;
      }
      cur[i] = uint8_t(line[i] + pred);
    }
    for (uint32_t x = 0; x < png.width; ++x)
      png.rgb.push_back({cur[x * bpp], cur[x * bpp + 1], cur[x * bpp + 2]});
    std::swap(prev, cur);
  }
  return png;
}

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string script_path() { return std::string(VTPU_SOURCE_DIR) + "/scripts/screenshot-html.sh"; }

bool chromium_installed() {
  std::string out;
  return run_command("command -v chromium || command -v chromium-browser", &out) == 0;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = test_temp_dir() / ("vtpu_stress_html_" + name);
  std::filesystem::create_directories(dir);
  return dir;
}

struct ImageStats {
  size_t distinct = 0;   // distinct colours (counted up to 10000)
  double not_modal = 0;  // fraction of pixels that differ from the most common colour
};
ImageStats image_stats(const Png& png) {
  std::map<uint32_t, size_t> colours;
  for (const auto& p : png.rgb) ++colours[(uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2]];
  size_t modal = 0;
  for (const auto& [c, n] : colours) modal = std::max(modal, n);
  return {colours.size(), png.rgb.empty() ? 0.0 : 1.0 - double(modal) / png.rgb.size()};
}

TEST(StressHtmlScreenshotTest, MissingChromiumIsAClearError) {
  std::string out;
  const int rc = run_command("CHROMIUM=/nonexistent/chromium " + script_path() + " " +
                                 script_path() + " " + test_temp_path("x.png"),
                             &out);
  EXPECT_EQ(rc, 127) << out;
  EXPECT_NE(out.find("apt-get install chromium"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_command(script_path() + " only-one-argument", &out), 2) << out;
  out.clear();
  EXPECT_EQ(run_command(script_path() + " a.html b.png 12by34", &out), 2) << out;
  EXPECT_NE(out.find("not WIDTHxHEIGHT"), std::string::npos) << out;
}

TEST(StressHtmlScreenshotTest, RendersANonBlankPageOfTheRequestedSize) {
  if (!chromium_installed()) GTEST_SKIP() << "chromium is not installed (apt-get install chromium)";
  const auto dir = temp_dir("shot");
  StressFixtureOptions o;
  o.cores = 4;
  const std::string html = (dir / "report.html").string(), png_path = (dir / "report.png").string();
  std::ofstream(html) << render_stress_html(make_stress_report(o));
  std::string out;
  ASSERT_EQ(run_command(script_path() + " " + html + " " + png_path + " 1200x1500", &out), 0)
      << out;
  const Png png = read_png(png_path);
  ASSERT_EQ(png.width, 1200u);
  ASSERT_EQ(png.height, 1500u);
  const ImageStats shot = image_stats(png);
  // The page draws: many colours (labels, runs, text antialiasing) and most pixels are not the
  // background. The header band is the page's dark blue-grey (#1d2733), and bfc's blue (#2f6fdb,
  // legend, buttons and lines) appears.
  EXPECT_GT(shot.distinct, 200u);
  EXPECT_GT(shot.not_modal, 0.2);
  EXPECT_EQ(png.rgb[5 * png.width + 5], (std::array<uint8_t, 3>{0x1d, 0x27, 0x33}));
  EXPECT_TRUE(std::find(png.rgb.begin(), png.rgb.end(), std::array<uint8_t, 3>{0x2f, 0x6f, 0xdb}) !=
              png.rgb.end());

  // The control: a blank page gives one colour, so the checks above can fail.
  const std::string blank = (dir / "blank.html").string(), blank_png = (dir / "blank.png").string();
  std::ofstream(blank) << "<!DOCTYPE html><html><body style=\"background:#fff\"></body></html>";
  out.clear();
  ASSERT_EQ(run_command(script_path() + " " + blank + " " + blank_png + " 320x200", &out), 0)
      << out;
  const Png blank_image = read_png(blank_png);
  EXPECT_EQ(blank_image.width, 320u);
  EXPECT_EQ(blank_image.height, 200u);
  EXPECT_EQ(image_stats(blank_image).distinct, 1u);
  std::filesystem::remove_all(dir);
}

// Regression: the page's "HBM needed" cell showed "–" when the capacity search
// found no capacity below its bound, where the terminal table and the JSON say ">SIZE". The
// page's own formatting functions are run in node (skipped when node is absent).
TEST(StressHtmlTest, HbmNeededShowsTheBoundWhenTheSearchFoundNone) {
  std::string out;
  if (run_command("command -v node", &out) != 0) GTEST_SKIP() << "node is not installed";
  const std::string js = kStressHtmlJs;
  const size_t a = js.find("// ---------- formatting ----------");
  const size_t b = js.find("// ---------- colours ----------");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  // The summary and per-core tables format the column with capacityText.
  EXPECT_NE(js.find("key: 'min_capacity_bytes', t: 'HBM needed', f: fmtBytes, best: 'min', "
                    "text: capacityText"),
            std::string::npos);
  const std::filesystem::path dir = temp_dir("capacity");
  const std::filesystem::path file = dir / "capacity.js";
  {
    std::ofstream f(file);
    f << js.substr(a, b - a)
      << "\nconsole.log(JSON.stringify(["
         "capacityText({min_capacity_bytes: null, capacity_search_max_bytes: 68719476736}),"
         "capacityText({min_capacity_bytes: 5242880, capacity_search_max_bytes: 68719476736}),"
         "capacityText({min_capacity_bytes: null, capacity_search_max_bytes: null}),"
         "capacityText({min_capacity_bytes: 0, capacity_search_max_bytes: 4096})]));\n";
  }
  out.clear();
  ASSERT_EQ(run_command("node " + file.string(), &out), 0) << out;
  EXPECT_EQ(out, "[\">64.0 GiB\",\"5.00 MiB\",\"\u2013\",\"0 B\"]\n");
  std::filesystem::remove_all(dir);
}

// A run that failed mid-way (`failed`, `error`) and the defrag mode are part of the document the
// page reads: accepted when well-typed, rejected naming the field otherwise.
TEST(StressHtmlTest, FailedRunsAndDefragModesAreValidated) {
  Json doc = make_stress_report(StressFixtureOptions{});
  doc["runs"][0]["failed"] = true;
  doc["runs"][0]["error"] = "replay failed: std::bad_alloc";
  doc["runs"][0]["defragment_mode"] = "before_growth";
  EXPECT_NO_THROW(validate_stress_report(doc));
  EXPECT_NE(render_stress_html(doc).find("replay failed: std::bad_alloc"), std::string::npos);
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"failed", "yes"}, {"error", 3}, {"defragment_mode", "sometimes"}}) {
    Json bad = doc;
    bad["runs"][0][key] = value;
    try {
      validate_stress_report(bad);
      ADD_FAILURE() << key << " " << value << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(e.message().find("runs[0]." + key), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace vtpu
