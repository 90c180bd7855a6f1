/*
 * test_hash_set.c - unit tests of the set of 64-bit hashes (cache/hash_set.c): membership
 * through growth, the lowest bit folded, the bound on slots, clearing, and a check against a
 * plain sorted list over many random hashes.
 */
#include "cache/hash_set.h"
#include "testlib.h"

#include <errno.h>
#include <stdlib.h>

static uint64_t next_rand(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x ^ (*x >> 29);
}

static void test_basics(void)
{
    struct hash_set s = {0};
    CHECK_EQ(hash_set_has(&s, 42), 0);
    CHECK_EQ(hash_set_add(&s, 42, 1024), 1);
    CHECK_EQ(hash_set_add(&s, 42, 1024), 0);
    CHECK_EQ(hash_set_has(&s, 42), 1);
    CHECK_EQ(hash_set_has(&s, 43), 1);      /* 42 | 1 == 43: one member */
    CHECK_EQ(hash_set_add(&s, 0, 1024), 1); /* 0 is stored as 1, not as an empty slot */
    CHECK_EQ(hash_set_has(&s, 1), 1);
    hash_set_clear(&s);
    CHECK_EQ(hash_set_has(&s, 42), 0);
    CHECK_EQ(hash_set_has(&s, 0), 0);
    CHECK_EQ(hash_set_add(&s, 42, 1024), 1);
    hash_set_free(&s);
    CHECK_EQ(hash_set_has(&s, 42), 0);
    hash_set_free(&s); /* twice: harmless */
}

/* Growth keeps every member; the bound stops it at max_cap slots (half of them used). */
static void test_growth_and_bound(void)
{
    struct hash_set s = {0};
    uint64_t x = 7;
    uint64_t *keys = malloc(600 * sizeof(*keys));
    int added = 0, rc = 0;
    for (int i = 0; i < 600; i++) {
        keys[i] = next_rand(&x) | 1;
        rc = hash_set_add(&s, keys[i], 1024);
        if (rc < 0)
            break;
        added += rc;
    }
    CHECK_EQ(rc, -E2BIG);
    CHECK_EQ(added, 512); /* 1024 slots at most, grown at half full */
    for (int i = 0; i < added; i++)
        CHECK_EQ(hash_set_has(&s, keys[i]), 1);
    CHECK_EQ(hash_set_add(&s, keys[0], 1024), 0); /* a member is found even when full */
    hash_set_clear(&s);
    CHECK_EQ(hash_set_add(&s, keys[600 - 1], 1024), 1);
    hash_set_free(&s);
    free(keys);
}

/* Against a plain list: random hashes, some repeated; every answer the same. */
static void test_model(void)
{
    enum { N = 20000 };
    struct hash_set s = {0};
    uint64_t *model = malloc(N * sizeof(*model));
    size_t nmodel = 0;
    uint64_t x = 11;
    for (int i = 0; i < N; i++) {
        uint64_t h = next_rand(&x) % 5000 * 0x10001ull; /* repeats */
        int in = 0;
        for (size_t j = 0; j < nmodel && !in; j++)
            in = model[j] == (h | 1);
        CHECK_EQ(hash_set_has(&s, h), in);
        CHECK_EQ(hash_set_add(&s, h, 1u << 20), !in);
        if (!in)
            model[nmodel++] = h | 1;
    }
    CHECK(nmodel > 4000 && nmodel <= 5000);
    for (size_t j = 0; j < nmodel; j++)
        CHECK_EQ(hash_set_has(&s, model[j]), 1);
    hash_set_free(&s);
    free(model);
}

int main(void)
{
    RUN(test_basics);
    RUN(test_growth_and_bound);
    RUN(test_model);
    return test_finish();
}
