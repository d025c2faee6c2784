// The reduction kernels against naive loops: the rank-order fold with its output aliasing any
// input (the direct algorithms fold in place), the fold written to several outputs with and
// without streaming stores, and the streaming copy at every alignment.
#include "vtpu/collectives/reduce_kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace vtpu {
namespace {

// Independent reference: ((c0 + c1) + c2) ... per element, in float.
std::vector<float> naive_fold(const std::vector<std::vector<float>>& in, uint64_t n) {
  std::vector<float> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    float acc = in[0][i];
    for (size_t r = 1; r < in.size(); ++r) acc = acc + in[r][i];
    out[i] = acc;
  }
  return out;
}

std::vector<std::vector<float>> random_inputs(int nranks, uint64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1e4f, 1e4f);
  std::vector<std::vector<float>> in(static_cast<size_t>(nranks), std::vector<float>(n));
  for (auto& v : in)
    for (float& x : v) x = d(gen);
  return in;
}

constexpr uint64_t kTile = kFoldTileBytes / sizeof(float);

// Regression: the fold once copied c[0] into `out` before reading the others, so an output that
// aliased c[r] for r > 0 (in place on rank r of the direct algorithms) lost rank r's data.
TEST(ReduceKernelsTest, FoldWithOutputAliasingAnyInput) {
  for (int nranks = 1; nranks <= 5; ++nranks) {
    for (uint64_t n : {uint64_t{1}, kTile - 1, 2 * kTile + 3}) {
      const auto in = random_inputs(nranks, n, static_cast<uint32_t>(nranks * 100 + n));
      const std::vector<float> expected = naive_fold(in, n);
      for (int alias = 0; alias < nranks; ++alias) {
        auto c = in;
        std::vector<const float*> ptrs;
        for (auto& v : c) ptrs.push_back(v.data());
        float* out = c[static_cast<size_t>(alias)].data();
        fold_in_rank_order(out, ptrs.data(), nranks, n, ReduceOp::kSum);
        ASSERT_EQ(0, std::memcmp(out, expected.data(), n * sizeof(float)))
            << "ranks " << nranks << " n " << n << " output aliases input " << alias;
      }
    }
  }
}

// The fold to every output, streaming or not, with outputs at odd offsets (so streaming stores
// have a head and a tail) and one output aliasing an input.
TEST(ReduceKernelsTest, FoldToAllOutputsWithAndWithoutStreamingStores) {
  for (bool streaming : {false, true}) {
    for (int nranks = 1; nranks <= 4; ++nranks) {
      for (uint64_t n : {uint64_t{1}, uint64_t{17}, 2 * kTile + 5}) {
        auto c = random_inputs(nranks, n, static_cast<uint32_t>(nranks + n));
        const std::vector<float> expected = naive_fold(c, n);
        std::vector<const float*> ptrs;
        for (auto& v : c) ptrs.push_back(v.data());
        std::vector<std::vector<float>> outs(3, std::vector<float>(n + 1, -7.0f));
        std::vector<float*> out_ptrs = {outs[0].data() + 1, outs[1].data(), outs[2].data() + 1,
                                        c.back().data()};
        fold_in_rank_order_to_all(out_ptrs.data(), 4, ptrs.data(), nranks, n, ReduceOp::kSum,
                                  streaming);
        stream_fence();
        for (float* o : out_ptrs) {
          ASSERT_EQ(0, std::memcmp(o, expected.data(), n * sizeof(float)))
              << "streaming " << streaming << " ranks " << nranks << " n " << n;
        }
        EXPECT_EQ(outs[0][0], -7.0f);  // nothing written before the output
        EXPECT_EQ(outs[1][n], -7.0f);  // nor after it
      }
    }
  }
}

TEST(ReduceKernelsTest, StreamCopyEveryAlignmentAndLength) {
  std::vector<unsigned char> src(512), dst(512);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (size_t doff = 0; doff < 16; ++doff) {
    for (size_t soff = 0; soff < 3; ++soff) {
      for (size_t len : {size_t{0}, size_t{1}, size_t{15}, size_t{64}, size_t{200}, size_t{400}}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        stream_copy(dst.data() + doff, src.data() + soff, len);
        stream_fence();
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= doff && i < doff + len;
          ASSERT_EQ(dst[i], inside ? src[i - doff + soff] : 0xEE)
              << "dst offset " << doff << " src offset " << soff << " length " << len;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vtpu
