/* image_survey.h: what the files of an image set are (`ctrain data inspect`): each
 * one decoded (data/image_file.h) so that a damaged file is found, its size, colour
 * model, format and bit depth noted, and its bytes hashed so that copies are found.
 */
#ifndef CT_IMAGE_SURVEY_H
#define CT_IMAGE_SURVEY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "data/image_set.h"

typedef struct ct_image_info {
    int w, h, channels;
    bool has_alpha;
    const char *format; /* "PNG", "JPEG", ... (static); NULL when unreadable */
    int bits;
    long long bytes;    /* the file's size */
    uint64_t hash;      /* FNV-1a of the file's bytes */
    char *why;          /* NULL, or why it cannot be read (owned) */
    int same_as;        /* the first earlier file of the survey with the same bytes, or -1 */
} ct_image_info;

/* Surveys f's files on `workers` threads (0: one per core) into (*info)[f->count];
 * same_as compares the bytes of files whose sizes and hashes agree, so a reported
 * copy is a true one. Fails only when memory runs out. */
int ct_image_survey(const ct_image_files *f, int workers, ct_image_info **info, ct_err *err);
void ct_image_survey_free(ct_image_info *info, int n);

#endif
