/* image_list.c: the CSV list-file parser (image_list.h). */
#include "data/image_list.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

void ct_image_list_free(ct_image_list *l) {
    for (int i = 0; i < l->count; i++) {
        free(l->path[i]);
        free(l->label[i]);
    }
    free(l->path);
    free(l->label);
    free(l->line);
    memset(l, 0, sizeof *l);
}

/* One field from *p (not past end, which is the line's end) into out (at most
 * CT_IMAGE_LIST_FIELD_MAX bytes and a NUL); *p is left after the field's comma,
 * or at end. Returns the field's length, or -1 with what went wrong in *why. */
static long field(const char **p, const char *end, char *out, bool *last, const char **why) {
    const char *s = *p;
    long n = 0;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    if (s < end && *s == '"') {
        for (s++;; s++) {
            if (s >= end) {
                *why = "a quoted field is not closed on its line";
                return -1;
            }
            if (*s == '"') {
                if (s + 1 < end && s[1] == '"') {
                    s++;
                } else {
                    s++;
                    break;
                }
            }
            if (n >= CT_IMAGE_LIST_FIELD_MAX) {
                *why = "a field is longer than 4096 bytes";
                return -1;
            }
            out[n++] = *s;
        }
        while (s < end && (*s == ' ' || *s == '\t')) s++;
        if (s < end && *s != ',') {
            *why = "text after a quoted field's closing quote";
            return -1;
        }
    } else {
        const char *start = s;
        while (s < end && *s != ',') {
            if (*s == '"') {
                *why = "a quote inside an unquoted field (quote the whole field)";
                return -1;
            }
            s++;
        }
        const char *stop = s;
        while (stop > start && (stop[-1] == ' ' || stop[-1] == '\t')) stop--;
        if (stop - start > CT_IMAGE_LIST_FIELD_MAX) {
            *why = "a field is longer than 4096 bytes";
            return -1;
        }
        n = stop - start;
        memcpy(out, start, (size_t)n);
    }
    out[n] = 0;
    *last = s >= end;
    *p = s < end ? s + 1 : end;
    return n;
}

static bool one_of(const char *s, const char *const *words) {
    for (; *words; words++)
        if (strcasecmp(s, *words) == 0) return true;
    return false;
}

static bool is_header(const char *path, const char *label) {
    static const char *const paths[] = {"path", "file", "filename", "filepath", "image", NULL};
    static const char *const labels[] = {"label", "class", "category", "target", NULL};
    return one_of(path, paths) || one_of(label, labels);
}

static int add(ct_image_list *l, int *cap, const char *path, const char *label, int line) {
    if (l->count == *cap) {
        int n = *cap ? *cap * 2 : 64;
        char **p = realloc(l->path, (size_t)n * sizeof *p);
        if (p) l->path = p;
        char **b = realloc(l->label, (size_t)n * sizeof *b);
        if (b) l->label = b;
        int *ln = realloc(l->line, (size_t)n * sizeof *ln);
        if (ln) l->line = ln;
        if (!p || !b || !ln) return -1;
        *cap = n;
    }
    char *a = strdup(path), *b = strdup(label);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
    l->path[l->count] = a;
    l->label[l->count] = b;
    l->line[l->count++] = line;
    return 0;
}

int ct_image_list_parse(const char *text, size_t len, const char *source, ct_image_list *l,
                        ct_err *err) {
    memset(l, 0, sizeof *l);
    char *buf = malloc(3 * (CT_IMAGE_LIST_FIELD_MAX + 1));
    if (!buf) return ct_errorf(err, "%s: out of memory", source);
    char *path = buf, *label = path + CT_IMAGE_LIST_FIELD_MAX + 1,
         *extra = label + CT_IMAGE_LIST_FIELD_MAX + 1;
    const char *p = text, *end = text + len;
    if (len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3)) p += 3;
    int cap = 0, line = 0, rc = 0;
    bool first = true;
    while (p < end && rc == 0) {
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *stop = eol ? eol : end, *next = eol ? eol + 1 : end;
        if (stop > p && stop[-1] == '\r') stop--;
        const char *q = p;
        while (q < stop && (*q == ' ' || *q == '\t')) q++;
        if (q == stop) { /* blank */
            p = next;
            continue;
        }
        if (memchr(p, 0, (size_t)(stop - p))) {
            rc = ct_errorf(err, "%s:%d: a NUL byte (not a text file?)", source, line);
            break;
        }
        const char *why = NULL;
        bool last = false;
        long np = field(&p, stop, path, &last, &why), nl = -1;
        int fields = 1;
        if (np >= 0 && !last) {
            nl = field(&p, stop, label, &last, &why);
            fields = 2;
        }
        while (!why && !last && field(&p, stop, extra, &last, &why) >= 0) fields++;
        if (why)
            rc = ct_errorf(err, "%s:%d: %s", source, line, why);
        else if (fields != 2)
            rc = ct_errorf(err, "%s:%d: %d field%s; a line is path,label", source, line, fields,
                           fields == 1 ? "" : "s");
        else if (np == 0 || nl == 0)
            rc = ct_errorf(err, "%s:%d: an empty %s", source, line, np == 0 ? "path" : "label");
        else if (first && is_header(path, label))
            l->header = true;
        else if (l->count == INT32_MAX)
            rc = ct_errorf(err, "%s:%d: more than %d images", source, line, INT32_MAX);
        else if (add(l, &cap, path, label, line) != 0)
            rc = ct_errorf(err, "%s: out of memory at line %d", source, line);
        first = false;
        p = next;
    }
    free(buf);
    if (rc == 0 && l->count == 0)
        rc = ct_errorf(err, "%s: lists no images (lines are path,label)", source);
    if (rc != 0) ct_image_list_free(l);
    return rc;
}

int ct_image_list_read(const char *path, ct_image_list *l, ct_err *err) {
    memset(l, 0, sizeof *l);
    FILE *f = fopen(path, "rb");
    if (!f) return ct_errorf(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return ct_errorf(err, "%s: not a regular file", path);
    }
    if (st.st_size > CT_IMAGE_LIST_MAX_BYTES) {
        fclose(f);
        return ct_errorf(err, "%s: %lld bytes, more than a list file may have (%lld)", path,
                         (long long)st.st_size, CT_IMAGE_LIST_MAX_BYTES);
    }
    size_t n = (size_t)st.st_size;
    char *text = malloc(n ? n : 1);
    if (!text) {
        fclose(f);
        return ct_errorf(err, "%s: out of memory", path);
    }
    size_t got = fread(text, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(text);
        return ct_errorf(err, "%s: read error", path);
    }
    int rc = ct_image_list_parse(text, n, path, l, err);
    free(text);
    return rc;
}
