// Tests for runtime/runtime.h and runtime/device_buffer.h: SPMD launch on every core or a subset,
// error propagation and fail-fast abort handlers, async launches and their order, many cores, and
// DeviceBuffer ownership.
#include "vtpu/runtime/runtime.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tests/temp_path.h"
#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/trace.h"
#include "vtpu/runtime/device_buffer.h"

// TSan suppressions for exception_ptr live in common/tsan_default_suppressions.cc.

namespace vtpu {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10;
// Every wait in these tests ends by this deadline, so that a bug fails the test instead of hanging.
constexpr std::chrono::seconds kWaitTimeout = 10s;

RuntimeOptions small_options(int num_cores, bool backing = false, uint64_t hbm_bytes = kMiB) {
  RuntimeOptions o;
  o.num_cores = num_cores;
  o.hbm_bytes_per_core = hbm_bytes;
  o.hbm_backing = backing;
  return o;
}

template <typename E, typename Fn>
std::string what_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected exception not thrown";
  return "";
}

// ---- Construction ----

TEST(RuntimeTest, ConstructsCoresWithTheirArenas) {
  Runtime rt(small_options(4, /*backing=*/true, 2 * kMiB));
  ASSERT_EQ(rt.num_cores(), 4);
  EXPECT_EQ(rt.options().num_cores, 4);
  EXPECT_EQ(rt.options().hbm_bytes_per_core, 2 * kMiB);
  std::set<HbmArena*> arenas;
  for (int i = 0; i < 4; ++i) {
    VirtualCore& core = rt.core(i);
    EXPECT_EQ(core.core_id(), i);
    EXPECT_EQ(core.hbm().core_id(), i);
    EXPECT_EQ(core.hbm().capacity_bytes(), 2 * kMiB);
    EXPECT_EQ(core.hbm().policy_name(), "bfc");
    EXPECT_TRUE(core.hbm().has_backing());
    EXPECT_FALSE(core.on_core_thread());
    arenas.insert(&core.hbm());
  }
  EXPECT_EQ(arenas.size(), 4u);
  EXPECT_NE(what_of<InvalidArgumentError>([&] { rt.core(4); }).find("core id 4"),
            std::string::npos);
  EXPECT_THROW(rt.core(-1), InvalidArgumentError);
}

TEST(RuntimeTest, InvalidOptionsThrow) {
  EXPECT_THROW({ Runtime rt(small_options(0)); }, InvalidArgumentError);
  RuntimeOptions o = small_options(2);
  o.allocator = "no-such-policy";
  EXPECT_NE(what_of<InvalidArgumentError>([&] { Runtime rt(o); }).find("'no-such-policy'"),
            std::string::npos);
  o = small_options(2, false, 100);
  EXPECT_THROW({ Runtime rt(o); }, InvalidArgumentError);
}

// ---- run_spmd ----

TEST(RuntimeTest, RunSpmdRunsOnEveryCoreOnceOnItsOwnThread) {
  constexpr int kCores = 8;
  Runtime rt(small_options(kCores));
  std::vector<std::atomic<int>> calls(kCores);
  std::vector<std::thread::id> threads(kCores);
  std::vector<int> seen_num_cores(kCores, -1);
  std::vector<int> on_own_thread(kCores, -1);
  std::vector<HbmArena*> arenas(kCores, nullptr);
  rt.run_spmd([&](CoreContext& ctx) {
    const int id = ctx.core_id();
    calls[id].fetch_add(1);
    threads[id] = std::this_thread::get_id();
    seen_num_cores[id] = ctx.num_cores();
    on_own_thread[id] = ctx.core().on_core_thread() ? 1 : 0;
    arenas[id] = &ctx.hbm();
  });
  std::set<std::thread::id> distinct;
  for (int i = 0; i < kCores; ++i) {
    SCOPED_TRACE("core " + std::to_string(i));
    EXPECT_EQ(calls[i].load(), 1);
    EXPECT_EQ(seen_num_cores[i], kCores);
    EXPECT_EQ(on_own_thread[i], 1);
    EXPECT_EQ(arenas[i], &rt.core(i).hbm());
    EXPECT_NE(threads[i], std::this_thread::get_id());
    distinct.insert(threads[i]);
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kCores));
  // A second program runs on the same threads: a core is one thread.
  std::vector<std::thread::id> again(kCores);
  rt.run_spmd([&](CoreContext& ctx) {
    calls[ctx.core_id()].fetch_add(1);
    again[ctx.core_id()] = std::this_thread::get_id();
  });
  for (int i = 0; i < kCores; ++i) {
    EXPECT_EQ(calls[i].load(), 2);
    EXPECT_EQ(again[i], threads[i]);
  }
}

TEST(RuntimeTest, CoreContextAllocateUsesThatCoresArena) {
  constexpr int kCores = 4;
  Runtime rt(small_options(kCores, /*backing=*/true));
  std::vector<DeviceBuffer> buffers(kCores);
  rt.run_spmd([&](CoreContext& ctx) {
    const int id = ctx.core_id();
    DeviceBuffer b =
        ctx.allocate(static_cast<uint64_t>(id + 1) * 1000, "core" + std::to_string(id));
    std::fill(b.data(), b.data() + b.size_bytes(), std::byte(id + 1));
    buffers[id] = std::move(b);
  });
  for (int i = 0; i < kCores; ++i) {
    SCOPED_TRACE("core " + std::to_string(i));
    const DeviceBuffer& b = buffers[i];
    EXPECT_EQ(b.core_id(), i);
    EXPECT_EQ(b.arena(), &rt.core(i).hbm());
    EXPECT_EQ(b.size_bytes(), (i + 1) * 1000u);
    EXPECT_EQ(b.data()[0], std::byte(i + 1));
    EXPECT_EQ(b.data()[b.size_bytes() - 1], std::byte(i + 1));
    // 1000, 2000, 3000, 4000 bytes round up to 1024, 2048, 3072, 4096.
    const MemoryStats s = rt.core(i).hbm().memory_stats();
    EXPECT_EQ(s.bytes_in_use, (i + 1) * 1024u);
    EXPECT_EQ(s.padded_bytes_in_use, (i + 1) * 1000u);
    EXPECT_EQ(s.num_allocs, 1u);
    EXPECT_EQ(s.num_live_buffers, 1u);
  }
  buffers.clear();
  for (int i = 0; i < kCores; ++i) {
    const MemoryStats s = rt.core(i).hbm().memory_stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.num_frees, 1u);
    EXPECT_EQ(s.peak_bytes_in_use, (i + 1) * 1024u);
  }
  // Buffers that die inside the program are freed by the time run_spmd returns.
  rt.run_spmd([](CoreContext& ctx) { ctx.allocate(10 * kKiB); });
  for (int i = 0; i < kCores; ++i) {
    const MemoryStats s = rt.core(i).hbm().memory_stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.num_allocs, 2u);
    EXPECT_EQ(s.peak_bytes_in_use, 10 * kKiB);
    rt.core(i).hbm().check_consistency();
  }
}

TEST(RuntimeTest, HostAllocateGoesToTheNamedCore) {
  Runtime rt(small_options(3));
  DeviceBuffer b = rt.allocate(2, 5000, "host");
  EXPECT_EQ(b.core_id(), 2);
  EXPECT_EQ(rt.core(2).hbm().memory_stats().bytes_in_use, 5120u);
  EXPECT_EQ(rt.core(0).hbm().memory_stats().bytes_in_use, 0u);
  EXPECT_EQ(rt.core(1).hbm().memory_stats().bytes_in_use, 0u);
  EXPECT_THROW(rt.allocate(3, 16), InvalidArgumentError);
  EXPECT_THROW(rt.allocate(0, 2 * kMiB), OutOfMemoryError);
}

TEST(RuntimeTest, FirstErrorIsRethrownWithItsTypeAndTheRuntimeStillWorks) {
  constexpr int kCores = 4;
  Runtime rt(small_options(kCores));
  std::vector<std::atomic<int>> finished(kCores);
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      DeviceBuffer ok = ctx.allocate(4 * kKiB);
      if (ctx.core_id() == 2) ctx.allocate(2 * kMiB, "huge");  // 1 MiB arena: out of memory
      finished[ctx.core_id()].fetch_add(1);
    });
    FAIL() << "run_spmd did not rethrow";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().core_id, 2);
    EXPECT_EQ(e.report().label, "huge");
    EXPECT_EQ(e.report().requested_bytes, 2 * kMiB);
    EXPECT_EQ(e.report().bytes_in_use, 4 * kKiB);  // the buffer `ok` was live at the time
  }
  // The other cores ran to completion; core 2's buffers were released while unwinding.
  for (int i = 0; i < kCores; ++i) EXPECT_EQ(finished[i].load(), i == 2 ? 0 : 1);
  for (int i = 0; i < kCores; ++i) {
    const MemoryStats s = rt.core(i).hbm().memory_stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.num_ooms, i == 2 ? 1u : 0u);
  }
  // Still works.
  rt.run_spmd([&](CoreContext& ctx) { finished[ctx.core_id()].fetch_add(1); });
  for (int i = 0; i < kCores; ++i) EXPECT_EQ(finished[i].load(), i == 2 ? 1 : 2);
}

TEST(RuntimeTest, NonVtpuExceptionTypesArePreserved) {
  struct CustomError {
    int core;
  };
  Runtime rt(small_options(3));
  try {
    rt.run_spmd([](CoreContext& ctx) {
      if (ctx.core_id() == 1) throw CustomError{ctx.core_id()};
    });
    FAIL() << "no rethrow";
  } catch (const CustomError& e) {
    EXPECT_EQ(e.core, 1);
  }
  try {
    rt.run_spmd([](CoreContext& ctx) {
      if (ctx.core_id() == 0) throw std::out_of_range("index 7 of 3");
    });
    FAIL() << "no rethrow";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "index 7 of 3");
  }
}

TEST(RuntimeTest, WhenEveryCoreFailsOneErrorIsRethrownAndHandlersRunOnce) {
  constexpr int kCores = 6;
  Runtime rt(small_options(kCores));
  std::mutex mu;
  int calls = 0;
  int failed_core = -1;
  std::exception_ptr seen;
  rt.add_abort_handler([&](int core, const std::exception_ptr& error) {
    std::lock_guard lock(mu);
    ++calls;
    failed_core = core;
    seen = error;
  });
  std::string rethrown;
  try {
    rt.run_spmd([](CoreContext& ctx) {
      throw InvalidArgumentError("core " + std::to_string(ctx.core_id()));
    });
  } catch (const InvalidArgumentError& e) {
    rethrown = e.message();
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(calls, 1);
  ASSERT_GE(failed_core, 0);
  ASSERT_LT(failed_core, kCores);
  // The error rethrown is the one the handler saw, from the core the handler was told about.
  EXPECT_EQ(rethrown, "core " + std::to_string(failed_core));
  ASSERT_TRUE(seen);
  try {
    std::rethrow_exception(seen);
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.message(), rethrown);
  }
}

TEST(RuntimeTest, AbortHandlerRunsWhileOtherCoresAreStillBlocked) {
  constexpr int kCores = 4;
  constexpr int kFailing = 1;
  Runtime rt(small_options(kCores));
  std::mutex mu;
  std::condition_variable cv;
  int blocked = 0;       // cores waiting for the abort
  bool aborted = false;  // set by the handler
  int handler_calls = 0, handler_core = -1, blocked_at_handler = -1;
  std::thread::id handler_thread;
  std::string handler_message;
  std::vector<int> woken_by_abort(kCores, -1);
  std::vector<std::thread::id> threads(kCores);

  const int handler_id = rt.add_abort_handler([&](int core, const std::exception_ptr& error) {
    std::lock_guard lock(mu);
    ++handler_calls;
    handler_core = core;
    blocked_at_handler = blocked;
    handler_thread = std::this_thread::get_id();
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      handler_message = e.message();
    } catch (...) {
    }
    aborted = true;  // what a collective's abort does: wake its waiters
    cv.notify_all();
  });

  auto program = [&](CoreContext& ctx) {
    const int id = ctx.core_id();
    threads[id] = std::this_thread::get_id();
    std::unique_lock lock(mu);
    if (id == kFailing) {
      // Fail only once every other core is blocked, as in a collective.
      const bool all_blocked =
          cv.wait_for(lock, kWaitTimeout, [&] { return blocked == kCores - 1; });
      lock.unlock();
      throw AbortedError(all_blocked ? "core 1 failed" : "peers never blocked");
    }
    ++blocked;
    cv.notify_all();
    woken_by_abort[id] = cv.wait_for(lock, kWaitTimeout, [&] { return aborted; }) ? 1 : 0;
    --blocked;
  };

  const auto start = std::chrono::steady_clock::now();
  try {
    rt.run_spmd(program);
    FAIL() << "no rethrow";
  } catch (const AbortedError& e) {
    EXPECT_EQ(e.message(), "core 1 failed");
  }
  // Fail-fast: far sooner than the peers' timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWaitTimeout / 2);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(handler_calls, 1);
    EXPECT_EQ(handler_core, kFailing);
    EXPECT_EQ(blocked_at_handler, kCores - 1);
    EXPECT_EQ(handler_thread, threads[kFailing]);  // runs on the failing core's thread
    EXPECT_EQ(handler_message, "core 1 failed");
    for (int i = 0; i < kCores; ++i) {
      if (i != kFailing) {
        EXPECT_EQ(woken_by_abort[i], 1) << "core " << i;
      }
    }
  }

  // A removed handler is not called again; a successful program calls none.
  rt.remove_abort_handler(handler_id);
  std::atomic<int> other_calls{0};
  rt.add_abort_handler([&](int, const std::exception_ptr&) { other_calls.fetch_add(1); });
  rt.run_spmd([](CoreContext&) {});
  EXPECT_EQ(other_calls.load(), 0);
  EXPECT_THROW(rt.run_spmd([](CoreContext& ctx) {
    if (ctx.core_id() == 3) throw InternalError("x");
  }),
               InternalError);
  EXPECT_EQ(other_calls.load(), 1);
  std::lock_guard lock(mu);
  EXPECT_EQ(handler_calls, 1);
}

TEST(RuntimeTest, EveryRegisteredHandlerIsCalled) {
  Runtime rt(small_options(2));
  std::atomic<int> a{-1}, b{-1};
  rt.add_abort_handler([&](int core, const std::exception_ptr&) { a = core; });
  rt.add_abort_handler([&](int core, const std::exception_ptr&) { b = core; });
  EXPECT_THROW(rt.run_spmd({1}, [](CoreContext&) { throw InternalError("boom"); }), InternalError);
  EXPECT_EQ(a.load(), 1);
  EXPECT_EQ(b.load(), 1);
}

TEST(RuntimeTest, AThrowingAbortHandlerDoesNotKillTheCore) {
  Runtime rt(small_options(3));
  std::atomic<int> later_handler_core{-1};
  rt.add_abort_handler(
      [](int, const std::exception_ptr&) { throw std::logic_error("bad handler"); });
  rt.add_abort_handler([&](int core, const std::exception_ptr&) { later_handler_core = core; });
  // The program's error, not the handler's, reaches the caller; the next handler still runs.
  EXPECT_THROW(rt.run_spmd([](CoreContext& ctx) {
    if (ctx.core_id() == 2) throw DeadlineExceededError("slow");
  }),
               DeadlineExceededError);
  EXPECT_EQ(later_handler_core.load(), 2);
  // Core 2's thread is alive: it runs the next program.
  std::atomic<int> ran{0};
  rt.run_spmd([&](CoreContext&) { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 3);
}

TEST(RuntimeTest, ConstAccessors) {
  Runtime rt(small_options(2));
  const Runtime& crt = rt;
  EXPECT_EQ(crt.core(1).core_id(), 1);
  EXPECT_EQ(&crt.core(1).hbm(), &rt.core(1).hbm());
  EXPECT_THROW(crt.core(2), InvalidArgumentError);
}

TEST(RuntimeTest, RunSpmdFromInsideAProgramFailsWithFailedPrecondition) {
  Runtime rt(small_options(2));
  std::vector<std::string> messages;
  rt.run_spmd({0}, [&](CoreContext& ctx) {
    Runtime& inner = ctx.runtime();
    auto record = [&](auto&& fn) {
      try {
        fn();
        messages.push_back("no error");
      } catch (const FailedPreconditionError& e) {
        messages.push_back(e.what());
      }
    };
    record([&] { inner.run_spmd([](CoreContext&) {}); });
    record([&] { inner.run_spmd({1}, [](CoreContext&) {}); });  // even on another core
    record([&] { inner.run_spmd_async([](CoreContext&) {}); });
  });
  ASSERT_EQ(messages.size(), 3u);
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("FailedPrecondition: "), std::string::npos) << m;
    EXPECT_NE(m.find("core 0"), std::string::npos) << m;
  }
  // Uncaught, it reaches the host like any other error, and the runtime is fine afterwards.
  EXPECT_THROW(
      rt.run_spmd({1}, [](CoreContext& ctx) { ctx.runtime().run_spmd([](CoreContext&) {}); }),
      FailedPreconditionError);
  std::atomic<int> ran{0};
  rt.run_spmd([&](CoreContext&) { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 2);
}

TEST(RuntimeTest, RunSpmdOnASubsetOfCores) {
  constexpr int kCores = 6;
  Runtime rt(small_options(kCores));
  std::vector<std::atomic<int>> calls(kCores);
  rt.run_spmd({4, 1, 3}, [&](CoreContext& ctx) {
    calls[ctx.core_id()].fetch_add(1);
    EXPECT_EQ(ctx.num_cores(), kCores);  // the runtime's size, not the group's
  });
  const std::vector<int> expected = {0, 1, 0, 1, 1, 0};
  for (int i = 0; i < kCores; ++i) EXPECT_EQ(calls[i].load(), expected[i]) << "core " << i;

  auto rejected = [&](const std::vector<int>& ids) {
    return what_of<InvalidArgumentError>(
        [&] { rt.run_spmd(ids, [&](CoreContext& ctx) { calls[ctx.core_id()].fetch_add(1); }); });
  };
  EXPECT_NE(rejected({}).find("empty"), std::string::npos);
  EXPECT_NE(rejected({6}).find("core id 6"), std::string::npos);
  EXPECT_NE(rejected({-1}).find("core id -1"), std::string::npos);
  EXPECT_NE(rejected({0, 2, 2}).find("core id 2 is listed twice"), std::string::npos);
  // Rejected launches run nowhere, not even on the valid cores listed before the bad one.
  for (int i = 0; i < kCores; ++i) EXPECT_EQ(calls[i].load(), expected[i]) << "core " << i;
}

// ---- run_spmd_async ----

TEST(RuntimeTest, RunSpmdAsyncReturnsBeforeTheProgramFinishes) {
  constexpr int kCores = 4;
  Runtime rt(small_options(kCores));
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> released{0};
  std::future<void> done = rt.run_spmd_async([&](CoreContext&) {
    std::unique_lock lock(mu);
    if (cv.wait_for(lock, kWaitTimeout, [&] { return release; })) released.fetch_add(1);
  });
  EXPECT_EQ(done.wait_for(50ms), std::future_status::timeout);
  EXPECT_EQ(released.load(), 0);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_EQ(done.wait_for(kWaitTimeout), std::future_status::ready);
  done.get();
  EXPECT_EQ(released.load(), kCores);
}

TEST(RuntimeTest, RunSpmdAsyncDeliversTheErrorThroughTheFuture) {
  Runtime rt(small_options(4));
  std::future<void> f = rt.run_spmd_async({0, 3}, [](CoreContext& ctx) {
    if (ctx.core_id() == 3) ctx.allocate(4 * kMiB, "too-big");
  });
  try {
    f.get();
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().core_id, 3);
    EXPECT_EQ(e.report().label, "too-big");
  }
  // Invalid groups are rejected at once, not through the future.
  EXPECT_THROW(rt.run_spmd_async({7}, [](CoreContext&) {}), InvalidArgumentError);
}

TEST(RuntimeTest, ProgramsRunOnEachCoreInLaunchOrder) {
  constexpr int kCores = 4, kPrograms = 20;
  Runtime rt(small_options(kCores));
  std::vector<std::vector<int>> log(kCores);  // each written only by its core
  std::vector<std::future<void>> futures;
  for (int p = 0; p < kPrograms; ++p) {
    futures.push_back(rt.run_spmd_async([&log, p](CoreContext& ctx) {
      if (ctx.core_id() == p % kCores) std::this_thread::sleep_for(1ms);  // perturb timing
      log[ctx.core_id()].push_back(p);
    }));
  }
  for (auto& f : futures) f.get();
  std::vector<int> expected(kPrograms);
  for (int p = 0; p < kPrograms; ++p) expected[p] = p;
  for (int i = 0; i < kCores; ++i) EXPECT_EQ(log[i], expected) << "core " << i;
}

TEST(RuntimeTest, ConcurrentLaunchesKeepOneOrderOnAllCores) {
  constexpr int kCores = 4, kPerThread = 25;
  Runtime rt(small_options(kCores));
  std::vector<std::vector<int>> log(kCores);
  auto launcher = [&](int tag) {
    std::vector<std::future<void>> futures;
    for (int p = 0; p < kPerThread; ++p) {
      const int value = tag * 1000 + p;
      futures.push_back(rt.run_spmd_async(
          [&log, value](CoreContext& ctx) { log[ctx.core_id()].push_back(value); }));
    }
    for (auto& f : futures) f.get();
  };
  std::thread a(launcher, 1), b(launcher, 2);
  a.join();
  b.join();
  ASSERT_EQ(log[0].size(), 2u * kPerThread);
  for (int i = 1; i < kCores; ++i) EXPECT_EQ(log[i], log[0]) << "core " << i;
}

TEST(RuntimeTest, DestructorDrainsPendingPrograms) {
  constexpr int kCores = 4;
  std::atomic<int> ran{0};
  std::future<void> f;
  {
    Runtime rt(small_options(kCores));
    f = rt.run_spmd_async([&](CoreContext&) {
      std::this_thread::sleep_for(20ms);
      ran.fetch_add(1);
    });
  }
  EXPECT_EQ(ran.load(), kCores);
  ASSERT_EQ(f.wait_for(0s), std::future_status::ready);
  EXPECT_NO_THROW(f.get());
}

// ---- Many cores ----

class RuntimeManyCoresTest : public ::testing::TestWithParam<int> {};

TEST_P(RuntimeManyCoresTest, EveryCoreRunsAndAllocatesInItsOwnArena) {
  const int num_cores = GetParam();
  // 64 cores with real (tiny) HBM; 256 cores metadata-only.
  const bool backing = num_cores <= 64;
  Runtime rt(small_options(num_cores, backing, 64 * kKiB));
  ASSERT_EQ(rt.num_cores(), num_cores);
  std::vector<std::atomic<int>> calls(static_cast<size_t>(num_cores));
  std::vector<DeviceBuffer> buffers(static_cast<size_t>(num_cores));
  rt.run_spmd([&](CoreContext& ctx) {
    const int id = ctx.core_id();
    if (ctx.num_cores() != num_cores) return;
    calls[id].fetch_add(1);
    DeviceBuffer b = ctx.allocate(1000 + id);
    if (backing) {
      b.data()[0] = std::byte(id);
      b.data()[b.size_bytes() - 1] = std::byte(id + 1);
    }
    buffers[id] = std::move(b);
  });
  for (int i = 0; i < num_cores; ++i) {
    SCOPED_TRACE("core " + std::to_string(i));
    ASSERT_EQ(calls[i].load(), 1);
    EXPECT_EQ(buffers[i].core_id(), i);
    EXPECT_EQ(buffers[i].size_bytes(), 1000u + i);
    // 1000 + i bytes round up to 1024 for i <= 24 and to 1280 above (at most 1255 bytes).
    EXPECT_EQ(rt.core(i).hbm().memory_stats().bytes_in_use, i < 25 ? 1024u : 1280u);
    if (backing) {
      EXPECT_EQ(buffers[i].data()[0], std::byte(i));
      EXPECT_EQ(buffers[i].data()[buffers[i].size_bytes() - 1], std::byte(i + 1));
    }
  }
  buffers.clear();
  // A failure on the last core still comes back, with all others finishing.
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      if (ctx.core_id() == num_cores - 1) ctx.allocate(kMiB);
      calls[ctx.core_id()].fetch_add(1);
    });
    FAIL() << "no rethrow";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().core_id, num_cores - 1);
  }
  for (int i = 0; i < num_cores; ++i) ASSERT_EQ(calls[i].load(), i == num_cores - 1 ? 1 : 2);
}

INSTANTIATE_TEST_SUITE_P(Cores, RuntimeManyCoresTest, ::testing::Values(64, 256));

// ---- DeviceBuffer ----

static_assert(std::is_nothrow_move_constructible_v<DeviceBuffer>);
static_assert(std::is_nothrow_move_assignable_v<DeviceBuffer>);
static_assert(!std::is_copy_constructible_v<DeviceBuffer>);
static_assert(!std::is_copy_assignable_v<DeviceBuffer>);

TEST(DeviceBufferTest, OutlivesTheRuntime) {
  DeviceBuffer host_side, from_program;
  std::weak_ptr<HbmArena> arena1, arena0;
  {
    Runtime rt(small_options(2, /*backing=*/true));
    arena1 = rt.core(1).hbm_shared();
    arena0 = rt.core(0).hbm_shared();
    host_side = rt.allocate(1, 4096, "keep");
    auto words = host_side.as<uint32_t>();
    for (size_t i = 0; i < words.size(); ++i) words[i] = static_cast<uint32_t>(i * 3);
    rt.run_spmd({0}, [&](CoreContext& ctx) {
      from_program = ctx.allocate(512);
      std::fill(from_program.data(), from_program.data() + 512, std::byte{0x42});
    });
  }
  // The runtime and its threads are gone; the buffers still own their arenas.
  ASSERT_FALSE(arena1.expired());
  ASSERT_FALSE(arena0.expired());
  ASSERT_TRUE(host_side.valid());
  EXPECT_EQ(host_side.core_id(), 1);
  auto words = host_side.as<uint32_t>();
  ASSERT_EQ(words.size(), 1024u);
  for (size_t i = 0; i < words.size(); ++i) ASSERT_EQ(words[i], i * 3) << i;
  EXPECT_EQ(host_side.arena()->memory_stats().bytes_in_use, 4096u);
  host_side.arena()->check_consistency();
  EXPECT_EQ(from_program.core_id(), 0);
  EXPECT_EQ(from_program.data()[511], std::byte{0x42});
  // Releasing the last buffer of an arena releases the arena.
  host_side.reset();
  EXPECT_TRUE(arena1.expired());
  EXPECT_FALSE(arena0.expired());
  from_program = DeviceBuffer();
  EXPECT_TRUE(arena0.expired());
}

TEST(DeviceBufferTest, MoveSemanticsAndDestructionFree) {
  Runtime rt(small_options(1, /*backing=*/true));
  HbmArena& hbm = rt.core(0).hbm();
  auto in_use = [&] { return hbm.memory_stats().bytes_in_use; };
  auto frees = [&] { return hbm.memory_stats().num_frees; };

  DeviceBuffer a = rt.allocate(0, 1000, "a");
  const BufferId id_a = a.id();
  EXPECT_NE(id_a, 0u);
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a.size_bytes(), 1000u);
  EXPECT_EQ(in_use(), 1024u);

  DeviceBuffer b(std::move(a));  // move construction transfers, frees nothing
  EXPECT_FALSE(a.valid());       // NOLINT(bugprone-use-after-move): the moved-from state is defined
  EXPECT_EQ(a.id(), 0u);
  EXPECT_EQ(a.size_bytes(), 0u);
  EXPECT_EQ(a.core_id(), -1);
  EXPECT_EQ(a.arena(), nullptr);
  EXPECT_THROW(a.data(), FailedPreconditionError);
  EXPECT_EQ(b.id(), id_a);
  EXPECT_EQ(b.size_bytes(), 1000u);
  EXPECT_EQ(in_use(), 1024u);
  EXPECT_EQ(frees(), 0u);

  DeviceBuffer c = rt.allocate(0, 3000);
  EXPECT_EQ(in_use(), 1024u + 3072u);
  c = std::move(b);  // move assignment frees c's old allocation
  EXPECT_EQ(in_use(), 1024u);
  EXPECT_EQ(frees(), 1u);
  EXPECT_EQ(c.id(), id_a);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)

  DeviceBuffer& alias = c;
  c = std::move(alias);  // self-move keeps the buffer
  EXPECT_TRUE(c.valid());
  EXPECT_EQ(c.id(), id_a);
  EXPECT_EQ(in_use(), 1024u);

  a.reset();  // no-op on an empty handle
  EXPECT_EQ(frees(), 1u);
  c.reset();
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(in_use(), 0u);
  EXPECT_EQ(frees(), 2u);

  {
    DeviceBuffer scoped = rt.allocate(0, 10);
    EXPECT_EQ(in_use(), 256u);
  }
  EXPECT_EQ(in_use(), 0u);
  EXPECT_EQ(frees(), 3u);

  // Buffers in a growing vector are moved, never double-freed.
  {
    std::vector<DeviceBuffer> v;
    for (int i = 0; i < 20; ++i) v.push_back(rt.allocate(0, 256));
    EXPECT_EQ(in_use(), 20u * 256);
    hbm.check_consistency();
  }
  EXPECT_EQ(in_use(), 0u);
  EXPECT_EQ(frees(), 23u);
  hbm.check_consistency();
}

TEST(DeviceBufferTest, EmptyAndZeroByteBuffers) {
  DeviceBuffer empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.core_id(), -1);
  EXPECT_EQ(empty.id(), 0u);
  EXPECT_THROW(empty.data(), FailedPreconditionError);
  EXPECT_THROW(DeviceBuffer(nullptr, 16), InvalidArgumentError);

  Runtime rt(small_options(2, /*backing=*/true));
  DeviceBuffer zero = rt.allocate(1, 0);
  EXPECT_TRUE(zero.valid());
  EXPECT_EQ(zero.core_id(), 1);
  EXPECT_EQ(zero.id(), 0u);
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_EQ(zero.as<float>().size(), 0u);
  EXPECT_EQ(rt.core(1).hbm().memory_stats().num_allocs, 0u);
  zero.reset();
  EXPECT_EQ(rt.core(1).hbm().memory_stats().num_frees, 0u);
}

TEST(DeviceBufferTest, TypedViews) {
  Runtime rt(small_options(1, /*backing=*/true));
  DeviceBuffer b = rt.allocate(0, 4096);
  auto floats = b.as<float>();
  ASSERT_EQ(floats.size(), 1024u);
  EXPECT_EQ(reinterpret_cast<std::byte*>(floats.data()), b.data());
  floats[1] = 1.5f;
  uint32_t bits = 0;
  std::memcpy(&bits, b.data() + sizeof(float), sizeof bits);
  EXPECT_EQ(bits, 0x3FC00000u);  // IEEE-754 bits of 1.5f
  EXPECT_EQ(b.as<double>().size(), 512u);
  DeviceBuffer odd = rt.allocate(0, 12);
  EXPECT_EQ(odd.as<uint32_t>().size(), 3u);
  EXPECT_NE(what_of<InvalidArgumentError>([&] { odd.as<double>(); }).find("12 bytes"),
            std::string::npos);
}

TEST(DeviceBufferTest, MetadataOnlyBuffersHaveNoBytes) {
  Runtime rt(small_options(1, /*backing=*/false));
  DeviceBuffer b = rt.allocate(0, 4096);
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(rt.core(0).hbm().memory_stats().bytes_in_use, 4096u);
  EXPECT_NE(what_of<FailedPreconditionError>([&] { b.data(); }).find("hbm_backing=false"),
            std::string::npos);
  EXPECT_THROW(b.as<float>(), FailedPreconditionError);
}

#ifndef NDEBUG
TEST(DeviceBufferTest, DebugBuildsPoisonFreedBytes) {
  Runtime rt(small_options(1, /*backing=*/true));
  DeviceBuffer b = rt.allocate(0, 1024);
  std::fill(b.data(), b.data() + 1024, std::byte{0x11});
  b.reset();
  DeviceBuffer again = rt.allocate(0, 1024);  // best fit, lowest offset: the same bytes
  ASSERT_EQ(rt.core(0).hbm().offset(again.id()), 0u);
  for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(again.data()[i], std::byte{0xDB}) << i;
}
#endif

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

TEST(RuntimeMemoryProfileTest, ChunkRecordsAndFilesCoverEveryCore) {
  RuntimeOptions o;
  o.num_cores = 2;
  o.hbm_bytes_per_core = 1 << 20;
  Runtime rt(o);
  DeviceBuffer a = rt.allocate(0, 1000, "weights");
  DeviceBuffer b = rt.allocate(1, 3000, "acts");
  DeviceBuffer c = rt.allocate(1, 256, "bias");
  const std::vector<MemoryChunkRecord> records = rt.memory_chunk_records();
  // Core 0: weights (1024-byte chunk) + one free chunk; core 1: acts (3072), bias (256), free.
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0].core_id, 0);
  EXPECT_EQ(records[0].label, "weights");
  EXPECT_EQ(records[0].requested_bytes, 1000u);
  EXPECT_EQ(records[0].chunk_bytes, 1024u);
  EXPECT_EQ(records[0].alloc_seq, 1u);
  EXPECT_FALSE(records[1].in_use);
  EXPECT_EQ(records[1].chunk_bytes, (1u << 20) - 1024);
  EXPECT_EQ(records[2].core_id, 1);
  EXPECT_EQ(records[2].label, "acts");
  EXPECT_EQ(records[3].label, "bias");
  EXPECT_EQ(records[3].offset, 3072u);
  EXPECT_EQ(records[3].alloc_seq, 2u);  // per core, from 1

  const std::string dir = test_temp_dir().string();
  const std::string prof = dir + "/vtpu_runtime_profile.prof";
  const std::string snap = dir + "/vtpu_runtime_snapshot.json";
  rt.save_device_memory_profile(prof);
  rt.save_memory_snapshot(snap);
  std::ifstream in(prof, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);  // gzip
  EXPECT_EQ(magic[1], 0x8b);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(snap));
  ASSERT_EQ(j.at("segments").size(), 2u);
  EXPECT_EQ(j.at("segments")[1].at("blocks").size(), 3u);
  EXPECT_THROW(rt.save_memory_snapshot(dir + "/no/such/dir/x.json"), Error);
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

TEST(RuntimeMemoryProfileTest, EventLogMergesEveryCore) {
  RuntimeOptions o;
  o.num_cores = 3;
  o.hbm_bytes_per_core = 1 << 20;
  o.record_memory_events = true;
  Runtime rt(o);
  rt.run_spmd([](CoreContext& ctx) {
    DeviceBuffer a = ctx.allocate(4096 * (ctx.core_id() + 1), "act");
    DeviceBuffer b = ctx.allocate(256, "tmp");
  });
  const std::string path = test_temp_path("vtpu_runtime_events.jsonl");
  rt.save_memory_event_log(path);
  const Trace t = read_trace(path);
  ASSERT_EQ(t.events.size(), 3u * 4u);  // two allocs and two frees per core
  std::vector<int> per_core(3, 0);
  for (size_t i = 0; i < t.events.size(); ++i) {
    ++per_core[static_cast<size_t>(t.events[i].core)];
    if (i > 0) {
      EXPECT_GE(t.events[i].t_us, t.events[i - 1].t_us);
    }
  }
  EXPECT_EQ(per_core, (std::vector<int>{4, 4, 4}));
}

// The CPUs the calling thread may run on, in increasing order.
std::vector<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::vector<std::vector<int>> core_thread_cpus(const std::string& pin, int cores) {
  RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = 1 * kMiB;
  o.pin_threads = pin;
  Runtime rt(o);
  std::vector<std::vector<int>> cpus(static_cast<size_t>(cores));
  rt.run_spmd([&](CoreContext& ctx) { cpus[static_cast<size_t>(ctx.core_id())] = thread_cpus(); });
  return cpus;
}

TEST(RuntimeTest, PinThreadsOnPinsCoreIRoundRobinOverTheAllowedCpus) {
  const std::vector<int> allowed = thread_cpus();
  const int cores = static_cast<int>(allowed.size()) + 1;  // one more than the CPUs: wraps
  const auto cpus = core_thread_cpus("on", cores);
  for (int i = 0; i < cores; ++i) {
    EXPECT_EQ(cpus[static_cast<size_t>(i)],
              std::vector<int>{allowed[static_cast<size_t>(i) % allowed.size()]})
        << "core " << i;
  }
}

TEST(RuntimeTest, PinThreadsAutoPinsOnlyWhenCoresFitTheCpus) {
  const std::vector<int> allowed = thread_cpus();
  if (allowed.size() >= 2) {
    const auto fit = core_thread_cpus("auto", static_cast<int>(allowed.size()));
    for (size_t i = 0; i < fit.size(); ++i) EXPECT_EQ(fit[i], std::vector<int>{allowed[i]});
  }
  // One core: nothing to hand off to, left to the scheduler.
  EXPECT_EQ(core_thread_cpus("auto", 1)[0], allowed);
  // More cores than CPUs: every thread keeps the process's whole set (the scheduler balances).
  for (const auto& c : core_thread_cpus("auto", static_cast<int>(allowed.size()) + 2)) {
    EXPECT_EQ(c, allowed);
  }
  for (const auto& c : core_thread_cpus("off", 1)) EXPECT_EQ(c, allowed);
}

TEST(RuntimeTest, PinThreadsRejectsUnknownValues) {
  RuntimeOptions o;
  o.pin_threads = "yes";
  try {
    o.validate();
    FAIL() << "pin_threads 'yes' was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("pin_threads is 'yes'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(RuntimeOptions::from_json(nlohmann::json{{"pin_threads", "off"}}).pin_threads, "off");
  EXPECT_THROW(RuntimeOptions::from_json(nlohmann::json{{"pin_threads", true}}),
               InvalidArgumentError);
}

// A host thread allocates, fills, checks, defragments and saves profiles while every core runs
// programs that do the same on the same arenas: no buffer loses its bytes (run under TSan too).
TEST(RuntimeTest, HostThreadAndCoreProgramsShareArenasSafely) {
  RuntimeOptions o;
  o.num_cores = 4;
  o.hbm_bytes_per_core = 4 << 20;
  o.hbm_memory_fraction = 0.75;
  Runtime rt(o);
  std::atomic<bool> stop{false};
  std::atomic<int> corrupt{0};
  std::thread host([&] {
    std::mt19937 rng(3);
    int n = 0;
    while (!stop) {
      const int c = rng() % 4;
      try {
        DeviceBuffer b = rt.allocate(c, 1 + rng() % 50000, "host");
        {
          BufferPin pin = b.pin();
          std::memset(b.data(), 0x5A, b.size_bytes());
        }
        (void)rt.memory_chunk_records();
        (void)rt.core(c).hbm().memory_stats();
        (void)rt.core(c).hbm().occupancy_map();
        if (++n % 16 == 0) rt.core(c).hbm().defragment();
        if (n % 64 == 0) rt.save_device_memory_profile(test_temp_path("host_and_cores.prof"));
        BufferPin pin = b.pin();
        for (uint64_t i = 0; i < b.size_bytes(); ++i)
          if (static_cast<uint8_t>(b.data()[i]) != 0x5A) {
            ++corrupt;
            break;
          }
      } catch (const OutOfMemoryError&) {
      }
    }
  });
  for (int round = 0; round < 20; ++round) {
    rt.run_spmd([&](CoreContext& ctx) {
      std::mt19937 rng(ctx.core_id() * 100 + round);
      std::vector<std::pair<DeviceBuffer, uint8_t>> bufs;
      for (int i = 0; i < 200; ++i) {
        if (rng() % 3 != 0 || bufs.empty()) {
          try {
            DeviceBuffer b = ctx.allocate(1 + rng() % 30000, "core");
            const uint8_t v = static_cast<uint8_t>(rng());
            {
              BufferPin pin = b.pin();
              std::memset(b.data(), v, b.size_bytes());
            }
            bufs.emplace_back(std::move(b), v);
          } catch (const OutOfMemoryError&) {
          }
        } else {
          const size_t k = rng() % bufs.size();
          BufferPin pin = bufs[k].first.pin();
          const std::byte* d = bufs[k].first.data();
          for (uint64_t j = 0; j < bufs[k].first.size_bytes(); ++j)
            if (static_cast<uint8_t>(d[j]) != bufs[k].second) {
              ++corrupt;
              break;
            }
          pin.reset();
          bufs.erase(bufs.begin() + static_cast<std::ptrdiff_t>(k));
        }
        if (i % 50 == 0) ctx.hbm().defragment();
      }
    });
  }
  stop = true;
  host.join();
  EXPECT_EQ(corrupt.load(), 0);
  for (int c = 0; c < 4; ++c) {
    rt.core(c).hbm().check_consistency();
    EXPECT_EQ(rt.core(c).hbm().memory_stats().bytes_in_use, 0u);
  }
}

// A buffer and its pin keep their arena alive after the runtime and its devices are gone.
TEST(RuntimeTest, BuffersOutliveRuntimeAndDevice) {
  DeviceBuffer keep;
  BufferPin pin;
  {
    RuntimeOptions o;
    o.num_cores = 2;
    o.hbm_bytes_per_core = 1 << 20;
    o.hbm_memory_fraction = 0.5;
    Runtime rt(o);
    keep = rt.allocate(1, 1000, "survivor");
    pin = keep.pin();
  }
  std::memset(keep.data(), 1, 1000);
  EXPECT_EQ(keep.arena()->capacity_bytes(), 512u * 1024u);
  pin.reset();
  keep.reset();
}

// An OOM on core 3 is the error run_spmd rethrows, naming core 3, round after round, and every
// other core's buffers are released.
TEST(RuntimeTest, OomOnOneCoreDoesNotPoisonOthers) {
  RuntimeOptions o;
  o.num_cores = 8;
  o.hbm_bytes_per_core = 64 << 10;
  Runtime rt(o);
  for (int round = 0; round < 3; ++round) {
    try {
      rt.run_spmd([](CoreContext& ctx) {
        DeviceBuffer b = ctx.allocate(ctx.core_id() == 3 ? (1 << 20) : 1024, "x");
      });
      ADD_FAILURE() << "expected OOM";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.report().core_id, 3);
    }
  }
  for (int c = 0; c < 8; ++c) EXPECT_EQ(rt.core(c).hbm().memory_stats().bytes_in_use, 0u);
}

}  // namespace
}  // namespace vtpu
