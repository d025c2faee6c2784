#include "examples/stress_html_output.h"

#include <fstream>

#include "common/error.h"
#include "examples/stress_html.h"

namespace vtpu::examples {

void write_stress_html(const nlohmann::json& report, const std::string& path) {
  const std::string html = render_stress_html(report);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw NotFoundError("cannot open --html '" + path + "' for writing");
  out << html;
  if (!out.flush()) throw NotFoundError("cannot write --html '" + path + "'");
}

}  // namespace vtpu::examples
