// XLA tiled layouts and the padded HBM bytes of an array on TPU, after XLA's docs/tiled_layout.md.
//
// A layout is a minor_to_major order plus a list of tiles. The dimensions are first put in
// physical order, most major first: for minor_to_major {1,0} that is (d0, d1). A tile
// (t_1, ..., t_m) then covers the m most-minor physical dimensions: each is padded up to a
// multiple of its tile size and split in two, and the tile-sized parts move to the end, so
//
//     (d_1, ..., d_k, ..., d_n)  ->  (d_1, ..., d_k-1, ceil(d_k/t_1), ..., ceil(d_n/t_m), t_1..t_m)
//
// A tile with more dimensions than the shape has first pads the shape with leading 1s. Each later
// tile applies in the same way to the shape the previous one produced, so (8,128)(2,1) tiles the
// within-tile (8,128) block by (2,1): it packs two 16-bit values of adjacent rows into 32 bits and
// pads nothing; (2,1,1,1) after (8,128) pairs whole tiles and can pad the tile count. The padded
// size is the product of the final shape times the element size.
//
//     f32[3,5]{1,0:T(2,2)}   ->  (2,3,2,2) = 24 elements (15 logical), as in the doc's Figure 1
//     f32[1024,1]{1,0:T(8,128)}  ->  (128,1,8,128) = 131072 elements: 128x the logical size
//
// XLA's own ShapeUtil::ArraySize rounds by the first tile only ("we assume the sub-tiles won't
// cause additional padding"); the full rule here gives the same bytes whenever that holds, which
// it does for every default TPU layout, and stays exact when a later tile pads too.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vtpu/common/element_type.h"

namespace vtpu {

/// One level of tiling: tile sizes for the most-minor physical dimensions, most major first,
/// counted in elements. (8,128) is 8 rows of 128 elements. Thread-compatible.
struct Tile {
  std::vector<int64_t> dimensions;  // each >= 1 (XLA's combined dimension, '*' or -1, is not
                                    // supported)

  /// XLA notation: "(8,128)".
  std::string to_string() const;
  bool operator==(const Tile&) const = default;
};

/// A dense array layout: dimension order plus tiles. Thread-compatible.
struct Layout {
  /// Dimension numbers, most minor first: {1,0} is row-major for rank 2. A permutation of
  /// 0..rank-1.
  std::vector<int64_t> minor_to_major;
  /// Tiles, applied in order to the most-minor physical dimensions; empty for an untiled layout.
  std::vector<Tile> tiles;

  /// XLA notation: "{1,0:T(8,128)(2,1)}", "{1,0}" without tiles, "{}" for rank 0.
  std::string to_string() const;
  /// Throws InvalidArgumentError when minor_to_major is not a permutation of 0..rank-1 (naming
  /// the layout and rank) or a tile has a dimension < 1 or no dimensions (naming the tile).
  void validate(size_t rank) const;
  bool operator==(const Layout&) const = default;
};

/// Parses XLA's notation, as Layout::to_string() writes it: "{1,0:T(8,128)(2,1)}", "{0,1}", "{}",
/// "{:T(8,128)}"; spaces are ignored. Throws InvalidArgumentError naming the text and position
/// for a syntax error, a number that does not fit int64, a combined tile dimension ('*' or -1),
/// a zero tile dimension, a minor_to_major that is not a permutation, or a layout attribute other
/// than T (XLA's E(), S(), ...).
Layout parse_layout(std::string_view text);

/// The layout XLA uses on TPU for an array of `type` and `rank` (>= 0) in HBM, after the doc's
/// "Examples of tiling formats": minor_to_major rank-1, ..., 0 (row-major) and
///   32-bit types (f32, s32, u32):            T(8,128)        (one 8x128 vector register)
///   16-bit types (bf16, f16, s16, u16):      T(8,128)(2,1)   (two rows packed into 32 bits)
///   8-bit types (s8, u8) and pred:           T(8,128)(4,1)   (four rows packed into 32 bits)
///   64-bit types (s64, u64, f64):            T(8,128)
/// Choices, where XLA TPU differs or is silent:
///   - 64-bit: TPUs have no 64-bit vector lanes; XLA splits an s64/u64 array into two 32-bit
///     arrays, each tiled (8,128), which takes the same bytes as T(8,128) with 8-byte elements.
///     f64 is not supported on TPU; it gets the same rule.
///   - pred: 1 byte per element, packed like s8 (the doc notes TPUs have used 4 bytes a pred;
///     use an explicit layout with s32 to model that).
///   - rank 1 is tiled by 1024 elements: T(1024) for 32- and 64-bit types, T(1024)(128)(2,1)
///     for 16-bit and T(1024)(128)(4,1) for 8-bit types, as XLA TPU's HLO shows
///     (f32[1024]{0:T(1024)}, bf16[6144]{0:T(1024)(128)(2,1)}); a vector takes
///     ceil(n / 1024) * 1024 elements. XLA sometimes picks T(128) or T(256) for short vectors,
///     and the small "2x128"/"4x128" tiles when a matrix's second-minor dimension is 1 to 4:
///     pass an explicit Layout to model those.
///   - rank 0 (a scalar) is untiled: "{}".
/// Throws InvalidArgumentError for a negative rank.
Layout tpu_default_layout(ElementType type, int64_t rank);

/// Bytes of the array's elements without padding: product(dims) * element_size_bytes(type).
/// `dims` are logical dimensions in elements, dimension 0 first (XLA's f32[256,512] is
/// {256, 512}). Rank 0 is one element. Throws InvalidArgumentError naming the shape for a
/// negative dimension or a size past 2^64 - 1 bytes.
uint64_t logical_bytes(ElementType type, std::span<const int64_t> dims);

/// The physical shape after tiling, most major first, in elements (see the model above):
/// f32[3,5]{1,0:T(2,2)} gives {2, 3, 2, 2}. Throws as padded_bytes().
std::vector<uint64_t> tiled_physical_dimensions(std::span<const int64_t> dims,
                                                const Layout& layout);

/// Bytes the array takes in memory under `layout`: the product of tiled_physical_dimensions()
/// times element_size_bytes(type). Throws InvalidArgumentError naming the shape and layout for a
/// negative dimension, a layout that does not fit the rank (Layout::validate), or a size past
/// 2^64 - 1 bytes.
uint64_t padded_bytes(ElementType type, std::span<const int64_t> dims, const Layout& layout);

/// Logical and padded bytes of one array, and the expansion factor padded / logical.
struct ArrayBytes {
  uint64_t logical_bytes = 0;  // product(dims) * element size
  uint64_t padded_bytes = 0;   // bytes under the layout, padding included
  double expansion = 1.0;      // padded_bytes / logical_bytes; 1.0 for an empty array
};

/// Both sizes under `layout`. Throws as padded_bytes().
ArrayBytes array_bytes(ElementType type, std::span<const int64_t> dims, const Layout& layout);
/// Both sizes under tpu_default_layout(type, dims.size()). Throws as padded_bytes().
ArrayBytes array_bytes(ElementType type, std::span<const int64_t> dims);

/// XLA's shape notation: "f32[3,5]{1,0:T(2,2)}", for messages and reports.
std::string shape_to_string(ElementType type, std::span<const int64_t> dims, const Layout& layout);

}  // namespace vtpu
