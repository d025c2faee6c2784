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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using vtpu::fuzz::check;
  vtpu::fuzz::refuse_cleanly([&] {
    switch (data[0] % 7) {
      case 0:
        vtpu::parse_bytes(text);
        break;
      case 1: {
        const vtpu::Layout layout = vtpu::parse_layout(text);
        check(vtpu::parse_layout(layout.to_string()) == layout, "layout does not read back");
        break;
      }
      case 2: {
        const vtpu::PartitionSpec spec = vtpu::PartitionSpec::parse(text);
        check(vtpu::PartitionSpec::parse(spec.to_string()) == spec, "spec does not read back");
        break;
      }
      case 3:
        vtpu::parse_reduce_op(text);
        break;
      case 4: {
        const vtpu::ElementType type = vtpu::parse_element_type(text);
        check(vtpu::parse_element_type(vtpu::element_type_name(type)) == type,
              "element type does not read back");
        break;
      }
      case 5:
        vtpu::check_mesh_devices(text, vtpu::parse_mesh_shape(text), vtpu::kMaxRunDevices, "");
        break;
      case 6: {
        const vtpu::TransformerMesh mesh = vtpu::parse_transformer_mesh(text);
        check(vtpu::parse_transformer_mesh(mesh.to_string()).num_cores() == mesh.num_cores(),
              "mesh does not read back");
        break;
      }
    }
  });
  return 0;
}
