/* test_random_nets.c: random small networks, the whole graph against the double
 * reference (parity_harness.h: parity_graph_steps, parity_graph_eval).
 *
 * A fixed-seed generator builds each net from convolutions (kernels 1, 3 and 5,
 * strides 1 to 3, any padding up to k/2, maps down to 1 x 1, so that kernel rows and
 * columns may lie wholly in the padding), max and average pools (2 or 3 wide,
 * padded or not), the tutorial's conv 3x3 -> relu -> 2x2 max-pool blocks, residual
 * blocks (identity and projection shortcuts, strided or not), batch norms, every
 * activation, global average pooling, and a head of linear layers with batch norm 1d
 * and dropout; 1 or 3 input channels, batches of 2 to 8 rows, full or partial. Each
 * net runs with ctrain's loops auto, portable or off, fused as `fit` builds it or
 * not, drawn from its seed, so that the backend's choices meet shapes no
 * hand-written case names. Training nets run one batch, or two with the second's
 * gradients accumulated into the first's (train.grad_accum_steps), and every output
 * and parameter gradient must be within the tolerance (L2, relative to the reference
 * tensor's). Other nets run as `ctrain eval` does: an inference plan's forward, with
 * random running statistics in the batch norms. Each group prints which of ctrain's
 * own loops the nets met (what this CPU picks; never asserted).
 *
 * The generator keeps clear of nets whose gradients vanish in exact arithmetic, where
 * the reference is rounding noise: a bias or a batch norm's shift is always followed
 * by a nonlinearity before any batch norm reads it (a residual add is followed by a
 * relu), no 1 x 1 convolution of a single channel feeds a batch norm (the norm undoes
 * its scale), and every batch norm normalizes at least 16 values per channel (1d: 6).
 *
 * fp32: within 5e-3 (the runs differ from the reference by rounding only, but where
 * a relu's input lies within rounding of zero the mask flips, and that one element's
 * gradient moves every gradient before it: 2e-3 in one net of 4800 drawn here,
 * with oneDNN capped at SSE4.1), the evaluations within 1e-4.
 * Native bf16 (the "bf16" group; exit 77 where oneDNN has no bf16 instructions):
 * training nets without batch norms (whose backward cancels, so that bf16 inputs err
 * by more than the gradient's size), within 10x the reference's size: bf16 rounding
 * flips relu masks and max-pool choices on maps of a few pixels (up to 64% here), and
 * a one-element gradient that sums to nearly nothing erred by 5.2x in one net of
 * 2800, so this bound is for gross errors such as a gradient read from memory nobody
 * wrote; evaluations, batch norms included, within 10%. The emulated bf16 and fp16
 * (every CPU runs them, in the main group) train within 0.5: their worst here is
 * 0.086, and a residual backward with the wrong sign errs by 1.99.
 * The "cuda" group (exit 77 without a usable GPU or a CUDA build) runs the fp32
 * nets on the CUDA backend, TF32 off (NVIDIA_TF32_OVERRIDE=0): training within
 * 5e-3, evaluations within 1e-3 (cuDNN may pick FFT or Winograd algorithms, whose
 * rounding errs more than direct sums); it prints the cuDNN and cuBLAS algorithms
 * the nets met. */
#include "ct_build_config.h" /* first: backend.h declares ct_backend_cuda under CT_HAVE_CUDA */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/cpu_isa.h"
#include "helpers.h"
#include "parity_harness.h"

#define MAX_LAYERS 64

typedef struct net {
    ct_layer_cfg layers[MAX_LAYERS];
    int n, c, h, w; /* layers; the input's channels and size */
    int batch, rows;
    char what[512];
    int len;
} net;

static uint32_t state;
static int draw(int lo, int hi) { /* uniform in [lo, hi] */
    state = state * 1664525u + 1013904223u;
    return lo + (int)((state >> 8) % (uint32_t)(hi - lo + 1));
}

static void say(net *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->what + t->len, sizeof t->what - (size_t)t->len, fmt, ap);
    va_end(ap);
    if (k > 0 && t->len + k < (int)sizeof t->what) t->len += k;
}

static void add(net *t, ct_layer_cfg l) {
    if (t->n < MAX_LAYERS) t->layers[t->n++] = l;
}

static ct_layer_cfg norm(ct_layer_kind kind) {
    ct_layer_cfg l = L(kind);
    l.eps = 1e-5, l.momentum = 0.1;
    return l;
}

static int out_size(int in, int k, int s, int p) {
    return in + 2 * p < k ? 0 : (in + 2 * p - k) / s + 1;
}

static ct_layer_cfg activation(net *t) {
    static const char *const names[] = {"relu", "gelu", "silu", "tanh", "sigmoid", "leaky"};
    int a = draw(0, 7);
    a = a > 5 ? 0 : a; /* relu more often */
    say(t, " %s", names[a]);
    switch (a) {
    case 1: return L(CT_LAYER_GELU);
    case 2: return L(CT_LAYER_SILU);
    case 3: return L(CT_LAYER_TANH);
    case 4: return L(CT_LAYER_SIGMOID);
    case 5: return leaky_relu(0.1);
    default: return L(CT_LAYER_RELU);
    }
}

/* A conv, then a batch norm or not, then an activation or not: a bias only where an
 * activation follows at once. */
static void conv_block(net *t, int *c, int *h, int *w, bool norms, bool small_maps) {
    static const int chans[] = {1, 3, 4, 8, 12, 16, 20, 24, 32, 48};
    int oc = chans[draw(0, 9)], k = draw(0, 3) == 0 ? 1 : draw(0, 4) == 0 ? 5 : 3;
    int s = draw(0, small_maps ? 1 : 2) == 0 ? draw(2, 3) : 1;
    int p = draw(0, 1) ? k / 2 : draw(0, k / 2);
    int oh = out_size(*h, k, s, p), ow = out_size(*w, k, s, p);
    if (oh < 1 || ow < 1) return;
    bool bn = norms && draw(0, 2) == 0 && t->rows * oh * ow >= 16 && !(k == 1 && *c == 1);
    bool act = bn || draw(0, 4) != 0, bias = !bn && act && draw(0, 1);
    add(t, conv(oc, k, s, p, bias));
    say(t, " conv%d k%d s%d p%d%s", oc, k, s, p, bias ? "" : " nobias");
    if (bn) add(t, norm(CT_LAYER_BATCHNORM2D)), say(t, " bn");
    if (act) add(t, activation(t));
    *c = oc, *h = oh, *w = ow;
}

static void pool_block(net *t, int *h, int *w) {
    bool max = draw(0, 2) != 0;
    int k = draw(2, 3), s = draw(1, 2), p = draw(0, k / 2);
    int oh = out_size(*h, k, s, p), ow = out_size(*w, k, s, p);
    if (oh < 1 || ow < 1) return;
    add(t, pool(max ? CT_LAYER_MAXPOOL2D : CT_LAYER_AVGPOOL2D, k, s, p));
    say(t, " %spool k%d s%d p%d", max ? "max" : "avg", k, s, p);
    *h = oh, *w = ow;
}

/* The tutorial's block: conv 3x3 (stride 1, padding 1) -> relu -> 2x2 max-pool, which
 * ctrain's loops fuse (the one-pass block on one input channel, else the backward
 * from the pool's gradient). */
static void cnn_block(net *t, int *c, int *h, int *w) {
    static const int chans[] = {4, 8, 12, 16, 24, 32, 48};
    if (*h < 2 || *w < 2) return;
    int oc = chans[draw(0, 6)];
    add(t, conv(oc, 3, 1, 1, true));
    add(t, L(CT_LAYER_RELU));
    add(t, pool(CT_LAYER_MAXPOOL2D, 2, 2, 0));
    say(t, " conv%d k3 s1 p1 relu maxpool k2 s2 p0", oc);
    *c = oc, *h /= 2, *w /= 2;
}

/* body: conv 3x3 (stride s) [bn] relu conv 3x3 [bn]; shortcut: identity, or a 1x1
 * conv [bn] where the stride or the channels change; the add, then a relu. */
static void residual_block(net *t, int *c, int *h, int *w, bool norms) {
    static const int chans[] = {3, 4, 8, 12, 16, 20, 24, 32, 48};
    int oc = draw(0, 1) ? *c : chans[draw(0, 8)], mid = chans[draw(0, 8)];
    int s = draw(0, 2) == 0 ? 2 : 1;
    int oh = out_size(*h, 3, s, 1), ow = out_size(*w, 3, s, 1);
    if (oh < 1 || ow < 1) return;
    bool bn = norms && t->rows * oh * ow >= 16 && draw(0, 1);
    bool proj = s != 1 || oc != *c, proj_bn = bn && *c > 1;
    add(t, body(conv(mid, 3, s, 1, !bn)));
    if (bn) add(t, body(norm(CT_LAYER_BATCHNORM2D)));
    add(t, body(L(CT_LAYER_RELU)));
    add(t, body(conv(oc, 3, 1, 1, false)));
    if (bn) add(t, body(norm(CT_LAYER_BATCHNORM2D)));
    if (proj) add(t, shortcut(conv(oc, 1, s, 0, false)));
    if (proj && proj_bn) add(t, shortcut(norm(CT_LAYER_BATCHNORM2D)));
    add(t, L(CT_LAYER_RESIDUAL));
    add(t, L(CT_LAYER_RELU));
    say(t, " residual[%d->%d->%d s%d%s%s] relu", *c, mid, oc, s, bn ? " bn" : "",
        proj ? " projection" : "");
    *c = oc, *h = oh, *w = ow;
}

static void build(net *t, uint32_t seed, bool small_maps, bool norms) {
    memset(t, 0, sizeof *t);
    state = seed * 2654435761u + 12345u;
    t->batch = draw(2, 8);
    t->rows = draw(0, 3) == 0 ? draw(2, t->batch) : t->batch;
    t->c = draw(0, 2) == 0 ? 3 : 1;
    t->h = small_maps ? draw(1, 5) : draw(5, 16);
    t->w = small_maps ? draw(1, 5) : draw(5, 16);
    say(t, "%dx%dx%d, %d of %d rows:", t->c, t->h, t->w, t->rows, t->batch);
    int c = t->c, h = t->h, w = t->w;
    for (int b = draw(1, 4); b > 0 && t->n < MAX_LAYERS - 16; b--) {
        int kind = draw(0, 11);
        if (kind <= 4) conv_block(t, &c, &h, &w, norms, small_maps);
        else if (kind <= 6) pool_block(t, &h, &w);
        else if (kind <= 8) residual_block(t, &c, &h, &w, norms);
        else cnn_block(t, &c, &h, &w);
    }
    if (draw(0, 2) == 0) add(t, L(CT_LAYER_GLOBAL_AVGPOOL)), say(t, " global-avgpool");
    add(t, L(CT_LAYER_FLATTEN));
    if (draw(0, 2) == 0) {
        int hidden = draw(5, 40);
        bool bn = norms && t->rows >= 6 && draw(0, 2) == 0;
        add(t, linear(hidden, !bn));
        say(t, " linear%d", hidden);
        if (bn) add(t, norm(CT_LAYER_BATCHNORM1D)), say(t, " bn1d");
        add(t, activation(t));
        if (draw(0, 3) == 0) add(t, dropout(0.3)), say(t, " dropout");
    }
    add(t, linear(10, true));
}

/* The backend the nets run on: the CPU's, or CUDA's (the "cuda" group), and the
 * fp32 evaluations' bound there (see the header). */
static bool on_cuda;
static double eval_tol = 1e-4;

/* The implementations of ctrain's own loops the nets met (on CUDA: every
 * algorithm), for the log. */
#define MAX_MET 32
static char met[MAX_MET][96];
static int met_count[MAX_MET], n_met;

static void tally(harness *h) {
    for (int i = 0; i < h->g.n_nodes; i++)
        for (int p = CT_PASS_FORWARD; p <= CT_PASS_BACKWARD_WEIGHTS; p++) {
            const char *s = h->vt->impl_name(h->b, i, (ct_impl_pass)p);
            if (!on_cuda && strncmp(s, "ctrain", 6) != 0) continue;
            int k = 0;
            while (k < n_met && strcmp(met[k], s) != 0) k++;
            if (k == n_met && n_met < MAX_MET) snprintf(met[n_met++], sizeof met[0], "%s", s);
            if (k < n_met) met_count[k]++;
        }
}

static void print_met(const char *what) {
    print_message("%s: %s met (layer passes):", what,
                  on_cuda ? "the algorithms" : "ctrain's loops");
    for (int k = 0; k < n_met; k++) print_message(" %s x%d;", met[k], met_count[k]);
    print_message("\n");
    n_met = 0;
    memset(met_count, 0, sizeof met_count);
}

/* How the bf16 runs compute: natively (the bf16 group) or emulated in fp32. */
static ct_cpu_bf16 bf16_mode = CT_CPU_BF16_NATIVE;

/* nets seeds [first, first + count) with amp, drawn loops and fusion: one training
 * step of a training plan, or with eval the evaluation forward of an inference plan
 * (as `ctrain eval` makes it). */
static void run(uint32_t first, int count, bool small_maps, ct_amp_mode amp, double tol,
                bool eval) {
    static const ct_cpu_loops modes[] = {CT_CPU_LOOPS_AUTO, CT_CPU_LOOPS_PORTABLE,
                                         CT_CPU_LOOPS_OFF};
    static const char *const mode_names[] = {"auto", "portable", "off"};
    const char *amp_name = amp == CT_AMP_OFF    ? "fp32"
                           : amp == CT_AMP_FP16 ? "fp16 emulated"
                           : bf16_mode == CT_CPU_BF16_NATIVE ? "bf16"
                                                             : "bf16 emulated";
    parity_amp = amp;
    parity_cpu_bf16 = amp == CT_AMP_BF16 ? bf16_mode : CT_CPU_BF16_AUTO;
    parity_l2_tol = tol;
    for (uint32_t seed = first; seed < first + (uint32_t)count; seed++) {
        net t;
        build(&t, seed, small_maps, amp == CT_AMP_OFF || eval); /* see the header */
        int m = draw(0, 2);
        bool fuse = draw(0, 3) != 0;
        int steps = draw(0, 2) == 0 ? 2 : 1; /* a second batch accumulating into the first */
        char what[640];
        snprintf(what, sizeof what, "net %u (%s%s, loops %s%s) %s", seed, amp_name,
                 eval ? " eval" : steps > 1 ? ", 2 batches accumulated" : "", mode_names[m],
                 fuse ? ", fused" : "", t.what);
        print_message("%s\n", what);
        parity_cpu_loops = modes[m];
        parity_fuse = fuse;
        harness *h = eval ? open_opt(t.c, t.h, t.w, t.layers, t.n, t.batch, false, CT_OPT_SGD, 0)
                          : open_as_built(t.c, t.h, t.w, t.layers, t.n, t.batch);
        parity_fuse = false;
        tally(h);
        parity_seed(seed + 1);
        if (eval) parity_graph_eval(h, t.rows, what);
        else parity_graph_steps(h, t.rows, steps, what);
        close_h(h);
    }
    parity_cpu_loops = CT_CPU_LOOPS_AUTO;
    parity_amp = CT_AMP_OFF;
    parity_cpu_bf16 = CT_CPU_BF16_AUTO;
    parity_l2_tol = 0.0;
}

static void test_fp32_nets(void **state) {
    (void)state;
    run(1, 60, false, CT_AMP_OFF, 5e-3, false);
    print_met("fp32 nets");
}

static void test_fp32_small_maps(void **state) {
    (void)state;
    run(1001, 60, true, CT_AMP_OFF, 5e-3, false);
    print_met("fp32 nets on small maps");
}

static void test_fp32_eval(void **state) {
    (void)state;
    run(4001, 30, false, CT_AMP_OFF, eval_tol, true);
    run(5001, 30, true, CT_AMP_OFF, eval_tol, true);
    print_met("fp32 evaluation");
}

/* The emulated mixed precisions, which every CPU runs (bf16 where oneDNN has no
 * bf16 instructions, fp16 everywhere): training within 0.5 relative L2, six times the
 * worst of these nets (0.086) and a quarter of what a residual backward with the
 * wrong sign gives (1.99); evaluations within 10%. */
#define EMULATED_TOL 0.5
static void test_emulated_amp(void **state) {
    (void)state;
    bf16_mode = CT_CPU_BF16_EMULATED;
    run(8001, 20, false, CT_AMP_BF16, EMULATED_TOL, false);
    run(8101, 20, true, CT_AMP_BF16, EMULATED_TOL, false);
    run(8201, 20, false, CT_AMP_BF16, 0.1, true);
    bf16_mode = CT_CPU_BF16_NATIVE;
    run(9001, 20, false, CT_AMP_FP16, EMULATED_TOL, false);
    run(9101, 20, true, CT_AMP_FP16, EMULATED_TOL, false);
    run(9201, 20, false, CT_AMP_FP16, 0.1, true);
    print_met("emulated bf16 and fp16");
}

static void test_bf16_nets(void **state) {
    (void)state;
    run(2001, 30, false, CT_AMP_BF16, 10.0, false);
    run(3001, 40, true, CT_AMP_BF16, 10.0, false);
    print_met("bf16 nets");
}

static void test_bf16_eval(void **state) {
    (void)state;
    run(6001, 30, false, CT_AMP_BF16, 0.1, true);
    run(7001, 30, true, CT_AMP_BF16, 0.1, true);
    print_met("bf16 evaluation");
}

/* The "cuda" group: the fp32 nets and evaluations on the CUDA backend. */
static int cuda_group(void) {
#ifdef CT_HAVE_CUDA
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1); /* before CUDA starts: fp32 products */
    char why[256];
    if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
    parity_vt = &ct_backend_cuda;
    on_cuda = true;
    eval_tol = 1e-3; /* see the header */
    const struct CMUnitTest cuda[] = {cmocka_unit_test(test_fp32_nets),
                                      cmocka_unit_test(test_fp32_small_maps),
                                      cmocka_unit_test(test_fp32_eval)};
    return cmocka_run_group_tests_name("cuda", cuda, NULL, NULL) ? 1 : 0;
#else
    return ct_test_skip("this build has no CUDA (meson option cuda)");
#endif
}

int main(int argc, char **argv) {
    static const char *const groups[] = {"bf16", "cuda"};
    const char *group = ct_test_group_in(argc, argv, groups, 2);
    if (group && !strcmp(group, "cuda")) return cuda_group();
    parity_vt = &ct_backend_cpu;
    parity_rel_tol = 1e-4;
    parity_print_loops_isa();
    if (group) { /* bf16 */
        if (!ct_onednn_has_bf16())
            return ct_test_skip("oneDNN has no bf16 instructions on this CPU (or "
                                "ONEDNN_MAX_CPU_ISA caps them): native bf16 does not run here");
        const struct CMUnitTest bf16[] = {cmocka_unit_test(test_bf16_nets),
                                          cmocka_unit_test(test_bf16_eval)};
        return cmocka_run_group_tests_name("bf16", bf16, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_nets),
        cmocka_unit_test(test_fp32_small_maps),
        cmocka_unit_test(test_fp32_eval),
        cmocka_unit_test(test_emulated_amp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
