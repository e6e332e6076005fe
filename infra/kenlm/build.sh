#!/usr/bin/env bash
# Builds KenLM's `lmplz` (ARPA estimation) and `build_binary` (ARPA -> binary) executables.
#
#   infra/kenlm/build.sh [OUT_DIR]        (default .tools/kenlm; PIP defaults to .venv/bin/pip)
#
# The PyPI wheel of kenlm only ships the Python query module; training a model needs the two
# C++ tools, so they are compiled from the kenlm sdist, which carries the full C++ sources.
# Taking the sdist from PyPI (same version as the venv's kenlm) keeps the binary format of the
# models we write and the reader that loads them in step. Needs cmake, g++ and the Debian
# packages named in BOOST_HINT below.
set -euo pipefail

KENLM_VERSION=0.3.0
OUT_DIR=${1:-.tools/kenlm}
PIP=${PIP:-.venv/bin/pip}
# Two jobs: the build machines have two cores and the lm/ sources need ~1 GiB each to compile.
JOBS=${JOBS:-2}
BOOST_HINT="install the build dependencies with:
  apt-get install -y libboost-program-options-dev libboost-system-dev libboost-thread-dev \\
    libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev cmake g++"

# A tool "runs" when it can be executed and its shared libraries resolve: exit codes 126/127
# (cannot execute / not found, also what a missing .so gives) and signals (>128) mean it does
# not. Both print usage and exit non-zero on --help, so the code itself is not checked.
runs() {
  local rc=0
  [[ -x $1 ]] || return 1
  "$1" --help >/dev/null 2>&1 || rc=$?
  ((rc < 126))
}

# The stamp names the version that was built, so bumping KENLM_VERSION rebuilds.
STAMP="$OUT_DIR/VERSION"
if runs "$OUT_DIR/bin/lmplz" && runs "$OUT_DIR/bin/build_binary" \
  && [[ $(cat "$STAMP" 2>/dev/null) == "$KENLM_VERSION" ]]; then
  echo "kenlm: $OUT_DIR/bin/{lmplz,build_binary} $KENLM_VERSION already built"
  exit 0
fi

for tool in cmake g++ tar; do
  command -v "$tool" >/dev/null || { echo "kenlm: '$tool' not found; $BOOST_HINT" >&2; exit 1; }
done
[[ -x $PIP ]] || command -v "$PIP" >/dev/null || {
  echo "kenlm: pip not found at '$PIP' (set PIP=... or run 'make setup' first)" >&2
  exit 1
}

# Absolute before any cd; the temp dir goes away however the script ends.
mkdir -p "$OUT_DIR/bin"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kenlm-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

start=$(date +%s)
echo "kenlm: downloading the kenlm==$KENLM_VERSION sdist"
# --no-binary kenlm (not :all:) forces the source archive for kenlm only; --no-deps because
# only the C++ sources are wanted, not an installable Python package.
"$PIP" download --quiet --no-binary kenlm --no-deps --dest "$WORK" "kenlm==$KENLM_VERSION"
tar -xzf "$WORK/kenlm-$KENLM_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/kenlm-$KENLM_VERSION"

echo "kenlm: configuring"
# Python bindings and tests are off (the venv's wheel is the query side), and interpolate is
# off so an installed Eigen cannot change what gets built. Max order 6 covers the 5-grams.
if ! cmake -S "$SRC" -B "$WORK/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DKENLM_MAX_ORDER=6 \
  -DENABLE_PYTHON=OFF \
  -DCOMPILE_TESTS=OFF \
  -DENABLE_INTERPOLATE=OFF \
  -DFORCE_STATIC=OFF >"$WORK/cmake.log" 2>&1; then
  tail -n 30 "$WORK/cmake.log" >&2
  if grep -qi boost "$WORK/cmake.log"; then
    echo "kenlm: cmake could not find Boost; $BOOST_HINT" >&2
  else
    echo "kenlm: cmake configure failed (log above); $BOOST_HINT" >&2
  fi
  exit 1
fi

echo "kenlm: building lmplz and build_binary (-j$JOBS)"
if ! cmake --build "$WORK/build" --target lmplz build_binary -j "$JOBS" >"$WORK/build.log" 2>&1
then
  tail -n 40 "$WORK/build.log" >&2
  echo "kenlm: build failed (log above)" >&2
  exit 1
fi

# Copy to a temporary name and rename so an interrupted copy never looks like a finished tool.
for tool in lmplz build_binary; do
  cp "$WORK/build/bin/$tool" "$OUT_DIR/bin/.$tool.tmp"
  mv -f "$OUT_DIR/bin/.$tool.tmp" "$OUT_DIR/bin/$tool"
  runs "$OUT_DIR/bin/$tool" || { echo "kenlm: built $tool does not run" >&2; exit 1; }
done
echo "$KENLM_VERSION" >"$STAMP"
echo "kenlm: built $OUT_DIR/bin/{lmplz,build_binary} in $(($(date +%s) - start)) s"
