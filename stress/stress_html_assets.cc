// The page's static parts, embedded at build time from stress/assets/ (stress/CMakeLists.txt).
#include "vtpu/stress/stress_html_assets.h"

namespace vtpu {

#include "stress/report_assets.inc"

}  // namespace vtpu
