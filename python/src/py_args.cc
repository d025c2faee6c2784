#include "py_args.h"

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/stress/stress_flags.h"

namespace vtpu::python {
namespace {

[[noreturn]] void bad(const char* name, py::handle value, const char* expected) {
  throw InvalidArgumentError(std::string(name) + "=" + std::string(py::repr(value)) +
                             " (expected " + expected + ")");
}

bool is_int(py::handle value) {
  return py::isinstance<py::int_>(value) && !py::isinstance<py::bool_>(value);
}

}  // namespace

uint64_t bytes_arg(py::handle value, const char* name) {
  constexpr const char* kExpected = "a byte count: an int >= 0 or a size such as \"64M\"";
  if (is_int(value)) {
    if (py::reinterpret_borrow<py::object>(value) < py::int_(0)) bad(name, value, kExpected);
    try {
      return value.cast<uint64_t>();
    } catch (const py::cast_error&) {
      bad(name, value, kExpected);
    }
  }
  if (!py::isinstance<py::str>(value)) bad(name, value, kExpected);
  try {
    return parse_bytes(value.cast<std::string>());
  } catch (const InvalidArgumentError&) {
    bad(name, value, kExpected);
  }
}

uint64_t uint64_arg(py::handle value, const char* name) {
  constexpr const char* kExpected = "an int in 0..2^64 - 1";
  if (!is_int(value) || py::reinterpret_borrow<py::object>(value) < py::int_(0))
    bad(name, value, kExpected);
  try {
    return value.cast<uint64_t>();
  } catch (const py::cast_error&) {
    bad(name, value, kExpected);
  }
}

int64_t int_arg(py::handle value, const char* name, int64_t lo, int64_t hi) {
  const std::string expected = "an int in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (!is_int(value)) bad(name, value, expected.c_str());
  int64_t v = 0;
  try {
    v = value.cast<int64_t>();
  } catch (const py::cast_error&) {
    bad(name, value, expected.c_str());
  }
  if (v < lo || v > hi) bad(name, value, expected.c_str());
  return v;
}

std::string str_arg(py::handle value, const char* name) {
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::hasattr(value, "__fspath__")) {
    py::object path = py::module_::import("os").attr("fspath")(value);
    if (py::isinstance<py::str>(path)) return path.cast<std::string>();
  }
  bad(name, value, "a str");
}

bool on_off_arg(py::handle value, const char* name) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::str>(value)) {
    const std::string word = value.cast<std::string>();
    if (word == "on") return true;
    if (word == "off") return false;
  }
  bad(name, value, "True, False, \"on\" or \"off\"");
}

std::vector<std::string> names_arg(py::handle value, const char* name) {
  if (py::isinstance<py::str>(value)) return split_comma_list(value.cast<std::string>());
  constexpr const char* kExpected = "a comma-separated str or a list of str";
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) {
    bad(name, value, kExpected);
  }
  std::vector<std::string> names;
  for (py::handle item : value) {
    if (!py::isinstance<py::str>(item)) bad(name, value, kExpected);
    names.push_back(item.cast<std::string>());
  }
  return names;
}

}  // namespace vtpu::python
