#!/usr/bin/env bash
# Put the example datasets under <repo>/data, taken from Debian packages with
# `apt-get download` + `dpkg-deb -x`, so nothing is installed:
#   data/digits.csv.gz  the UCI handwritten digits (the copy python3-sklearn ships)
#   data/fortunes.txt   English text for the character-level transformer: every
#                       fortune file of the `fortunes` package (the text files of
#                       usr/share/games/fortunes/, not the .dat indexes nor the .u8
#                       symlinks), concatenated in C-locale name order, each '%'
#                       separator line replaced by an empty line.
# Idempotent: a present and valid file is left alone. Prints the paths, one a line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
digits="$repo/data/digits.csv.gz"
digits_member="usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
fortunes="$repo/data/fortunes.txt"
fortunes_dir="usr/share/games/fortunes"
# The package's text is about 2.5 MB; less than this means a broken download or layout.
fortunes_min_bytes=1000000
# Fraction of bytes < 128 (the text has a few UTF-8 quotes and overstrikes).
fortunes_min_ascii_permille=990

# validate_digits FILE: 1797 lines, each 64 pixels in 0..16 then a label in 0..9.
validate_digits() {
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

# validate_fortunes FILE: at least fortunes_min_bytes, at least 99.0% ASCII bytes, no '%' line.
validate_fortunes() {
  [[ -f "$1" ]] || { echo "$1: not a file" >&2; return 1; }
  local size ascii
  size=$(wc -c <"$1")
  if ((size < fortunes_min_bytes)); then
    echo "$1: $size bytes, expected >= $fortunes_min_bytes" >&2
    return 1
  fi
  ascii=$(LC_ALL=C tr -cd '\000-\177' <"$1" | wc -c)
  if ((ascii * 1000 < size * fortunes_min_ascii_permille)); then
    echo "$1: $ascii of $size bytes are ASCII, expected >= $fortunes_min_ascii_permille per mille" >&2
    return 1
  fi
  if LC_ALL=C grep -q '^%$' "$1"; then
    echo "$1: still holds '%' separator lines" >&2
    return 1
  fi
}

tmp=""
part=""
trap '[[ -z "$tmp" ]] || rm -rf -- "$tmp"; [[ -z "$part" ]] || rm -f -- "$part"' EXIT

# fetch_deb PACKAGE: downloads PACKAGE's .deb and extracts it to $tmp/PACKAGE.
fetch_deb() {
  local pkg=$1
  for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null 2>&1 || { echo "fetch-data: $tool not found (Debian/Ubuntu only)" >&2; exit 1; }
  done
  if [[ -z "$tmp" ]]; then
    tmp=$(mktemp -d /tmp/vtpu-fetch-data.XXXXXX)
    # apt-get download runs as the unprivileged _apt user when invoked as root;
    # make the directory writable for it to avoid the sandbox warning.
    chmod 0777 "$tmp"
  fi
  download() { (cd "$tmp" && apt-get download -qq "$pkg") >"$tmp/apt.log" 2>&1; }
  if ! download; then
    echo "fetch-data: apt-get download $pkg failed; running apt-get update and retrying" >&2
    if ((EUID == 0)); then apt-get update -qq
    elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq
    else echo "fetch-data: not root and no sudo; cannot run apt-get update" >&2; fi
    if ! download; then
      cat "$tmp/apt.log" >&2
      echo "fetch-data: could not download $pkg" >&2
      exit 1
    fi
  fi
  local debs=("$tmp/${pkg}"_*.deb)
  [[ -f "${debs[0]}" ]] || { echo "fetch-data: no $pkg .deb after download" >&2; exit 1; }
  mkdir "$tmp/$pkg"
  dpkg-deb -x "${debs[0]}" "$tmp/$pkg"
}

# install_file SRC DEST: atomic copy into data/.
install_file() {
  mkdir -p "$repo/data"
  part=$(mktemp "$repo/data/.${2##*/}.XXXXXX")
  cp -- "$1" "$part"
  chmod 0644 "$part"
  mv -f -- "$part" "$2"
  part=""
}

# ---- digits ----
if [[ -f "$digits" ]] && validate_digits "$digits" 2>/dev/null; then
  :
else
  [[ -e "$digits" ]] && echo "fetch-data: $digits is invalid, re-fetching" >&2
  fetch_deb python3-sklearn
  src="$tmp/python3-sklearn/$digits_member"
  [[ -f "$src" ]] || { echo "fetch-data: $digits_member not found in python3-sklearn" >&2; exit 1; }
  if ! validate_digits "$src"; then
    echo "fetch-data: $digits_member from python3-sklearn failed validation" >&2
    exit 1
  fi
  install_file "$src" "$digits"
fi
echo "$digits"

# ---- fortunes ----
if validate_fortunes "$fortunes" 2>/dev/null; then
  :
else
  [[ -e "$fortunes" ]] && echo "fetch-data: $fortunes is invalid, re-fetching" >&2
  fetch_deb fortunes
  dir="$tmp/fortunes/$fortunes_dir"
  [[ -d "$dir" ]] || { echo "fetch-data: $fortunes_dir not found in fortunes" >&2; exit 1; }
  # Regular files only (the .u8 names are symlinks), without the strfile .dat indexes.
  mapfile -t files < <(cd "$dir" && find . -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
    -printf '%f\n' | LC_ALL=C sort)
  ((${#files[@]} > 0)) || { echo "fetch-data: no fortune files in $fortunes_dir" >&2; exit 1; }
  for f in "${files[@]}"; do cat -- "$dir/$f"; done | LC_ALL=C sed 's/^%$//' >"$tmp/fortunes.txt"
  if ! validate_fortunes "$tmp/fortunes.txt"; then
    echo "fetch-data: the fortunes text failed validation" >&2
    exit 1
  fi
  install_file "$tmp/fortunes.txt" "$fortunes"
fi
echo "$fortunes"
