#include "vtpu/stress/stress_html_output.h"

#include "vtpu/common/output_path.h"
#include "vtpu/stress/stress_html.h"

namespace vtpu {

void write_stress_html(const nlohmann::json& report, const std::string& path) {
  write_output_file("--html", path, render_stress_html(report));
}

}  // namespace vtpu
