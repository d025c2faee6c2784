// vtpu's error codes as Python exceptions. Each class derives from vtpu.Error and from the builtin
// a Python user would catch (InvalidArgument is a ValueError, ResourceExhausted a MemoryError,
// DeadlineExceeded a TimeoutError, ...); the instance keeps vtpu's message and its code.
#include <array>
#include <utility>

#include "py_common.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu::python {
namespace {

struct ErrorClass {
  ErrorCode code;
  const char* name;
  const char* builtin;  // the builtins class it also derives from
  const char* doc;
};

constexpr std::array<ErrorClass, 9> kErrorClasses = {{
    {ErrorCode::kInvalidArgument, "InvalidArgumentError", "ValueError",
     "A bad argument: shape, dtype, spec, axis name, option or file content (a ValueError)."},
    {ErrorCode::kResourceExhausted, "ResourceExhaustedError", "MemoryError",
     "Out of HBM or another bounded resource (a MemoryError). An allocation failure carries the "
     "out-of-memory report as .report (a dict) and each of its fields as an attribute."},
    {ErrorCode::kDeadlineExceeded, "DeadlineExceededError", "TimeoutError",
     "A wait ran past its timeout, e.g. a collective past collective_timeout_ms (a TimeoutError)."},
    {ErrorCode::kAborted, "AbortedError", "RuntimeError",
     "Another core failed, so this operation was abandoned."},
    {ErrorCode::kFailedPrecondition, "FailedPreconditionError", "RuntimeError",
     "The call does not make sense in the current state (a deleted array, a nested shard_map)."},
    {ErrorCode::kUnimplemented, "UnimplementedError", "NotImplementedError",
     "vtpu does not support the operation (a NotImplementedError)."},
    {ErrorCode::kInternal, "InternalError", "RuntimeError", "An invariant broke: a bug in vtpu."},
    {ErrorCode::kNotFound, "NotFoundError", "FileNotFoundError",
     "A named file or entity does not exist (a FileNotFoundError)."},
    {ErrorCode::kPermissionDenied, "PermissionDeniedError", "PermissionError",
     "A file exists but may not be read or written (a PermissionError)."},
}};

// The classes, made once at import and kept for the life of the process (module state).
py::object& error_classes() {
  static auto* classes = new py::object[kErrorClasses.size()];
  return *classes;
}
py::object& error_class(ErrorCode code) {
  for (size_t i = 0; i < kErrorClasses.size(); ++i) {
    if (kErrorClasses[i].code == code) return (&error_classes())[i];
  }
  return (&error_classes())[static_cast<size_t>(ErrorCode::kInternal)];
}

void raise(const Error& e) {
  py::object cls = error_class(e.code());
  py::object exc = cls(e.message());
  exc.attr("code") = std::string(error_code_name(e.code()));
  exc.attr("message") = e.message();
  if (const auto* oom = dynamic_cast<const OutOfMemoryError*>(&e)) {
    nlohmann::json report = oom->report();
    py::dict fields = to_python(report);
    exc.attr("report") = fields;
    for (auto item : fields) {
      exc.attr(item.first) = item.second;
    }
  }
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

void register_errors(py::module_& m) {
  py::object builtins = py::module_::import("builtins");
  auto base = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("vtpu.Error",
                                "Base of every vtpu error; `code` is its canonical code "
                                "(\"InvalidArgument\", ...) and `message` vtpu's message.",
                                PyExc_Exception, nullptr));
  m.attr("Error") = base;
  for (size_t i = 0; i < kErrorClasses.size(); ++i) {
    const ErrorClass& c = kErrorClasses[i];
    py::tuple bases = py::make_tuple(base, builtins.attr(c.builtin));
    std::string qualified = std::string("vtpu.") + c.name;
    auto cls = py::reinterpret_steal<py::object>(
        PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr));
    if (!cls) throw py::error_already_set();
    m.attr(c.name) = cls;
    (&error_classes())[i] = cls;
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e);
    }
  });
}

}  // namespace vtpu::python
