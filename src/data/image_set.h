/* image_set.h: training and test sets from image files (data.format folder and
 * list), decoded once into a dataset of model input samples (data/idx.h).
 *
 * A folder holds one subfolder per class; the classes are the subfolders' names
 * in byte order (as torchvision's ImageFolder sorts them). A class's images are
 * the files under its subfolder, at any depth, whose names end in .png, .jpg,
 * .jpeg, .pgm, .ppm or .pnm (any case), in byte order of their paths below it;
 * names starting with '.' are passed over, other files are counted as ignored.
 * A set's samples come class by class, in that order.
 *
 * A list file (image_list.h) names each image and its label; a relative path is
 * taken from the list file's folder. A label is a class name when the classes are
 * named, else a class index in 0..num_classes-1.
 *
 * Every image is read (image_file.h) and brought to model.input's [C, H, W]
 * (image_convert.h, with data.resize) by `workers` threads; what each thread does
 * depends only on the image, so the dataset is the same for any number of them.
 * An image that cannot be read or converted is a bad file: with skip_bad the set
 * is made of the others and each bad file is reported with its reason; otherwise
 * the load fails naming the first (in the set's order) and the count.
 */
#ifndef CT_IMAGE_SET_H
#define CT_IMAGE_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "data/idx.h"

/* Names, owned. */
typedef struct ct_names {
    char **name;
    int count;
} ct_names;

void ct_names_free(ct_names *n);
/* The index of name in n, or -1. */
int ct_names_find(const ct_names *n, const char *name);

/* The images of a set and their labels (owned). */
typedef struct ct_image_files {
    char **path;
    int *label;
    int count;
    int ignored; /* folder: files passed over for their names */
} ct_image_files;

void ct_image_files_free(ct_image_files *f);

/* The class subfolders of dir, sorted; fails when there are none or a name is
 * unfit for a class name (longer than 63 bytes or with control characters). */
int ct_folder_classes(const char *dir, ct_names *classes, ct_err *err);

/* The images of dir's class subfolders, labelled by classes (from the training
 * folder: a subfolder of dir with a name not among them fails). */
int ct_folder_files(const char *dir, const ct_names *classes, ct_image_files *f, ct_err *err);

/* The class names of a list file's labels: its distinct labels sorted, or none
 * (count 0) when every label is a whole number. */
int ct_list_classes(const char *list_path, ct_names *classes, ct_err *err);

/* The images of a list file, labelled through classes when it has names, else by
 * index (< num_classes). */
int ct_list_files(const char *list_path, const ct_names *classes, int num_classes,
                  ct_image_files *f, ct_err *err);

typedef struct ct_image_decode {
    int c, h, w;     /* model.input */
    int resize;      /* data.resize (image_convert.h), 0: none */
    int num_classes;
    int workers;     /* threads; 0: one per core */
    bool skip_bad;   /* data.on_bad_file: skip */
    const char *what; /* names the set in messages: "data.train_dir" */
    FILE *log;       /* bad files left out, with reasons (NULL: not reported) */
} ct_image_decode;

/* Reads and converts f's images into ds (ds->count may be less than f->count with
 * skip_bad; *skipped gets how many were left out). */
int ct_image_files_decode(const ct_image_files *f, const ct_image_decode *o, ct_dataset *ds,
                          int *skipped, ct_err *err);

/* Images kept at sizes of their own, for random_resized_crop (data/image_augment.h):
 * sample i is uint8 [C, h[i], w[i]] at px + offset[i]. */
typedef struct ct_image_store {
    uint8_t *px;
    size_t *offset;
    int *w, *h;
    uint8_t *labels;
    int count, channels, num_classes;
} ct_image_store;

/* f's images read and converted as ct_image_files_decode does (the same bad-file
 * rules), but kept with their shorter side scaled to o->resize, aspect kept, not
 * cut; each must then cover o's H x W. */
int ct_image_files_decode_store(const ct_image_files *f, const ct_image_decode *o,
                                ct_image_store *st, int *skipped, ct_err *err);
void ct_image_store_free(ct_image_store *st);

/* Sample i's centre H x W into out[C * H * W]: what ct_image_files_decode gives for
 * it with the same resize. */
void ct_image_store_center(const ct_image_store *st, int i, int H, int W, uint8_t *out);

#endif
