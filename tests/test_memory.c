/* test_memory.c: sizes on the command line, the memory report, and the
 * out-of-memory fix on the real planner (CNN): with E = batch * accumulation steps,
 * the fix takes the fewest steps whose batch ceil(E / steps) fits, so its batch fits
 * and the batch of one step fewer does not; it equals a linear scan over the steps;
 * batch * steps covers E with fewer than `steps` samples to spare. The forward-only
 * plan holds no gradients or optimizer state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "train/memory.h"
#include "train/model.h"

static void test_parse_size(void **state) {
    (void)state;
    size_t v;
    ct_err err = {{0}};
    assert_int_equal(ct_parse_size("512M", &v, &err), 0);
    assert_int_equal(v, (size_t)512 << 20);
    assert_int_equal(ct_parse_size("2G", &v, &err), 0);
    assert_int_equal(v, (size_t)2 << 30);
    assert_int_equal(ct_parse_size("64KiB", &v, &err), 0);
    assert_int_equal(v, (size_t)64 << 10);
    assert_int_equal(ct_parse_size("1000", &v, &err), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(ct_parse_size("1.5G", &v, &err), 0);
    assert_int_equal(v, (size_t)3 << 29);
    assert_int_equal(ct_parse_size("12X", &v, &err), -1);
    assert_non_null(strstr(err.msg, "--max-memory: expected a size like 512M"));
    assert_int_equal(ct_parse_size("-5M", &v, &err), -1);
    assert_int_equal(ct_parse_size("", &v, &err), -1);
    /* The largest size a size_t holds in whole T, and the first past it (2^64 bytes),
     * which is refused rather than converted (undefined behaviour); so are inf and
     * nan, which strtod accepts. */
    assert_int_equal(ct_parse_size("16777215T", &v, &err), 0);
    assert_true(v == (size_t)16777215 << 40);
    assert_int_equal(ct_parse_size("16777216T", &v, &err), -1);
    assert_non_null(strstr(err.msg, "--max-memory: '16777216T' is not a size this machine can address"));
    assert_int_equal(ct_parse_size("1e30G", &v, &err), -1);
    assert_int_equal(ct_parse_size("inf", &v, &err), -1);
    assert_int_equal(ct_parse_size("nan", &v, &err), -1);
}

/* The CNN with the direct convolutions: its arena grows with every image of the batch,
 * which the searches below check exactly. (Winograd's workspace moves by a fraction
 * of a MiB with the batch's tiling; memory.c says what that does to the fix.) */
static ct_config *load_cnn(void) {
    static ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load("configs/cnn.yaml", &cfg, &err) != 0) fail_msg("%s", err.msg);
    cfg.train.cpu_winograd = CT_CPU_WINOGRAD_OFF;
    return &cfg;
}

static size_t arena_at(const ct_config *cfg, const ct_device_choice *dev, bool training, int batch) {
    ct_model *m;
    ct_err err = {{0}};
    ct_model_req req = {.training = training, .batch = batch};
    if (ct_model_create(cfg, dev, &req, &m, &err) != 0) fail_msg("%s", err.msg);
    size_t t = m->plan.total;
    ct_model_destroy(m);
    return t;
}

static long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

/* Arena at `batch` as the fix runs it: accumulating over `steps` micro-batches. */
static size_t arena_accum(const ct_config *cfg, const ct_device_choice *dev, int batch,
                          int steps) {
    ct_config c = *cfg;
    c.train.grad_accum_steps = steps;
    return arena_at(&c, dev, true, batch);
}

/* The fix for cfg's batch and steps under `limit`, checked against its guarantee
 * and against a linear scan: the fewest steps s whose batch ceil(E / s), below
 * cfg's batch, fits. */
static ct_memory_fix check_fix(const ct_config *cfg, const ct_device_choice *dev, size_t limit) {
    const int B = cfg->train.batch_size;
    const long long E = (long long)B * cfg->train.grad_accum_steps;
    assert_true(arena_at(cfg, dev, true, B) > limit); /* the finder's premise */
    ct_memory_fix fix;
    ct_err err = {{0}};
    if (ct_memory_find_fix(cfg, dev, true, NULL, limit, &fix, &err) != 0) fail_msg("%s", err.msg);
    printf("batch %d x %d steps (E = %lld) under %zu bytes: fix batch %d x %d steps = %lld, "
           "arena %zu\n", B, cfg->train.grad_accum_steps, E, limit, fix.batch, fix.accum,
           (long long)fix.batch * fix.accum, fix.arena);
    /* The batch for its steps: covers E with fewer than `steps` samples to spare. */
    assert_true(fix.accum >= 2 && fix.batch >= 1 && fix.batch < B);
    assert_true(fix.batch == ceil_div(E, fix.accum));
    assert_true((long long)fix.batch * fix.accum >= E);
    assert_true((long long)(fix.batch - 1) * fix.accum < E);
    /* It fits, planned as it will run. */
    assert_int_equal(fix.arena, arena_accum(cfg, dev, fix.batch, fix.accum));
    assert_true(fix.arena <= limit);
    /* One step fewer needs a batch that does not fit (or is not below cfg's). */
    long long fewer = ceil_div(E, fix.accum - 1);
    if (fewer < B) assert_true(arena_accum(cfg, dev, (int)fewer, fix.accum - 1) > limit);
    /* A linear scan over the steps finds the same. */
    long long s = 1;
    while (ceil_div(E, s) >= B || arena_accum(cfg, dev, (int)ceil_div(E, s), (int)s) > limit) s++;
    assert_int_equal(fix.accum, s);
    /* The largest batch that fits: it fits, one more does not (or is cfg's). */
    assert_true(fix.largest >= fix.batch && fix.largest < B);
    assert_true(arena_accum(cfg, dev, fix.largest, 2) <= limit);
    if (fix.largest + 1 < B) assert_true(arena_accum(cfg, dev, fix.largest + 1, 2) > limit);
    return fix;
}

static void test_fix_takes_the_fewest_steps_whose_batch_fits(void **state) {
    (void)state;
    ct_config *cfg = load_cnn();
    ct_device_choice dev;
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    ct_err err = {{0}};
    assert_int_equal(ct_device_select(&cpu, &dev, &err), 0);

    /* Batch 1000 where batch 490 is the largest that fits: 2 steps would need 500,
     * so 3 steps of 334 (1002 samples); not 4 of 250, which keeps 1000 exactly
     * with a batch half of what fits. */
    cfg->train.batch_size = 1000;
    size_t limit = arena_accum(cfg, &dev, 490, 2);
    assert_true(arena_accum(cfg, &dev, 491, 2) > limit);
    ct_memory_fix fix = check_fix(cfg, &dev, limit);
    assert_int_equal(fix.accum, 3);
    assert_int_equal(fix.batch, 334);
    assert_int_equal(fix.largest, 490);
    assert_true(arena_accum(cfg, &dev, 500, 2) > limit);

    /* The same where batch 500 just fits (the bytes per sample depend on the layouts
     * oneDNN picks on this CPU): 2 steps of 500. */
    fix = check_fix(cfg, &dev, arena_accum(cfg, &dev, 500, 2));
    assert_int_equal(fix.accum, 2);
    assert_int_equal(fix.batch, 500);

    /* Batch 3000 under 40 MiB; batch 600 x 4 steps (E = 2400) under 100 MiB. */
    cfg->train.batch_size = 3000;
    check_fix(cfg, &dev, (size_t)40 << 20);
    cfg->train.batch_size = 600;
    cfg->train.grad_accum_steps = 4;
    fix = check_fix(cfg, &dev, (size_t)100 << 20);
    assert_true(fix.accum > 4);
    cfg->train.grad_accum_steps = 1;

    /* Not even batch 1 fits in 1 KiB. */
    assert_int_equal(ct_memory_find_fix(cfg, &dev, true, NULL, 1024, &fix, &err), -1);
    assert_non_null(strstr(err.msg, "even batch size 1"));
    ct_config_free(cfg);
}

static void test_forward_only_plan_is_smaller(void **state) {
    (void)state;
    ct_config *cfg = load_cnn();
    ct_device_choice dev;
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    ct_err err = {{0}};
    assert_int_equal(ct_device_select(&cpu, &dev, &err), 0);
    ct_model *train, *eval;
    ct_model_req rt = {.training = true, .batch = 256}, re = {.training = false, .batch = 256};
    assert_int_equal(ct_model_create(cfg, &dev, &rt, &train, &err), 0);
    assert_int_equal(ct_model_create(cfg, &dev, &re, &eval, &err), 0);
    assert_int_equal(ct_plan_kind_bytes(&eval->plan, CT_REGION_GRADS), 0);
    assert_int_equal(ct_plan_kind_bytes(&eval->plan, CT_REGION_OPT_STATE), 0);
    assert_int_equal(ct_plan_kind_bytes(&train->plan, CT_REGION_GRADS),
                     ct_plan_kind_bytes(&train->plan, CT_REGION_PARAMS));
    assert_int_equal(ct_plan_kind_bytes(&train->plan, CT_REGION_OPT_STATE),
                     2 * ct_plan_kind_bytes(&train->plan, CT_REGION_PARAMS)); /* Adam: m, v */
    assert_true(eval->plan.total < train->plan.total);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ct_memory_report(&train->plan, "Memory", f);
    fclose(f);
    assert_non_null(strstr(text, "optimizer state"));
    assert_non_null(strstr(text, "reserved"));
    free(text);
    ct_model_destroy(train);
    ct_model_destroy(eval);
    ct_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_fix_takes_the_fewest_steps_whose_batch_fits),
        cmocka_unit_test(test_forward_only_plan_is_smaller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
