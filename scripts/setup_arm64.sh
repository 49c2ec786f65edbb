#!/usr/bin/env bash
# What the aarch64 cross build and its emulated runs need (idempotent; scripts/setup.sh calls
# it): Debian's cross compiler, qemu-user (tests under qemu-aarch64) and qemu-system-aarch64
# (the bare-metal port), and the target's libraries. Those whose arm64 and amd64 packages are
# co-installable (Multi-Arch: same) come from apt with the arm64 architecture added;
# pthreadpool and XNNPACK are not (installing their arm64 -dev package removes the host's), so
# their arm64 packages are unpacked into a sysroot in the cache instead, which
# cmake/aarch64-linux-gnu.cmake searches.
set -euo pipefail

KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-$HOME/.cache/keel}"
SYSROOT="${KEEL_ARM64_SYSROOT:-$KEEL_CACHE_DIR/arm64-sysroot}"
HOST_PACKAGES=(g++-aarch64-linux-gnu qemu-user qemu-system-arm)
ARM64_PACKAGES=(libc6:arm64 libstdc++6:arm64 libgtest-dev:arm64 libmimalloc-dev:arm64 libcpp-httplib-dev:arm64 libssl-dev:arm64
                libcpuinfo0:arm64)
UNPACKED=(libpthreadpool-dev libpthreadpool0 libxnnpack-dev libxnnpack0)

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "setup-arm64: adding the arm64 architecture to dpkg"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi
missing=()
for p in "${HOST_PACKAGES[@]}" "${ARM64_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-arm64: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp="$SYSROOT/.unpacked"
if [ "$(cat "$stamp" 2>/dev/null)" != "${UNPACKED[*]}" ]; then
  echo "setup-arm64: unpacking ${UNPACKED[*]} (arm64) into $SYSROOT"
  rm -rf "$SYSROOT"
  mkdir -p "$SYSROOT/debs"
  (cd "$SYSROOT/debs" && apt-get download -qq "${UNPACKED[@]/%/:arm64}" 2>/dev/null)
  for d in "$SYSROOT"/debs/*.deb; do dpkg -x "$d" "$SYSROOT"; done
  rm -rf "$SYSROOT/debs"
  echo "${UNPACKED[*]}" >"$stamp"
fi
for f in usr/include/pthreadpool.h usr/include/xnnpack.h usr/lib/aarch64-linux-gnu/libXNNPACK.so \
  usr/lib/aarch64-linux-gnu/libpthreadpool.so; do
  [ -e "$SYSROOT/$f" ] || { echo "setup-arm64: $SYSROOT/$f is missing after unpacking" >&2; exit 1; }
done
