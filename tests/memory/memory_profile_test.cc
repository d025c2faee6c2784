// Tests for memory/memory_profile.h: the pprof bytes parsed back with the generated
// perftools.profiles classes (every sample, label and string-table entry), `go tool pprof -top` on
// a written file when Go is installed, the JSON snapshot's values, error paths, and profiles of a
// real HbmArena.
#include "vtpu/memory/memory_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "memory/profile.pb.h"
#include "tests/temp_path.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {
namespace {

namespace pp = perftools::profiles;

MemoryChunkRecord live(int core, uint64_t offset, uint64_t chunk_bytes, uint64_t requested_bytes,
                       std::string label, uint64_t seq, std::string kind = "buffer") {
  return {core, offset, chunk_bytes, requested_bytes, true, std::move(label), seq, std::move(kind)};
}

MemoryChunkRecord free_chunk(int core, uint64_t offset, uint64_t chunk_bytes) {
  MemoryChunkRecord r;
  r.core_id = core;
  r.offset = offset;
  r.chunk_bytes = chunk_bytes;
  return r;
}

// Two cores: core 0 holds two 1 MiB "weights", "activations", an unlabelled buffer, an
// executable and a free hole; core 1 one "weights" and a free tail. Listed out of order so that
// the encoders' sorting shows.
std::vector<MemoryChunkRecord> sample_records() {
  return {
      live(1, 0, kMiB, kMiB, "weights", 1),
      live(0, kMiB, 3072, 3000, "activations", 2),
      free_chunk(0, kMiB + 3072, 4096),
      live(0, 2 * kMiB + 7424, 8192, 8192, "program", 5, "executable"),
      live(0, 0, kMiB, kMiB, "weights", 1),
      live(0, 2 * kMiB + 7168, 256, 100, "", 4),
      live(0, kMiB + 7168, kMiB, kMiB, "weights", 3),
      free_chunk(1, kMiB, 512),
  };
}

std::string gunzip(const std::string& gz) {
  z_stream zs{};
  EXPECT_EQ(inflateInit2(&zs, 15 + 16), Z_OK);  // 15 + 16: expect a gzip wrapper
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[4096];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END) << "not a complete gzip stream";
  EXPECT_EQ(zs.avail_in, 0u) << "bytes after the gzip stream";
  inflateEnd(&zs);
  return out;
}

pp::Profile parse(const std::string& gz) {
  EXPECT_GE(gz.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
  pp::Profile p;
  EXPECT_TRUE(p.ParseFromString(gunzip(gz)));
  return p;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A sample with its string indices resolved: function names leaf first, values, and labels as
// "key=str" or "key=num[unit]".
struct ResolvedSample {
  std::vector<std::string> functions;
  std::vector<int64_t> values;
  std::vector<std::string> labels;
  bool operator==(const ResolvedSample&) const = default;
};

std::ostream& operator<<(std::ostream& os, const ResolvedSample& s) {
  os << "{";
  for (const auto& f : s.functions) os << f << " ";
  os << "|";
  for (int64_t v : s.values) os << " " << v;
  os << " |";
  for (const auto& l : s.labels) os << " " << l;
  return os << "}";
}

// Resolves every sample, checking on the way that each id and string index points at an entry.
std::vector<ResolvedSample> resolve(const pp::Profile& p) {
  auto str = [&](int64_t i) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, p.string_table_size());
    return (i >= 0 && i < p.string_table_size()) ? p.string_table(static_cast<int>(i))
                                                 : std::string("<bad>");
  };
  std::map<uint64_t, std::string> function_name;
  for (const pp::Function& f : p.function()) {
    EXPECT_NE(f.id(), 0u);
    EXPECT_TRUE(function_name.emplace(f.id(), str(f.name())).second) << "duplicate id " << f.id();
    EXPECT_EQ(f.system_name(), f.name());
    EXPECT_EQ(f.filename(), 0);
  }
  std::map<uint64_t, std::string> location_function;
  for (const pp::Location& l : p.location()) {
    EXPECT_NE(l.id(), 0u);
    EXPECT_EQ(l.mapping_id(), 0u);
    EXPECT_EQ(l.line_size(), 1);
    if (l.line_size() != 1) continue;
    EXPECT_EQ(function_name.count(l.line(0).function_id()), 1u);
    location_function[l.id()] = function_name[l.line(0).function_id()];
  }
  std::vector<ResolvedSample> out;
  for (const pp::Sample& s : p.sample()) {
    ResolvedSample r;
    for (uint64_t id : s.location_id()) {
      EXPECT_EQ(location_function.count(id), 1u) << "unknown location " << id;
      r.functions.push_back(location_function[id]);
    }
    r.values.assign(s.value().begin(), s.value().end());
    for (const pp::Label& l : s.label()) {
      if (l.str() != 0) {
        EXPECT_EQ(l.num(), 0);
        r.labels.push_back(str(l.key()) + "=" + str(l.str()));
      } else {
        r.labels.push_back(str(l.key()) + "=" + std::to_string(l.num()) +
                           (l.num_unit() != 0 ? str(l.num_unit()) : ""));
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

TEST(MemoryProfileTest, PprofAggregatesLiveChunksLikeJax) {
  const std::vector<MemoryChunkRecord> records = sample_records();
  const std::string gz = encode_pprof(records);
  const pp::Profile p = parse(gz);

  // Strings in order of first use: the header, then per sample the function, kind and core.
  const std::vector<std::string> strings = {
      "",        "allocations", "count",        "space",  "bytes", "kind",
      "core",    "label",       "(unlabelled)", "buffer", "0",     "activations",
      "weights", "program",     "executable",   "1"};
  EXPECT_EQ(std::vector<std::string>(p.string_table().begin(), p.string_table().end()), strings);

  ASSERT_EQ(p.sample_type_size(), 2);
  EXPECT_EQ(p.string_table(p.sample_type(0).type()), "allocations");
  EXPECT_EQ(p.string_table(p.sample_type(0).unit()), "count");
  EXPECT_EQ(p.string_table(p.sample_type(1).type()), "space");
  EXPECT_EQ(p.string_table(p.sample_type(1).unit()), "bytes");
  EXPECT_EQ(p.default_sample_type(), 0);  // unset: readers default to the last type, space
  EXPECT_EQ(p.time_nanos(), 0);
  EXPECT_EQ(p.mapping_size(), 0);

  // Ordered by (core, kind, label, bytes); the two core-0 weights are one sample of count 2.
  const std::vector<ResolvedSample> expected = {
      {{"(unlabelled)"}, {1, 100}, {"kind=buffer", "core=0", "bytes=100bytes"}},
      {{"activations"},
       {1, 3000},
       {"kind=buffer", "core=0", "label=activations", "bytes=3000bytes"}},
      {{"weights"},
       {2, 2 * 1048576},
       {"kind=buffer", "core=0", "label=weights", "bytes=1048576bytes"}},
      {{"program"}, {1, 8192}, {"kind=executable", "core=0", "label=program", "bytes=8192bytes"}},
      {{"weights"}, {1, 1048576}, {"kind=buffer", "core=1", "label=weights", "bytes=1048576bytes"}},
  };
  EXPECT_EQ(resolve(p), expected);

  // One function and one location per distinct name, ids from 1, in order of first use.
  ASSERT_EQ(p.function_size(), 4);
  ASSERT_EQ(p.location_size(), 4);
  const char* names[] = {"(unlabelled)", "activations", "weights", "program"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p.function(i).id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(p.string_table(p.function(i).name()), names[i]);
    EXPECT_EQ(p.location(i).id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(p.location(i).line(0).function_id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(p.location(i).line(0).line(), 0);
  }

  // Deterministic: same bytes again, and from the records in another order.
  EXPECT_EQ(encode_pprof(records), gz);
  std::vector<MemoryChunkRecord> reversed(records.rbegin(), records.rend());
  EXPECT_EQ(encode_pprof(reversed), gz);
}

TEST(MemoryProfileTest, PprofOneSamplePerChunkWithChunkBytes) {
  const PprofOptions options{.aggregate = false, .space = PprofBytes::kChunk};
  const pp::Profile p = parse(encode_pprof(sample_records(), options));
  const std::vector<std::string> strings = {
      "",     "allocations", "count",        "space",     "bytes",      "kind",
      "core", "label",       "offset",       "alloc_seq", "weights",    "buffer",
      "0",    "activations", "(unlabelled)", "program",   "executable", "1"};
  EXPECT_EQ(std::vector<std::string>(p.string_table().begin(), p.string_table().end()), strings);

  // In (core, offset) order, count 1 each, chunk bytes, plus offset and alloc_seq labels.
  const std::vector<ResolvedSample> expected = {
      {{"weights"},
       {1, 1048576},
       {"kind=buffer", "core=0", "label=weights", "bytes=1048576bytes", "offset=0bytes",
        "alloc_seq=1"}},
      {{"activations"},
       {1, 3072},
       {"kind=buffer", "core=0", "label=activations", "bytes=3072bytes", "offset=1048576bytes",
        "alloc_seq=2"}},
      {{"weights"},
       {1, 1048576},
       {"kind=buffer", "core=0", "label=weights", "bytes=1048576bytes", "offset=1055744bytes",
        "alloc_seq=3"}},
      {{"(unlabelled)"},
       {1, 256},
       {"kind=buffer", "core=0", "bytes=256bytes", "offset=2104320bytes", "alloc_seq=4"}},
      {{"program"},
       {1, 8192},
       {"kind=executable", "core=0", "label=program", "bytes=8192bytes", "offset=2104576bytes",
        "alloc_seq=5"}},
      {{"weights"},
       {1, 1048576},
       {"kind=buffer", "core=1", "label=weights", "bytes=1048576bytes", "offset=0bytes",
        "alloc_seq=1"}},
  };
  EXPECT_EQ(resolve(p), expected);
  EXPECT_EQ(p.function_size(), 4);
}

TEST(MemoryProfileTest, EmptyAndAllFreeGiveAProfileWithoutSamples) {
  for (const std::vector<MemoryChunkRecord>& records :
       {std::vector<MemoryChunkRecord>{}, std::vector<MemoryChunkRecord>{free_chunk(0, 0, kMiB)}}) {
    const pp::Profile p = parse(encode_pprof(records));
    EXPECT_EQ(p.sample_type_size(), 2);
    EXPECT_EQ(p.sample_size(), 0);
    EXPECT_EQ(p.location_size(), 0);
    EXPECT_EQ(p.function_size(), 0);
  }
}

// A unique temporary directory, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "vtpu_profile_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(MemoryProfileTest, PprofFileRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("memory.prof");
  const std::vector<MemoryChunkRecord> records = sample_records();
  write_pprof(path, records);
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes, encode_pprof(records));
  EXPECT_EQ(resolve(parse(bytes)).size(), 5u);

  // Writing again replaces the file (a shorter profile leaves no tail of the old one).
  write_pprof(path, std::vector<MemoryChunkRecord>{live(0, 0, 256, 256, "x", 1)});
  const pp::Profile p = parse(read_file(path));
  ASSERT_EQ(p.sample_size(), 1);
  EXPECT_EQ(p.sample(0).value(1), 256);
}

TEST(MemoryProfileTest, SnapshotGroupsBlocksPerCoreLikeTorch) {
  const nlohmann::json j = memory_snapshot_json(sample_records());
  auto block = [](uint64_t address, uint64_t size, uint64_t requested, const char* state,
                  const char* label, uint64_t seq, const char* kind = "buffer") {
    return nlohmann::json{{"address", address}, {"size", size},   {"requested_size", requested},
                          {"state", state},     {"label", label}, {"alloc_seq", seq},
                          {"kind", kind}};
  };
  const nlohmann::json expected = {
      {"format", "vtpu.memory_snapshot"},
      {"version", 1},
      {"segments",
       {{{"device", 0},
         {"address", 0},
         {"total_size", 2 * kMiB + 3072 + 4096 + 256 + 8192},
         {"allocated_size", 2 * kMiB + 3072 + 256 + 8192},
         {"active_size", 2 * kMiB + 3072 + 256 + 8192},
         {"requested_size", 2 * kMiB + 3000 + 100 + 8192},
         {"free_size", 4096},
         {"largest_free_block", 4096},
         {"num_blocks", 6},
         {"num_allocated_blocks", 5},
         {"blocks",
          {block(0, kMiB, kMiB, "active_allocated", "weights", 1),
           block(kMiB, 3072, 3000, "active_allocated", "activations", 2),
           block(kMiB + 3072, 4096, 0, "inactive", "", 0),
           block(kMiB + 7168, kMiB, kMiB, "active_allocated", "weights", 3),
           block(2 * kMiB + 7168, 256, 100, "active_allocated", "", 4),
           block(2 * kMiB + 7424, 8192, 8192, "active_allocated", "program", 5, "executable")}}},
        {{"device", 1},
         {"address", 0},
         {"total_size", kMiB + 512},
         {"allocated_size", kMiB},
         {"active_size", kMiB},
         {"requested_size", kMiB},
         {"free_size", 512},
         {"largest_free_block", 512},
         {"num_blocks", 2},
         {"num_allocated_blocks", 1},
         {"blocks",
          {block(0, kMiB, kMiB, "active_allocated", "weights", 1),
           block(kMiB, 512, 0, "inactive", "", 0)}}}}},
      {"totals",
       {{"total_size", 3 * kMiB + 3072 + 4096 + 256 + 8192 + 512},
        {"allocated_size", 3 * kMiB + 3072 + 256 + 8192},
        {"active_size", 3 * kMiB + 3072 + 256 + 8192},
        {"requested_size", 3 * kMiB + 3000 + 100 + 8192},
        {"free_size", 4096 + 512},
        {"num_blocks", 8},
        {"num_allocated_blocks", 6},
        {"num_segments", 2}}}};
  EXPECT_EQ(j, expected) << j.dump(2);

  // The file holds the same JSON.
  TempDir dir;
  const std::string path = dir.file("snapshot.json");
  write_memory_snapshot(path, sample_records());
  EXPECT_EQ(nlohmann::json::parse(read_file(path)), expected);
}

// Expects `fn` to throw E whose what() contains every needle.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
  }
}

TEST(MemoryProfileTest, UnwritablePathsNameThePathAndErrno) {
  const std::vector<MemoryChunkRecord> records = sample_records();
  const std::string missing = "/nonexistent-vtpu-dir/memory.prof";
  expect_error<NotFoundError>([&] { write_pprof(missing, records); },
                              {"pprof profile", "'" + missing + "'", "No such file or directory"});
  expect_error<NotFoundError>(
      [&] { write_memory_snapshot(missing, records); },
      {"memory snapshot", "'" + missing + "'", "No such file or directory"});
  TempDir dir;  // a directory is not a file
  expect_error<InvalidArgumentError>([&] { write_pprof(dir.path(), records); },
                                     {"'" + dir.path() + "'", "Is a directory"});
  if (access("/dev/full", W_OK) == 0) {  // writes fail with ENOSPC
    expect_error<ResourceExhaustedError>([&] { write_pprof("/dev/full", records); },
                                         {"'/dev/full'", "No space left on device"});
  }
}

TEST(MemoryProfileTest, InconsistentRecordsAreRejected) {
  auto both = [](std::vector<MemoryChunkRecord> records, const std::vector<std::string>& needles) {
    expect_error<InvalidArgumentError>([&] { encode_pprof(records); }, needles);
    expect_error<InvalidArgumentError>([&] { memory_snapshot_json(records); }, needles);
  };
  both({live(2, 512, 256, 300, "x", 1)},
       {"offset 512 on core 2", "requested_bytes 300 > chunk_bytes 256"});
  both({live(0, 0, 1024, 1024, "a", 1), free_chunk(0, 768, 256)},
       {"offset 768 on core 0", "overlaps the chunk at offset 0 of 1024 bytes"});
  both({free_chunk(1, 0, 0)}, {"offset 0 on core 1", "chunk_bytes 0"});
  both({free_chunk(0, ~uint64_t{0} - 10, 256)}, {"ends past 2^64"});
  // The same offset on different cores is fine.
  EXPECT_NO_THROW(encode_pprof(
      std::vector<MemoryChunkRecord>{live(0, 0, 256, 256, "a", 1), live(1, 0, 256, 256, "a", 1)}));
  // pprof values are int64.
  const uint64_t huge = uint64_t{1} << 63;
  expect_error<InvalidArgumentError>(
      [&] { encode_pprof(std::vector<MemoryChunkRecord>{live(0, 0, huge, huge, "big", 1)}); },
      {"int64"});
}

// The `go` executable on PATH, or "" if there is none.
std::string find_go() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/go";
    if (access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) {
      return candidate;
    }
  }
  return "";
}

// Runs `go tool pprof FLAGS -top FILE` (flags are shell words, e.g. "-tagfocus='core=^0$'") with
// HOME, GOCACHE and GOPATH in `scratch` and the network off; returns stdout + stderr. The command
// is bounded by coreutils' timeout when present.
std::string go_pprof_top(const std::string& go, const std::string& file, const TempDir& scratch,
                         const std::string& flags = "") {
  std::string cmd = "HOME='" + scratch.path() + "' GOCACHE='" + scratch.file("gocache") +
                    "' GOPATH='" + scratch.file("gopath") +
                    "' GOPROXY=off GOTOOLCHAIN=local GOFLAGS= ";
  if (access("/usr/bin/timeout", X_OK) == 0) cmd += "/usr/bin/timeout 60 ";
  cmd +=
      "'" + go + "' tool pprof " + (flags.empty() ? "" : flags + " ") + "-top '" + file + "' 2>&1";
  std::FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << cmd << "\n" << out;
  return out;
}

// pprof's byte label ("3072kB", "292.97kB", "1.50MB", "100B": units of 1024, two decimals at
// most) as bytes; -1 if it is not one.
double pprof_bytes(const std::string& text) {
  static const std::map<std::string, double> kUnits = {
      {"B", 1.0}, {"kB", 1024.0}, {"MB", 1024.0 * 1024}, {"GB", 1024.0 * 1024 * 1024}};
  size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (const std::exception&) {
    return -1;
  }
  const auto unit = kUnits.find(text.substr(end));
  return unit == kUnits.end() ? -1 : v * unit->second;
}

// Checks the "flat" column of `pprof -top` (flat flat% sum% cum cum% name): exactly the expected
// names, each with the expected bytes to pprof's printed precision (0.005 of the unit).
void expect_flat_bytes(const std::string& top, const std::map<std::string, uint64_t>& expected) {
  std::map<std::string, std::string> flat;
  std::istringstream lines(top);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
    if (w.size() == 6 && w[1].back() == '%' && w[2].back() == '%' && w[4].back() == '%') {
      flat[w[5]] = w[0];
    }
  }
  // "Showing nodes accounting for X, P% of T total": the shown nodes hold the expected bytes.
  uint64_t total = 0;
  for (const auto& [name, bytes] : expected) total += bytes;
  const std::string marker = "Showing nodes accounting for ";
  const size_t at = top.find(marker);
  ASSERT_NE(at, std::string::npos) << top;
  const size_t from = at + marker.size();
  const std::string shown = top.substr(from, top.find(',', from) - from);
  EXPECT_NEAR(pprof_bytes(shown), static_cast<double>(total), 0.005 * total) << top;
  ASSERT_EQ(flat.size(), expected.size()) << top;
  for (const auto& [name, bytes] : expected) {
    const auto it = flat.find(name);
    ASSERT_NE(it, flat.end()) << name << " missing from\n" << top;
    const double got = pprof_bytes(it->second);
    const double unit = got / std::stod(it->second);  // bytes per printed unit
    EXPECT_NEAR(got, static_cast<double>(bytes), 0.005 * unit + 1e-9)
        << name << " flat " << it->second << " in\n"
        << top;
  }
}

TEST(MemoryProfileTest, GoToolPprofListsBuffersByLabel) {
  const std::string go = find_go();
  if (go.empty()) {
    GTEST_SKIP() << "`go` is not on PATH; install golang-go (scripts/install-deps.sh) to run "
                    "`go tool pprof` on the profile";
  }
  // pprof -top hides nodes under 0.5% of the total, so every buffer here is larger than that.
  const std::vector<MemoryChunkRecord> records = {
      live(0, 0, 2 * kMiB, 2 * kMiB, "weights", 1),
      live(0, 2 * kMiB, 1536 * kKiB, 1536 * kKiB, "activations", 2),
      free_chunk(0, 3584 * kKiB, 256),
      live(0, 3584 * kKiB + 256, 512 * kKiB, 512 * kKiB, "program", 3, "executable"),
      live(0, 4096 * kKiB + 256, 300 * 1024, 300000, "", 4),
      live(1, 0, kMiB, kMiB, "weights", 1),
  };
  TempDir dir;
  const std::string path = dir.file("memory.prof");
  write_pprof(path, records);
  const std::string top = go_pprof_top(go, path, dir);
  // pprof scales bytes by 1024 and prints two decimals, dropping ".00".
  EXPECT_NE(top.find("Type: space"), std::string::npos) << top;
  expect_flat_bytes(top, {
                             {"weights", 3 * kMiB},  // 2 MiB on core 0 + 1 MiB on core 1
                             {"activations", 1536 * kKiB},
                             {"program", 512 * kKiB},
                             {"(unlabelled)", 300000},
                         });

  // The core label selects cores, core 0 included. Regression: a numeric core label lost core 0,
  // because pprof drops a numeric label whose value is 0 and that has no unit.
  expect_flat_bytes(go_pprof_top(go, path, dir, "-tagfocus='core=^0$'"),
                    {{"weights", 2 * kMiB},
                     {"activations", 1536 * kKiB},
                     {"program", 512 * kKiB},
                     {"(unlabelled)", 300000}});
  expect_flat_bytes(go_pprof_top(go, path, dir, "-tagfocus='core=^1$'"), {{"weights", kMiB}});
}

// Records for a real arena: HbmArena exposes chunks (walk) and, per live id, offset and size;
// the labels and sequence numbers are the caller's, kept in `buffers` (id, label), allocation
// order. HbmArena::chunk_records() will replace this.
std::vector<MemoryChunkRecord> records_from_arena(
    const HbmArena& arena, const std::vector<std::pair<BufferId, std::string>>& buffers) {
  std::map<uint64_t, std::pair<const std::string*, uint64_t>> by_offset;  // label, seq
  for (size_t i = 0; i < buffers.size(); ++i) {
    by_offset[arena.offset(buffers[i].first)] = {&buffers[i].second, i + 1};
  }
  std::map<uint64_t, uint64_t> requested;
  for (const auto& [id, label] : buffers) requested[arena.offset(id)] = arena.size_bytes(id);
  std::vector<ChunkInfo> chunks;
  arena.walk([&](const ChunkInfo& c) { chunks.push_back(c); });  // no calls back in under lock
  std::vector<MemoryChunkRecord> out;
  for (const ChunkInfo& c : chunks) {
    MemoryChunkRecord r;
    r.core_id = arena.core_id();
    r.offset = c.offset;
    r.chunk_bytes = c.size_bytes;
    r.in_use = c.in_use;
    if (c.in_use) {
      const auto it = by_offset.find(c.offset);
      EXPECT_NE(it, by_offset.end()) << "untracked live chunk at " << c.offset;
      if (it != by_offset.end()) {
        r.label = *it->second.first;
        r.alloc_seq = it->second.second;
        r.requested_bytes = requested[c.offset];
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Records of a 16 MiB arena on core 3 holding params (4 MiB), grads (100000 B), a freed 1 MiB
// hole, opt_state (2 MiB) and grads (200000 B), in that address order; plus its stats.
struct ArenaProfile {
  std::vector<MemoryChunkRecord> records;
  MemoryStats stats;
  uint64_t capacity_bytes = 0;
};

ArenaProfile make_arena_profile() {
  ArenaOptions o;
  o.capacity_bytes = 16 * kMiB;
  o.backing = false;
  o.core_id = 3;
  HbmArena arena(o);
  std::vector<std::pair<BufferId, std::string>> buffers;
  auto allocate = [&](uint64_t bytes, const std::string& label) {
    buffers.emplace_back(arena.allocate(bytes, label), label);
  };
  allocate(4 * kMiB, "params");
  allocate(100000, "grads");
  const BufferId scratch = arena.allocate(kMiB, "scratch");
  allocate(2 * kMiB, "opt_state");
  allocate(200000, "grads");
  arena.free(scratch);  // leaves a free hole between grads and opt_state
  arena.check_consistency();
  return {records_from_arena(arena, buffers), arena.memory_stats(), arena.capacity_bytes()};
}

TEST(MemoryProfileTest, ProfileOfARealArena) {
  const auto [records, stats, capacity_bytes] = make_arena_profile();

  // The snapshot accounts for every byte of the arena, and agrees with memory_stats().
  const nlohmann::json snap = memory_snapshot_json(records);
  ASSERT_EQ(snap["segments"].size(), 1u);
  const nlohmann::json& seg = snap["segments"][0];
  EXPECT_EQ(seg["device"], 3);
  EXPECT_EQ(seg["total_size"], capacity_bytes);
  EXPECT_EQ(seg["allocated_size"], stats.bytes_in_use);
  EXPECT_EQ(seg["requested_size"], stats.padded_bytes_in_use);
  EXPECT_EQ(seg["free_size"], stats.total_free_bytes);
  EXPECT_EQ(seg["largest_free_block"], stats.largest_free_block_bytes);
  EXPECT_EQ(seg["num_allocated_blocks"], stats.num_live_buffers);
  uint64_t next = 0;  // blocks tile [0, capacity) in address order
  std::vector<std::string> layout;
  for (const nlohmann::json& b : seg["blocks"]) {
    EXPECT_EQ(b["address"], next);
    next += b["size"].get<uint64_t>();
    layout.push_back(b["state"] == "inactive" ? "free"
                                              : b["label"].get<std::string>() + "#" +
                                                    std::to_string(b["alloc_seq"].get<int>()));
  }
  EXPECT_EQ(next, capacity_bytes);
  EXPECT_EQ(layout, (std::vector<std::string>{"params#1", "grads#2", "free", "opt_state#3",
                                              "grads#4", "free"}));

  // pprof: requested bytes by default, chunk bytes on request (which sum to bytes_in_use).
  std::map<std::string, std::pair<int64_t, int64_t>> by_label;  // count, bytes
  for (const ResolvedSample& s : resolve(parse(encode_pprof(records)))) {
    by_label[s.functions.at(0)].first += s.values.at(0);
    by_label[s.functions.at(0)].second += s.values.at(1);
  }
  const std::map<std::string, std::pair<int64_t, int64_t>> expected = {
      {"params", {1, int64_t{4} << 20}},
      {"grads", {2, 300000}},
      {"opt_state", {1, int64_t{2} << 20}}};
  EXPECT_EQ(by_label, expected);
  int64_t chunk_total = 0;
  for (const ResolvedSample& s :
       resolve(parse(encode_pprof(records, {.space = PprofBytes::kChunk})))) {
    chunk_total += s.values.at(1);
  }
  EXPECT_EQ(chunk_total, static_cast<int64_t>(stats.bytes_in_use));
}

TEST(MemoryProfileTest, GoToolPprofOnARealArena) {
  const std::string go = find_go();
  if (go.empty()) {
    GTEST_SKIP() << "`go` is not on PATH; install golang-go (scripts/install-deps.sh) to run "
                    "`go tool pprof` on the arena profile";
  }
  TempDir dir;
  write_pprof(dir.file("arena.prof"), make_arena_profile().records);
  expect_flat_bytes(go_pprof_top(go, dir.file("arena.prof"), dir),
                    {{"params", 4 * kMiB}, {"opt_state", 2 * kMiB}, {"grads", 300000}});
}

// Regression: a snapshot whose label is not valid UTF-8 made write_memory_snapshot throw
// nlohmann's type_error 316 (not a vtpu::Error); the label is now written with U+FFFD.
TEST(MemoryProfileTest, SnapshotFileReplacesInvalidUtf8InLabels) {
  ArenaOptions o;
  o.capacity_bytes = 1 << 20;
  o.backing = false;
  HbmArena arena(o);
  arena.allocate(100, "bad\xff\xfe label");
  const std::string path = test_temp_path("invalid_utf8_snapshot.json");
  ASSERT_NO_THROW(write_memory_snapshot(path, arena.chunk_records()));
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["segments"][0]["blocks"][0]["label"], "bad\xef\xbf\xbd\xef\xbf\xbd label");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace vtpu
