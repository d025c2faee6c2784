#include "examples/cli_validators.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "common/units.h"

namespace vtpu::examples {

CLI::Validator parse_validator(std::function<void(const std::string&)> parse, std::string name) {
  return CLI::Validator(
      [parse = std::move(parse)](std::string& s) {
        try {
          parse(s);
          return std::string();
        } catch (const Error& e) {
          return e.message();
        }
      },
      std::move(name));
}

CLI::Validator size_validator() {
  return parse_validator([](const std::string& s) { parse_bytes(s); }, "SIZE");
}

CLI::Validator dimension_validator() {
  return CLI::Validator(
      [](std::string& s) {
        constexpr unsigned long long kMax = 1ULL << 62;
        const bool digits =
            !s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos;
        if (digits && std::strtoull(s.c_str(), nullptr, 10) <= kMax) return std::string();
        return "dimension '" + s + "' is not an integer in 0..2^62";
      },
      "INT>=0");
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
