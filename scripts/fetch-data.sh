#!/usr/bin/env bash
# Put the UCI handwritten digits dataset (the copy scikit-learn ships) at
# <repo>/data/digits.csv.gz. It is taken from Debian's python3-sklearn .deb
# with `apt-get download` + `dpkg-deb -x`, so nothing is installed.
# Idempotent: a present and valid file is left alone. Prints the path.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$repo/data/digits.csv.gz"
member="usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"

# validate FILE: 1797 lines, each 64 pixels in 0..16 then a label in 0..9.
validate() {
  gzip -cd -- "$1" 2>/dev/null | awk -F, '
    NF != 65 { bad = "line " NR ": " NF " fields, expected 65"; exit }
    {
      for (i = 1; i <= 65; i++) {
        v = $i; sub(/\r$/, "", v); sub(/\.0*$/, "", v)
        max = (i <= 64) ? 16 : 9
        if (v !~ /^[0-9]+$/ || v + 0 > max) {
          bad = "line " NR " field " i ": \"" $i "\" not an integer in 0.." max; exit
        }
      }
    }
    END {
      if (bad == "" && NR != 1797) bad = NR " lines, expected 1797"
      if (bad != "") { print bad > "/dev/stderr"; exit 1 }
    }'
  # PIPESTATUS: catch a corrupt gzip stream even if awk was happy.
  local st=("${PIPESTATUS[@]}")
  [[ ${st[0]} -eq 0 && ${st[1]} -eq 0 ]]
}

if [[ -f "$dest" ]] && validate "$dest" 2>/dev/null; then
  echo "$dest"
  exit 0
fi
[[ -e "$dest" ]] && echo "fetch-data: $dest is invalid, re-fetching" >&2

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch-data: $tool not found (Debian/Ubuntu only)" >&2; exit 1; }
done

part=""
tmp=$(mktemp -d /tmp/vtpu-fetch-data.XXXXXX)
trap 'rm -rf -- "$tmp"; [[ -z "$part" ]] || rm -f -- "$part"' EXIT
# apt-get download runs as the unprivileged _apt user when invoked as root;
# make the directory writable for it to avoid the sandbox warning.
chmod 0777 "$tmp"

download() { (cd "$tmp" && apt-get download -qq python3-sklearn) >"$tmp/apt.log" 2>&1; }
if ! download; then
  echo "fetch-data: apt-get download failed; running apt-get update and retrying" >&2
  if ((EUID == 0)); then apt-get update -qq
  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq
  else echo "fetch-data: not root and no sudo; cannot run apt-get update" >&2; fi
  if ! download; then
    cat "$tmp/apt.log" >&2
    echo "fetch-data: could not download python3-sklearn" >&2
    exit 1
  fi
fi

debs=("$tmp"/python3-sklearn_*.deb)
[[ -f "${debs[0]}" ]] || { echo "fetch-data: no python3-sklearn .deb after download" >&2; exit 1; }
mkdir "$tmp/x"
dpkg-deb -x "${debs[0]}" "$tmp/x"
src="$tmp/x/$member"
[[ -f "$src" ]] || { echo "fetch-data: $member not found in ${debs[0]##*/}" >&2; exit 1; }
if ! validate "$src"; then
  echo "fetch-data: $member from ${debs[0]##*/} failed validation" >&2
  exit 1
fi

mkdir -p "$repo/data"
part=$(mktemp "$repo/data/.digits.csv.gz.XXXXXX")
cp -- "$src" "$part"
chmod 0644 "$part"
mv -f -- "$part" "$dest"
part=""
echo "$dest"
