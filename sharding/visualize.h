// A text picture of which cores hold which block of a 1-D or 2-D array, as
// jax.debug.visualize_array_sharding prints it without colour (jax/_src/debugging.py: a rich table
// with box.SQUARE, show_lines, no padding). Each block is a box labelled with the cores that hold
// it ("core 0,1"; JAX writes the platform, "TPU 0,1").
//
// Sizes, as JAX computes them (scale 1): base_height = 10, base_width = int(10 * aspect) with
// aspect = cols / rows (1 / n for a 1-D array of n), and a block covering a fraction fr of the
// rows and fc of the columns gets
//
//     width  = clamp(int(fc * base_width * 2.5), min_width, max_width)   (1-D: 1 line high)
//     height = int(fr * base_height)
//
// The label is centred with floor((width - len - 2) / 2) spaces on its left and the rest on its
// right, and floor((height - 2) / 2) blank lines above it and the rest below (negatives count as
// 0); width and height count one border each side, so a box shows width - 2 characters and
// height - 1 lines. A column is as wide as its widest box, a row as tall as its tallest. f32[8,8]
// with P('x', 'y') on a (2, 2) mesh gives width 12 and height 5:
//
//     ┌──────────┬──────────┐
//     │          │          │
//     │  core 0  │  core 1  │
//     │          │          │
//     │          │          │
//     ├──────────┼──────────┤
//     │          │          │
//     │  core 2  │  core 3  │
//     │          │          │
//     │          │          │
//     └──────────┴──────────┘
//
// Differences from JAX: blocks are ordered by their index ranges, so uneven shardings (short or
// empty blocks, which JAX's chunk index arithmetic does not allow) draw too; the picture is
// returned, not printed, and ends with one newline (JAX prints a blank line after it); a table
// wider than max_width is not wrapped; the devices of every addend of a partial array share their
// block's box.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vtpu/sharding/named_sharding.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {

/// jax.debug.visualize_sharding's keyword arguments that shape the picture.
struct VisualizeOptions {
  double scale = 1.0;  // multiplies base_height (10 lines); 0 < scale <= 100
  int min_width = 9;   // narrowest box, in characters (borders included); >= 5
  int max_width = 80;  // widest box, in characters; min_width..1000
};

/// The picture of `sharding` over an array of `global_shape` (rank 1 or 2). Throws
/// InvalidArgumentError for another rank or a zero dimension (naming the shape), options out of
/// their bounds, or as NamedSharding::check_shape.
std::string visualize_array_sharding(const NamedSharding& sharding,
                                     const std::vector<int64_t>& global_shape,
                                     const VisualizeOptions& options = {});

/// The picture of `array`'s sharding: visualize_array_sharding(array.sharding(), shape).
std::string visualize_array_sharding(const ShardedArray& array,
                                     const VisualizeOptions& options = {});

}  // namespace vtpu
