// <immintrin.h> for the AVX-512 translation units. GCC 12 flags the self-initialized
// placeholders inside its own AVX-512 intrinsics (_mm512_undefined_*) as uninitialized at every
// inlined use; the warning is about the header, so it is silenced here and nowhere else.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
