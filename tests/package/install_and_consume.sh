#!/usr/bin/env bash
# install_and_consume.sh BUILD_DIR SOURCE_DIR CXX [PYTHON PYTHON_DIR]: installs BUILD_DIR into a
# temporary prefix, builds examples/quickstart.cc as an outside project against it and runs it,
# then runs the installed vtpu from a directory that holds no vtpu files and, given PYTHON, imports
# the installed Python package from <prefix>/PYTHON_DIR. Exit 0 when all of it holds.
set -euo pipefail
build=$1 source=$2 cxx=$3 python=${4:-} python_dir=${5:-}
tmp=$(mktemp -d /tmp/vtpu-package-test.XXXXXX)
trap 'rm -rf -- "$tmp"' EXIT
prefix=$tmp/prefix
unset VTPU_DATA_DIR

fail() { echo "package test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install failed"; }
[[ -f $prefix/include/vtpu/runtime/runtime.h ]] || fail "no include/vtpu/runtime/runtime.h under $prefix"
[[ -f $prefix/lib/cmake/vtpu/vtpuConfig.cmake ]] || fail "no lib/cmake/vtpu/vtpuConfig.cmake under $prefix"
if grep -q -e '-march' -e '-Wall' -e '-Werror' -e 'fsanitize' "$prefix"/lib/cmake/vtpu/vtpuTargets*.cmake; then
  fail "vtpuTargets.cmake carries build-only flags: $(grep -h -o -e '-march[^;"]*' -e '-W[a-z]*' "$prefix"/lib/cmake/vtpu/vtpuTargets*.cmake | sort -u | tr '\n' ' ')"
fi

# A consumer project outside the tree, as the README shows it.
mkdir -p "$tmp/consumer"
cp "$source/examples/quickstart.cc" "$tmp/consumer/"
cat >"$tmp/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(consumer LANGUAGES CXX)
find_package(vtpu 0.1 REQUIRED)
add_executable(quickstart quickstart.cc)
target_link_libraries(quickstart PRIVATE vtpu::sharding)
CMAKE
# VTPU_CONSUMER_FLAGS: the sanitizer of a sanitizer build's libraries (tests/package/CMakeLists.txt).
consumer_flags=${VTPU_CONSUMER_FLAGS:-}
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_CXX_FLAGS="$consumer_flags" -DCMAKE_EXE_LINKER_FLAGS="$consumer_flags" \
  >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "the consumer does not configure"; }
cmake --build "$tmp/consumer/build" -j2 >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "the consumer does not build"; }
commands=$tmp/consumer/build/compile_commands.json
grep -q 'quickstart.cc' "$commands" || fail "no compile line for quickstart.cc in $commands"
if grep -q -e '-march=native' -e '-Wall' -e '-Wextra' "$commands"; then
  fail "the consumer's compile line carries vtpu's build flags: $(grep '"command"' "$commands")"
fi
grep -q -e "-isystem $prefix/include" -e "-I$prefix/include" "$commands" \
  || fail "the consumer's compile line does not name $prefix/include: $(grep '"command"' "$commands")"
out=$("$tmp/consumer/build/quickstart") || fail "quickstart exited $?"
[[ $out == *"y[0] = 4;"* ]] || fail "quickstart printed: $out"

# The installed vtpu, run from a directory with no vtpu files, finds the digits and the model files
# under <prefix>/share/vtpu.
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
json=$("$prefix/bin/vtpu" train mlp --steps 2 --cores 2 --json) || fail "installed vtpu train mlp exited $?"
data=$(grep -o '"data": *"[^"]*"' <<<"$json" | head -1 | sed 's/.*: *"//; s/"$//')
[[ $data == "$prefix/share/vtpu/digits.csv.gz" ]] \
  || fail "installed vtpu read '$data', expected $prefix/share/vtpu/digits.csv.gz"
"$prefix/bin/vtpu" plan examples/models/mlp.json --mesh 2x4 --json >/dev/null \
  || fail "installed vtpu plan examples/models/mlp.json exited $?"
if [[ -n $python ]]; then
  # VTPU_PYTHON_PRELOAD: a sanitizer build's runtime for the uninstrumented interpreter.
  found=$(LD_PRELOAD="${VTPU_PYTHON_PRELOAD:-}" PYTHONPATH="$prefix/$python_dir" "$python" -c '
import numpy as np, vtpu
rt = vtpu.Runtime(cores=2, hbm_bytes="8M")
mesh = vtpu.make_mesh((2,), ("x",), devices=rt.devices())
assert np.asarray(vtpu.device_put(np.arange(4.0), vtpu.NamedSharding(mesh, vtpu.P("x")))).tolist() == [0, 1, 2, 3]
print(vtpu.__file__, vtpu.data_file("digits.csv.gz"))') || fail "the installed Python package does not import"
  [[ $found == "$prefix/$python_dir/vtpu/__init__.py $prefix/share/vtpu/digits.csv.gz" ]] \
    || fail "installed python package: $found (expected it and its data under $prefix)"
fi
echo "package test: installed to $prefix, consumer built and ran, installed vtpu found its data"
