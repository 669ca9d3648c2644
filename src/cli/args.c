/* args.c: the subcommands' shared argument parser (see cli.h). */
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40) return 99;
    int d[41][41];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

const char *ct_closest_name(const char *word, const char *const *names, int n) {
    int best = -1, bd = 3;
    for (int i = 0; i < n; i++) {
        int dd = edit_distance(word, names[i]);
        if (dd < bd) bd = dd, best = i;
    }
    return best >= 0 ? names[best] : NULL;
}

static int unknown_option(const char *cmd, const char *name, const ct_argspec *specs, int n,
                          ct_err *err) {
    int best = -1, bd = 3;
    for (int i = 0; i < n; i++) {
        int dd = edit_distance(name, specs[i].name);
        if (dd < bd) bd = dd, best = i;
    }
    if (best >= 0)
        ct_errorf(err, "%s: unknown option '--%s' (did you mean '--%s'?)", cmd, name,
                  specs[best].name);
    else
        ct_errorf(err, "%s: unknown option '--%s'", cmd, name);
    return CT_EXIT_USAGE;
}

/* "--quiet" for 'q', "--verbose" for 'v', "--output" for 'o'; NULL for others. */
static const char *short_alias(char c) {
    return c == 'q' ? "--quiet" : c == 'v' ? "--verbose" : c == 'o' ? "--output" : NULL;
}

int ct_parse_args(const char *cmd, int argc, char **argv, const ct_argspec *specs, int nspecs,
                  const char **pos, int max_pos, int *npos, ct_err *err) {
    *npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] && a[1] != '-' && !a[2]) { /* "-x": its long form */
            const char *alias = short_alias(a[1]);
            bool known = false;
            for (int k = 0; alias && k < nspecs; k++) known |= !strcmp(specs[k].name, alias + 2);
            if (!known) {
                ct_errorf(err, "%s: unknown option '%s'", cmd, a);
                return CT_EXIT_USAGE;
            }
            a = alias;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (*npos >= max_pos) {
                ct_errorf(err, "%s: unexpected argument '%s'", cmd, a);
                return CT_EXIT_USAGE;
            }
            pos[(*npos)++] = a;
            continue;
        }
        char name[64];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, a + 2, len);
        name[len] = 0;
        const ct_argspec *s = NULL;
        for (int k = 0; k < nspecs; k++)
            if (strcmp(specs[k].name, name) == 0) s = &specs[k];
        if (!s) return unknown_option(cmd, name, specs, nspecs, err);
        if (s->flag) *s->flag = true;
        if (s->nvalues == 0) {
            if (eq && s->value) { /* a flag with an optional "=VALUE" */
                *s->value = eq + 1;
            } else if (eq) {
                ct_errorf(err, "%s: option '--%s' takes no value", cmd, name);
                return CT_EXIT_USAGE;
            }
            continue;
        }
        int need = s->nvalues - (eq ? 1 : 0);
        if (eq && s->nvalues == 2) {
            ct_errorf(err, "%s: option '--%s' takes two values: --%s A B", cmd, name, name);
            return CT_EXIT_USAGE;
        }
        if (i + need >= argc) {
            ct_errorf(err, "%s: option '--%s' needs %s", cmd, name,
                      s->nvalues == 2 ? "two values" : "a value");
            return CT_EXIT_USAGE;
        }
        for (int k = 1; k <= need; k++)
            if (strncmp(argv[i + k], "--", 2) == 0 && argv[i + k][2] != '\0') {
                ct_errorf(err, "%s: option '--%s' needs %s, got the option '%s'", cmd, name,
                          s->nvalues == 2 ? "two values" : "a value", argv[i + k]);
                return CT_EXIT_USAGE;
            }
        *s->value = eq ? eq + 1 : argv[++i];
        if (s->nvalues == 2) *s->value2 = argv[++i];
    }
    return 0;
}

FILE *ct_report_stream(const char *out) {
    struct stat a, b;
    if (!strcmp(out, "-")) return stderr;
    if (stat(out, &a) == 0 && fstat(STDOUT_FILENO, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        return stderr;
    return stdout;
}
