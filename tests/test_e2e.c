/* test_e2e.c: the user's path end to end through the binary, on 4000 MNIST
 * training and 1000 test images: `ctrain fit` prints one line per epoch in the
 * tutorial's form and writes a checkpoint and metrics.csv; `ctrain eval` rebuilds
 * the model from the checkpoint alone and reports the same test accuracy as the
 * last epoch, with per-class accuracy and a confusion matrix that sums to the
 * test set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"

static char dir[512];

static char *run(const char *args, int *status) {
    char cmd[4096], out[600];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "cd / && %s/ctrain %s >%s 2>&1 </dev/null", ct_test_build_root(), args, out);
    int st = system(cmd);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return ct_test_read_file(out, NULL);
}

static void test_fit_then_eval(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 4000, 1000);
    char cfg[1024], args[2048];
    char extra[1024];
    snprintf(extra, sizeof extra, "train: {epochs: 3, batch_size: 128, out: %s/run}\n", dir);
    ct_test_write_config(dir, "e2e",
                         "    - conv2d: {out_channels: 16, kernel: 3, padding: 1}\n"
                         "    - relu\n"
                         "    - maxpool2d: {kernel: 2}\n"
                         "    - flatten\n"
                         "    - linear: {out_features: 64}\n"
                         "    - relu\n"
                         "    - dropout: {p: 0.2}\n"
                         "    - linear: {out_features: 10}\n",
                         extra, cfg, sizeof cfg);
    int st;
    snprintf(args, sizeof args, "fit %s --device cpu", cfg);
    char *out = run(args, &st);
    printf("%s", out);
    assert_int_equal(st, 0);
    double last_acc = -1, loss, acc, vloss;
    int epochs = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        int e;
        if (sscanf(line, "Epoch %d | Train Loss: %lf, Acc: %lf | Val Loss: %lf, Acc: %lf |", &e,
                   &loss, &acc, &vloss, &last_acc) == 5) {
            epochs++;
            assert_int_equal(e, epochs);
            assert_non_null(strstr(line, "samples/s"));
        }
    }
    free(out);
    assert_int_equal(epochs, 3);
    assert_true(last_acc > 0.80); /* 4000 images, 94 steps: ~0.86 (chance is 0.10) */

    snprintf(args, sizeof args, "eval --checkpoint %s/run/model.bin", dir);
    out = run(args, &st);
    printf("%s", out);
    assert_int_equal(st, 0);
    double eval_acc = -1;
    long long correct, total;
    char *p = strstr(out, "Accuracy: ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "Accuracy: %lf (%lld/%lld)", &eval_acc, &correct, &total), 3);
    assert_int_equal(total, 1000);
    assert_true(fabs(eval_acc - last_acc) < 1e-4); /* the same model, the same test set */
    assert_non_null(strstr(out, "Per-class accuracy"));
    /* Confusion matrix rows sum to the test set. */
    p = strstr(out, "Confusion matrix");
    assert_non_null(p);
    p = strchr(p, '\n') + 1;
    p = strchr(p, '\n') + 1; /* skip the column header */
    long long sum = 0, diag = 0;
    for (int t = 0; t < 10; t++) {
        int row;
        int used;
        assert_int_equal(sscanf(p, " %d%n", &row, &used), 1);
        assert_int_equal(row, t);
        p += used;
        for (int c = 0; c < 10; c++) {
            long long v;
            assert_int_equal(sscanf(p, " %lld%n", &v, &used), 1);
            p += used;
            sum += v;
            if (c == t) diag += v;
        }
    }
    assert_int_equal(sum, 1000);
    assert_int_equal(diag, correct);
    free(out);

    /* metrics.csv has a header and one row per epoch. */
    char csv[700];
    snprintf(csv, sizeof csv, "%s/run/metrics.csv", dir);
    char *text = ct_test_read_file(csv, NULL);
    assert_non_null(text);
    int lines = 0;
    for (char *c = text; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, 4);
    free(text);
    ct_test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fit_then_eval)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
