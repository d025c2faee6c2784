#include "examples/stress_html_output.h"

#include <fstream>

#include "common/error.h"

// TODO(merge): replace this fallback with a plain #include "examples/stress_html.h" and the call
// to render_stress_html() below once the renderer's branch is merged.
#if __has_include("examples/stress_html.h")
#include "examples/stress_html.h"
#define VTPU_HAVE_STRESS_HTML 1
#else
#define VTPU_HAVE_STRESS_HTML 0
#endif

namespace vtpu::examples {

bool stress_html_available() { return VTPU_HAVE_STRESS_HTML != 0; }

void write_stress_html(const nlohmann::json& report, const std::string& path) {
#if VTPU_HAVE_STRESS_HTML
  const std::string html = render_stress_html(report);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw NotFoundError("cannot open '" + path + "' for writing the HTML report");
  out << html;
  if (!out.flush()) throw NotFoundError("cannot write the HTML report to '" + path + "'");
#else
  (void)report;
  throw UnimplementedError("--html '" + path +
                           "': this build has no HTML renderer (render_stress_html from "
                           "examples/stress_html.h is not built in); use --json FILE instead");
#endif
}

}  // namespace vtpu::examples
