#!/usr/bin/env bash
# Render an HTML page (e.g. the `vtpu stress --html` report) to a PNG with headless Chromium.
#
# Usage: scripts/screenshot-html.sh IN.html OUT.png [WIDTHxHEIGHT]
#   WIDTHxHEIGHT  the viewport, which is also the PNG size (device scale factor 1);
#                 default 1360x2600. Only the viewport is captured: pick a height that holds
#                 the part of the page you want.
#
# Needs Debian's `chromium` (apt-get install chromium, or scripts/install-deps.sh --chromium).
# Runs with a fresh --user-data-dir that is removed afterwards, --no-sandbox when root, and no
# network use beyond what the page asks for (the stress report asks for none). The page's
# scripts get up to 10 s of virtual time to draw before the capture.
# Environment: CHROMIUM=path overrides the binary.
set -euo pipefail

usage() { sed -n '2,8s/^# \{0,1\}//p' "$0"; }
if (($# < 2 || $# > 3)); then
  usage >&2
  exit 2
fi
in=$1
out=$2
size=${3:-1360x2600}
if [[ ! $size =~ ^([0-9]+)x([0-9]+)$ ]] || ((BASH_REMATCH[1] < 16 || BASH_REMATCH[2] < 16)); then
  echo "screenshot-html: size '$size' is not WIDTHxHEIGHT (e.g. 1360x2600, each >= 16)" >&2
  exit 2
fi
width=${BASH_REMATCH[1]}
height=${BASH_REMATCH[2]}
if [[ ! -f $in ]]; then
  echo "screenshot-html: input '$in' is not a file" >&2
  exit 1
fi

chromium=${CHROMIUM:-}
if [[ -z $chromium ]]; then
  for c in chromium chromium-browser; do
    if command -v "$c" >/dev/null 2>&1; then
      chromium=$(command -v "$c")
      break
    fi
  done
fi
if [[ -z $chromium ]] || ! command -v -- "$chromium" >/dev/null 2>&1; then
  echo "screenshot-html: chromium not found${chromium:+ at '$chromium'}; install it with: apt-get install chromium" >&2
  echo "  (or scripts/install-deps.sh --chromium)" >&2
  exit 127
fi

in_abs=$(cd "$(dirname -- "$in")" && pwd)/$(basename -- "$in")
out_dir=$(dirname -- "$out")
mkdir -p -- "$out_dir"
out_abs=$(cd "$out_dir" && pwd)/$(basename -- "$out")

profile=$(mktemp -d "${TMPDIR:-/tmp}/screenshot-html.XXXXXX")
trap 'rm -rf -- "$profile"' EXIT
flags=(--headless --disable-gpu --hide-scrollbars --force-device-scale-factor=1
       --no-first-run --no-default-browser-check --disable-extensions --mute-audio
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$profile" --window-size="$width,$height"
       --virtual-time-budget=10000 --screenshot="$out_abs")
if ((EUID == 0)); then flags+=(--no-sandbox); fi

rm -f -- "$out_abs"
log="$profile/chromium.log"
if ! timeout 120 "$chromium" "${flags[@]}" "file://$in_abs" >"$log" 2>&1; then
  echo "screenshot-html: chromium failed on $in; its output:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
if [[ ! -s $out_abs ]]; then
  echo "screenshot-html: chromium wrote no screenshot to $out; its output:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
echo "$out_abs (${width}x${height})"
