/* svg_plot.h: learning curves as one self-contained SVG (no scripts, no external
 * fonts or styles).
 *
 * Two panels, loss and accuracy against epoch, for runs[0..n) overlaid: each run
 * has a colour; its training curve is solid with a dot per epoch, its validation
 * curve dashed, and its step records (when logged) a thin, faint line. A legend
 * names the runs and the line styles. Every curve is a <polyline> with
 * data-run (the run's label) and data-series ("train_loss", "val_loss",
 * "step_loss", "train_acc", "val_acc", "step_acc"). Axes are scaled to the finite
 * values of every run, with round ticks.
 */
#ifndef CT_SVG_PLOT_H
#define CT_SVG_PLOT_H

#include <stdio.h>

#include "plot/curves.h"

int ct_plot_svg(const ct_run_curves *runs, int n, const char *title, FILE *out, ct_err *err);

#endif
