/* cli.h: the subcommands and the small argument parser they share.
 *
 * Each command returns an exit status and, on failure, fills err; only main()
 * prints errors and exits. */
#ifndef CT_CLI_H
#define CT_CLI_H

#include <stdbool.h>

#include "common/error.h"

enum { CT_EXIT_OK = 0, CT_EXIT_ERROR = 1, CT_EXIT_USAGE = 2 }; /* stopped by a signal: 128 + it */

typedef struct ct_command {
    const char *name;
    const char *synopsis; /* "fit CONFIG [options]" */
    const char *summary;  /* one line */
    const char *help;     /* option lines */
    int (*run)(int argc, char **argv, ct_err *err); /* argv[0] is the command name */
    bool ranks;           /* runs as several MPI ranks (dist/dist.h); others refuse */
} ct_command;

int ct_cmd_fit(int argc, char **argv, ct_err *err);
int ct_cmd_eval(int argc, char **argv, ct_err *err);
int ct_cmd_summary(int argc, char **argv, ct_err *err);
int ct_cmd_devices(int argc, char **argv, ct_err *err);
int ct_cmd_bench(int argc, char **argv, ct_err *err);
int ct_cmd_plot(int argc, char **argv, ct_err *err);
int ct_cmd_inspect(int argc, char **argv, ct_err *err);
int ct_cmd_export(int argc, char **argv, ct_err *err);
int ct_cmd_predict(int argc, char **argv, ct_err *err);
int ct_cmd_data(int argc, char **argv, ct_err *err);

/* One option: "--name" with 0 (flag), 1 or 2 values. A flag whose `value` is set also
 * takes an optional "--name=VALUE" (--resume=auto). */
typedef struct ct_argspec {
    const char *name;  /* without the leading "--" */
    int nvalues;
    const char **value;  /* first value (nvalues >= 1; a flag's optional =VALUE) */
    const char **value2; /* second value (nvalues == 2) */
    bool *flag;          /* set when present (any nvalues), may be NULL */
} ct_argspec;

/* Parses argv[1..argc) into the specs and up to max_pos positionals. Accepts
 * "--name value", "--name=value" (one value), and the one-letter aliases -q
 * (--quiet), -v (--verbose) and -o (--output) where the command has those options. Unknown options, missing values
 * and too many positionals are errors ("fit: unknown option '--epoch' (did you mean
 * '--epochs'?)"); the return value is then CT_EXIT_USAGE, else 0. */
int ct_parse_args(const char *cmd, int argc, char **argv, const ct_argspec *specs, int nspecs,
                  const char **pos, int max_pos, int *npos, ct_err *err);

/* The entry of names[0..n) within edit distance 2 of word (the closest, the first
 * on a tie), or NULL: the did-you-mean of unknown commands and options. */
const char *ct_closest_name(const char *word, const char *const *names, int n);

#include <stdio.h>

/* Where a command's "Wrote OUT" line goes: stderr when OUT is "-" or the same file
 * as standard output (the written bytes go there), else stdout. */
FILE *ct_report_stream(const char *out);

/* Loads a config and applies the common overrides that are non-NULL. */
typedef struct ct_overrides {
    const char *epochs, *batch_size, *lr, *device, *seed, *out, *amp, *grad_accum_steps, *graph,
        *cpu_loops, *cpu_bf16, *cpu_winograd;
} ct_overrides;

#endif
