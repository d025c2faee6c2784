// Allocation traces (vtpu bench memory --trace, vtpu stress --trace, the Python replay):
// read_trace. An accepted trace must be writable by to_json_line and read back unchanged.
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "fuzz/fuzz_input.h"
#include "vtpu/memory/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  const auto trace = vtpu::fuzz::accept_or_refuse([&] { return vtpu::read_trace(in, "input"); });
  if (!trace) return 0;
  std::string text = trace->header.dump() + "\n";
  for (const vtpu::TraceEvent& e : trace->events) text += vtpu::to_json_line(e) + "\n";
  std::istringstream again(text);
  vtpu::fuzz::check(vtpu::read_trace(again, "written back").events == trace->events,
                    "the written trace reads back different events");
  return 0;
}
