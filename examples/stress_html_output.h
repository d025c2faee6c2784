// Writing the HTML page of a `vtpu stress` report (`vtpu stress --html FILE`).
//
// The page itself is rendered by render_stress_html() in examples/stress_html.h, written on a
// separate branch. When that header is in the tree, write_stress_html() calls it; without it,
// the option fails with UnimplementedError before any work is done.
// TODO(merge): once examples/stress_html.{h,cc} are merged (and stress_html.cc is listed in
// examples/CMakeLists.txt), drop the __has_include fallback in stress_html_output.cc and call
// render_stress_html() directly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace vtpu::examples {

/// Whether this build can write the HTML page (render_stress_html is available).
bool stress_html_available();

/// Writes render_stress_html(report) to `path`. Throws UnimplementedError when the renderer is
/// not built in, NotFoundError when `path` cannot be written. Thread-safe.
void write_stress_html(const nlohmann::json& report, const std::string& path);

}  // namespace vtpu::examples
