// The _vtpu extension module; the package vtpu (python/vtpu/__init__.py) re-exports it.
#include "py_common.h"

PYBIND11_MODULE(_vtpu, m) {
  m.doc() = "vtpu: a virtual TPU pod on one machine (the C++ extension behind `import vtpu`).";
  using namespace vtpu::python;
  warm_up_common();
  register_errors(m);
  register_runtime(m);
  register_sharding(m);
  register_shard_map(m);
  register_memory(m);
  register_stress(m);
  register_planner(m);
  register_data(m);
}
