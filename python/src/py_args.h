// Keyword arguments of the memory, stress and planner bindings, checked as the command line checks
// its flags: a bad value is vtpu.InvalidArgumentError (a ValueError) naming the argument and the
// value, never a pybind11 TypeError about C++ types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "py_common.h"

namespace vtpu::python {

/// A byte count: an int >= 0, or a size with an optional K/M/G/T suffix ("64M", powers of 1024,
/// as parse_bytes reads it).
uint64_t bytes_arg(py::handle value, const char* name);
/// An int in [0, 2^64 - 1] (a seed).
uint64_t uint64_arg(py::handle value, const char* name);
/// An int in [lo, hi] (a bool is not one).
int64_t int_arg(py::handle value, const char* name, int64_t lo, int64_t hi);
/// A str (or os.PathLike for a path).
std::string str_arg(py::handle value, const char* name);
/// A bool, or the command line's words "on" / "off".
bool on_off_arg(py::handle value, const char* name);
/// Names: "a,b" (as the command line takes them) or a list or tuple of str.
std::vector<std::string> names_arg(py::handle value, const char* name);

}  // namespace vtpu::python
