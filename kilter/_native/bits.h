/* The one place popcount and ctz come from, so every .pyx counts bits the same way. */
#ifndef KILTER_BITS_H
#define KILTER_BITS_H
#include <stdint.h>

static inline int kilter_popcount(uint64_t x) { return __builtin_popcountll(x); }
static inline int kilter_ctz(uint64_t x) { return x ? __builtin_ctzll(x) : 64; }

#endif
