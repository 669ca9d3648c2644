/* test_fuzz_regressions.c: every saved fuzz input goes through the fuzz targets
 * (tests/fuzz/targets.h), the same functions the libFuzzer harnesses call, in a
 * child process with a 64 MiB heap budget (bounded_alloc.h):
 *   tests/fuzz/regressions/<target>/  inputs that once crashed a reader, or were
 *                                     crafted to make it allocate a claim: each
 *                                     must give a clean error or a success;
 *   tests/fuzz/corpus/<target>/       the seeds: valid-* must be accepted, every
 *                                     other one refused with a clean error.
 * In a sanitizer build a report ends the child, which fails the case too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bounded_alloc.h"
#include "fuzz/targets.h"
#include "helpers.h"

#define FUZZ_DIR CT_SOURCE_ROOT "/tests/fuzz"
#define BUDGET ((size_t)64 << 20)

typedef enum { EXPECT_CLEAN, EXPECT_ACCEPTED, EXPECT_REFUSED } expectation;

typedef struct replay {
    ct_fuzz_fn fn;
    const uint8_t *data;
    size_t size;
    expectation want;
} replay;

static const char *result_name(ct_fuzz_result r) {
    return r == CT_FUZZ_ACCEPTED ? "accepted" : r == CT_FUZZ_REFUSED ? "refused" : "broken";
}

/* Runs in the child (no cmocka asserts): 0 when the result is what was wanted. */
static int replay_one(void *arg, char *msg, size_t n) {
    const replay *r = arg;
    char why[2048];
    ct_fuzz_result got = r->fn(r->data, r->size, why, sizeof why);
    snprintf(msg, n, "%s: %s", result_name(got), why);
    if (got == CT_FUZZ_BROKEN) return 1;
    if (r->want == EXPECT_ACCEPTED) return got != CT_FUZZ_ACCEPTED;
    if (r->want == EXPECT_REFUSED) return got != CT_FUZZ_REFUSED;
    return 0;
}

/* Replays every file of FUZZ_DIR/<kind>/<target>/; returns how many there were. */
static int replay_dir(const char *kind, const char *target, ct_fuzz_fn fn) {
    char dir[1024], path[1400], msg[2200];
    snprintf(dir, sizeof dir, "%s/%s/%s", FUZZ_DIR, kind, target);
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    int count = 0, failed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size;
        char *data = ct_test_read_file(path, &size);
        assert_non_null(data);
        replay r = {fn, (const uint8_t *)data, size, EXPECT_CLEAN};
        if (strcmp(kind, "corpus") == 0)
            r.want = strncmp(e->d_name, "valid-", 6) == 0 ? EXPECT_ACCEPTED : EXPECT_REFUSED;
        if (ct_test_bounded(replay_one, &r, BUDGET, msg, sizeof msg) != 0) {
            print_error("%s/%s: %s\n", kind, e->d_name, msg);
            failed++;
        }
        free(data);
        count++;
    }
    closedir(d);
    if (failed) fail_msg("%d of %d inputs in %s failed", failed, count, dir);
    return count;
}

static void replay_target(const char *target, ct_fuzz_fn fn) {
    int regressions = replay_dir("regressions", target, fn);
    int seeds = replay_dir("corpus", target, fn);
    if (regressions == 0 || seeds == 0)
        fail_msg("%s: %d regression inputs and %d seeds; each directory needs some", target,
                 regressions, seeds);
}

static void test_config_inputs(void **state) {
    (void)state;
    replay_target("config", ct_fuzz_config);
}

static void test_idx_inputs(void **state) {
    (void)state;
    replay_target("idx", ct_fuzz_idx);
}

static void test_checkpoint_inputs(void **state) {
    (void)state;
    replay_target("checkpoint", ct_fuzz_checkpoint);
}

static void test_image_inputs(void **state) {
    (void)state;
    replay_target("image", ct_fuzz_image);
}

static void test_list_inputs(void **state) {
    (void)state;
    replay_target("list", ct_fuzz_list);
}

static void test_cache_inputs(void **state) {
    (void)state;
    replay_target("cache", ct_fuzz_cache);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_inputs),
        cmocka_unit_test(test_idx_inputs),
        cmocka_unit_test(test_checkpoint_inputs),
        cmocka_unit_test(test_image_inputs),
        cmocka_unit_test(test_list_inputs),
        cmocka_unit_test(test_cache_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
