#include "py_common.h"

namespace vtpu::python {

void register_shard_map(py::module_& m) { (void)m; }

}  // namespace vtpu::python
