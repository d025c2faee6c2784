"""vtpu: a virtual TPU pod on one machine.

Worker threads stand in for TPU cores, each with its own HBM arena; arrays are split across them
with JAX's Mesh / PartitionSpec / NamedSharding semantics, and functions run on every core with
``vtpu.shard_map`` and call the collectives of ``vtpu.lax`` by mesh axis name.

    import numpy as np, vtpu
    rt = vtpu.Runtime(cores=8)
    mesh = vtpu.make_mesh((2, 4), ("data", "model"), devices=rt.devices())
    x = vtpu.device_put(np.ones((8, 16), np.float32), vtpu.NamedSharding(mesh, vtpu.P("data", "model")))
    f = vtpu.shard_map(lambda b: vtpu.lax.psum(b, "data"), mesh=mesh,
                       in_specs=vtpu.P("data", "model"), out_specs=vtpu.P(None, "model"))
    np.asarray(f(x))   # every element 2.0

Differences from JAX are listed in docs/PYTHON.md.
"""

import importlib as _importlib

from vtpu._vtpu import *  # noqa: F401,F403
from vtpu._vtpu import Error  # noqa: F401

# The extension's submodules are re-exported by the .py files of the same names, which `import
# vtpu.memory` finds; binding them here replaces the extension's objects the * import brought.
for _name in ("lax", "memory", "stress", "planner"):
    globals()[_name] = _importlib.import_module("vtpu." + _name)
del _name
