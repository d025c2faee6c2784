#include "vtpu/memory/backing_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"

namespace vtpu {

BackingStore::BackingStore(uint64_t size_bytes) : size_bytes_(size_bytes) {
  if (size_bytes == 0) return;
  void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw ResourceExhaustedError("could not reserve " + std::to_string(size_bytes) + " bytes (" +
                                 format_bytes(size_bytes) +
                                 ") of address space for HBM: " + std::strerror(errno));
  }
  base_ = static_cast<std::byte*>(p);
}

BackingStore::~BackingStore() {
  if (base_ != nullptr) ::munmap(base_, size_bytes_);
}

void BackingStore::release(uint64_t offset, uint64_t size_bytes) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (offset + page - 1) / page * page;
  const uint64_t end = (offset + size_bytes) / page * page;
  if (base_ == nullptr || end <= begin) return;
  ::madvise(base_ + begin, end - begin, MADV_DONTNEED);
}

uint64_t BackingStore::resident_bytes() const {
  if (base_ == nullptr) return 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t pages = (size_bytes_ + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  if (::mincore(base_, size_bytes_, vec.data()) != 0) return 0;
  uint64_t resident = 0;
  for (unsigned char v : vec) resident += (v & 1) ? page : 0;
  return resident;
}

}  // namespace vtpu
