// Shared by the reshard tests: a partial array built by hand, device d holding `addends[d]` as
// its whole block.
#pragma once

#include <algorithm>
#include <vector>

#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu::testing {

inline ShardedArray partial_array(Runtime& rt, const std::vector<int64_t>& shape,
                                  const NamedSharding& s,
                                  const std::vector<std::vector<float>>& addends) {
  std::vector<DeviceBuffer> buffers;
  for (int dev : s.mesh().devices()) {
    const std::vector<float>& v = addends[static_cast<size_t>(dev)];
    DeviceBuffer b = rt.allocate(dev, v.size() * sizeof(float), "test/addend");
    std::copy(v.begin(), v.end(), b.as<float>().begin());
    buffers.push_back(std::move(b));
  }
  return ShardedArray::from_buffers(shape, s, std::move(buffers));
}

}  // namespace vtpu::testing
