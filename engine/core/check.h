// KEEL_ENSURE on load/plan paths: returns an Error naming what was expected and what was
// found. KEEL_DCHECK inside hot loops: debug builds only, never on caller-provided input.
#pragma once

#include "core/status.h"

#define KEEL_ENSURE(cond, status, ...)                        \
  do {                                                        \
    if (!(cond)) return ::keel::Error((status), __VA_ARGS__); \
  } while (0)

#define KEEL_TRY(expr)                             \
  do {                                             \
    ::keel::Error keel_try_err_ = (expr);          \
    if (!keel_try_err_.ok()) return keel_try_err_; \
  } while (0)

#ifndef NDEBUG
#define KEEL_DCHECK(cond)          \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)
#else
#define KEEL_DCHECK(cond) \
  do {                    \
  } while (0)
#endif
