#include "vtpu/memory/tiled_layout.h"

#include <cctype>
#include <charconv>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

std::string join_ints(std::span<const int64_t> values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  return out;
}

std::string dims_to_string(ElementType type, std::span<const int64_t> dims) {
  return std::string(element_type_name(type)) + "[" + join_ints(dims) + "]";
}

// Throws InvalidArgumentError naming what() for the first negative dimension.
template <typename What>
void check_dims(std::span<const int64_t> dims, const What& what) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      throw InvalidArgumentError("dimension " + std::to_string(i) + " of " + what() + " is " +
                                 std::to_string(dims[i]) + " (expected >= 0)");
    }
  }
}

// The product of `factors`, or InvalidArgumentError naming what(...) when it passes 2^64 - 1.
// A zero factor makes the product 0 even if the others alone would overflow.
template <typename Range, typename What>
uint64_t checked_product(const Range& factors, uint64_t initial, const What& what) {
  for (auto f : factors) {
    if (f == 0) return 0;
  }
  uint64_t out = initial;
  for (auto f : factors) {
    if (__builtin_mul_overflow(out, static_cast<uint64_t>(f), &out)) {
      throw InvalidArgumentError(what() + ": size overflows 2^64 bytes");
    }
  }
  return out;
}

// A small recursive-descent parser over XLA's layout notation.
class LayoutParser {
 public:
  explicit LayoutParser(std::string_view text) : text_(text) {}

  Layout parse() {
    Layout layout;
    expect('{');
    if (peek() != ':' && peek() != '}') {
      layout.minor_to_major.push_back(parse_int("minor_to_major entry"));
      while (peek() == ',') {
        ++pos_;
        layout.minor_to_major.push_back(parse_int("minor_to_major entry"));
      }
    }
    if (peek() == ':') {
      ++pos_;
      while (peek() != '}') {
        const char attr = peek();
        if (attr != 'T') {
          fail(attr == '\0' ? std::string("unexpected end (expected '}')")
                            : "unsupported layout attribute '" + std::string(1, attr) +
                                  "' (only T(...) tiles are supported)");
        }
        ++pos_;
        if (peek() != '(') fail("expected '(' after 'T'");
        while (peek() == '(') layout.tiles.push_back(parse_tile());
      }
    }
    expect('}');
    peek();                                                      // skips trailing spaces
    if (pos_ < text_.size()) fail("unexpected text after '}'");  // also an embedded NUL
    layout.validate(layout.minor_to_major.size());
    return layout;
  }

 private:
  // The next non-space character, or '\0' at the end.
  char peek() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  void expect(char c) {
    if (peek() != c) fail("expected '" + std::string(1, c) + "'");
    ++pos_;
  }

  Tile parse_tile() {
    expect('(');
    Tile tile;
    tile.dimensions.push_back(parse_int("tile dimension"));
    while (peek() == ',') {
      ++pos_;
      tile.dimensions.push_back(parse_int("tile dimension"));
    }
    expect(')');
    return tile;
  }

  int64_t parse_int(const char* what) {
    auto combined = [&] {
      fail(std::string(what) + " is a combined dimension ('*' or -1), which is not supported");
    };
    if (peek() == '*') combined();
    int64_t value = 0;
    const char* begin = text_.data() + pos_;
    const char* end = text_.data() + text_.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec == std::errc::result_out_of_range) fail(std::string(what) + " does not fit int64");
    if (ec != std::errc() || ptr == begin) fail(std::string("expected a ") + what);
    if (value == -1) combined();
    pos_ += static_cast<size_t>(ptr - begin);
    return value;
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgumentError("invalid layout '" + std::string(text_) + "' at position " +
                               std::to_string(pos_) + ": " + why +
                               " (expected XLA notation such as {1,0:T(8,128)(2,1)})");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::string Tile::to_string() const { return "(" + join_ints(dimensions) + ")"; }

std::string Layout::to_string() const {
  std::string out = "{" + join_ints(minor_to_major);
  if (!tiles.empty()) {
    out += ":T";
    for (const Tile& t : tiles) out += t.to_string();
  }
  return out + "}";
}

void Layout::validate(size_t rank) const {
  if (minor_to_major.size() != rank) {
    throw InvalidArgumentError("layout " + to_string() + " has " +
                               std::to_string(minor_to_major.size()) +
                               " minor_to_major entries for a rank-" + std::to_string(rank) +
                               " shape (expected a permutation of 0.." +
                               std::to_string(static_cast<int64_t>(rank) - 1) + ")");
  }
  std::vector<bool> seen(rank, false);
  for (int64_t d : minor_to_major) {
    if (d < 0 || static_cast<uint64_t>(d) >= rank || seen[static_cast<size_t>(d)]) {
      throw InvalidArgumentError(
          "minor_to_major of layout " + to_string() + " is not a permutation of 0.." +
          std::to_string(static_cast<int64_t>(rank) - 1) + ": dimension " + std::to_string(d) +
          (d >= 0 && static_cast<uint64_t>(d) < rank ? " repeats" : " is out of range"));
    }
    seen[static_cast<size_t>(d)] = true;
  }
  for (const Tile& t : tiles) {
    if (t.dimensions.empty()) {
      throw InvalidArgumentError("layout " + to_string() +
                                 " has a tile with no dimensions (expected at least one)");
    }
    for (int64_t d : t.dimensions) {
      if (d < 1) {
        throw InvalidArgumentError("tile " + t.to_string() + " of layout " + to_string() +
                                   " has a dimension " + std::to_string(d) + " (expected >= 1)");
      }
    }
  }
}

Layout parse_layout(std::string_view text) { return LayoutParser(text).parse(); }

Layout tpu_default_layout(ElementType type, int64_t rank) {
  if (rank < 0) {
    throw InvalidArgumentError("rank " + std::to_string(rank) + " is negative (expected >= 0)");
  }
  Layout layout;
  for (int64_t d = rank - 1; d >= 0; --d) layout.minor_to_major.push_back(d);
  if (rank == 0) return layout;  // scalars are untiled
  // A vector is tiled by 1024 elements, as XLA TPU lays out f32[1024]{0:T(1024)} and
  // bf16[6144]{0:T(1024)(128)(2,1)}; higher ranks by one (8,128) vector register.
  if (rank == 1) {
    layout.tiles.push_back(Tile{{1024}});
    if (element_size_bytes(type) < 4) layout.tiles.push_back(Tile{{128}});
  } else {
    layout.tiles.push_back(Tile{{8, 128}});
  }
  switch (element_size_bytes(type)) {
    case 2:
      layout.tiles.push_back(Tile{{2, 1}});
      break;
    case 1:
      layout.tiles.push_back(Tile{{4, 1}});
      break;
    default:  // 4- and 8-byte types: no packing tile
      break;
  }
  return layout;
}

uint64_t logical_bytes(ElementType type, std::span<const int64_t> dims) {
  check_dims(dims, [&] { return dims_to_string(type, dims); });
  return checked_product(dims, element_size_bytes(type),
                         [&] { return dims_to_string(type, dims); });
}

std::vector<uint64_t> tiled_physical_dimensions(std::span<const int64_t> dims,
                                                const Layout& layout) {
  check_dims(dims, [&] { return "shape [" + join_ints(dims) + "]" + layout.to_string(); });
  layout.validate(dims.size());
  // Physical order, most major first: minor_to_major read backwards.
  std::vector<uint64_t> physical;
  physical.reserve(dims.size());
  for (auto it = layout.minor_to_major.rbegin(); it != layout.minor_to_major.rend(); ++it) {
    physical.push_back(static_cast<uint64_t>(dims[static_cast<size_t>(*it)]));
  }
  for (const Tile& tile : layout.tiles) {
    const size_t m = tile.dimensions.size();
    if (m > physical.size()) physical.insert(physical.begin(), m - physical.size(), 1);
    const size_t first = physical.size() - m;  // the first tiled dimension
    for (size_t j = 0; j < m; ++j) {
      const auto t = static_cast<uint64_t>(tile.dimensions[j]);
      uint64_t& d = physical[first + j];
      d = d / t + (d % t != 0);  // tiles along this dimension (ceil, cannot overflow)
      physical.push_back(t);
    }
  }
  return physical;
}

uint64_t padded_bytes(ElementType type, std::span<const int64_t> dims, const Layout& layout) {
  const std::vector<uint64_t> physical = tiled_physical_dimensions(dims, layout);
  return checked_product(physical, element_size_bytes(type),
                         [&] { return shape_to_string(type, dims, layout); });
}

ArrayBytes array_bytes(ElementType type, std::span<const int64_t> dims, const Layout& layout) {
  ArrayBytes out;
  out.padded_bytes = padded_bytes(type, dims, layout);
  out.logical_bytes = logical_bytes(type, dims);
  out.expansion = out.logical_bytes == 0 ? 1.0
                                         : static_cast<double>(out.padded_bytes) /
                                               static_cast<double>(out.logical_bytes);
  return out;
}

ArrayBytes array_bytes(ElementType type, std::span<const int64_t> dims) {
  return array_bytes(type, dims, tpu_default_layout(type, static_cast<int64_t>(dims.size())));
}

std::string shape_to_string(ElementType type, std::span<const int64_t> dims, const Layout& layout) {
  return dims_to_string(type, dims) + layout.to_string();
}

}  // namespace vtpu
