/* input_set.h: the inputs of a prediction (`ctrain predict`), gathered into one
 * dataset of model input samples, with where each sample came from.
 *
 * An input is an IDX image file (gzip or plain; recognized by its magic) or an
 * image file (image_file.h). IDX samples that have the model's [C, H, W] are taken
 * as they are (4-d files as data/images.h reads them); a 3-d file of another
 * size is taken as gray images and converted like image files. Image files go
 * through image_convert.h, with the config's data.resize as evaluation applies it.
 * Labels are all 0 (predictions need none).
 */
#ifndef CT_INPUT_SET_H
#define CT_INPUT_SET_H

#include <stdbool.h>

#include "common/error.h"
#include "data/idx.h"

typedef struct ct_input_opts {
    int c, h, w;     /* the model's input */
    int num_classes;
    int limit;       /* IDX files: at most this many samples from each (0: all) */
    bool invert;     /* image files: 255 - v (image_convert.h) */
    int resize;      /* image files: data.resize of the model's config (image_convert.h) */
    long long max_pixels; /* image files: the pixel limit (0: CT_IMAGE_MAX_PIXELS) */
} ct_input_opts;

typedef struct ct_input_set {
    ct_dataset ds;   /* [count, c, h, w] */
    int *source;     /* [count]: index of the input (paths[]) the sample came from */
    int *sample;     /* [count]: its index in an IDX file, -1 for an image file */
    bool *converted; /* [count]: resized, or its channels changed (alpha dropped too) */
    /* The inputs that could not be read, each its one-line reason naming the file
     * (owned; n_bad of them). */
    char **bad;
    int n_bad;
} ct_input_set;

/* Reads paths[0..n) in order. An input that cannot be read (missing, corrupt,
 * too large) is set aside in s->bad and the others are read; -1 (its reason in err,
 * nothing allocated) only when none can be read or memory runs out. */
int ct_input_set_load(const char *const *paths, int n, const ct_input_opts *o, ct_input_set *s,
                      ct_err *err);
void ct_input_set_free(ct_input_set *s);

#endif
