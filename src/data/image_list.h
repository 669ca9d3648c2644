/* image_list.h: list files of image paths and labels (data.format: list).
 *
 * One image per line, "path,label", as CSV: fields separated by a comma, a field
 * in double quotes may hold commas and "" for a quote; spaces around a field are
 * dropped; lines end in LF or CR LF; blank lines are skipped; a UTF-8 byte-order
 * mark at the start is skipped. The first line is a header, and skipped, when its
 * path field is path, file, filename, filepath or image, or its label field is
 * label, class, category or target (in any case). A label is a class index (0,
 * 1, ...) or a class name (data/image_set.h maps it). Errors name the file and
 * line ("train.csv:12: 3 fields; a line is path,label").
 */
#ifndef CT_IMAGE_LIST_H
#define CT_IMAGE_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define CT_IMAGE_LIST_MAX_BYTES (1LL << 30) /* a list file's size */
#define CT_IMAGE_LIST_FIELD_MAX 4096        /* a field's bytes, the quotes' content */

typedef struct ct_image_list {
    char **path;  /* [count], as written (owned) */
    char **label; /* [count], as written (owned) */
    int *line;    /* [count]: the line each came from, from 1 */
    int count;
    bool header;  /* the first line was a header */
} ct_image_list;

/* Parses text[0..len) (a list file's bytes; `source` names it in errors). */
int ct_image_list_parse(const char *text, size_t len, const char *source, ct_image_list *l,
                        ct_err *err);
/* Reads and parses the file at path. */
int ct_image_list_read(const char *path, ct_image_list *l, ct_err *err);
void ct_image_list_free(ct_image_list *l);

#endif
