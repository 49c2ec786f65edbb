# Compiler cache for scripts/test.sh and scripts/proofs.sh (sourced, not run). With ccache
# (scripts/setup.sh installs it) every configure gets it as its compiler launcher, keyed on paths
# relative to the checkout, so a fresh clone elsewhere on the same machine (as CI's is) reuses
# what an earlier build compiled; a cold cache only costs the compiles it would do anyway.
#
#   KEEL_CMAKE_CACHE_ARGS   the cmake arguments (empty without ccache)
#   CCACHE_DIR              default $KEEL_CACHE_DIR/ccache (~/.cache/keel/ccache)
#   KEEL_NO_CCACHE=1        build without it
KEEL_CMAKE_CACHE_ARGS=()
if [ "${KEEL_NO_CCACHE:-0}" != 1 ] && command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-${KEEL_CACHE_DIR:-$HOME/.cache/keel}/ccache}"
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  KEEL_CMAKE_CACHE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

# One line for the end of a run: how many compiles the cache answered.
compiler_cache_summary() {
  [ ${#KEEL_CMAKE_CACHE_ARGS[@]} -gt 0 ] || { echo "compiler cache: off"; return; }
  ccache --print-stats 2>/dev/null | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hits += $2 }
    $1 == "cache_miss" { misses = $2 }
    END { printf "compiler cache (%s): %d hits, %d misses since its statistics were zeroed\n", ENVIRON["CCACHE_DIR"], hits, misses }'
}
