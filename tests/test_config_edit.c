/* test_config_edit.c: the command line's KEY=VALUE edits of a config (config.h):
 * dotted keys and list indices, keys and sections that the file lacks, list
 * entries given as a bare name, YAML values, the same checks as the file's with
 * the edit named as the source, the form errors found before any file is read,
 * and the resolved text that records every edit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

/* Loads configs/mlp.yaml with the edits args[0..n); 0 or -1 with err. */
static int load_mlp(const char *const *args, int n, ct_config *cfg, ct_err *err) {
    ct_config_edit edits[CT_MAX_EDITS];
    for (int i = 0; i < n; i++)
        if (ct_config_edit_parse(args[i], &edits[i], err) != 0)
            fail_msg("%s: %s", args[i], err->msg);
    return ct_config_load_edited("configs/mlp.yaml", edits, n, cfg, err);
}

/* The example, and edits into lists, new keys and new sections. */
static void test_edits_apply(void **state) {
    (void)state;
    const char *const args[] = {
        "optimizer.type=sgd",
        "optimizer.momentum=0.9",
        "schedule.type=cosine",
        "train.epochs=3",
        "model.layers.3.linear.out_features=512",   /* a list entry with parameters */
        "model.layers.2.relu.checkpoint=true",      /* a bare name, opened */
        "train.label_smoothing=0.1",                /* a key the file lacks */
        "data.augment.crop=2",                      /* a section the file lacks */
        "name=mlp-edited",
    };
    ct_config cfg;
    ct_err err = {{0}};
    if (load_mlp(args, 9, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.optimizer.type, CT_OPT_SGD);
    assert_true(cfg.optimizer.momentum == 0.9);
    assert_true(cfg.optimizer.lr == 0.001); /* the file's, kept */
    assert_int_equal(cfg.schedule.type, CT_SCHED_COSINE);
    assert_int_equal(cfg.train.epochs, 3);
    assert_int_equal(cfg.layers[3].out_features, 512);
    assert_int_equal(cfg.layers[2].kind, CT_LAYER_RELU);
    assert_true(cfg.layers[2].checkpoint);
    assert_true(cfg.train.label_smoothing == 0.1);
    assert_int_equal(cfg.data.crop, 2);
    assert_string_equal(cfg.name, "mlp-edited");
    assert_string_equal(cfg.train.out, "runs/mlp-edited");

    /* the resolved text holds the edits and parses to the same config */
    assert_non_null(strstr(cfg.text, "type: sgd"));
    assert_non_null(strstr(cfg.text, "out_features: 512"));
    assert_null(strstr(cfg.text, "out_features: 128"));
    ct_config again;
    if (ct_config_parse(cfg.text, cfg.text_len, "config.yaml", NULL, &again, &err))
        fail_msg("%s", err.msg);
    assert_memory_equal(&again.optimizer, &cfg.optimizer, sizeof cfg.optimizer);
    assert_memory_equal(&again.schedule, &cfg.schedule, sizeof cfg.schedule);
    assert_memory_equal(&again.train, &cfg.train, sizeof cfg.train);
    assert_int_equal(again.layers[3].out_features, 512);
    assert_true(again.layers[2].checkpoint);
    ct_config_free(&again);
    ct_config_free(&cfg);
}

/* Values are YAML: lists, mappings, quoted strings, and later edits win. */
static void test_edit_values(void **state) {
    (void)state;
    const char *const args[] = {
        "optimizer.betas=[0.8, 0.99]",
        "data.normalize={mean: 0.1307, std: 0.3081}",
        "model.layers.5={linear: {out_features: 10, bias: false}}",
        "train.epochs=7",
        "train.epochs=2",
    };
    ct_config cfg;
    ct_err err = {{0}};
    if (load_mlp(args, 5, &cfg, &err)) fail_msg("%s", err.msg);
    assert_true(cfg.optimizer.beta1 == 0.8 && cfg.optimizer.beta2 == 0.99);
    assert_true(cfg.data.mean[0] == 0.1307 && cfg.data.std[0] == 0.3081);
    assert_false(cfg.layers[5].bias);
    assert_int_equal(cfg.train.epochs, 2);
    ct_config_free(&cfg);
}

/* Loads mlp.yaml with one edit, which must fail with exactly `want`. */
static void expect_edit_error(const char *arg, const char *want) {
    ct_config cfg;
    ct_err err = {{0}};
    int rc = load_mlp(&arg, 1, &cfg, &err);
    if (rc != -1 || strcmp(err.msg, want) != 0)
        fail_msg("%s: rc %d, want '%s', got '%s'", arg, rc, want, err.msg);
    assert_null(cfg.text);
}

/* An edited value meets the file's checks; the error names the edit. */
static void test_edit_errors(void **state) {
    (void)state;
    expect_edit_error("optimizer.lr=-1",
                      "override 'optimizer.lr=-1': error: 'optimizer.lr' must be > 0, got -1");
    expect_edit_error("optimizer.lrr=0.1",
                      "override 'optimizer.lrr=0.1': error: unknown key 'lrr' in 'optimizer' "
                      "(did you mean 'lr'?)");
    expect_edit_error("train.epochs=many",
                      "override 'train.epochs=many': error: 'train.epochs' expects an integer, "
                      "got 'many'");
    expect_edit_error("train.amp=fp8", "override 'train.amp=fp8': error: unknown train.amp "
                      "'fp8' (expected one of: off, fp16, bf16)");
    expect_edit_error("model.layers.9.linear.out_features=5",
                      "override 'model.layers.9.linear.out_features=5': error: 'model.layers' "
                      "is a list: '9' is not an index in 0..5");
    /* the bounds themselves: one past the last entry, and a negative index */
    expect_edit_error("model.layers.6.linear.out_features=5",
                      "override 'model.layers.6.linear.out_features=5': error: 'model.layers' "
                      "is a list: '6' is not an index in 0..5");
    expect_edit_error("model.layers.-1.linear.out_features=5",
                      "override 'model.layers.-1.linear.out_features=5': error: 'model.layers' "
                      "is a list: '-1' is not an index in 0..5");
    expect_edit_error("model.layers.x=relu", "override 'model.layers.x=relu': error: "
                      "'model.layers' is a list: 'x' is not an index in 0..5");
    expect_edit_error("name.first=a",
                      "override 'name.first=a': error: 'name' is 'mlp', which has no key 'first'");
    expect_edit_error("model.layers.0.linear.out_features=5",
                      "override 'model.layers.0.linear.out_features=5': error: "
                      "'model.layers.0' is 'flatten', which has no key 'linear'");
    expect_edit_error("trian.epochs=3", "override 'trian.epochs=3': error: unknown top-level "
                      "key 'trian' (did you mean 'train'?)");
    /* the edit makes a key of the file invalid: the error is at the file's key */
    ct_config cfg;
    ct_err err = {{0}};
    const char *arg = "optimizer.type=sgd";
    ct_config_edit e;
    assert_int_equal(ct_config_edit_parse(arg, &e, &err), 0);
    const char *yaml = "model: {input: [1, 2, 2], layers: [flatten, linear: {out_features: 2}]}\n"
                       "optimizer: {type: adam, betas: [0.9, 0.99]}\n"
                       "data: {train_images: a, train_labels: b, test_images: c, "
                       "test_labels: d}\n";
    assert_int_equal(ct_config_parse_edited(yaml, strlen(yaml), "t.yaml", NULL, &e, 1, &cfg, &err),
                     -1);
    assert_string_equal(err.msg, "t.yaml:2:25: error: 'optimizer.betas' applies only to "
                                 "optimizer type adam and adamw, not sgd");
}

/* A shorthand option is an edit named by its option. */
static void test_shorthand_edit(void **state) {
    (void)state;
    ct_config_edit e[2];
    ct_config_edit_shorthand("epochs", "train.epochs", "4", &e[0]);
    ct_config_edit_shorthand("device", "device", "cpu:2", &e[1]);
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load_edited("configs/mlp.yaml", e, 2, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.train.epochs, 4);
    assert_int_equal(cfg.device.n_list, 2);
    assert_non_null(strstr(cfg.text, "epochs: 4"));
    ct_config_free(&cfg);
    ct_config_edit_shorthand("lr", "optimizer.lr", "0", &e[0]);
    assert_int_equal(ct_config_load_edited("configs/mlp.yaml", e, 1, &cfg, &err), -1);
    assert_string_equal(err.msg, "--lr 0: error: 'optimizer.lr' must be > 0, got 0");
}

/* The form of KEY=VALUE is checked without any file. */
static void test_edit_parse_errors(void **state) {
    (void)state;
    static const struct {
        const char *arg, *want;
    } cases[] = {
        {"optimizer.lr", "'optimizer.lr': expected KEY=VALUE (e.g. optimizer.lr=0.01)"},
        {"=3", "'=3': the key before '=' is empty"},
        {"a..b=1", "'a..b=1': empty part in key 'a..b' (parts are joined by one '.')"},
        {".a=1", "'.a=1': empty part in key '.a' (parts are joined by one '.')"},
        {"a.=1", "'a.=1': empty part in key 'a.' (parts are joined by one '.')"},
        {"x=[1,", "'x=[1,': the value is not valid YAML: did not find expected node content"},
        {"x=a: b: c", "'x=a: b: c': the value is not valid YAML: mapping values are not "
                      "allowed in this context"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_config_edit e;
        ct_err err = {{0}};
        assert_int_equal(ct_config_edit_parse(cases[i].arg, &e, &err), -1);
        if (strcmp(err.msg, cases[i].want) != 0)
            fail_msg("%s: want '%s', got '%s'", cases[i].arg, cases[i].want, err.msg);
    }
    ct_config_edit e;
    ct_err err = {{0}};
    assert_int_equal(ct_config_edit_parse("data.normalize.mean=", &e, &err), 0);
    assert_string_equal(e.path, "data.normalize.mean");
    assert_string_equal(e.value, "");
    assert_int_equal(ct_config_edit_parse("a=b=c", &e, &err), 0); /* the first '=' splits */
    assert_string_equal(e.path, "a");
    assert_string_equal(e.value, "b=c");
}

/* Every key ct_config_keys lists (what shell completion offers) is one the parser
 * knows: an edit of it may be refused for its value, never as an unknown key. */
static void test_key_list_is_the_parsers(void **state) {
    (void)state;
    const char *keys[128];
    int n = ct_config_keys(keys, 128);
    assert_true(n > 40);
    for (int i = 0; i < n; i++) {
        char arg[300];
        snprintf(arg, sizeof arg, "%s={}", keys[i]);
        ct_config cfg;
        ct_err err = {{0}};
        int rc = load_mlp((const char *const[]){arg}, 1, &cfg, &err);
        if (rc == 0) ct_config_free(&cfg);
        else if (strstr(err.msg, "unknown"))
            fail_msg("%s is listed but the parser refuses it: %s", keys[i], err.msg);
    }
}

/* A layer given as a null-valued mapping (`?flatten` in a flow list, `- flatten:` in
 * a block one) keeps a resolved text that parses again: the null is written `null`,
 * where libyaml would quote an empty flow scalar as '', a string. Resume's key
 * comparison takes every spelling of a null as the same value. */
static void test_null_layer_params(void **state) {
    (void)state;
    static const char flow[] = "model:\n  input: [1, 28, 28]\n"
                               "  layers: [conv2d: {out_channels: 4, kernel: 3}, ?flatten,\n"
                               "           linear: {out_features: 10}]\n"
                               "data: {train_images: a, train_labels: b, test_images: c,\n"
                               "       test_labels: d, num_classes: 10}\n";
    ct_config cfg, again;
    ct_err err = {{0}};
    if (ct_config_parse(flow, sizeof flow - 1, "flow.yaml", NULL, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.n_layers, 3);
    assert_non_null(strstr(cfg.text, "{flatten: null}"));
    if (ct_config_parse(cfg.text, cfg.text_len, "resolved.yaml", NULL, &again, &err) != 0)
        fail_msg("the resolved text is refused: %s\n%s", err.msg, cfg.text);
    assert_string_equal(again.text, cfg.text);
    static const char block[] = "model:\n  input: [1, 28, 28]\n  layers:\n"
                                "    - conv2d: {out_channels: 4, kernel: 3}\n"
                                "    - flatten:\n    - linear: {out_features: 10}\n"
                                "data: {train_images: a, train_labels: b, test_images: c,\n"
                                "       test_labels: d, num_classes: 10}\n";
    char diff[256];
    assert_int_equal(ct_config_diff(block, flow, NULL, diff, sizeof diff, &err), 0);
    assert_int_equal(ct_config_diff("layers: [{flatten: ~}]", "layers:\n  - flatten:\n", NULL,
                                    diff, sizeof diff, &err), 0);
    assert_int_equal(ct_config_diff("layers: [{flatten: 1}]", "layers: [{flatten: null}]", NULL,
                                    diff, sizeof diff, &err), 1);
    assert_string_equal(diff, "layers.0.flatten 1 -> null");
    ct_config_free(&cfg);
    ct_config_free(&again);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edits_apply),
        cmocka_unit_test(test_edit_values),
        cmocka_unit_test(test_edit_errors),
        cmocka_unit_test(test_shorthand_edit),
        cmocka_unit_test(test_edit_parse_errors),
        cmocka_unit_test(test_key_list_is_the_parsers),
        cmocka_unit_test(test_null_layer_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
