/*
 * shaper_fault.h - deterministic per-request fault choice.
 *
 * The generator is xoshiro256** seeded through splitmix64 from --seed. Every request
 * (except GET /__shaper/stats) draws exactly three numbers, whatever the probabilities, so
 * the k-th request's plan depends only on the seed, k and the probabilities.
 */
#ifndef PAGEFS_SHAPER_FAULT_H
#define PAGEFS_SHAPER_FAULT_H

#include <stdbool.h>
#include <stdint.h>

struct shaper_conf;

struct shaper_rng {
    uint64_t s[4];
};

enum shaper_local { SHAPER_LOCAL_NONE, SHAPER_LOCAL_503, SHAPER_LOCAL_SLOWDOWN };
enum shaper_cut { SHAPER_CUT_NONE, SHAPER_CUT_RESET, SHAPER_CUT_TRUNCATE };

struct shaper_fault_plan {
    enum shaper_local local; /* answered by the shaper, not forwarded */
    enum shaper_cut cut;     /* forwarded response cut after half its body */
    bool stall;              /* forwarded response held --stall-ms before its first byte */
};

void shaper_rng_seed(struct shaper_rng *rng, uint64_t seed);

/* A uniform double in [0, 1). */
double shaper_rng_uniform(struct shaper_rng *rng);

/* Draws the plan of the next request. A local answer excludes cut and stall. */
void shaper_fault_choose(struct shaper_rng *rng, const struct shaper_conf *conf,
                         struct shaper_fault_plan *plan);

#endif
