/* The unit tests' deterministic random numbers (xorshift64; each test binary has its own state). */
#ifndef SEER_TEST_RAND_H
#define SEER_TEST_RAND_H

#include <stdint.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline double urand(void) { /* [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static inline float nrand(void) { /* roughly N(0, 1) */
    return (float)((urand() + urand() + urand() + urand() - 2.0) * 1.7320508);
}

#endif
