#include "vtpu/stress/stress_html.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/common/strings.h"
#include "vtpu/stress/stress_html_assets.h"

namespace vtpu {
namespace {

using Json = nlohmann::json;

// The summary fields of the contract, in the order the page shows them. Every one must be
// present in `summary` and in each `per_core` entry; each is a number or null.
enum class FieldKind { kCount, kNumber, kFraction, kLatency };
struct SummaryField {
  const char* name;
  FieldKind kind;
};
constexpr SummaryField kSummaryFields[] = {
    {"events", FieldKind::kCount},
    {"peak_reserved_bytes", FieldKind::kCount},
    {"peak_live_bytes", FieldKind::kCount},
    {"reserved_over_live", FieldKind::kNumber},
    {"fragmentation_mean", FieldKind::kFraction},
    {"fragmentation_max", FieldKind::kFraction},
    {"false_ooms", FieldKind::kCount},
    {"true_ooms", FieldKind::kCount},
    {"alloc_latency_ns", FieldKind::kLatency},
    {"free_latency_ns", FieldKind::kLatency},
    {"events_per_second", FieldKind::kNumber},
    {"defragmentations", FieldKind::kCount},
    {"defrag_bytes_moved", FieldKind::kCount},
    {"defrag_time_ns", FieldKind::kNumber},
    {"min_capacity_bytes", FieldKind::kCount},
    {"integrity_checks", FieldKind::kCount},
    {"integrity_failures", FieldKind::kCount},
};

// Walks the document with a JSON path for messages ("runs[1].per_core[0].timeline[3].event"),
// reading each value through common/json_fields.h.
class Checker {
 public:
  static constexpr const char* kWhere = "stress report";

  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw_json_error(kWhere, path, what);
  }
  static JsonField field(const Json& object, const std::string& path, const char* key) {
    auto it = object.find(key);
    return JsonField(it == object.end() ? nullptr : &*it, kWhere, join(path, key));
  }
  static const Json& member(const Json& object, const std::string& path, const char* key,
                            const char* expected) {
    return field(object, path, key).json(expected);
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) { return json_index_path(path, i); }

  [[noreturn]] static void wrong(const std::string& path, const Json& value,
                                 const std::string& expected) {
    JsonField(&value, kWhere, path).fail_expected(expected);
  }

  static const Json& object(const Json& parent, const std::string& path, const char* key) {
    return JsonObject(field(parent, path, key), "an object").json();
  }
  static const Json& array(const Json& parent, const std::string& path, const char* key) {
    const JsonField f = field(parent, path, key);
    const Json& v = f.json("an array");
    if (!v.is_array()) f.fail_expected("an array");
    return v;
  }
  static const std::string& string(const Json& parent, const std::string& path, const char* key) {
    return field(parent, path, key).string();
  }
  static bool boolean(const Json& parent, const std::string& path, const char* key) {
    return field(parent, path, key).boolean();
  }
  static bool is_count(const Json& v) {
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  }
  static uint64_t count(const Json& parent, const std::string& path, const char* key) {
    return field(parent, path, key).unsigned_integer();
  }
  static double number(const Json& parent, const std::string& path, const char* key,
                       double min_value, double max_value, const char* expected) {
    return field(parent, path, key).number(min_value, max_value, expected);
  }
  // A number or null; `kind` gives the range.
  static void summary_value(const Json& parent, const std::string& path, const SummaryField& f) {
    static constexpr double kInf = std::numeric_limits<double>::infinity();
    switch (f.kind) {
      case FieldKind::kCount: {
        const Json& v = member(parent, path, f.name, "a non-negative integer or null");
        if (!v.is_null() && !is_count(v))
          wrong(join(path, f.name), v, "a non-negative integer or null");
        return;
      }
      case FieldKind::kNumber:
      case FieldKind::kFraction: {
        const bool fraction = f.kind == FieldKind::kFraction;
        const char* expected =
            fraction ? "a number in [0, 1] or null" : "a finite number >= 0 or null";
        const Json& v = member(parent, path, f.name, expected);
        if (v.is_null()) return;
        number(parent, path, f.name, 0.0, fraction ? 1.0 : kInf, expected);
        return;
      }
      case FieldKind::kLatency: {
        const char* expected = "an object {median, p99, p99_99} or null";
        const Json& v = member(parent, path, f.name, expected);
        if (v.is_null()) return;
        if (!v.is_object()) wrong(join(path, f.name), v, expected);
        for (const char* q : {"median", "p99", "p99_99"}) {
          const Json& x = member(v, join(path, f.name), q, "a finite number >= 0 or null");
          if (!x.is_null())
            number(v, join(path, f.name), q, 0.0, kInf, "a finite number >= 0 or null");
        }
        return;
      }
    }
  }
  static void summary(const Json& object, const std::string& path) {
    for (const SummaryField& f : kSummaryFields) summary_value(object, path, f);
  }
};

void validate_worst(const Json& worst, const std::string& path) {
  using C = Checker;
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  C::count(worst, path, "event");
  C::number(worst, path, "t_us", 0.0, kInf, "a finite number >= 0");
  C::number(worst, path, "fragmentation", 0.0, 1.0, "a number in [0, 1]");
  const uint64_t capacity = C::count(worst, path, "capacity_bytes");
  if (capacity == 0) C::wrong(C::join(path, "capacity_bytes"), worst["capacity_bytes"], "> 0");
  const Json& blocks = C::array(worst, path, "blocks");
  const std::string blocks_path = C::join(path, "blocks");
  if (blocks.empty()) C::fail(blocks_path, "empty (expected blocks covering [0, capacity_bytes))");
  uint64_t end = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Json& b = blocks[i];
    const std::string bp = C::index(blocks_path, i);
    if (!b.is_object()) C::wrong(bp, b, "an object");
    const uint64_t offset = C::count(b, bp, "offset");
    if (offset != end)
      C::fail(C::join(bp, "offset"), "expected " + std::to_string(end) +
                                         " (blocks are in address order with no gap or "
                                         "overlap), got " +
                                         std::to_string(offset));
    const uint64_t bytes = C::count(b, bp, "bytes");
    if (bytes == 0) C::wrong(C::join(bp, "bytes"), b["bytes"], "an integer >= 1");
    if (bytes > capacity - offset)
      C::fail(C::join(bp, "bytes"), "block [" + std::to_string(offset) + ", +" +
                                        std::to_string(bytes) + ") ends past capacity_bytes " +
                                        std::to_string(capacity));
    end = offset + bytes;
    const std::string& state = C::string(b, bp, "state");
    if (state == "used") {
      C::count(b, bp, "id");
      if (auto it = b.find("label"); it != b.end() && !it->is_null() && !it->is_string())
        C::wrong(C::join(bp, "label"), *it, "a string or null");
      if (auto it = b.find("requested_bytes"); it != b.end() && !it->is_null()) {
        if (!C::is_count(*it) || it->get<uint64_t>() > bytes)
          C::wrong(C::join(bp, "requested_bytes"), *it,
                   ("an integer in [0, bytes = " + std::to_string(bytes) + "]").c_str());
      }
    } else if (state != "free") {
      C::wrong(C::join(bp, "state"), b["state"], "\"used\" or \"free\"");
    }
  }
  if (end != capacity)
    C::fail(blocks_path, "cover [0, " + std::to_string(end) +
                             ") (expected [0, capacity_bytes = " + std::to_string(capacity) + "))");
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

uint64_t num_maps(const Json& report) {
  uint64_t n = 0;
  for (const Json& run : report["runs"])
    for (const Json& pc : run["per_core"])
      if (auto it = pc.find("worst"); it != pc.end() && !it->is_null()) ++n;
  return n;
}

// Writes `json` for a <script type="application/json"> element: ASCII only, and '<', '>', '&'
// as \u escapes (valid inside JSON strings, the only place JSON text can hold them), so that
// neither "</script" nor "<!--" can appear.
void append_script_json(std::string& out, const Json& json) {
  const std::string text = json.dump(-1, ' ', true, Json::error_handler_t::replace);
  out.reserve(out.size() + text.size() + text.size() / 16);
  for (char c : text) {
    switch (c) {
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        out += c;
    }
  }
}

// HTML text content: escapes markup characters and replaces invalid UTF-8 (by a round trip
// through nlohmann's replacing dump), then writes non-ASCII as character references.
std::string html_text(const std::string& s) {
  const std::string ascii = Json(s).dump(-1, ' ', true, Json::error_handler_t::replace);
  // `ascii` is a JSON string literal of ASCII characters; decode its escapes to code points.
  std::string out;
  for (size_t i = 1; i + 1 < ascii.size(); ++i) {
    char c = ascii[i];
    if (c == '\\') {
      char e = ascii[++i];
      uint32_t cp = 0;
      switch (e) {
        case 'n':
          cp = '\n';
          break;
        case 't':
          cp = '\t';
          break;
        case 'r':
          cp = '\r';
          break;
        case 'b':
          cp = '\b';
          break;
        case 'f':
          cp = '\f';
          break;
        case 'u':
          cp = static_cast<uint32_t>(std::stoul(ascii.substr(i + 1, 4), nullptr, 16));
          i += 4;
          if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < ascii.size() && ascii[i + 1] == '\\') {
            const uint32_t lo =
                static_cast<uint32_t>(std::stoul(ascii.substr(i + 3, 4), nullptr, 16));
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          }
          break;
        default:
          cp = static_cast<unsigned char>(e);  // \" \\ \/
      }
      if (cp < 0x20) cp = ' ';
      if (cp >= 0x80 || cp == '<' || cp == '>' || cp == '&' || cp == '"' || cp == '\'') {
        out += "&#" + std::to_string(cp) + ";";
      } else {
        out += static_cast<char>(cp);
      }
    } else if (c == '<' || c == '>' || c == '&' || c == '"' || c == '\'') {
      out += "&#" + std::to_string(static_cast<int>(c)) + ";";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Json timeline_columns(const Json& timeline) {
  std::vector<std::string> keys;
  for (const Json& sample : timeline)
    for (auto it = sample.begin(); it != sample.end(); ++it)
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
  Json out = Json::object();
  for (const std::string& key : keys) {
    Json column = Json::array();
    for (const Json& sample : timeline) {
      auto it = sample.find(key);
      column.push_back(it == sample.end() ? Json(nullptr) : *it);
    }
    out[key] = std::move(column);
  }
  return out;
}

void validate_stress_report(const Json& report) {
  using C = Checker;
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!report.is_object()) C::wrong("(document)", report, "a JSON object");
  const std::string& format = C::string(report, "", "format");
  if (format != "vtpu-stress") C::wrong("format", report["format"], "\"vtpu-stress\"");
  const Json& version = C::member(report, "", "version", "the integer 1");
  if (!C::is_count(version) || version.get<uint64_t>() != 1)
    C::wrong("version", version, "the integer 1");
  C::string(report, "", "command");
  const Json& workload = C::object(report, "", "workload");
  C::string(workload, "workload", "name");
  if (auto it = workload.find("description"); it != workload.end() && !it->is_string())
    C::wrong("workload.description", *it, "a string");
  if (auto it = workload.find("seed");
      it != workload.end() && !it->is_null() && !it->is_number_integer())
    C::wrong("workload.seed", *it, "an integer or null");
  if (auto it = workload.find("trace_path");
      it != workload.end() && !it->is_null() && !it->is_string())
    C::wrong("workload.trace_path", *it, "a string or null");
  const uint64_t cores = C::count(report, "", "cores");
  if (cores == 0) C::wrong("cores", report["cores"], "an integer >= 1");
  C::count(report, "", "hbm_bytes");
  C::boolean(report, "", "under_load");
  const Json& runs = C::array(report, "", "runs");
  if (runs.empty()) C::fail("runs", "empty (expected at least one run)");
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string rp = C::index("runs", r);
    const Json& run = runs[r];
    if (!run.is_object()) C::wrong(rp, run, "an object");
    C::string(run, rp, "allocator");
    C::boolean(run, rp, "auto_defragment");
    if (auto it = run.find("defragment_mode");
        it != run.end() &&
        !(it->is_string() && (*it == "off" || *it == "on_failure" || *it == "before_growth")))
      C::wrong(C::join(rp, "defragment_mode"), *it, "\"off\", \"on_failure\" or \"before_growth\"");
    if (auto it = run.find("error"); it != run.end() && !it->is_string())
      C::wrong(C::join(rp, "error"), *it, "a string");
    if (auto it = run.find("failed"); it != run.end() && !it->is_boolean())
      C::wrong(C::join(rp, "failed"), *it, "a boolean");
    C::summary(C::object(run, rp, "summary"), C::join(rp, "summary"));
    const Json& per_core = C::array(run, rp, "per_core");
    const std::string pcp = C::join(rp, "per_core");
    if (per_core.size() != cores)
      C::fail(pcp, "has " + std::to_string(per_core.size()) +
                       " entries (expected one per core, cores = " + std::to_string(cores) + ")");
    std::vector<bool> seen(cores, false);
    for (size_t i = 0; i < per_core.size(); ++i) {
      const std::string cp = C::index(pcp, i);
      const Json& pc = per_core[i];
      if (!pc.is_object()) C::wrong(cp, pc, "an object");
      const uint64_t core = C::count(pc, cp, "core");
      if (core >= cores || seen[core])
        C::wrong(C::join(cp, "core"), pc["core"],
                 ("a core id in [0, " + std::to_string(cores) + ") not listed before").c_str());
      seen[core] = true;
      C::summary(pc, cp);
      const Json& timeline = C::array(pc, cp, "timeline");
      const std::string tp = C::join(cp, "timeline");
      for (size_t k = 0; k < timeline.size(); ++k) {
        const std::string sp = C::index(tp, k);
        const Json& s = timeline[k];
        if (!s.is_object()) C::wrong(sp, s, "an object");
        C::count(s, sp, "event");
        C::number(s, sp, "t_us", 0.0, kInf, "a finite number >= 0");
        C::count(s, sp, "bytes_in_use");
        C::count(s, sp, "bytes_reserved");
        C::number(s, sp, "fragmentation", 0.0, 1.0, "a number in [0, 1]");
      }
      const Json& worst = C::member(pc, cp, "worst", "an object or null");
      if (!worst.is_null()) {
        if (!worst.is_object()) C::wrong(C::join(cp, "worst"), worst, "an object or null");
        validate_worst(worst, C::join(cp, "worst"));
      }
    }
  }
}

Json merge_worst_blocks(const Json& worst, uint64_t budget) {
  budget = std::max<uint64_t>(budget, 1);
  const Json& blocks = worst.at("blocks");
  const uint64_t capacity = worst.at("capacity_bytes").get<uint64_t>();
  uint64_t extent = 0;
  for (const Json& b : blocks)
    if (b.at("state") == "used")
      extent = b.at("offset").get<uint64_t>() + b.at("bytes").get<uint64_t>();
  if (extent == 0) extent = capacity;
  const uint64_t threshold = std::max<uint64_t>(1, ceil_div(extent, budget));
  const uint64_t tail_threshold = std::max(threshold, ceil_div(capacity, budget));

  Json labels = Json::array();
  std::map<std::string, int64_t> label_index;
  auto intern = [&](const std::string& s) -> int64_t {
    auto [pos, inserted] = label_index.emplace(s, static_cast<int64_t>(labels.size()));
    if (inserted) labels.push_back(s);
    return pos->second;
  };
  // Unlabelled blocks are "" (a label may not be empty in the page: "" shows as unlabelled).
  auto label_text = [](const Json& b) -> std::string {
    auto it = b.find("label");
    return it == b.end() || !it->is_string() ? std::string() : it->get<std::string>();
  };
  auto label_of = [&](const Json& b) -> int64_t {
    const std::string s = label_text(b);
    return s.empty() ? -1 : intern(s);
  };
  // Every label's exact used bytes and block count, for the legend (top 16 by bytes).
  std::map<std::string, std::pair<uint64_t, uint64_t>> all_labels;

  Json segments = Json::array();
  uint64_t used_blocks = 0, free_blocks = 0, largest_free = 0, used_bytes = 0, requested_bytes = 0;
  // The open merged span.
  struct Span {
    uint64_t offset = 0, bytes = 0, count = 0, used = 0, requested = 0;
    std::map<std::string, uint64_t> label_bytes;  // label -> used bytes ("" for none)
    Json first;                                   // the single block when count == 1
  } span;
  auto close_span = [&] {
    if (span.count == 0) return;
    if (span.count == 1) {
      const Json& b = span.first;
      const bool used = b.at("state") == "used";
      segments.push_back(
          Json::array({span.offset, span.bytes, used ? 1 : 0, used ? label_of(b) : -1,
                       used ? b.at("id") : Json(nullptr), span.requested, 1, span.used}));
    } else {
      const std::string* top = nullptr;
      uint64_t top_bytes = 0;
      for (const auto& [label, bytes] : span.label_bytes)
        if (bytes > top_bytes) top = &label, top_bytes = bytes;
      const int state = span.used == 0 ? 0 : 2;
      segments.push_back(Json::array({span.offset, span.bytes, state,
                                      top == nullptr || top->empty() ? -1 : intern(*top), nullptr,
                                      span.requested, span.count, span.used}));
    }
    span = Span{};
  };
  for (const Json& b : blocks) {
    const uint64_t offset = b.at("offset").get<uint64_t>();
    const uint64_t bytes = b.at("bytes").get<uint64_t>();
    const bool used = b.at("state") == "used";
    uint64_t requested = 0;
    if (used) {
      ++used_blocks;
      used_bytes += bytes;
      auto it = b.find("requested_bytes");
      requested = (it != b.end() && !it->is_null()) ? it->get<uint64_t>() : bytes;
      requested_bytes += requested;
      auto& [label_bytes, label_blocks] = all_labels[label_text(b)];
      label_bytes += bytes;
      ++label_blocks;
    } else {
      ++free_blocks;
      largest_free = std::max(largest_free, bytes);
    }
    const uint64_t limit = offset >= extent ? tail_threshold : threshold;
    if (bytes >= limit) {
      close_span();
      span.offset = offset;
      span.bytes = bytes;
      span.count = 1;
      span.used = used ? bytes : 0;
      span.requested = requested;
      span.first = b;
      close_span();
      continue;
    }
    if (span.count == 0) span.offset = offset;
    if (span.count == 0) span.first = b;
    span.bytes += bytes;
    ++span.count;
    if (used) {
      span.used += bytes;
      span.requested += requested;
      span.label_bytes[label_text(b)] += bytes;
    }
    if (span.bytes >= limit) close_span();
  }
  close_span();
  std::vector<std::pair<uint64_t, std::string>> by_bytes;
  for (const auto& [label, totals] : all_labels) by_bytes.emplace_back(totals.first, label);
  std::sort(by_bytes.begin(), by_bytes.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  Json top_labels = Json::array();
  for (size_t i = 0; i < by_bytes.size() && i < 16; ++i) {
    const std::string& label = by_bytes[i].second;
    top_labels.push_back(Json{{"label", label.empty() ? Json(nullptr) : Json(label)},
                              {"bytes", by_bytes[i].first},
                              {"blocks", all_labels[label].second}});
  }
  return Json{{"original_blocks", blocks.size()},
              {"distinct_labels", all_labels.size()},
              {"top_labels", std::move(top_labels)},
              {"min_block_bytes", threshold},
              {"used_blocks", used_blocks},
              {"free_blocks", free_blocks},
              {"largest_free_bytes", largest_free},
              {"used_bytes", used_bytes},
              {"requested_bytes", requested_bytes},
              {"labels", std::move(labels)},
              {"columns", Json::array({"offset", "bytes", "state", "label", "id", "requested_bytes",
                                       "count", "used_bytes"})},
              {"segments", std::move(segments)}};
}

std::string render_stress_html(const Json& report, const StressHtmlOptions& options) {
  validate_stress_report(report);

  // The embedded copy: the input, except that maps with more blocks than their share are merged.
  const uint64_t maps = std::max<uint64_t>(num_maps(report), 1);
  const uint64_t share = std::clamp<uint64_t>(
      options.total_segment_budget / maps, std::max<uint64_t>(options.min_segments_per_map, 1),
      std::max(options.max_segments_per_map, options.min_segments_per_map));
  bool any_merged = false;
  uint64_t samples = 0;
  for (const Json& run : report["runs"])
    for (const Json& pc : run["per_core"]) {
      if (const Json& w = pc["worst"]; !w.is_null() && w["blocks"].size() > share)
        any_merged = true;
      samples += pc["timeline"].size();
    }
  const bool columns = samples > options.verbatim_timeline_samples;
  Json compact_copy;
  const Json* data = &report;
  if (any_merged || columns) {
    // Copy everything but the timelines and big block lists, which are rewritten.
    auto copy_except = [](const Json& from, const char* key) {
      Json to = Json::object();
      for (auto it = from.begin(); it != from.end(); ++it)
        if (it.key() != key) to[it.key()] = it.value();
      return to;
    };
    compact_copy = copy_except(report, "runs");
    compact_copy["runs"] = Json::array();
    for (const Json& run : report["runs"]) {
      Json run_copy = copy_except(run, "per_core");
      run_copy["per_core"] = Json::array();
      for (const Json& pc : run["per_core"]) {
        Json pc_copy = Json::object();
        for (auto it = pc.begin(); it != pc.end(); ++it)
          if (it.key() != "worst" && (it.key() != "timeline" || !columns))
            pc_copy[it.key()] = it.value();
        if (columns) pc_copy["timeline_columns"] = timeline_columns(pc["timeline"]);
        const Json& w = pc["worst"];
        if (w.is_null() || w["blocks"].size() <= share) {
          pc_copy["worst"] = w;
        } else {
          Json w_copy = copy_except(w, "blocks");
          w_copy["blocks_merged"] = merge_worst_blocks(w, share);
          pc_copy["worst"] = std::move(w_copy);
        }
        run_copy["per_core"].push_back(std::move(pc_copy));
      }
      compact_copy["runs"].push_back(std::move(run_copy));
    }
    data = &compact_copy;
  }

  const std::string title =
      "vtpu stress: " + report["workload"]["name"].get<std::string>() + " (" +
      count_text(static_cast<long long>(report["cores"].get<uint64_t>()), "core") + ")";
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_text(title) + "</title>\n<style>\n\n";
  out += kStressHtmlCss;
  out += "</style>\n</head>\n<body>\n";
  out += kStressHtmlBody;
  out += "<script type=\"application/json\" id=\"vtpu-stress-data\">";
  append_script_json(out, *data);
  out += "</script>\n<script>\n\n";
  out += kStressHtmlJs;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

std::string render_stress_html(const Json& report) {
  return render_stress_html(report, StressHtmlOptions{});
}

}  // namespace vtpu
