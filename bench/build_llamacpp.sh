#!/usr/bin/env bash
# Builds llama.cpp's own tools natively: the benchmark tools bench/vs_llamacpp.py measures Keel
# against, its HTTP server (bench/serve_load.py), and its perplexity, completion and tokenize
# tools, the reference of the parity checks (docs/results.md, tests/reference/). The sources are
# the llama.cpp tree vendored in one pinned llama-cpp-python sdist from PyPI (the version and the
# sdist's sha256 are fixed below), built Release for this CPU (GGML_NATIVE, no GPU backends, no
# TLS or download code). Idempotent: a finished build is reused.
#
# usage: bench/build_llamacpp.sh            prints the directory holding the binaries
#   KEEL_CACHE_DIR   cache root (default ~/.cache/keel); the build goes to
#                    $KEEL_CACHE_DIR/llama.cpp-<version>/
#   JOBS             parallel compile jobs (default 2); compiles run under nice -n 10
set -euo pipefail

LCP_VERSION=0.3.36
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# The llama.cpp commit llama-cpp-python 0.3.36 vendors (its CHANGELOG: "update llama.cpp to
# ggml-org/llama.cpp@0c1e57098"); the sdist carries no git metadata, so it is passed to CMake.
LLAMACPP_COMMIT=0c1e57098
TARGETS=(llama-bench llama-quantize llama-batched-bench llama-server llama-perplexity llama-completion llama-tokenize)

die() { echo "build_llamacpp.sh: $*" >&2; exit 1; }

CACHE=${KEEL_CACHE_DIR:-$HOME/.cache/keel}
DEST=$CACHE/llama.cpp-$LCP_VERSION
BIN=$DEST/build/bin
STAMP=$DEST/build/.keel-built-$LCP_VERSION-$LLAMACPP_COMMIT
JOBS=${JOBS:-2}

built() {
    [[ -f $STAMP ]] || return 1
    local t
    for t in "${TARGETS[@]}"; do [[ -x $BIN/$t ]] || return 1; done
}

if built; then
    echo "$BIN"
    exit 0
fi

for tool in cmake python3 sha256sum tar; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is required to fetch the sdist"
mkdir -p "$DEST"

SDIST=$DEST/llama_cpp_python-$LCP_VERSION.tar.gz
if [[ ! -f $SDIST ]]; then
    echo "fetching llama-cpp-python $LCP_VERSION sdist from PyPI" >&2
    tmp=$(mktemp -d "$DEST/download.XXXXXX")
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$LCP_VERSION" -d "$tmp" >&2 \
        || die "pip download of llama-cpp-python==$LCP_VERSION failed"
    [[ -f $tmp/llama_cpp_python-$LCP_VERSION.tar.gz ]] || die "pip did not produce the expected sdist in $tmp"
    mv "$tmp/llama_cpp_python-$LCP_VERSION.tar.gz" "$SDIST"
    rm -rf "$tmp"
fi
echo "$LCP_SHA256  $SDIST" | sha256sum -c --status \
    || die "$SDIST does not have the pinned sha256 $LCP_SHA256 (delete it to download again)"

SRC=$DEST/src/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp
if [[ ! -f $SRC/CMakeLists.txt ]]; then
    rm -rf "$DEST/src"
    mkdir -p "$DEST/src"
    tar -xzf "$SDIST" -C "$DEST/src" || die "could not unpack $SDIST"
    [[ -f $SRC/CMakeLists.txt ]] || die "$SDIST has no vendor/llama.cpp/CMakeLists.txt"
fi

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
# A build configured before llama-server was a target is configured again with the server on.
if [[ ! -f $DEST/build/CMakeCache.txt ]] || ! grep -q "^LLAMA_BUILD_SERVER:BOOL=ON" "$DEST/build/CMakeCache.txt"; then
    cmake -S "$SRC" -B "$DEST/build" "${GEN[@]}" \
        -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_COMMIT="$LLAMACPP_COMMIT" >&2 \
        || { rm -f "$DEST/build/CMakeCache.txt"; die "CMake configure failed (see above)"; }
fi
nice -n 10 cmake --build "$DEST/build" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2 \
    || die "building ${TARGETS[*]} failed (see above)"
for t in "${TARGETS[@]}"; do [[ -x $BIN/$t ]] || die "$BIN/$t was not produced"; done
touch "$STAMP"
echo "$BIN"
