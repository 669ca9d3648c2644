/* cmd_plot.c: `ctrain plot RUN... [-o FILE] [--title TEXT]`: the learning curves of
 * one or more runs as one SVG (plot/svg_plot.h), written atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/atomic_file.h"
#include "plot/curves.h"
#include "plot/svg_plot.h"

#define CT_PLOT_MAX_RUNS 16

int ct_cmd_plot(int argc, char **argv, ct_err *err) {
    const char *out = "curves.svg", *title = NULL, *pos[CT_PLOT_MAX_RUNS];
    ct_argspec specs[] = {
        {"output", 1, &out, NULL, NULL}, /* -o */
        {"title", 1, &title, NULL, NULL},
    };
    int npos, rc = ct_parse_args("plot", argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                                 pos, CT_PLOT_MAX_RUNS, &npos, err);
    if (rc) return rc;
    if (npos == 0) {
        ct_errorf(err, "plot: expected one or more run directories (e.g. ctrain plot runs/cnn "
                  "runs/cnn-2)");
        return CT_EXIT_USAGE;
    }
    ct_run_curves runs[CT_PLOT_MAX_RUNS];
    int n = 0;
    rc = CT_EXIT_OK;
    for (; n < npos; n++)
        if (ct_curves_read(pos[n], &runs[n], err) != 0) {
            rc = CT_EXIT_ERROR;
            break;
        }
    char default_title[256] = "";
    if (rc == CT_EXIT_OK && !title) {
        for (int i = 0; i < n; i++) {
            if (i) strncat(default_title, " vs ", sizeof default_title - strlen(default_title) - 1);
            strncat(default_title, runs[i].label, sizeof default_title - strlen(default_title) - 1);
        }
        title = default_title;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *mem = rc == CT_EXIT_OK ? open_memstream(&text, &len) : NULL;
    if (rc == CT_EXIT_OK && !mem) rc = (ct_errorf(err, "out of memory"), CT_EXIT_ERROR);
    if (mem) {
        if (ct_plot_svg(runs, n, title, mem, err) != 0) rc = CT_EXIT_ERROR;
        fclose(mem);
        if (rc == CT_EXIT_OK && ct_atomic_write_file(out, text, len, err) != 0)
            rc = CT_EXIT_ERROR;
        free(text);
    }
    for (int i = 0; i < n; i++) ct_curves_free(&runs[i]);
    if (rc == CT_EXIT_OK)
        fprintf(ct_report_stream(out), "Wrote %s (%d run%s)\n", out, npos, npos == 1 ? "" : "s");
    return rc;
}
