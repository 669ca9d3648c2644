/* test_loader.c: the double-buffered batch loader (src/data/loader.c) on small
 * in-memory datasets: coverage, seeded order, partial batches, normalization,
 * abandoning an epoch and destroying mid-epoch; the class-balanced sampler; a
 * sample source and its failures; starting into an epoch. Sample identity is
 * encoded in the pixels (px0 = id & 255, px1 = id >> 8), so x and y can be checked
 * together. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/philox.h"
#include "data/loader.h"

#define ROWS 2
#define COLS 3
#define MAX_N 2000

typedef struct fixture {
    ct_dataset ds;
    uint8_t images[MAX_N * ROWS * COLS];
    uint8_t labels[MAX_N];
} fixture;

static fixture g_fx;

/* Sample i: pixels (i & 255, i >> 8, i*7+1, i*13+2, ...), label i % classes. */
static ct_dataset *make_ds(int n, int classes) {
    fixture *f = &g_fx;
    for (int i = 0; i < n; i++) {
        uint8_t *px = f->images + (size_t)i * ROWS * COLS;
        px[0] = (uint8_t)(i & 255);
        px[1] = (uint8_t)(i >> 8);
        for (int p = 2; p < ROWS * COLS; p++) px[p] = (uint8_t)(i * (5 + 2 * p) + p);
        f->labels[i] = (uint8_t)(i % classes);
    }
    f->ds = (ct_dataset){.images = f->images, .labels = f->labels, .count = n, .channels = 1, .rows = ROWS,
                         .cols = COLS, .num_classes = classes};
    return &f->ds;
}

/* With mean 0 and std 1/255, x = pixel exactly (pixel/255*255 rounds back). */
static ct_loader *make_loader(const ct_dataset *ds, int bs, bool shuffle, uint64_t seed) {
    ct_loader *l = NULL;
    ct_err err = {{0}};
    if (ct_loader_create(ds, bs, shuffle, seed, 0.0, 1.0 / 255.0, &l, &err))
        fail_msg("%s", err.msg);
    return l;
}

static int sample_id(const float *x) { return (int)lroundf(x[0]) + 256 * (int)lroundf(x[1]); }

/* Runs one epoch, checks batch sizes/indices and x/y consistency, and writes the
 * sample order to order[count]. */
static void run_epoch(ct_loader *l, const ct_dataset *ds, int bs, int *order) {
    ct_batch b;
    int pos = 0, k = 0;
    while (ct_loader_next(l, &b)) {
        int left = ds->count - pos;
        assert_int_equal(b.index, k);
        assert_int_equal(b.n, left < bs ? left : bs);
        for (int i = 0; i < b.n; i++) {
            int id = sample_id(b.x + (size_t)i * ROWS * COLS);
            assert_in_range(id, 0, ds->count - 1);
            assert_int_equal(b.y[i], ds->labels[id]);
            order[pos++] = id;
        }
        k++;
    }
    assert_int_equal(pos, ds->count);
    assert_int_equal(k, ct_loader_batches_per_epoch(l));
    assert_int_equal(ct_loader_next(l, &b), 0); /* stays at the end */
}

static void assert_is_permutation(const int *order, int n) {
    static char seen[MAX_N];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < n; i++) {
        assert_false(seen[order[i]]);
        seen[order[i]] = 1;
    }
}

static void test_partial_batches(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(10, 10);
    ct_loader *l = make_loader(ds, 4, false, 1);
    assert_int_equal(ct_loader_batches_per_epoch(l), 3);
    ct_batch b;
    assert_int_equal(ct_loader_next(l, &b), 0); /* no epoch started yet */
    ct_loader_start_epoch(l, 0);
    int sizes[3], n = 0;
    while (ct_loader_next(l, &b)) sizes[n++] = b.n;
    assert_int_equal(n, 3);
    assert_int_equal(sizes[0], 4);
    assert_int_equal(sizes[1], 4);
    assert_int_equal(sizes[2], 2);
    ct_loader_destroy(l);

    l = make_loader(ds, 5, false, 1);
    assert_int_equal(ct_loader_batches_per_epoch(l), 2);
    ct_loader_destroy(l);
    l = make_loader(ds, 64, true, 1); /* one batch larger than the dataset */
    assert_int_equal(ct_loader_batches_per_epoch(l), 1);
    int order[10];
    ct_loader_start_epoch(l, 0);
    run_epoch(l, ds, 64, order);
    assert_is_permutation(order, 10);
    ct_loader_destroy(l);
}

static void test_shuffle_covers_every_sample(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(1000, 10);
    ct_loader *l = make_loader(ds, 7, true, 42);
    int order[1000];
    for (int e = 0; e < 5; e++) {
        ct_loader_start_epoch(l, e);
        run_epoch(l, ds, 7, order);
        assert_is_permutation(order, 1000);
        int fixed = 0;
        for (int i = 0; i < 1000; i++) fixed += order[i] == i;
        assert_true(fixed < 20); /* actually shuffled */
    }
    ct_loader_destroy(l);
}

static void test_shuffle_off_is_identity(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(37, 5);
    ct_loader *l = make_loader(ds, 8, false, 42);
    int order[37];
    for (int e = 0; e < 3; e++) {
        ct_loader_start_epoch(l, e);
        run_epoch(l, ds, 8, order);
        for (int i = 0; i < 37; i++) assert_int_equal(order[i], i);
    }
    ct_loader_destroy(l);
}

/* The documented algorithm: Fisher-Yates with j = floor(u * (i + 1)), u from Philox. */
static void reference_order(int n, uint64_t seed, int epoch, int *perm) {
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        float u = ct_philox_uniform(seed, CT_RNG_STREAM_SHUFFLE, (uint32_t)epoch, (uint64_t)i);
        int j = (int)((double)u * (i + 1));
        if (j > i) j = i;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void test_order_depends_only_on_seed_and_epoch(void **state) {
    (void)state;
    enum { N = 200 };
    ct_dataset *ds = make_ds(N, 10);
    ct_loader *a = make_loader(ds, 16, true, 7);
    ct_loader *b = make_loader(ds, 16, true, 7);
    ct_loader *c = make_loader(ds, 16, true, 8);
    int oa3[N], ob3[N], oa4[N], oc3[N], again[N], ref[N];
    ct_loader_start_epoch(a, 3);
    run_epoch(a, ds, 16, oa3);
    ct_loader_start_epoch(a, 4);
    run_epoch(a, ds, 16, oa4);
    ct_loader_start_epoch(b, 3); /* fresh loader, no history */
    run_epoch(b, ds, 16, ob3);
    ct_loader_start_epoch(c, 3);
    run_epoch(c, ds, 16, oc3);
    ct_loader_start_epoch(a, 3); /* epoch 3 again after epoch 4 */
    run_epoch(a, ds, 16, again);
    assert_memory_equal(oa3, ob3, sizeof oa3);
    assert_memory_equal(oa3, again, sizeof oa3);
    assert_memory_not_equal(oa3, oa4, sizeof oa3);
    assert_memory_not_equal(oa3, oc3, sizeof oa3);
    reference_order(N, 7, 3, ref);
    assert_memory_equal(oa3, ref, sizeof ref);
    ct_loader_destroy(a);
    ct_loader_destroy(b);
    ct_loader_destroy(c);
}

static void test_normalization(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(300, 3);
    const double mean = 0.1307, std = 0.3081;
    ct_loader *l = NULL;
    ct_err err = {{0}};
    assert_int_equal(ct_loader_create(ds, 32, false, 0, mean, std, &l, &err), 0);
    ct_loader_start_epoch(l, 0);
    ct_batch b;
    int seen = 0;
    while (ct_loader_next(l, &b)) {
        for (int i = 0; i < b.n; i++) {
            const uint8_t *px = ds->images + (size_t)(b.index * 32 + i) * ROWS * COLS;
            for (int p = 0; p < ROWS * COLS; p++) {
                float want = ((float)px[p] / 255.0f - (float)mean) / (float)std;
                assert_true(b.x[(size_t)i * ROWS * COLS + p] == want);
                double exact = (px[p] / 255.0 - mean) / std;
                assert_true(fabs(b.x[(size_t)i * ROWS * COLS + p] - exact) < 1e-5);
            }
            seen++;
        }
    }
    assert_int_equal(seen, 300);
    ct_loader_destroy(l);
    /* Values that are exact in binary: pixel 0 and 255 with mean 0.5, std 0.25. */
    uint8_t img[ROWS * COLS] = {0, 255, 0, 255, 0, 255}, lab[1] = {0};
    ct_dataset one = {.images = img, .labels = lab, .count = 1, .channels = 1, .rows = ROWS, .cols = COLS,
                      .num_classes = 1};
    assert_int_equal(ct_loader_create(&one, 1, true, 0, 0.5, 0.25, &l, &err), 0);
    ct_loader_start_epoch(l, 0);
    assert_int_equal(ct_loader_next(l, &b), 1);
    for (int p = 0; p < ROWS * COLS; p++) assert_true(b.x[p] == (p % 2 ? 2.0f : -2.0f));
    ct_loader_destroy(l);
}

/* The producer runs ahead, but never into the slot of the batch the caller holds:
 * with the producer as far ahead as it may go (ct_loader_wait_ahead), the held
 * batch is unchanged and the next one is ready. */
static void test_held_batch_is_not_overwritten(void **state) {
    (void)state;
    enum { N = 60, BS = 4 };
    ct_dataset *ds = make_ds(N, 10);
    ct_loader *l = make_loader(ds, BS, false, 0);
    ct_loader_start_epoch(l, 0);
    ct_batch b;
    float x[BS * ROWS * COLS];
    int32_t y[BS];
    while (ct_loader_next(l, &b)) {
        memcpy(x, b.x, sizeof(float) * (size_t)b.n * ROWS * COLS);
        memcpy(y, b.y, sizeof(int32_t) * (size_t)b.n);
        int ahead = ct_loader_wait_ahead(l);
        assert_memory_equal(x, b.x, sizeof(float) * (size_t)b.n * ROWS * COLS);
        assert_memory_equal(y, b.y, sizeof(int32_t) * (size_t)b.n);
        assert_int_equal(sample_id(b.x), b.index * BS);
        assert_int_equal(ahead, b.index + 1 < N / BS ? 1 : 0);
    }
    ct_loader_destroy(l);
}

static void test_abandon_epoch(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(500, 10);
    ct_loader *l = make_loader(ds, 3, true, 99);
    int order[500], ref[500];
    ct_batch b;
    for (int e = 0; e < 50; e++) {
        ct_loader_start_epoch(l, e);
        for (int k = 0; k < e % 5; k++) assert_int_equal(ct_loader_next(l, &b), 1);
    }
    ct_loader_start_epoch(l, 1); /* twice in a row */
    ct_loader_start_epoch(l, 2);
    run_epoch(l, ds, 3, order);
    reference_order(500, 99, 2, ref);
    assert_memory_equal(order, ref, sizeof ref);
    ct_loader_destroy(l);
}

static void test_destroy_mid_epoch(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(2000, 10);
    ct_batch b;
    for (int t = 0; t < 50; t++) {
        ct_loader *l = make_loader(ds, 1 + t % 4, true, (uint64_t)t);
        if (t % 3) ct_loader_start_epoch(l, t);
        for (int k = 0; k < t % 4; k++) ct_loader_next(l, &b);
        ct_loader_destroy(l); /* must join, not hang */
    }
    ct_loader_destroy(NULL);
}

static void test_create_rejects_bad_args(void **state) {
    (void)state;
    ct_dataset *ds = make_ds(10, 10);
    ct_loader *l = (ct_loader *)1;
    ct_err err = {{0}};
    assert_int_equal(ct_loader_create(ds, 0, true, 0, 0.0, 1.0, &l, &err), -1);
    assert_null(l);
    assert_non_null(strstr(err.msg, "batch_size must be >= 1"));
    assert_int_equal(ct_loader_create(ds, 4, true, 0, 0.0, 0.0, &l, &err), -1);
    assert_non_null(strstr(err.msg, "std > 0"));
    ct_dataset empty = {0};
    assert_int_equal(ct_loader_create(&empty, 4, true, 0, 0.0, 1.0, &l, &err), -1);
    assert_non_null(strstr(err.msg, "dataset"));
}

/* ct_shard_range: contiguous, covering, sizes within one of each other. */
static void test_shard_range_partitions(void **state) {
    (void)state;
    for (int n = 0; n <= 70; n++)
        for (int count = 1; count <= 9; count++) {
            int next = 0, lo = n, hi = 0;
            for (int r = 0; r < count; r++) {
                int off, m;
                ct_shard_range(n, r, count, &off, &m);
                assert_int_equal(off, next);
                next += m;
                lo = m < lo ? m : lo;
                hi = m > hi ? m : hi;
            }
            assert_int_equal(next, n);
            assert_true(hi - lo <= 1);
        }
}

/* Sharded loaders (3 ranks, same seed) deliver, batch by batch, exactly the
 * rows of the unsharded loader's batch, in order, with n_global = its size, and
 * first_pos = the epoch position of their first row (row i is order[first_pos + i]). */
static void test_shards_concatenate_to_the_batch(void **state) {
    (void)state;
    const int n = 1000, bs = 64, ranks = 3;
    ct_dataset *ds = make_ds(n, 10);
    ct_loader *whole = make_loader(ds, bs, true, 11), *part[3];
    for (int r = 0; r < ranks; r++) {
        part[r] = make_loader(ds, bs, true, 11);
        ct_loader_set_shard(part[r], r, ranks);
    }
    int32_t order[1000];
    for (int epoch = 0; epoch < 2; epoch++) {
        ct_loader_start_epoch(whole, epoch);
        for (int r = 0; r < ranks; r++) ct_loader_start_epoch(part[r], epoch);
        ct_epoch_order(11, epoch, true, n, order);
        ct_batch w, p;
        int batches = 0;
        while (ct_loader_next(whole, &w)) {
            assert_int_equal(w.n_global, w.n);
            assert_int_equal(w.first_pos, (int64_t)w.index * bs);
            int row = 0;
            for (int r = 0; r < ranks; r++) {
                assert_int_equal(ct_loader_next(part[r], &p), 1);
                assert_int_equal(p.index, w.index);
                assert_int_equal(p.n_global, w.n);
                assert_int_equal(p.first_pos, w.first_pos + row);
                for (int i = 0; i < p.n; i++, row++) {
                    assert_int_equal(sample_id(p.x + i * ROWS * COLS), order[p.first_pos + i]);
                    assert_int_equal(sample_id(p.x + i * ROWS * COLS),
                                     sample_id(w.x + row * ROWS * COLS));
                    assert_int_equal(p.y[i], w.y[row]);
                }
            }
            assert_int_equal(row, w.n);
            batches++;
        }
        assert_int_equal(batches, (n + bs - 1) / bs);
        for (int r = 0; r < ranks; r++) assert_int_equal(ct_loader_next(part[r], &p), 0);
    }
    ct_loader_destroy(whole);
    for (int r = 0; r < ranks; r++) ct_loader_destroy(part[r]);
}

/* The balanced sampler (data/sampler.h) on 1000 samples in classes of 900, 90 and
 * 10: each class drawn about a third of the time (each count within 5 binomial
 * standard deviations of 1000/3), every drawn sample of its class; the order a
 * function of (seed, epoch) alone, another epoch another order; the loader's
 * batches follow ct_epoch_order_balanced position by position. */
static void test_balanced_sampler(void **state) {
    (void)state;
    enum { N = 1000 };
    ct_dataset *ds = make_ds(N, 3);
    for (int i = 0; i < N; i++) g_fx.labels[i] = (uint8_t)(i < 900 ? 0 : i < 990 ? 1 : 2);
    ct_class_index ix;
    ct_err err = {{0}};
    assert_int_equal(ct_class_index_build(ds->labels, N, &ix, &err), 0);
    assert_int_equal(ix.n_present, 3);
    static int32_t a[N], b[N];
    static int order[N];
    ct_epoch_order_balanced(7, 0, &ix, N, a);
    int per[3] = {0};
    for (int i = 0; i < N; i++) {
        assert_in_range(a[i], 0, N - 1);
        per[ds->labels[a[i]]]++;
    }
    double sd = sqrt(N * (1.0 / 3) * (2.0 / 3));
    for (int c = 0; c < 3; c++)
        if (fabs(per[c] - N / 3.0) > 5 * sd)
            fail_msg("class %d drawn %d times of %d (expected about %d)", c, per[c], N, N / 3);
    ct_epoch_order_balanced(7, 0, &ix, N, b);
    assert_memory_equal(a, b, sizeof a);
    ct_epoch_order_balanced(7, 1, &ix, N, b);
    assert_true(memcmp(a, b, sizeof a) != 0);
    ct_loader *l = make_loader(ds, 64, true, 7);
    ct_loader_set_balanced(l, &ix);
    for (int epoch = 0; epoch < 2; epoch++) {
        ct_loader_start_epoch(l, epoch);
        run_epoch(l, ds, 64, order);
        ct_epoch_order_balanced(7, epoch, &ix, N, b);
        for (int i = 0; i < N; i++) assert_int_equal(order[i], b[i]);
    }
    ct_loader_destroy(l);
    ct_class_index_free(&ix);
}

/* A sample source (ct_loader_set_source): sample i's pixels are the fixture's with
 * epoch added to each byte; it fails for the samples in fail[0..n_fail). */
typedef struct source_ctx {
    const ct_dataset *ds;
    int fail[3], n_fail;
} source_ctx;

static int test_source(void *ctx, uint32_t epoch, int index, uint8_t *out, ct_err *err) {
    const source_ctx *c = ctx;
    for (int k = 0; k < c->n_fail; k++)
        if (c->fail[k] == index) return ct_errorf(err, "cannot make sample %d", index);
    for (int p = 0; p < ROWS * COLS; p++)
        out[p] = (uint8_t)(c->ds->images[(size_t)index * ROWS * COLS + p] + epoch);
    return 0;
}

/* With a source, each row's pixels are the source's for the batch's epoch, on 1 and
 * on 3 threads alike, with the labels of the dataset's samples. A sample the source
 * fails for ends the epoch at its batch: ct_loader_next gives -1 there, with the
 * message of the batch's first failing row, and the next epoch starts afresh. */
static void test_source_batches(void **state) {
    (void)state;
    const int N = 300, BS = 64;
    ct_dataset *ds = make_ds(N, 7);
    source_ctx c = {.ds = ds};
    for (int threads = 1; threads <= 3; threads += 2) {
        ct_loader *l = make_loader(ds, BS, true, 11);
        ct_err err = {{0}};
        assert_int_equal(ct_loader_set_source(l, test_source, &c, threads, &err), 0);
        for (int epoch = 0; epoch < 2; epoch++) {
            ct_loader_start_epoch(l, epoch);
            ct_batch b;
            int seen = 0;
            while (ct_loader_next(l, &b) == 1)
                for (int r = 0; r < b.n; r++, seen++) {
                    const float *x = b.x + (size_t)r * ROWS * COLS;
                    int id = ((int)lroundf(x[0]) - epoch) & 255;
                    int hi = ((int)lroundf(x[1]) - epoch) & 255;
                    id += 256 * hi;
                    assert_true(id >= 0 && id < N);
                    assert_int_equal(b.y[r], id % 7);
                    for (int p = 2; p < ROWS * COLS; p++)
                        assert_int_equal((int)lroundf(x[p]),
                                         (uint8_t)(ds->images[(size_t)id * ROWS * COLS + p] +
                                                   epoch));
                }
            assert_int_equal(seen, N);
        }
        /* failures: find batch 2's rows, fail two of them */
        int32_t order[300];
        ct_epoch_order(11, 2, true, N, order);
        c.fail[0] = order[2 * BS + 40];
        c.fail[1] = order[2 * BS + 5];
        c.n_fail = 2;
        ct_loader_start_epoch(l, 2);
        ct_batch b;
        assert_int_equal(ct_loader_next(l, &b), 1);
        assert_int_equal(ct_loader_next(l, &b), 1);
        assert_int_equal(ct_loader_next(l, &b), -1);
        char want[64];
        snprintf(want, sizeof want, "cannot make sample %d", order[2 * BS + 5]);
        assert_string_equal(ct_loader_error(l), want);
        assert_int_equal(ct_loader_next(l, &b), 0); /* the epoch ended there */
        c.n_fail = 0;
        ct_loader_start_epoch(l, 2);
        int batches = 0;
        while (ct_loader_next(l, &b) == 1) batches++;
        assert_int_equal(batches, (N + BS - 1) / BS);
        ct_loader_destroy(l);
    }
}

/* Counts the samples it makes (the fixture's pixels as they are). */
static int counting_source(void *ctx, uint32_t epoch, int index, uint8_t *out, ct_err *err) {
    (void)epoch, (void)err;
    int *made = ctx;
    __atomic_add_fetch(made, 1, __ATOMIC_RELAXED);
    memcpy(out, g_fx.images + (size_t)index * ROWS * COLS, ROWS * COLS);
    return 0;
}

/* ct_loader_start_epoch_at: the epoch goes on from the batch asked for, with the
 * batches a full epoch gives there; the ones before are never made (a source is
 * asked for the rest of the epoch's samples only). Starting past every batch ends
 * the epoch at once. */
static void test_start_epoch_at(void **state) {
    (void)state;
    const int N = 250, BS = 32; /* 8 batches, the last of 26 */
    ct_dataset *ds = make_ds(N, 5);
    ct_loader *full = make_loader(ds, BS, true, 3), *part = make_loader(ds, BS, true, 3);
    int made = 0;
    ct_err err = {{0}};
    assert_int_equal(ct_loader_set_source(part, counting_source, &made, 2, &err), 0);
    ct_loader_start_epoch(full, 1);
    ct_loader_start_epoch_at(part, 1, 5);
    ct_batch a, b;
    for (int k = 0; k < 5; k++) assert_int_equal(ct_loader_next(full, &a), 1);
    for (int k = 5; k < 8; k++) {
        assert_int_equal(ct_loader_next(full, &a), 1);
        assert_int_equal(ct_loader_next(part, &b), 1);
        assert_int_equal(b.index, k);
        assert_int_equal(a.n, b.n);
        assert_int_equal(a.first_pos, b.first_pos);
        assert_memory_equal(a.x, b.x, (size_t)a.n * ROWS * COLS * sizeof(float));
        assert_memory_equal(a.y, b.y, (size_t)a.n * sizeof(int32_t));
    }
    assert_int_equal(ct_loader_next(part, &b), 0);
    assert_int_equal(made, 2 * BS + 26);
    ct_loader_start_epoch_at(part, 2, 8);
    assert_int_equal(ct_loader_next(part, &b), 0);
    ct_loader_destroy(full);
    ct_loader_destroy(part);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_batches),
        cmocka_unit_test(test_shuffle_covers_every_sample),
        cmocka_unit_test(test_shuffle_off_is_identity),
        cmocka_unit_test(test_order_depends_only_on_seed_and_epoch),
        cmocka_unit_test(test_normalization),
        cmocka_unit_test(test_held_batch_is_not_overwritten),
        cmocka_unit_test(test_abandon_epoch),
        cmocka_unit_test(test_destroy_mid_epoch),
        cmocka_unit_test(test_create_rejects_bad_args),
        cmocka_unit_test(test_shard_range_partitions),
        cmocka_unit_test(test_shards_concatenate_to_the_batch),
        cmocka_unit_test(test_balanced_sampler),
        cmocka_unit_test(test_source_batches),
        cmocka_unit_test(test_start_epoch_at),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
