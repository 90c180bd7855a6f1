/*
 * shaper_fault.c - the fault PRNG (xoshiro256**, splitmix64 seeding) and the per-request
 * plan. Three draws per request in a fixed order (local answer, cut, stall); a probability
 * of 1 always fires (u < 1), 0 never does. No state beyond the caller's struct shaper_rng.
 */
#include "shaper_fault.h"

#include "shaper_conf.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void shaper_rng_seed(struct shaper_rng *rng, uint64_t seed)
{
    uint64_t x = seed;

    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

static uint64_t next_u64(struct shaper_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double shaper_rng_uniform(struct shaper_rng *rng)
{
    return (double)(next_u64(rng) >> 11) * 0x1.0p-53;
}

void shaper_fault_choose(struct shaper_rng *rng, const struct shaper_conf *conf,
                         struct shaper_fault_plan *plan)
{
    double u_local = shaper_rng_uniform(rng);
    double u_cut = shaper_rng_uniform(rng);
    double u_stall = shaper_rng_uniform(rng);

    plan->local = SHAPER_LOCAL_NONE;
    plan->cut = SHAPER_CUT_NONE;
    plan->stall = false;
    if (u_local < conf->p_503) {
        plan->local = SHAPER_LOCAL_503;
        return;
    }
    if (u_local < conf->p_503 + conf->p_slowdown) {
        plan->local = SHAPER_LOCAL_SLOWDOWN;
        return;
    }
    if (u_cut < conf->p_reset)
        plan->cut = SHAPER_CUT_RESET;
    else if (u_cut < conf->p_reset + conf->p_truncate)
        plan->cut = SHAPER_CUT_TRUNCATE;
    plan->stall = u_stall < conf->p_stall;
}
