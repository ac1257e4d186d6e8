/* Choosing the next token: greedy, or the transformers sampling pipeline (repetition penalty,
 * temperature, top-k, top-p, min-p) with a seeded xoroshiro128+ generator. One sequence's
 * sampling runs on one thread (a batch's sequences side by side, each with its own generator:
 * lua_model.c's step_batch), so a seed gives the same tokens whatever the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define SEER_X86 1
#endif

#include "model.h"
#include "model_private.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void seer_rng_seed(seer_rng_t *r, uint64_t seed) {
    r->s[0] = splitmix64(&seed);
    r->s[1] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double seer_rng_uniform(seer_rng_t *r) {
    uint64_t s0 = r->s[0], s1 = r->s[1], out = s0 + s1;
    s1 ^= s0;
    r->s[0] = rotl(s0, 24) ^ s1 ^ (s1 << 16);
    r->s[1] = rotl(s1, 37);
    return (double)(out >> 11) * 0x1.0p-53;
}

typedef struct {
    float logit;
    int id;
} cand_t;

/* The first index of the largest logit (x > best, as a scalar loop: -0 and +0 tie), or
 * SEER_SAMPLE_NONFINITE when a logit is NaN or +infinity or every one is -infinity. */
static int argmax_generic(const float *logits, int vocab) {
    int best = 0;
    for (int i = 0; i < vocab; i++) {
        float x = logits[i];
        if (isnan(x) || x == INFINITY) return SEER_SAMPLE_NONFINITE;
        if (x > logits[best]) best = i;
    }
    return logits[best] == -INFINITY ? SEER_SAMPLE_NONFINITE : best;
}

#ifdef SEER_X86
/* The same answer in two vector passes (the largest value and whether any is NaN or +inf, then
 * its first index): greedy decoding scans the whole vocabulary per sequence and step, and the
 * scalar loop (a compare against a reloaded logits[best] each step) took 115 us for 32000 logits,
 * now 3.5-6 us (a 20,000-scan loop over seer_sample on this VM): 1.8 ms of a batch-16 decode step
 * of the 0.5B bench model (about 56 ms) before. The maximum of floats is exact, so the index is
 * the scalar loop's (tests/unit/test_model.c, sample::greedy_scan_matches_the_scalar_rule). */
__attribute__((target("avx2"))) static int argmax_avx2(const float *logits, int vocab) {
    __m256 mx = _mm256_set1_ps(-INFINITY), inf = _mm256_set1_ps(INFINITY), bad = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= vocab; i += 8) {
        __m256 v = _mm256_loadu_ps(logits + i);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(v, inf, _CMP_EQ_OQ)));
        mx = _mm256_max_ps(mx, v);
    }
    if (_mm256_movemask_ps(bad)) return SEER_SAMPLE_NONFINITE;
    float m8[8], m = -INFINITY;
    _mm256_storeu_ps(m8, mx);
    for (int k = 0; k < 8; k++)
        if (m8[k] > m) m = m8[k];
    for (int k = i; k < vocab; k++) {
        float x = logits[k];
        if (isnan(x) || x == INFINITY) return SEER_SAMPLE_NONFINITE;
        if (x > m) m = x;
    }
    if (m == -INFINITY) return SEER_SAMPLE_NONFINITE;
    __m256 mv = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= vocab; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i), mv, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < vocab; i++)
        if (logits[i] == m) return i;
    return SEER_SAMPLE_NONFINITE; /* not reached: m is one of the logits */
}
#endif

static int argmax_finite(const float *logits, int vocab) {
#ifdef SEER_X86
    if (seer_k_have_avx2()) return argmax_avx2(logits, vocab);
#endif
    return argmax_generic(logits, vocab);
}

/* The candidates in order: logit descending, -0 equal to +0 (as == compares them), ties by id
 * ascending. A stable LSD radix sort of 64-bit items (the logit's order key above the id, ids
 * ascending to start with) on the key's 32 bits in SEER_SAMPLE_DIGIT-bit passes gives the order
 * of the comparator sort (qsort) it replaced, element for element, so every probability, sum
 * and pick is the bits it was (tests/unit/test_model.c holds that sampler). A sample (this sort, the exponentials, the
 * filters) takes 0.8-1.0 ms for 32,000 logits and 4.2-5.8 ms for 152,064 on the Zen 3 VM; with
 * qsort and a comparator call per comparison it took 4.8 and 28.4 ms, per sequence and step of
 * every sampled generation (20% of a batch of 20 sampled sequences' time on the 0.5B bench
 * model). 8-bit digits (four passes) measured the same. c gets the sorted candidates; items has
 * room for 2 * n. NaN cannot occur (argmax_finite rejected it). */
#ifndef SEER_SAMPLE_DIGIT
#define SEER_SAMPLE_DIGIT 11
#endif
static uint32_t desc_key(float x) {
    uint32_t u;
    if (x == 0.0f) x = 0.0f; /* -0 sorts with +0, as == compares them */
    memcpy(&u, &x, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending as the floats */
    return ~u;                                        /* descending */
}
static void sort_desc(const float *logits, cand_t *c, uint64_t *items, int n) {
    enum { BITS = SEER_SAMPLE_DIGIT, BUCKETS = 1 << BITS, PASSES = (32 + BITS - 1) / BITS };
    uint32_t hist[PASSES][BUCKETS];
    memset(hist, 0, sizeof hist);
    uint64_t *src = items, *dst = items + n;
    for (int i = 0; i < n; i++) {
        uint32_t k = desc_key(logits[i]);
        src[i] = (uint64_t)k << 32 | (uint32_t)i;
        for (int p = 0; p < PASSES; p++) hist[p][(k >> (p * BITS)) & (BUCKETS - 1)]++;
    }
    for (int p = 0; p < PASSES; p++) {
        uint32_t *h = hist[p];
        int shift = 32 + p * BITS;
        if (h[(src[0] >> shift) & (BUCKETS - 1)] == (uint32_t)n) continue; /* one digit everywhere */
        uint32_t at = 0;
        for (int b = 0; b < BUCKETS; b++) {
            uint32_t cnt = h[b];
            h[b] = at;
            at += cnt;
        }
        for (int i = 0; i < n; i++) dst[h[(src[i] >> shift) & (BUCKETS - 1)]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    for (int i = 0; i < n; i++) {
        int id = (int)(uint32_t)src[i];
        c[i] = (cand_t){logits[id], id};
    }
}

int seer_sample(float *logits, int vocab, const int32_t *history, int n_history, const seer_sampler_opts_t *o,
                seer_rng_t *rng) {
    if (o->repetition_penalty > 0 && o->repetition_penalty != 1.0f) {
        for (int i = 0; i < n_history; i++) {
            int id = history[i];
            if (id < 0 || id >= vocab) continue;
            /* Applied once per distinct token, as transformers gathers then scatters. */
            int seen = 0;
            for (int j = 0; j < i && !seen; j++) seen = history[j] == id;
            if (seen) continue;
            logits[id] = logits[id] < 0 ? logits[id] * o->repetition_penalty : logits[id] / o->repetition_penalty;
        }
    }
    /* Logits that are NaN or +infinity (activations that overflowed, a hook that wrote NaN) or
     * all -infinity choose no token: greedy would take id 0 (NaN compares false), sampling the
     * last candidate. The caller reports it (SEER_SAMPLE_NONFINITE). */
    int best = argmax_finite(logits, vocab);
    if (best < 0) return best;
    if (o->temperature <= 0.0f) return best;
    cand_t *c = malloc((size_t)vocab * sizeof *c);
    uint64_t *items = malloc((size_t)vocab * sizeof *items * 2);
    if (!c || !items) {
        free(c);
        free(items);
        return -1;
    }
    /* Sorted by logit (a positive temperature keeps the order); the probabilities are
     * exp((logit - max) / temperature) in double, so a tiny temperature tends to greedy instead
     * of overflowing logit / temperature to infinity (which made every probability NaN and
     * picked the least likely token). */
    sort_desc(logits, c, items, vocab);
    free(items);
    int n = vocab;
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    double mx = c[0].logit, t = o->temperature, sum = 0;
    double *p = malloc((size_t)n * sizeof *p);
    if (!p) {
        free(c);
        return -1;
    }
    for (int i = 0; i < n; i++) sum += (p[i] = exp(((double)c[i].logit - mx) / t));
    for (int i = 0; i < n; i++) p[i] /= sum;
    /* top_p = 0 keeps the most likely token alone, as transformers' TopPLogitsWarper does (it
     * keeps min_tokens_to_keep = 1); it used to mean "off" here */
    if (o->top_p >= 0 && o->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += p[i];
            if (cum >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (o->min_p > 0) {
        double thr = o->min_p * p[0];
        int keep = 1;
        while (keep < n && p[keep] >= thr) keep++;
        n = keep;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += p[i];
    double u = seer_rng_uniform(rng) * total, acc = 0;
    int pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += p[i];
        if (u < acc) {
            pick = c[i].id;
            break;
        }
    }
    free(p);
    free(c);
    return pick;
}
