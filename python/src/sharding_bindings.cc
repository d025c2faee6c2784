#include "py_common.h"

namespace vtpu::python {

void register_sharding(py::module_& m) { (void)m; }

}  // namespace vtpu::python
