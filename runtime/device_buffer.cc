#include "vtpu/runtime/device_buffer.h"

#include <utility>

namespace vtpu {

DeviceBuffer::DeviceBuffer(std::shared_ptr<HbmArena> arena, uint64_t size_bytes, std::string label)
    : arena_(std::move(arena)), size_bytes_(size_bytes) {
  if (!arena_) throw InvalidArgumentError("DeviceBuffer needs an arena, got null");
  if (size_bytes > 0) id_ = arena_->allocate(size_bytes, std::move(label));
}

DeviceBuffer::DeviceBuffer(std::shared_ptr<HbmArena> arena, uint64_t size_bytes,
                           uint64_t charged_bytes, std::string label)
    : arena_(std::move(arena)), size_bytes_(size_bytes) {
  if (!arena_) throw InvalidArgumentError("DeviceBuffer needs an arena, got null");
  // allocate_padded refuses size > charged, so a buffer never has bytes without a chunk.
  if (charged_bytes > 0 || size_bytes > 0) {
    id_ = arena_->allocate_padded(charged_bytes, size_bytes, std::move(label));
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : arena_(std::move(other.arena_)),
      id_(std::exchange(other.id_, 0)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    arena_ = std::move(other.arena_);
    id_ = std::exchange(other.id_, 0);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (arena_ && id_ != 0) arena_->free(id_);  // cannot throw: id_ is live by construction
  arena_.reset();
  id_ = 0;
  size_bytes_ = 0;
}

std::byte* DeviceBuffer::data() const {
  if (!arena_) throw FailedPreconditionError("data() on an empty DeviceBuffer");
  if (id_ == 0) return nullptr;
  std::byte* p = arena_->data(id_);
  if (p == nullptr) {
    throw FailedPreconditionError("core " + std::to_string(core_id()) +
                                  " has a metadata-only HBM arena (hbm_backing=false): its "
                                  "buffers have no bytes");
  }
  return p;
}

BufferPin DeviceBuffer::pin() const {
  if (!arena_) throw FailedPreconditionError("pin() on an empty DeviceBuffer");
  if (id_ == 0) return {};
  return BufferPin(arena_, id_);
}

}  // namespace vtpu
