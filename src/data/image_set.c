/* image_set.c: image folders and list files made into datasets (image_set.h). */
#include "data/image_set.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/parallel.h"
#include "config/config.h"
#include "data/image_convert.h"
#include "data/image_file.h"
#include "data/image_list.h"

#define FOLDER_MAX_DEPTH 32 /* subfolders below a class folder (symbolic-link loops end) */
#define BAD_FILES_SHOWN 20  /* bad files listed by name in the log; the rest counted */

void ct_names_free(ct_names *n) {
    for (int i = 0; i < n->count; i++) free(n->name[i]);
    free(n->name);
    n->name = NULL;
    n->count = 0;
}

int ct_names_find(const ct_names *n, const char *name) {
    for (int i = 0; i < n->count; i++)
        if (strcmp(n->name[i], name) == 0) return i;
    return -1;
}

void ct_image_files_free(ct_image_files *f) {
    for (int i = 0; i < f->count; i++) free(f->path[i]);
    free(f->path);
    free(f->label);
    memset(f, 0, sizeof *f);
}

/* A growing list of strings. */
typedef struct strings {
    char **s;
    int n, cap;
} strings;

static int strings_add(strings *l, const char *a, const char *b) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        char **s = realloc(l->s, (size_t)cap * sizeof *s);
        if (!s) return -1;
        l->s = s;
        l->cap = cap;
    }
    size_t na = strlen(a), nb = b ? strlen(b) : 0;
    char *t = malloc(na + (b ? 1 + nb : 0) + 1);
    if (!t) return -1;
    memcpy(t, a, na);
    if (b) {
        t[na] = '/';
        memcpy(t + na + 1, b, nb + 1);
    } else {
        t[na] = 0;
    }
    l->s[l->n++] = t;
    return 0;
}

static void strings_free(strings *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    memset(l, 0, sizeof *l);
}

static int by_bytes(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The entries of dir (not "." or "..", nor hidden ones) that are folders (dirs)
 * or not (the rest), unsorted. */
static int list_dir(const char *dir, strings *dirs, strings *rest, ct_err *err) {
    DIR *d = opendir(dir);
    if (!d) return ct_errorf(err, "%s: %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[CT_PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) {
            rc = ct_errorf(err, "%s/%s: path too long", dir, e->d_name);
            break;
        }
        strings *to = is_dir(path) ? dirs : rest;
        if (to && strings_add(to, e->d_name, NULL) != 0)
            rc = ct_errorf(err, "%s: out of memory", dir);
    }
    closedir(d);
    return rc;
}

int ct_folder_classes(const char *dir, ct_names *classes, ct_err *err) {
    memset(classes, 0, sizeof *classes);
    strings dirs = {0};
    if (!is_dir(dir)) return ct_errorf(err, "%s: not a folder (format folder needs a folder per "
                                       "class)", dir);
    if (list_dir(dir, &dirs, NULL, err) != 0) {
        strings_free(&dirs);
        return -1;
    }
    if (dirs.n == 0) {
        strings_free(&dirs);
        return ct_errorf(err, "%s: no class folders (format folder needs a folder per class "
                         "holding its images)", dir);
    }
    qsort(dirs.s, (size_t)dirs.n, sizeof *dirs.s, by_bytes);
    for (int i = 0; i < dirs.n; i++) {
        const char *name = dirs.s[i];
        bool control = false;
        for (const char *c = name; *c; c++) control |= (unsigned char)*c < 0x20 || *c == 0x7f;
        if (strlen(name) >= CT_CLASS_NAME_MAX || control) {
            ct_errorf(err, "%s/%s: a class folder's name must be 1..%d bytes without control "
                      "characters", dir, name, CT_CLASS_NAME_MAX - 1);
            strings_free(&dirs);
            return -1;
        }
    }
    classes->name = dirs.s;
    classes->count = dirs.n;
    return 0;
}

static bool image_name(const char *name) {
    static const char *const ext[] = {".png", ".jpg", ".jpeg", ".pgm", ".ppm", ".pnm"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        size_t k = strlen(ext[i]);
        if (n > k && strcasecmp(name + n - k, ext[i]) == 0) return true;
    }
    return false;
}

/* The image files under dir (full paths) into out; others counted in *ignored. */
static int walk(const char *dir, int depth, strings *out, int *ignored, ct_err *err) {
    if (depth > FOLDER_MAX_DEPTH)
        return ct_errorf(err, "%s: more than %d folders deep (a symbolic link loop?)", dir,
                         FOLDER_MAX_DEPTH);
    strings dirs = {0}, rest = {0};
    int rc = list_dir(dir, &dirs, &rest, err);
    for (int i = 0; rc == 0 && i < rest.n; i++) {
        if (!image_name(rest.s[i]))
            (*ignored)++;
        else if (strings_add(out, dir, rest.s[i]) != 0)
            rc = ct_errorf(err, "%s: out of memory", dir);
    }
    for (int i = 0; rc == 0 && i < dirs.n; i++) {
        char sub[CT_PATH_MAX];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, dirs.s[i]) >= sizeof sub)
            rc = ct_errorf(err, "%s/%s: path too long", dir, dirs.s[i]);
        else
            rc = walk(sub, depth + 1, out, ignored, err);
    }
    strings_free(&dirs);
    strings_free(&rest);
    return rc;
}

/* Appends label `label` count times to f's labels and takes the paths. */
static int files_take(ct_image_files *f, strings *paths, int label) {
    if (paths->n > INT32_MAX - f->count) return -1;
    int n = f->count + paths->n;
    char **p = realloc(f->path, (size_t)(n ? n : 1) * sizeof *p);
    if (p) f->path = p;
    int *l = realloc(f->label, (size_t)(n ? n : 1) * sizeof *l);
    if (l) f->label = l;
    if (!p || !l) return -1;
    for (int i = 0; i < paths->n; i++) {
        f->path[f->count + i] = paths->s[i];
        f->label[f->count + i] = label;
    }
    f->count = n;
    free(paths->s);
    memset(paths, 0, sizeof *paths);
    return 0;
}

int ct_folder_files(const char *dir, const ct_names *classes, ct_image_files *f, ct_err *err) {
    memset(f, 0, sizeof *f);
    ct_names here;
    if (ct_folder_classes(dir, &here, err) != 0) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < here.count; i++)
        if (ct_names_find(classes, here.name[i]) < 0)
            rc = ct_errorf(err, "%s/%s: not a class of the training set (its classes are the "
                           "training folder's %d subfolders)", dir, here.name[i], classes->count);
    for (int k = 0; rc == 0 && k < classes->count; k++) {
        if (ct_names_find(&here, classes->name[k]) < 0) continue; /* none of this class */
        char sub[CT_PATH_MAX];
        strings paths = {0};
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, classes->name[k]) >= sizeof sub)
            rc = ct_errorf(err, "%s/%s: path too long", dir, classes->name[k]);
        else
            rc = walk(sub, 0, &paths, &f->ignored, err);
        if (rc == 0) {
            qsort(paths.s, (size_t)paths.n, sizeof *paths.s, by_bytes);
            if (files_take(f, &paths, k) != 0) rc = ct_errorf(err, "%s: out of memory", dir);
        }
        strings_free(&paths);
    }
    ct_names_free(&here);
    if (rc == 0 && f->count == 0)
        rc = ct_errorf(err, "%s: no images in its class folders (.png, .jpg, .jpeg, .pgm, .ppm)",
                       dir);
    if (rc != 0) ct_image_files_free(f);
    return rc;
}

/* A whole number in 0..INT32_MAX, as written. */
static bool whole_number(const char *s, long *v) {
    if (!*s) return false;
    long n = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || n > INT32_MAX / 10) return false;
        n = n * 10 + (*s - '0');
    }
    *v = n;
    return true;
}

int ct_list_classes(const char *list_path, ct_names *classes, ct_err *err) {
    memset(classes, 0, sizeof *classes);
    ct_image_list l;
    if (ct_image_list_read(list_path, &l, err) != 0) return -1;
    bool names = false;
    for (int i = 0; i < l.count && !names; i++) {
        long v;
        names = !whole_number(l.label[i], &v);
    }
    int rc = 0;
    if (names) {
        qsort(l.label, (size_t)l.count, sizeof *l.label, by_bytes);
        strings out = {0};
        for (int i = 0; rc == 0 && i < l.count; i++) {
            if (i > 0 && strcmp(l.label[i], l.label[i - 1]) == 0) continue;
            if (strlen(l.label[i]) >= CT_CLASS_NAME_MAX)
                rc = ct_errorf(err, "%s: the class name '%.40s...' is longer than %d bytes",
                               list_path, l.label[i], CT_CLASS_NAME_MAX - 1);
            else if (strings_add(&out, l.label[i], NULL) != 0)
                rc = ct_errorf(err, "%s: out of memory", list_path);
        }
        if (rc == 0) {
            classes->name = out.s;
            classes->count = out.n;
        } else {
            strings_free(&out);
        }
    }
    ct_image_list_free(&l);
    return rc;
}

int ct_list_files(const char *list_path, const ct_names *classes, int num_classes,
                  ct_image_files *f, ct_err *err) {
    memset(f, 0, sizeof *f);
    ct_image_list l;
    if (ct_image_list_read(list_path, &l, err) != 0) return -1;
    char base[CT_PATH_MAX];
    snprintf(base, sizeof base, "%s", list_path);
    char *slash = strrchr(base, '/');
    if (slash)
        slash[slash == base ? 1 : 0] = 0;
    else
        snprintf(base, sizeof base, ".");
    f->path = calloc((size_t)l.count, sizeof *f->path);
    f->label = calloc((size_t)l.count, sizeof *f->label);
    int rc = f->path && f->label ? 0 : ct_errorf(err, "%s: out of memory", list_path);
    for (int i = 0; rc == 0 && i < l.count; i++) {
        long v = -1;
        int k = classes->count ? ct_names_find(classes, l.label[i]) : -1;
        if (classes->count && k < 0)
            rc = ct_errorf(err, "%s:%d: the label '%.64s' is not a class name (%d classes: "
                           "%s, ...)", list_path, l.line[i], l.label[i], classes->count,
                           classes->name[0]);
        else if (!classes->count && (!whole_number(l.label[i], &v) || v >= num_classes))
            rc = ct_errorf(err, "%s:%d: the label '%.64s' is not a class index in 0..%d", list_path,
                           l.line[i], l.label[i], num_classes - 1);
        if (rc != 0) break;
        f->label[i] = classes->count ? k : (int)v;
        const char *p = l.path[i];
        char full[2 * CT_PATH_MAX];
        if (p[0] == '/')
            snprintf(full, sizeof full, "%s", p);
        else
            snprintf(full, sizeof full, "%s/%s", base, p);
        if (!(f->path[i] = strdup(full))) rc = ct_errorf(err, "%s: out of memory", list_path);
        f->count = i + 1;
    }
    ct_image_list_free(&l);
    if (rc != 0) ct_image_files_free(f);
    return rc;
}

/* ---- decoding ---------------------------------------------------------------- */

typedef struct decode_job {
    const ct_image_files *f;
    const ct_image_decode *o;
    uint8_t *images;
    size_t sample;
    char **why; /* [count]: NULL, or why image i is bad (owned) */
} decode_job;

static const char out_of_memory[] = "out of memory";

/* why a file is bad, kept (the static out_of_memory when even that fails). */
static char *keep_why(const char *msg) {
    char *why = strdup(msg);
    return why ? why : (char *)out_of_memory;
}

static void decode_one(void *ctx, int i) {
    decode_job *j = ctx;
    const ct_image_decode *o = j->o;
    const char *path = j->f->path[i];
    ct_image img;
    ct_err e = {{0}};
    int min_w, min_h;
    ct_image_input_needs(o->h, o->w, o->resize, &min_w, &min_h);
    int rc = ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, min_w, min_h, &img, &e);
    if (rc == 0) {
        rc = ct_image_to_input_resized(&img, path, o->c, o->h, o->w, o->resize, false,
                                       j->images + (size_t)i * j->sample, &e);
        ct_image_free(&img);
    }
    if (rc != 0) j->why[i] = keep_why(e.msg);
}

/* After a decode: fails (err) when bad files are not to be skipped, or are all
 * there is; else reports the skipped ones on o->log. *bad gets their count. */
static int judge_bad(const ct_image_files *f, const ct_image_decode *o, char *const *why, int *bad,
                     ct_err *err) {
    int first_bad = -1;
    *bad = 0;
    for (int i = 0; i < f->count; i++)
        if (why[i] && (*bad)++ == 0) first_bad = i;
    if (*bad == 0) return 0;
    if (*bad == f->count)
        return ct_errorf(err, "%s: none of its %d images can be read; the first: %s", o->what,
                         f->count, why[first_bad]);
    if (!o->skip_bad)
        return ct_errorf(err, "%s: %d of %d images cannot be read; the first: %s "
                         "(data.on_bad_file: skip leaves them out)", o->what, *bad, f->count,
                         why[first_bad]);
    if (o->log) {
        fprintf(o->log, "ctrain: %s: left out %d of %d images that cannot be read "
                "(data.on_bad_file: skip):\n", o->what, *bad, f->count);
        for (int i = 0, shown = 0; i < f->count; i++)
            if (why[i] && shown++ < BAD_FILES_SHOWN) fprintf(o->log, "  %s\n", why[i]);
        if (*bad > BAD_FILES_SHOWN) fprintf(o->log, "  ... and %d more\n", *bad - BAD_FILES_SHOWN);
    }
    return 0;
}

static void free_why(char **why, int n) {
    for (int i = 0; i < n; i++)
        if (why[i] != out_of_memory) free(why[i]);
    free(why);
}

int ct_image_files_decode(const ct_image_files *f, const ct_image_decode *o, ct_dataset *ds,
                          int *skipped, ct_err *err) {
    memset(ds, 0, sizeof *ds);
    *skipped = 0;
    decode_job j = {.f = f, .o = o, .sample = (size_t)o->c * o->h * o->w};
    j.images = malloc(j.sample * (size_t)(f->count ? f->count : 1));
    j.why = calloc((size_t)(f->count ? f->count : 1), sizeof *j.why);
    uint8_t *labels = malloc((size_t)(f->count ? f->count : 1));
    if (!j.images || !j.why || !labels) {
        free(j.images);
        free(j.why);
        free(labels);
        return ct_errorf(err, "%s: out of memory for %d images of %dx%dx%d", o->what, f->count,
                         o->c, o->h, o->w);
    }
    ct_parallel_for(f->count, o->workers, decode_one, &j);
    int bad = 0, kept = 0, rc = judge_bad(f, o, j.why, &bad, err);
    for (int i = 0; rc == 0 && i < f->count; i++) {
        if (j.why[i]) continue;
        if (kept != i)
            memmove(j.images + (size_t)kept * j.sample, j.images + (size_t)i * j.sample,
                    j.sample);
        labels[kept++] = (uint8_t)f->label[i];
    }
    free_why(j.why, f->count);
    if (rc != 0) {
        free(j.images);
        free(labels);
        return -1;
    }
    *skipped = bad;
    ds->images = j.images;
    ds->labels = labels;
    ds->count = kept;
    ds->channels = o->c;
    ds->rows = o->h;
    ds->cols = o->w;
    ds->num_classes = o->num_classes;
    return 0;
}

/* ---- images kept at their own sizes --------------------------------------------- */

typedef struct store_job {
    const ct_image_files *f;
    const ct_image_decode *o;
    uint8_t **px; /* [count]: image i at its kept size, or NULL */
    int *w, *h;
    char **why;
} store_job;

static void store_one(void *ctx, int i) {
    store_job *j = ctx;
    const ct_image_decode *o = j->o;
    const char *path = j->f->path[i];
    ct_image img;
    ct_err e = {{0}};
    int rc = ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, o->resize, o->resize, &img, &e);
    if (rc == 0) {
        int rw, rh;
        ct_image_resized_size(img.w, img.h, o->resize, &rw, &rh);
        if (rw < o->w || rh < o->h)
            rc = ct_errorf(&e, "%s: a %dx%d image resized to %dx%d (data.resize %d) is smaller "
                           "than the model's %dx%d input", path, img.w, img.h, rw, rh, o->resize,
                           o->w, o->h);
        else if (!(j->px[i] = malloc((size_t)o->c * rw * rh)))
            rc = ct_errorf(&e, "%s: out of memory", path);
        else
            rc = ct_image_to_input(&img, path, o->c, rh, rw, false, j->px[i], &e);
        j->w[i] = rw;
        j->h[i] = rh;
        ct_image_free(&img);
    }
    if (rc != 0) {
        free(j->px[i]);
        j->px[i] = NULL;
        j->why[i] = keep_why(e.msg);
    }
}

void ct_image_store_free(ct_image_store *st) {
    free(st->px);
    free(st->offset);
    free(st->w);
    free(st->h);
    free(st->labels);
    memset(st, 0, sizeof *st);
}

int ct_image_files_decode_store(const ct_image_files *f, const ct_image_decode *o,
                                ct_image_store *st, int *skipped, ct_err *err) {
    memset(st, 0, sizeof *st);
    *skipped = 0;
    size_t n = (size_t)(f->count ? f->count : 1);
    store_job j = {.f = f, .o = o, .px = calloc(n, sizeof *j.px), .w = calloc(n, sizeof(int)),
                   .h = calloc(n, sizeof(int)), .why = calloc(n, sizeof *j.why)};
    st->offset = malloc(n * sizeof *st->offset);
    st->w = malloc(n * sizeof *st->w);
    st->h = malloc(n * sizeof *st->h);
    st->labels = malloc(n);
    int rc = j.px && j.w && j.h && j.why && st->offset && st->w && st->h && st->labels
                 ? 0
                 : ct_errorf(err, "%s: out of memory for %d images", o->what, f->count);
    if (rc == 0) ct_parallel_for(f->count, o->workers, store_one, &j);
    int bad = 0;
    if (rc == 0) rc = judge_bad(f, o, j.why, &bad, err);
    size_t total = 0;
    for (int i = 0; rc == 0 && i < f->count; i++)
        if (j.px[i]) total += (size_t)o->c * j.w[i] * j.h[i];
    if (rc == 0 && !(st->px = malloc(total ? total : 1)))
        rc = ct_errorf(err, "%s: out of memory for %zu bytes of images", o->what, total);
    for (int i = 0, k = 0; rc == 0 && i < f->count; i++) {
        if (!j.px[i]) continue;
        size_t bytes = (size_t)o->c * j.w[i] * j.h[i];
        st->offset[k] = k ? st->offset[k - 1] + (size_t)o->c * st->w[k - 1] * st->h[k - 1] : 0;
        memcpy(st->px + st->offset[k], j.px[i], bytes);
        st->w[k] = j.w[i];
        st->h[k] = j.h[i];
        st->labels[k++] = (uint8_t)f->label[i];
        st->count = k;
    }
    for (int i = 0; j.px && i < f->count; i++) free(j.px[i]);
    free(j.px);
    free(j.w);
    free(j.h);
    if (j.why) free_why(j.why, f->count);
    if (rc != 0) {
        ct_image_store_free(st);
        return -1;
    }
    st->channels = o->c;
    st->num_classes = o->num_classes;
    *skipped = bad;
    return 0;
}

void ct_image_store_center(const ct_image_store *st, int i, int H, int W, uint8_t *out) {
    int w = st->w[i], h = st->h[i];
    int top = (int)lround((h - H) / 2.0), left = (int)lround((w - W) / 2.0);
    for (int c = 0; c < st->channels; c++)
        for (int y = 0; y < H; y++)
            memcpy(out + ((size_t)c * H + y) * W,
                   st->px + st->offset[i] + ((size_t)c * h + top + y) * w + left, (size_t)W);
}
