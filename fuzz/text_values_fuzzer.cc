// The text values of command-line flags and JSON fields that have a grammar of their own: byte
// sizes ("16G"), XLA layouts, PartitionSpecs, reduce ops, element types, --mesh shapes ("2x2x2",
// "2x4"). The first input byte picks the parser, the rest is the text. What a parser accepts and
// prints must parse back to the same value.
#include <string>
#include <string_view>

#include "fuzz/fuzz_input.h"
#include "vtpu/common/element_type.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/sharding/mesh_arg.h"
#include "vtpu/sharding/partition_spec.h"
#include "vtpu/train/transformer_trainer.h"

namespace {

using vtpu::fuzz::accept_or_refuse;
using vtpu::fuzz::check;

void parse_text(uint8_t which, const std::string& text) {
  switch (which % 7) {
    case 0:
      vtpu::fuzz::refuse_cleanly([&] { vtpu::parse_bytes(text); });
      break;
    case 1:
      if (const auto layout = accept_or_refuse([&] { return vtpu::parse_layout(text); })) {
        check(vtpu::parse_layout(layout->to_string()) == *layout, "layout does not read back");
      }
      break;
    case 2:
      if (const auto spec = accept_or_refuse([&] { return vtpu::PartitionSpec::parse(text); })) {
        check(vtpu::PartitionSpec::parse(spec->to_string()) == *spec, "spec does not read back");
      }
      break;
    case 3:
      vtpu::fuzz::refuse_cleanly([&] { vtpu::parse_reduce_op(text); });
      break;
    case 4:
      if (const auto type = accept_or_refuse([&] { return vtpu::parse_element_type(text); })) {
        check(vtpu::parse_element_type(vtpu::element_type_name(*type)) == *type,
              "element type does not read back");
      }
      break;
    case 5:
      vtpu::fuzz::refuse_cleanly([&] {
        vtpu::check_mesh_devices(text, vtpu::parse_mesh_shape(text), vtpu::kMaxRunDevices, "");
      });
      break;
    case 6:
      if (const auto mesh = accept_or_refuse([&] { return vtpu::parse_transformer_mesh(text); })) {
        check(vtpu::parse_transformer_mesh(mesh->to_string()).num_cores() == mesh->num_cores(),
              "mesh does not read back");
      }
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  parse_text(data[0], std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  return 0;
}
