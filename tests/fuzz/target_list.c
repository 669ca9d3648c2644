/* target_list.c: the list-file parser of data.format list on fuzzed text
 * (targets.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "data/image_list.h"
#include "targets.h"

ct_fuzz_result ct_fuzz_list(const uint8_t *data, size_t size, char *why, size_t n) {
    ct_image_list l;
    ct_err err = {{0}};
    errno = 0;
    if (ct_image_list_parse((const char *)data, size, "fuzz.csv", &l, &err) != 0) {
        if (l.count || l.path) {
            snprintf(why, n, "refused, but the entries were not freed");
            return CT_FUZZ_BROKEN;
        }
        return ct_fuzz_refusal(err.msg, "fuzz.csv", errno, why, n);
    }
    /* every entry non-empty, within the field limit, without NUL, on increasing lines
     * that the text has */
    ct_fuzz_result r = CT_FUZZ_ACCEPTED;
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    for (int i = 0; i < l.count && r == CT_FUZZ_ACCEPTED; i++) {
        size_t a = strlen(l.path[i]), b = strlen(l.label[i]);
        if (a == 0 || b == 0 || a > CT_IMAGE_LIST_FIELD_MAX || b > CT_IMAGE_LIST_FIELD_MAX ||
            l.line[i] < 1 || (size_t)l.line[i] > lines || (i > 0 && l.line[i] <= l.line[i - 1])) {
            snprintf(why, n, "entry %d: path of %zu bytes, label of %zu, line %d of %zu", i, a, b,
                     l.line[i], lines);
            r = CT_FUZZ_BROKEN;
        }
    }
    if (r == CT_FUZZ_ACCEPTED)
        snprintf(why, n, "accepted: %d entries%s", l.count, l.header ? " after a header" : "");
    if (l.count == 0) {
        snprintf(why, n, "accepted a list of no entries");
        r = CT_FUZZ_BROKEN;
    }
    ct_image_list_free(&l);
    return r;
}
