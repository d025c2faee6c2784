#include "examples/cli_validators.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "common/units.h"

namespace vtpu::examples {

CLI::Validator size_validator() {
  return CLI::Validator(
      [](std::string& s) {
        try {
          parse_bytes(s);
          return std::string();
        } catch (const Error& e) {
          return e.message();
        }
      },
      "SIZE");
}

CLI::Validator learning_rate_validator() {
  return CLI::Validator(
      [](std::string& s) {
        const double v = std::strtod(s.c_str(), nullptr);
        return v > 0.0 && std::isfinite(v) ? std::string()
                                           : "learning rate " + s + " must be a finite number > 0";
      },
      "> 0");
}

}  // namespace vtpu::examples
