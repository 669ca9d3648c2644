/* svg_plot.c: learning curves as SVG (svg_plot.h). */
#include "plot/svg_plot.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

enum { WIDTH = 960, HEIGHT = 440, TOP = 56, PANEL_H = 270, PANEL_W = 380, LEFT0 = 72,
       LEFT1 = 552, LEGEND_Y = 392 };

/* Colour-blind-safe (Okabe-Ito), then repeating. */
static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                      "#E69F00", "#56B4E9", "#000000", "#F0E442"};

typedef struct range {
    double lo, hi;
} range;

typedef struct panel {
    int left;
    range x, y;
    const char *title;
} panel;

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void widen(range *r, double v) {
    if (!isfinite(v)) return;
    if (v < r->lo) r->lo = v;
    if (v > r->hi) r->hi = v;
}

/* A step of 1, 2 or 5 times a power of ten giving about five ticks over r. */
static double tick_step(range r) {
    double raw = (r.hi - r.lo) / 5.0, p = pow(10.0, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1.0 : m < 3.5 ? 2.0 : m < 7.5 ? 5.0 : 10.0) * p;
}

/* Pads r, keeps it inside [floor, ceil] (NaN: unbounded) and makes it non-empty. */
static range settle(range r, double floor_v, double ceil_v) {
    if (!(r.hi >= r.lo)) r = (range){0.0, 1.0};
    double pad = (r.hi - r.lo) * 0.06;
    if (pad == 0) pad = fabs(r.hi) * 0.1 + 0.05;
    r.lo -= pad;
    r.hi += pad;
    if (!isnan(floor_v) && r.lo < floor_v) r.lo = floor_v;
    if (!isnan(ceil_v) && r.hi > ceil_v) r.hi = ceil_v;
    return r;
}

static double px(const panel *p, double x) {
    return p->left + (x - p->x.lo) / (p->x.hi - p->x.lo) * PANEL_W;
}

static double py(const panel *p, double y) {
    return TOP + PANEL_H - (y - p->y.lo) / (p->y.hi - p->y.lo) * PANEL_H;
}

static void draw_axes(FILE *f, const panel *p, const char *xlabel) {
    fprintf(f, "<g class=\"panel\">\n<text x=\"%d\" y=\"%d\" font-size=\"15\" "
            "font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
            p->left + PANEL_W / 2, TOP - 12, p->title);
    double ys = tick_step(p->y);
    for (double t = ceil(p->y.lo / ys) * ys; t <= p->y.hi + 1e-12; t += ys) {
        double y = py(p, t);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n",
                p->left, y, p->left + PANEL_W, y, p->left - 6, y + 4, fabs(t) < ys * 1e-6 ? 0 : t);
    }
    double xs = tick_step(p->x);
    if (xs < 1) xs = 1; /* epochs are whole */
    for (double t = ceil(p->x.lo / xs) * xs; t <= p->x.hi + 1e-12; t += xs)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
                px(p, t), TOP + PANEL_H + 16, t);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#555\"/>\n<text x=\"%d\" y=\"%d\" font-size=\"12\" "
            "text-anchor=\"middle\">%s</text>\n</g>\n",
            p->left, TOP, PANEL_W, PANEL_H, p->left + PANEL_W / 2, TOP + PANEL_H + 34, xlabel);
}

/* One curve: the finite points of pts[0..n) (acc: the accuracy, else the loss). */
static void draw_curve(FILE *f, const panel *p, const ct_curve_point *pts, int n, bool acc,
                       const char *run, const char *series, const char *colour,
                       const char *style, bool dots) {
    fprintf(f, "<polyline data-run=\"");
    xml_text(f, run);
    fprintf(f, "\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" %s points=\"", series, colour,
            style);
    for (int i = 0; i < n; i++) {
        double v = acc ? pts[i].acc : pts[i].loss;
        if (isfinite(v)) fprintf(f, "%.2f,%.2f ", px(p, pts[i].x), py(p, v));
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; dots && i < n; i++) {
        double v = acc ? pts[i].acc : pts[i].loss;
        if (isfinite(v))
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n",
                    px(p, pts[i].x), py(p, v), colour);
    }
}

static void draw_legend(FILE *f, const ct_run_curves *runs, int n) {
    int x = LEFT0, y = LEGEND_Y;
    for (int r = 0; r < n; r++) {
        if (x > WIDTH - 200) {
            x = LEFT0;
            y += 20;
        }
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                "stroke-width=\"3\"/>\n<text x=\"%d\" y=\"%d\" font-size=\"12\">",
                x, y, x + 24, y, colours[r % 8], x + 30, y + 4);
        xml_text(f, runs[r].label);
        fprintf(f, "</text>\n");
        x += 40 + 8 * (int)strlen(runs[r].label);
    }
    y += 24;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" stroke-width=\"2\"/>"
            "<text x=\"%d\" y=\"%d\" font-size=\"12\">train (per epoch)</text>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" stroke-width=\"2\" "
            "stroke-dasharray=\"6 4\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">val</text>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" stroke-opacity=\"0.4\"/>"
            "<text x=\"%d\" y=\"%d\" font-size=\"12\">train (logged steps)</text>\n",
            LEFT0, y, LEFT0 + 24, y, LEFT0 + 30, y + 4, LEFT0 + 170, y, LEFT0 + 194, y,
            LEFT0 + 200, y + 4, LEFT0 + 250, y, LEFT0 + 274, y, LEFT0 + 280, y + 4);
}

int ct_plot_svg(const ct_run_curves *runs, int n, const char *title, FILE *f, ct_err *err) {
    range x = {0.0, 1.0}, loss = {INFINITY, -INFINITY}, acc = {INFINITY, -INFINITY};
    for (int r = 0; r < n; r++) {
        const ct_run_curves *c = &runs[r];
        for (int i = 0; i < c->n_epochs; i++) {
            widen(&x, c->train[i].x);
            widen(&loss, c->train[i].loss);
            widen(&loss, c->val[i].loss);
            widen(&acc, c->train[i].acc);
            widen(&acc, c->val[i].acc);
        }
        for (int i = 0; i < c->n_steps; i++) {
            widen(&loss, c->steps[i].loss);
            widen(&acc, c->steps[i].acc);
        }
    }
    panel pl = {LEFT0, x, settle(loss, 0.0, NAN), "Loss"};
    panel pa = {LEFT1, x, settle(acc, 0.0, 1.0), "Accuracy"};
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
            "<text x=\"%d\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">",
            WIDTH, HEIGHT, WIDTH, HEIGHT, WIDTH / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    draw_axes(f, &pl, "epoch");
    draw_axes(f, &pa, "epoch");
    static const char *const solid = "stroke-width=\"2\"";
    static const char *const dashed = "stroke-width=\"2\" stroke-dasharray=\"6 4\"";
    static const char *const faint = "stroke-width=\"1\" stroke-opacity=\"0.4\"";
    for (int r = 0; r < n; r++) {
        const ct_run_curves *c = &runs[r];
        const char *col = colours[r % 8];
        for (int k = 0; k < 2; k++) {
            const panel *p = k ? &pa : &pl;
            draw_curve(f, p, c->steps, c->n_steps, k, c->label, k ? "step_acc" : "step_loss", col,
                       faint, false);
            draw_curve(f, p, c->train, c->n_epochs, k, c->label, k ? "train_acc" : "train_loss",
                       col, solid, true);
            draw_curve(f, p, c->val, c->n_epochs, k, c->label, k ? "val_acc" : "val_loss", col,
                       dashed, true);
        }
    }
    draw_legend(f, runs, n);
    fprintf(f, "</svg>\n");
    if (ferror(f)) return ct_errorf(err, "cannot write the SVG");
    return 0;
}
