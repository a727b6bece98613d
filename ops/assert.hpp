#pragma once

#include <cstdio>
#include <cstdlib>

/// Programmer bugs (broken invariants) abort with the location; expected failures use af::error.
#define AF_ASSERT(cond)                                                                  \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: actorflow assertion failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)
