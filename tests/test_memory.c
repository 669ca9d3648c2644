/* test_memory.c: sizes on the command line, the memory report, and the
 * out-of-memory fix: the batch it proposes fits the limit and the next larger
 * batch does not; the forward-only plan holds no gradients or optimizer state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
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
}

static ct_config *load_cnn(void) {
    static ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load("configs/cnn.yaml", &cfg, &err) != 0) fail_msg("%s", err.msg);
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

static void test_fix_is_the_largest_batch_that_fits(void **state) {
    (void)state;
    ct_config *cfg = load_cnn();
    ct_device_choice dev;
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    ct_err err = {{0}};
    assert_int_equal(ct_device_select(&cpu, &dev, &err), 0);
    cfg->train.batch_size = 3000;
    size_t limit = (size_t)40 << 20;
    assert_true(arena_at(cfg, &dev, true, 3000) > limit);
    ct_memory_fix fix;
    assert_int_equal(ct_memory_find_fix(cfg, &dev, true, limit, &fix, &err), 0);
    printf("batch 3000 needs %zu bytes; fix: batch %d x %d steps, %zu bytes\n",
           arena_at(cfg, &dev, true, 3000), fix.batch, fix.accum, fix.arena);
    assert_true(fix.arena <= limit);
    cfg->train.grad_accum_steps = fix.accum; /* the fixed run accumulates */
    assert_int_equal(fix.arena, arena_at(cfg, &dev, true, fix.batch));
    cfg->train.grad_accum_steps = 1;
    assert_true((long long)fix.batch * fix.accum >= 3000);
    assert_true(arena_at(cfg, &dev, true, 2 * fix.batch) > limit); /* no much larger fits */
    if (3000 % fix.batch == 0) assert_int_equal(fix.batch * fix.accum, 3000);
    /* Not even batch 1 fits in 1 KiB. */
    assert_int_equal(ct_memory_find_fix(cfg, &dev, true, 1024, &fix, &err), -1);
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
        cmocka_unit_test(test_fix_is_the_largest_batch_that_fits),
        cmocka_unit_test(test_forward_only_plan_is_smaller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
