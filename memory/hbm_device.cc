#include "vtpu/memory/hbm_device.h"

#include <cmath>
#include <sstream>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"

namespace vtpu {

ArenaLimit ArenaLimit::bytes(uint64_t limit_bytes) {
  if (limit_bytes == 0) throw InvalidArgumentError("arena limit of 0 bytes (expected >= 1 byte)");
  ArenaLimit l;
  l.bytes_ = limit_bytes;
  return l;
}

ArenaLimit ArenaLimit::fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    std::ostringstream os;
    os << "arena memory fraction " << fraction << " is out of range (expected 0 < fraction <= 1)";
    throw InvalidArgumentError(os.str());
  }
  ArenaLimit l;
  l.fraction_ = fraction;
  return l;
}

uint64_t ArenaLimit::resolve(uint64_t total_bytes) const {
  if (bytes_) return *bytes_;
  // long double keeps 64 bits of mantissa, so every total is exact and round() lands on the
  // nearest byte. roundl, not llroundl: llroundl returns a signed long long, which cannot hold
  // totals >= 2^63 (it returned 2^63 for any of them). fraction <= 1 keeps the product <= total.
  const long double v =
      std::roundl(static_cast<long double>(*fraction_) * static_cast<long double>(total_bytes));
  return v >= static_cast<long double>(total_bytes) ? total_bytes : static_cast<uint64_t>(v);
}

std::string ArenaLimit::to_string() const {
  if (bytes_) return format_bytes(*bytes_);
  std::ostringstream os;
  os << "fraction " << *fraction_;
  return os.str();
}

HbmDevice::HbmDevice(uint64_t total_bytes, int core_id)
    : state_(std::make_shared<State>(total_bytes)), core_id_(core_id) {
  if (total_bytes == 0) {
    throw InvalidArgumentError("HBM device of 0 bytes on core " + std::to_string(core_id) +
                               " (expected >= 1 byte)");
  }
}

uint64_t HbmDevice::reserved_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->reserved_bytes;
}

int HbmDevice::num_arenas() const {
  std::lock_guard lock(state_->mu);
  return state_->num_arenas;
}

std::shared_ptr<HbmArena> HbmDevice::create_arena(const ArenaLimit& limit, ArenaOptions options) {
  const uint64_t total = state_->total_bytes;
  const uint64_t bytes = limit.resolve(total);
  const std::string what = "arena" + (options.name.empty() ? "" : " '" + options.name + "'") +
                           " of " + format_bytes(bytes) +
                           (limit.is_fraction() ? " (" + limit.to_string() + ")" : "") +
                           " on core " + std::to_string(core_id_);
  if (bytes == 0 || bytes > total) {
    throw InvalidArgumentError("cannot create " + what + ": the limit must be between 1 byte and " +
                               "the device's " + format_bytes(total));
  }
  {
    std::lock_guard lock(state_->mu);
    if (bytes > total - state_->reserved_bytes) {
      throw ResourceExhaustedError(
          "cannot create " + what + ": the device has " + format_bytes(total) + " and its " +
          std::to_string(state_->num_arenas) + " live arena(s) already hold " +
          format_bytes(state_->reserved_bytes) + " (" +
          format_bytes(total - state_->reserved_bytes) +
          " left; limits are fractions of the total, never of what is free)");
    }
    state_->reserved_bytes += bytes;
    ++state_->num_arenas;
  }
  auto release = [state = state_, bytes] {
    std::lock_guard lock(state->mu);
    state->reserved_bytes -= bytes;
    --state->num_arenas;
  };
  options.capacity_bytes = bytes;
  options.core_id = core_id_;
  HbmArena* arena = nullptr;
  try {
    arena = new HbmArena(options);
  } catch (...) {
    release();
    throw;
  }
  return std::shared_ptr<HbmArena>(arena, [release](HbmArena* a) {
    delete a;
    release();
  });
}

}  // namespace vtpu
