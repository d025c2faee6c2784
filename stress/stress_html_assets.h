// The static parts of the `vtpu stress --html` page (stress/stress_html.h): stylesheet, body
// skeleton and script, written as real files in stress/assets/ and embedded at build time. Data
// never goes here: render_stress_html() embeds it separately as JSON. The design is in
// docs/STRESS.md. The script inserts data only through textContent / setAttribute of numbers,
// never through innerHTML, so labels cannot inject markup.
#pragma once

namespace vtpu {

extern const char kStressHtmlCss[];   // stress/assets/report.css, inside <style>
extern const char kStressHtmlBody[];  // stress/assets/report_body.html, before the data
extern const char kStressHtmlJs[];    // stress/assets/report.js; reads #vtpu-stress-data

}  // namespace vtpu
