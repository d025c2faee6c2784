#include "examples/stress_html_output.h"

#include "examples/output_path.h"
#include "examples/stress_html.h"

namespace vtpu::examples {

void write_stress_html(const nlohmann::json& report, const std::string& path) {
  write_output_file("--html", path, render_stress_html(report));
}

}  // namespace vtpu::examples
