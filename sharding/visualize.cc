#include "vtpu/sharding/visualize.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

/// Python's divmod for a positive divisor: the quotient rounds down, the remainder is >= 0.
std::pair<int64_t, int64_t> floor_divmod(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return {q, a - q * b};
}

/// One box: its label and its padding (characters left and right, lines above and below).
struct Box {
  std::string label;
  int64_t left = 0, right = 0, top = 0, bottom = 0;
  int64_t width() const { return left + static_cast<int64_t>(label.size()) + right; }
  int64_t lines() const { return top + 1 + bottom; }
};

std::string repeat(const std::string& s, int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

/// A border line: `first`, then each column's width of "─" separated by `mid`, then `last`.
std::string border(const std::vector<int64_t>& widths, const char* first, const char* mid,
                   const char* last) {
  std::string line = first;
  for (size_t j = 0; j < widths.size(); ++j) line += (j ? mid : "") + repeat("─", widths[j]);
  return line + last + "\n";
}

/// Line `k` of `box` drawn `width` characters wide: the label centred between its paddings
/// (rich's Padding around Align.center), blank above and below it.
std::string box_line(const Box& box, int64_t k, int64_t width) {
  if (k != box.top) return std::string(static_cast<size_t>(width), ' ');
  const int64_t inner = width - box.left - box.right;
  const int64_t excess = inner - static_cast<int64_t>(box.label.size());
  return std::string(static_cast<size_t>(box.left + excess / 2), ' ') + box.label +
         std::string(static_cast<size_t>(excess - excess / 2 + box.right), ' ');
}

std::string draw(const std::vector<std::vector<Box>>& grid) {
  std::vector<int64_t> widths(grid[0].size(), 0);
  for (const std::vector<Box>& row : grid) {
    for (size_t j = 0; j < row.size(); ++j) widths[j] = std::max(widths[j], row[j].width());
  }
  std::string out = border(widths, "┌", "┬", "┐");
  for (size_t i = 0; i < grid.size(); ++i) {
    if (i) out += border(widths, "├", "┼", "┤");
    int64_t height = 0;
    for (const Box& b : grid[i]) height = std::max(height, b.lines());
    for (int64_t k = 0; k < height; ++k) {
      out += "│";
      for (size_t j = 0; j < widths.size(); ++j) out += box_line(grid[i][j], k, widths[j]) + "│";
      out += "\n";
    }
  }
  return out + border(widths, "└", "┴", "┘");
}

}  // namespace

std::string visualize_array_sharding(const NamedSharding& sharding,
                                     const std::vector<int64_t>& global_shape,
                                     const VisualizeOptions& options) {
  // Bounds keep the picture a screenful: the height is 10 x scale lines per mesh row.
  if (!(options.scale > 0.0 && options.scale <= 100.0)) {
    throw InvalidArgumentError("visualize_array_sharding scale " + std::to_string(options.scale) +
                               " (expected 0 < scale <= 100)");
  }
  if (options.min_width < 5 || options.max_width < options.min_width || options.max_width > 1000) {
    throw InvalidArgumentError(
        "visualize_array_sharding widths " + std::to_string(options.min_width) + ".." +
        std::to_string(options.max_width) + " (expected 5 <= min_width <= max_width <= 1000)");
  }
  sharding.check_shape(global_shape);
  const size_t rank = global_shape.size();
  if (rank < 1 || rank > 2 || *std::min_element(global_shape.begin(), global_shape.end()) < 1) {
    throw InvalidArgumentError("visualize_array_sharding of shape " + shape_text(global_shape) +
                               " (expected rank 1 or 2 and every dimension >= 1)");
  }
  const bool two_d = rank == 2;
  // Each device's block as (rows, columns); a 1-D array is one row. The picture's rows and
  // columns are the distinct ranges, in order.
  std::map<int, std::pair<IndexRange, IndexRange>> block_of;
  std::map<std::pair<int64_t, int64_t>, size_t> row_of, col_of;
  auto key = [](const IndexRange& r) { return std::make_pair(r.start, r.stop); };
  for (int dev : sharding.mesh().devices()) {
    const std::vector<IndexRange> box = sharding.index_ranges(dev, global_shape);
    block_of[dev] = {two_d ? box[0] : IndexRange{0, 1}, box.back()};
    row_of[key(block_of[dev].first)] = 0;
    col_of[key(block_of[dev].second)] = 0;
  }
  size_t n = 0;
  for (auto& entry : row_of) entry.second = n++;
  n = 0;
  for (auto& entry : col_of) entry.second = n++;
  std::vector<std::vector<std::set<int>>> holders(row_of.size(),
                                                  std::vector<std::set<int>>(col_of.size()));
  std::vector<std::vector<std::pair<IndexRange, IndexRange>>> blocks(
      row_of.size(), std::vector<std::pair<IndexRange, IndexRange>>(col_of.size()));
  for (const auto& [dev, block] : block_of) {
    const size_t i = row_of.at(key(block.first)), j = col_of.at(key(block.second));
    holders[i][j].insert(dev);
    blocks[i][j] = block;
  }

  // JAX's arithmetic, in its order of double operations.
  const int64_t base_height = static_cast<int64_t>(10 * options.scale);
  const double rows = static_cast<double>(global_shape[0]);
  const double cols = two_d ? static_cast<double>(global_shape[1]) : rows;
  const double aspect = (two_d ? cols : 1.0) / rows;
  const double base_width =
      static_cast<double>(static_cast<int64_t>(static_cast<double>(base_height) * aspect));
  std::vector<std::vector<Box>> grid(row_of.size(), std::vector<Box>(col_of.size()));
  for (size_t i = 0; i < grid.size(); ++i) {
    for (size_t j = 0; j < grid[i].size(); ++j) {
      const auto& [vert, horiz] = blocks[i][j];
      const int64_t width = std::clamp(
          static_cast<int64_t>(static_cast<double>(horiz.size()) / cols * base_width * 2.5),
          int64_t{options.min_width}, int64_t{options.max_width});
      const int64_t height = two_d ? static_cast<int64_t>(static_cast<double>(vert.size()) / rows *
                                                          static_cast<double>(base_height))
                                   : 1;
      Box& b = grid[i][j];
      b.label = "core";
      for (int dev : holders[i][j])
        b.label += (b.label.size() == 4 ? " " : ",") + std::to_string(dev);
      const auto [left, lrem] = floor_divmod(width - static_cast<int64_t>(b.label.size()) - 2, 2);
      const auto [top, trem] = floor_divmod(height - 2, 2);
      b.left = std::max<int64_t>(left, 0);
      b.right = std::max<int64_t>(left + lrem, 0);
      b.top = std::max<int64_t>(top, 0);
      b.bottom = std::max<int64_t>(top + trem, 0);
    }
  }
  return draw(grid);
}

std::string visualize_array_sharding(const ShardedArray& array, const VisualizeOptions& options) {
  return visualize_array_sharding(array.sharding(), array.global_shape(), options);
}

}  // namespace vtpu
