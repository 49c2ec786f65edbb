// FlatBuffers' internal assertions on freestanding builds. Its default is <cassert>, whose
// failure path (__assert_func) formats through stdio and calls abort. These assertions guard
// FlatBuffers' own invariants, not the model bytes (the verifier reports bad input as a failed
// verification), so a debug build traps where assert would abort and a release build drops
// them as assert does.
#pragma once

#ifdef NDEBUG
#define KEEL_FLATBUFFERS_ASSERT(cond) static_cast<void>(0)
#else
#define KEEL_FLATBUFFERS_ASSERT(cond) ((cond) ? static_cast<void>(0) : __builtin_trap())
#endif
