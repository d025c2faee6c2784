#include "vtpu/collectives/transport.h"

#include "vtpu/collectives/ring_buffer_link.h"

namespace vtpu {

std::unique_ptr<Link> InProcessTransport::connect(int src_core, int dst_core,
                                                  const LinkOptions& options) {
  return std::make_unique<RingBufferLink>(src_core, dst_core, options);
}

}  // namespace vtpu
