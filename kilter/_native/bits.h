/* The one place popcount and ctz come from, so every .pyx counts bits the same way. */
#ifndef KILTER_BITS_H
#define KILTER_BITS_H
#include <stdint.h>

static inline int kilter_popcount(uint64_t x) { return __builtin_popcountll(x); }
static inline int kilter_ctz(uint64_t x) { return x ? __builtin_ctzll(x) : 64; }
static inline void kilter_prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

/* Nonzero when some byte of x is '"', '\\' or below 0x20 (a JSON string must stop there). */
static inline uint64_t kilter_json_special(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t q = x ^ (ones * 0x22), b = x ^ (ones * 0x5C);
    uint64_t zq = (q - ones) & ~q, zb = (b - ones) & ~b, lt = (x - ones * 0x20) & ~x;
    return (zq | zb | lt) & highs;
}

#endif
