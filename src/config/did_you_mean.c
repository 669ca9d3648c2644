/* did_you_mean.c: near-miss suggestions for unknown keys and enum values.
 *
 * Distance is the case-insensitive optimal-string-alignment edit distance
 * (Levenshtein plus adjacent transposition, so "linaer" is one edit from
 * "linear"). A candidate is suggested when it is within max(1, len/3) edits for
 * short words and within max(2, len/3) for words of four or more characters.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#define CT_DYM_MAX_LEN 64

static size_t ct_min3(size_t a, size_t b, size_t c) {
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

size_t ct_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > CT_DYM_MAX_LEN || m > CT_DYM_MAX_LEN) return (size_t)-1;
    size_t d[CT_DYM_MAX_LEN + 1][CT_DYM_MAX_LEN + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            size_t cost = ai != bj;
            d[i][j] = ct_min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == bj && d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    }
    return d[n][m];
}

static size_t ct_max_distance(size_t len) {
    size_t third = len / 3;
    size_t floor = len >= 4 ? 2 : 1;
    return third > floor ? third : floor;
}

const char *ct_did_you_mean(const char *word, const char *const *cands, size_t n) {
    size_t limit = ct_max_distance(strlen(word)), best_d = (size_t)-1;
    const char *best = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = ct_edit_distance(word, cands[i]);
        if (d <= limit && d < strlen(cands[i]) && d < best_d) {
            best = cands[i];
            best_d = d;
        }
    }
    return best;
}

void ct_join_names(const char *const *names, size_t n, char *buf, size_t bufn) {
    size_t used = 0;
    if (bufn) buf[0] = '\0';
    for (size_t i = 0; i < n && used < bufn; i++) {
        int w = snprintf(buf + used, bufn - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0) return;
        used += (size_t)w;
    }
}

void ct_suggest(const char *word, const char *const *cands, size_t n, const char *label,
                char *buf, size_t bufn) {
    const char *near = ct_did_you_mean(word, cands, n);
    if (near) {
        snprintf(buf, bufn, " (did you mean '%s'?)", near);
        return;
    }
    char list[512];
    ct_join_names(cands, n, list, sizeof list);
    snprintf(buf, bufn, " (%s: %s)", label, list);
}
