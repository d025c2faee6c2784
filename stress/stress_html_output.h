// Writing the HTML page of a `vtpu stress` report (`vtpu stress --html FILE`); the page itself is
// rendered by render_stress_html() (stress/stress_html.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace vtpu {

/// Writes render_stress_html(report) to `path`. Throws InvalidArgumentError when `report` is not
/// a valid stress document (see docs/STRESS.md), InvalidArgumentError naming --html and the
/// system's reason when `path` cannot be written (write_output_file). Thread-safe.
void write_stress_html(const nlohmann::json& report, const std::string& path);

}  // namespace vtpu
