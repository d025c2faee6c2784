// The static parts of the `vtpu stress --html` page (stress/stress_html.h): stylesheet, body
// skeleton and script. Data never goes here: render_stress_html() embeds it separately as JSON.
#pragma once

namespace vtpu {

extern const char kStressHtmlCss[];   // inside <style>
extern const char kStressHtmlBody[];  // the body's static elements, before the data
extern const char kStressHtmlJs[];    // inside the last <script>; reads #vtpu-stress-data

}  // namespace vtpu
