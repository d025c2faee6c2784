// Collectives over a group that spans processes give the same bits as one process: each test
// runs the collective on the distributed runtime and on a one-process runtime of the same cores
// in this process, and compares.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "tests/distributed/test_util.h"
#include "tests/expect_error.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/transport.h"
#include "vtpu/distributed/distributed.h"

namespace vtpu {
namespace {

using distributed_test::default_link_options;

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Every core's all-reduced values, indexed by core (cores of other processes stay empty).
std::vector<std::vector<float>> all_reduce_on(Runtime& rt, int n, Algorithm alg) {
  Communicator comm(rt, iota(rt.num_cores()));
  std::vector<std::vector<float>> out(static_cast<size_t>(rt.num_cores()));
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.1f * static_cast<float>(ctx.core_id() + 1) + 1e-3f * static_cast<float>(i % 977);
    CollectiveOptions co;
    co.algorithm = alg;
    comm.all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum, co);
    out[static_cast<size_t>(ctx.core_id())] = std::move(x);
  });
  return out;
}

TEST(MpiTransportTest, AllReduceMatchesOneProcessBitForBit) {
  auto dist = distributed::make_runtime(default_link_options(8));
  Runtime one(default_link_options(8));
  for (int n : {1, 1000, 300000}) {
    for (Algorithm alg : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kBidirectionalRing,
                          Algorithm::kRecursiveDoubling}) {
      const auto got = all_reduce_on(*dist, n, alg);
      const auto want = all_reduce_on(one, n, alg);
      for (int c : dist->local_core_ids()) {
        ASSERT_EQ(0, std::memcmp(got[c].data(), want[c].data(), want[c].size() * sizeof(float)))
            << "core " << c << " n " << n << " " << algorithm_name(alg);
      }
    }
  }
}

// Bytes that differ per message and position.
std::vector<std::byte> pattern(uint64_t bytes, uint64_t message) {
  std::vector<std::byte> v(bytes);
  for (uint64_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 131 + message * 7) >> 3);
  return v;
}

// Buffer transfers on the link from process 0's first core to process 1's: messages of every
// size arrive whole, in the order started, in the receiver's memory; a message shorter or longer
// than the receive fails it with InternalError naming the lengths; abort wakes a waiting receive,
// and cancelling ends it.
TEST(MpiTransportTest, BufferTransfersArriveInOrderAndCheckTheirLength) {
  auto dist = distributed::make_runtime(default_link_options(8));
  const int peer_core = dist->local_num_cores();
  auto& provider = dynamic_cast<TransportProvider&>(dist->process_group());
  const std::shared_ptr<Transport> transport = provider.make_transport(*dist, {0, peer_core});
  const int p = dist->process_index();
  if (p < 2) {
    std::unique_ptr<Link> link = transport->connect(0, peer_core, LinkOptions{});
    ASSERT_TRUE(link->supports_buffer_transfer());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    const std::vector<uint64_t> sizes = {0, 1, 4096, uint64_t{1} << 20, 3000001};
    std::vector<std::vector<std::byte>> data;
    for (size_t m = 0; m < sizes.size(); ++m) data.push_back(pattern(sizes[m], m));
    if (p == 0) {
      for (const auto& d : data) link->start_buffer_send(d.data(), d.size());
      std::vector<std::byte> short_one(99), long_one(101);
      link->start_buffer_send(short_one.data(), short_one.size());
      link->start_buffer_send(long_one.data(), long_one.size());
      for (size_t m = 0; m < data.size() + 2; ++m) link->wait_buffer_send(deadline);
    } else {
      std::vector<std::vector<std::byte>> got;
      for (uint64_t n : sizes) got.emplace_back(n, std::byte{0});
      for (auto& g : got) link->start_buffer_recv(g.data(), g.size());
      std::vector<std::byte> room(100);
      link->start_buffer_recv(room.data(), 100);
      link->start_buffer_recv(room.data(), 100);
      for (size_t m = 0; m < got.size(); ++m) {
        link->wait_buffer_recv(deadline);
        EXPECT_EQ(got[m], data[m]) << "message " << m << " of " << sizes[m] << " bytes";
      }
      testing::expect_error(ErrorCode::kInternal, [&] { link->wait_buffer_recv(deadline); },
                            {"99", "100"});
      testing::expect_error(ErrorCode::kInternal, [&] { link->wait_buffer_recv(deadline); },
                            {"100"});
      // Nothing more comes: abort wakes the wait, and cancelling ends the receive.
      link->start_buffer_recv(room.data(), 100);
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        link->abort("stop");
      });
      testing::expect_error(ErrorCode::kAborted, [&] { link->wait_buffer_recv(deadline); },
                            {"stop"});
      aborter.join();
      link->cancel_buffer_transfers(deadline);
      testing::expect_error(ErrorCode::kInternal, [&] { link->wait_buffer_recv(deadline); }, {});
    }
  }
  dist->process_group().barrier();
}

}  // namespace
}  // namespace vtpu
