/* config_scalar.c: strict parsing of scalar text, shared by the YAML walk and
 * the command-line overrides.
 *
 * Integers are decimal only (no "0x", "0o", "010", "1_000", no spaces) and must be
 * consumed whole without overflow. Floats go through strtod, must be consumed
 * whole and be finite; hexadecimal floats are refused.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

/* An optional sign followed by one or more decimal digits, nothing else. A
 * leading zero is refused ("010" is octal 8 in YAML 1.1). */
static bool ct_is_decimal(const char *s, bool allow_sign) {
    if (allow_sign && (*s == '+' || *s == '-')) s++;
    if (!*s || (s[0] == '0' && s[1])) return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

ct_num_status ct_scan_ll(const char *s, long long *out) {
    if (!s || !ct_is_decimal(s, true)) return CT_NUM_SYNTAX;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE) return CT_NUM_RANGE;
    *out = v;
    return CT_NUM_OK;
}

ct_num_status ct_scan_u64(const char *s, uint64_t *out) {
    if (!s || !ct_is_decimal(s, true)) return CT_NUM_SYNTAX;
    if (*s == '-') return CT_NUM_RANGE;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10); /* at least 64 bits */
    if (errno == ERANGE) return CT_NUM_RANGE;
    *out = (uint64_t)v;
    return CT_NUM_OK;
}

ct_num_status ct_scan_double(const char *s, double *out) {
    if (!s || !*s || isspace((unsigned char)*s) || strpbrk(s, "xX")) return CT_NUM_SYNTAX;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return CT_NUM_SYNTAX;
    if (strpbrk(s, "iInN")) return CT_NUM_SYNTAX; /* inf, infinity, nan */
    if (isinf(v)) return CT_NUM_RANGE;
    *out = v;
    return CT_NUM_OK;
}

bool ct_scan_bool(const char *s, bool *out) {
    if (!s) return false;
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0) {
        *out = true;
        return true;
    }
    if (strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0) {
        *out = false;
        return true;
    }
    return false;
}

int ct_scan_choice(const char *s, const ct_choice *c) {
    if (!s) return -1;
    int m = ct_name_lookup(s, c->names, c->n);
    if (m < 0 && (strcmp(s, "false") == 0 || strcmp(s, "no") == 0)) m = c->off;
    return m;
}

const ct_choice ct_amp_choice = {"train.amp", ct_amp_mode_names, 3, CT_AMP_OFF};
const ct_choice ct_graph_choice = {"train.graph", ct_graph_mode_names, 2, CT_GRAPH_OFF};
const ct_choice ct_cpu_loops_choice = {"train.cpu_loops", ct_cpu_loops_names, 3,
                                       CT_CPU_LOOPS_OFF};
const ct_choice ct_cpu_bf16_choice = {"train.cpu_bf16", ct_cpu_bf16_names, 3,
                                      CT_CPU_BF16_EMULATED};
const ct_choice ct_cpu_winograd_choice = {"train.cpu_winograd", ct_cpu_winograd_names, 2,
                                          CT_CPU_WINOGRAD_OFF};

const char *ct_choice_list(const ct_choice *c, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; i < c->n; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i == 0 ? "" : i + 1 == c->n ? " or " : ", ",
                 c->names[i]);
    }
    return buf;
}
