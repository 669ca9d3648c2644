/* cmd_data.c: the data tools.
 *
 * `ctrain data inspect DIR|CONFIG [--workers N] [--json]`: an image folder's (or a
 * folder or list config's training and test sets') classes and counts, image sizes,
 * formats, the files that cannot be read with why, and the files that are copies of
 * others (the same bytes), across the sets too; as text or one JSON object.
 *
 * `ctrain data cache CONFIG`: a folder or list config's training and test images
 * decoded into cache files that later runs read instead (train/data_cache.h).
 *
 * `ctrain data stats CONFIG`: the training set read as fit reads it, timed, and the
 * per-channel mean and standard deviation of its pixels / 255, as a data.normalize
 * line to paste.
 *
 * `ctrain data export CONFIG --to DIR [--jpeg Q] [--limit N]`: a config's
 * data sets written as image folders (data.format folder reads them back):
 * DIR/train, DIR/val (with data.val_split) and DIR/test, each with a subfolder per
 * class (its data.class_names entry, '/' written as '-', else the class index
 * zero-padded so that byte order is index order) holding one PNG (or JPEG) per
 * sample, named by its index in the set, zero-padded. Read back, the samples come
 * by class folder in byte order of the names (index order for indices), and in each
 * class by index. DIR must not exist yet: nothing already there is overwritten. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "common/parallel.h"
#include "config/config.h"
#include "data/image_survey.h"
#include "data/image_write.h"
#include "io/json_write.h"
#include "train/datasets.h"
#include "train/progress.h"

static int digits(long n) {
    int d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

static int make_dir(const char *path, ct_err *err) {
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return ct_errorf(err, "%s: %s", path, strerror(errno));
    return 0;
}

/* Class k's folder name: its data.class_names entry with each '/' as '-' and a
 * leading '.' as '_' (a folder scan passes hidden names over), else k zero-padded
 * to `width` digits. */
static void folder_name(const ct_config *cfg, int k, int width, char *out, size_t n) {
    const char *name = ct_config_class_name(cfg, k);
    if (!name) {
        if ((size_t)snprintf(out, n, "%0*d", width, k) >= n) out[0] = 0; /* width <= 3 */
        return;
    }
    snprintf(out, n, "%s", name);
    for (char *c = out; *c; c++)
        if (*c == '/') *c = '-';
    if (out[0] == '.') out[0] = '_';
}

/* The first `limit` samples of ds (0: all) into dir/<class>/<index>.png|jpg. */
static int export_set(const ct_config *cfg, const ct_dataset *ds, const char *dir, int limit,
                      int quality, int *written, ct_err *err) {
    int n = limit > 0 && limit < ds->count ? limit : ds->count;
    int cw = digits(ds->num_classes - 1), iw = digits(ds->count - 1);
    size_t sample = (size_t)ds->channels * ds->rows * ds->cols;
    if (make_dir(dir, err) != 0) return -1;
    for (int i = 0; i < n; i++) {
        char class_dir[CT_PATH_MAX], path[CT_PATH_MAX], name[CT_CLASS_NAME_MAX];
        folder_name(cfg, ds->labels[i], cw, name, sizeof name);
        int a = snprintf(class_dir, sizeof class_dir, "%s/%s", dir, name);
        int b = snprintf(path, sizeof path, "%s/%0*d.%s", class_dir, iw, i,
                         quality ? "jpg" : "png");
        if (a < 0 || b < 0 || (size_t)a >= sizeof class_dir || (size_t)b >= sizeof path)
            return ct_errorf(err, "%s: path too long", dir);
        if (make_dir(class_dir, err) != 0 ||
            ct_image_write(path, ds->images + (size_t)i * sample, ds->channels, ds->rows, ds->cols,
                           quality, err) != 0)
            return -1;
    }
    *written = n;
    return 0;
}

static int export_all(const ct_config *cfg, const char *to, int limit, int quality, ct_err *err) {
    ct_dataset train, val, test;
    bool has_val = false;
    memset(&test, 0, sizeof test);
    if (ct_data_load_train(cfg, stderr, &train, &val, &has_val, err) != 0) return -1;
    int rc = ct_data_load_test(cfg, stderr, NULL, NULL, &test, err);
    if (rc == 0 && (train.channels != 1 && train.channels != 3))
        rc = ct_errorf(err, "model.input has %d channels; images are written with 1 or 3",
                       train.channels);
    if (rc == 0 && mkdir(to, 0777) != 0)
        rc = ct_errorf(err, "%s: %s", to, errno == EEXIST ? "already exists (data export writes a "
                       "new folder)" : strerror(errno));
    const ct_dataset *sets[3] = {&train, has_val ? &val : NULL, &test};
    static const char *const names[3] = {"train", "val", "test"};
    for (int s = 0; rc == 0 && s < 3; s++) {
        if (!sets[s]) continue;
        char dir[CT_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", to, names[s]);
        int n = 0;
        rc = export_set(cfg, sets[s], dir, limit, quality, &n, err);
        if (rc == 0)
            printf("Wrote %s: %d %s images in %d class folders\n", dir, n,
                   quality ? "JPEG" : "PNG", sets[s]->num_classes);
    }
    ct_dataset_free(&train);
    if (has_val) ct_dataset_free(&val);
    ct_dataset_free(&test);
    return rc;
}

/* ---- inspect ------------------------------------------------------------------ */

#define SHOWN 5 /* sizes and formats listed one by one; the rest counted */

typedef struct tally {
    char key[48];
    int n;
} tally;

/* Counts key in t[0..*n) (at most cap kinds; more are counted in *other). */
static void tally_add(tally *t, int *n, int cap, const char *key, int *other) {
    for (int i = 0; i < *n; i++)
        if (strcmp(t[i].key, key) == 0) {
            t[i].n++;
            return;
        }
    if (*n == cap) {
        (*other)++;
        return;
    }
    snprintf(t[*n].key, sizeof t[*n].key, "%s", key);
    t[(*n)++].n = 1;
}

static int by_count(const void *a, const void *b) {
    const tally *x = a, *y = b;
    return x->n != y->n ? y->n - x->n : strcmp(x->key, y->key);
}

static void print_tallies(const char *what, tally *t, int n, int other) {
    qsort(t, (size_t)n, sizeof *t, by_count);
    printf("  %s:", what);
    for (int i = 0; i < n && i < SHOWN; i++) printf("%s %s (%d)", i ? "," : "", t[i].key, t[i].n);
    int more = other;
    for (int i = SHOWN; i < n; i++) more += t[i].n;
    if (more) printf(", and %d more image%s of other kinds", more, more == 1 ? "" : "s");
    printf("\n");
}

#define TALLY_CAP 256

/* JSON: [{key: k, "images": n}, ...] of t (sorted by count), and "other" images. */
static void json_tallies(ct_jw *w, const char *array, const char *key, tally *t, int n,
                         int other) {
    qsort(t, (size_t)n, sizeof *t, by_count);
    ct_jw_array(w, array);
    for (int i = 0; i < n; i++) {
        ct_jw_object(w, NULL);
        ct_jw_str(w, key, t[i].key);
        ct_jw_int(w, "images", t[i].n);
        ct_jw_close(w);
    }
    ct_jw_close(w);
    if (other) ct_jw_int(w, "images_of_other_kinds", other);
}

/* One set's report: classes and counts, sizes, formats, unreadable files; as text,
 * or as an object of w's "sets" array. */
static void report_set(const char *name, const ct_image_files *f, const ct_names *classes,
                       const ct_image_info *info, int first, ct_jw *w) {
    int bad = 0, other_sizes = 0, other_formats = 0, n_sizes = 0, n_formats = 0;
    static tally sizes[TALLY_CAP], formats[TALLY_CAP];
    for (int i = 0; i < f->count; i++) {
        const ct_image_info *in = &info[first + i];
        if (in->why) {
            bad++;
            continue;
        }
        char key[48];
        snprintf(key, sizeof key, "%dx%d", in->w, in->h);
        tally_add(sizes, &n_sizes, TALLY_CAP, key, &other_sizes);
        int colors = in->channels - (in->has_alpha ? 1 : 0);
        snprintf(key, sizeof key, "%s %s%s %d-bit", in->format, colors == 1 ? "gray" : "RGB",
                 in->has_alpha ? "+alpha" : "", in->bits);
        tally_add(formats, &n_formats, TALLY_CAP, key, &other_formats);
    }
    int n_classes = classes->count;
    for (int i = 0; i < f->count && !classes->count; i++)
        if (f->label[i] + 1 > n_classes) n_classes = f->label[i] + 1;
    int *per = calloc((size_t)(n_classes ? n_classes : 1), sizeof *per);
    for (int i = 0; per && i < f->count; i++) per[f->label[i]]++;
    if (w) {
        ct_jw_object(w, NULL);
        ct_jw_str(w, "set", name);
        ct_jw_int(w, "images", f->count);
        ct_jw_bool(w, "other_files_passed_over", f->ignored > 0);
        ct_jw_array(w, "classes");
        for (int k = 0; per && k < n_classes; k++) {
            char index[16];
            snprintf(index, sizeof index, "%d", k);
            ct_jw_object(w, NULL);
            ct_jw_str(w, "name", classes->count ? classes->name[k] : index);
            ct_jw_int(w, "images", per[k]);
            ct_jw_close(w);
        }
        ct_jw_close(w);
        json_tallies(w, "sizes", "size", sizes, n_sizes, other_sizes);
        json_tallies(w, "formats", "format", formats, n_formats, other_formats);
        ct_jw_array(w, "unreadable");
        for (int i = 0; i < f->count; i++)
            if (info[first + i].why) {
                ct_jw_object(w, NULL);
                ct_jw_str(w, "path", f->path[i]);
                ct_jw_str(w, "reason", info[first + i].why);
                ct_jw_close(w);
            }
        ct_jw_close(w);
        ct_jw_close(w);
        free(per);
        return;
    }
    printf("%s: %d image%s in %d class%s%s\n", name, f->count, f->count == 1 ? "" : "s",
           n_classes, n_classes == 1 ? "" : "es",
           f->ignored ? " (other files passed over)" : "");
    for (int k = 0; per && k < n_classes; k++) {
        char index[16];
        snprintf(index, sizeof index, "%d", k);
        printf("  %-24s %8d\n", classes->count ? classes->name[k] : index, per[k]);
    }
    free(per);
    if (n_sizes) print_tallies("sizes (width x height)", sizes, n_sizes, other_sizes);
    if (n_formats) print_tallies("formats", formats, n_formats, other_formats);
    printf("  unreadable: %d\n", bad);
    for (int i = 0; i < f->count; i++)
        if (info[first + i].why) printf("    %s\n", info[first + i].why);
}

static int inspect(const char *target, int workers, bool json, ct_err *err) {
    ct_image_files sets[2];
    ct_names classes = {0};
    const char *names[2] = {target, NULL};
    int n_sets = 1;
    struct stat st;
    memset(sets, 0, sizeof sets);
    if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (ct_folder_classes(target, &classes, err) != 0) return -1;
        if (ct_folder_files(target, &classes, &sets[0], err) != 0) {
            ct_names_free(&classes);
            return -1;
        }
    } else {
        ct_config cfg;
        if (ct_config_load(target, &cfg, err) != 0) return -1;
        int rc = ct_data_image_files(&cfg, true, &sets[0], &classes, err);
        if (rc == 0) {
            ct_names ignored;
            rc = ct_data_image_files(&cfg, false, &sets[1], &ignored, err);
            if (rc == 0) ct_names_free(&ignored);
        }
        names[0] = ct_data_key(&cfg.data, true);
        names[1] = ct_data_key(&cfg.data, false);
        ct_config_free(&cfg);
        if (rc != 0) {
            ct_image_files_free(&sets[0]);
            ct_names_free(&classes);
            return -1;
        }
        n_sets = 2;
    }
    /* one survey over both sets, so that copies across them are found */
    ct_image_files all = sets[0];
    if (n_sets == 2) {
        all.count = sets[0].count + sets[1].count;
        all.path = malloc((size_t)all.count * sizeof *all.path);
        all.label = NULL;
        if (!all.path) {
            ct_image_files_free(&sets[0]);
            ct_image_files_free(&sets[1]);
            ct_names_free(&classes);
            return ct_errorf(err, "out of memory");
        }
        memcpy(all.path, sets[0].path, (size_t)sets[0].count * sizeof *all.path);
        memcpy(all.path + sets[0].count, sets[1].path, (size_t)sets[1].count * sizeof *all.path);
    }
    ct_image_info *info;
    double t0 = ct_now();
    int rc = ct_image_survey(&all, workers, &info, err);
    double secs = ct_now() - t0;
    int threads = ct_parallel_threads(all.count, workers);
    if (rc == 0 && json) {
        ct_jw w;
        ct_jw_init(&w);
        ct_jw_array(&w, "sets");
        for (int s = 0, first = 0; s < n_sets; first += sets[s++].count)
            report_set(names[s], &sets[s], &classes, info, first, &w);
        ct_jw_close(&w);
        ct_jw_array(&w, "copies");
        for (int i = 0; i < all.count; i++)
            if (info[i].same_as >= 0) {
                ct_jw_object(&w, NULL);
                ct_jw_str(&w, "path", all.path[i]);
                ct_jw_str(&w, "same_as", all.path[info[i].same_as]);
                ct_jw_bool(&w, "test_image_in_training_set",
                           n_sets == 2 && i >= sets[0].count && info[i].same_as < sets[0].count);
                ct_jw_close(&w);
            }
        ct_jw_close(&w);
        ct_jw_int(&w, "files", all.count);
        ct_jw_num(&w, "seconds", secs);
        ct_jw_int(&w, "threads", threads);
        rc = ct_jw_print(&w, stdout, err);
        ct_image_survey_free(info, all.count);
    } else if (rc == 0) {
        for (int s = 0, first = 0; s < n_sets; first += sets[s++].count)
            report_set(names[s], &sets[s], &classes, info, first, NULL);
        int copies = 0, across = 0;
        for (int i = 0; i < all.count; i++)
            if (info[i].same_as >= 0) {
                copies++;
                across += i >= sets[0].count && info[i].same_as < sets[0].count;
            }
        printf("copies (the same bytes as an earlier file): %d", copies);
        if (n_sets == 2) printf(", %d of them test images that are also training images", across);
        printf("\n");
        for (int i = 0, shown = 0; i < all.count; i++)
            if (info[i].same_as >= 0 && shown++ < 20)
                printf("  %s = %s\n", all.path[i], all.path[info[i].same_as]);
        if (copies > 20) printf("  ... and %d more\n", copies - 20);
        printf("Read %d files in %.2f s by %d thread%s\n", all.count, secs, threads,
               threads == 1 ? "" : "s");
        ct_image_survey_free(info, all.count);
    }
    if (n_sets == 2) free(all.path);
    for (int s = 0; s < n_sets; s++) ct_image_files_free(&sets[s]);
    ct_names_free(&classes);
    return rc;
}

/* ---- stats -------------------------------------------------------------------- */

static int stats(const char *config, ct_err *err) {
    ct_config cfg;
    if (ct_config_load(config, &cfg, err) != 0) return -1;
    ct_dataset train, val;
    bool has_val = false;
    double t0 = ct_now();
    int rc = ct_data_load_train(&cfg, stderr, &train, &val, &has_val, err);
    double secs = ct_now() - t0;
    if (rc == 0) {
        int C = train.channels;
        size_t plane = (size_t)train.rows * train.cols;
        printf("Read %d training images of %dx%dx%d in %.2f s (%.0f images/s)\n", train.count, C,
               train.rows, train.cols, secs, train.count / (secs > 0 ? secs : 1e-9));
        printf("normalize: {mean: [");
        double mean[CT_DATA_CHANNELS_MAX], sd[CT_DATA_CHANNELS_MAX];
        for (int c = 0; c < C && c < CT_DATA_CHANNELS_MAX; c++) {
            double s1 = 0, s2 = 0;
            for (int i = 0; i < train.count; i++) {
                const uint8_t *p = train.images + ((size_t)i * C + c) * plane;
                unsigned long long a = 0, b = 0;
                for (size_t k = 0; k < plane; k++) {
                    a += p[k];
                    b += (unsigned long long)p[k] * p[k];
                }
                s1 += (double)a;
                s2 += (double)b;
            }
            double n = (double)train.count * (double)plane;
            mean[c] = s1 / n / 255.0;
            sd[c] = sqrt(fmax(s2 / n / (255.0 * 255.0) - mean[c] * mean[c], 0.0));
            printf("%s%.4f", c ? ", " : "", mean[c]);
        }
        printf("], std: [");
        for (int c = 0; c < C && c < CT_DATA_CHANNELS_MAX; c++)
            printf("%s%.4f", c ? ", " : "", sd[c]);
        printf("]}\n");
        ct_dataset_free(&train);
        if (has_val) ct_dataset_free(&val);
    }
    ct_config_free(&cfg);
    return rc;
}

int ct_cmd_data(int argc, char **argv, ct_err *err) {
    const char *to = NULL, *jpeg = NULL, *limit_s = NULL, *workers_s = NULL, *pos[2];
    bool json = false;
    ct_argspec specs[] = {
        {"to", 1, &to, NULL, NULL},
        {"jpeg", 1, &jpeg, NULL, NULL},
        {"limit", 1, &limit_s, NULL, NULL},
        {"workers", 1, &workers_s, NULL, NULL},
        {"json", 0, NULL, NULL, &json},
    };
    int npos, rc = ct_parse_args("data", argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                                 pos, 2, &npos, err);
    if (rc) return rc;
    const char *action = npos >= 1 ? pos[0] : "";
    bool is_export = !strcmp(action, "export"), is_inspect = !strcmp(action, "inspect"),
         is_stats = !strcmp(action, "stats"), is_cache = !strcmp(action, "cache");
    if (!is_export && !is_inspect && !is_stats && !is_cache) {
        ct_errorf(err, "data: expected inspect DIR|CONFIG, stats CONFIG, cache CONFIG or export "
                  "CONFIG --to DIR (e.g. ctrain data export configs/mlp.yaml --to digits)");
        return CT_EXIT_USAGE;
    }
    if (npos < 2) {
        ct_errorf(err, "data %s: expected a %s", action,
                  is_inspect ? "folder or CONFIG" : "CONFIG");
        return CT_EXIT_USAGE;
    }
    char *end = NULL;
    long workers = workers_s ? strtol(workers_s, &end, 10) : 0;
    if (workers_s && (*end || workers < 1 || workers > CT_DATA_WORKERS_MAX)) {
        ct_errorf(err, "data %s: --workers expects 1..%d, got '%s'", action, CT_DATA_WORKERS_MAX,
                  workers_s);
        return CT_EXIT_USAGE;
    }
    if (!is_export && (to || jpeg || limit_s)) {
        ct_errorf(err, "data %s: --to, --jpeg and --limit are export's options", action);
        return CT_EXIT_USAGE;
    }
    if (json && !is_inspect) {
        ct_errorf(err, "data %s: --json is inspect's option", action);
        return CT_EXIT_USAGE;
    }
    if (is_inspect)
        return inspect(pos[1], (int)workers, json, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
    if (is_stats) return stats(pos[1], err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
    if (is_cache) {
        ct_config cfg;
        if (ct_config_load(pos[1], &cfg, err) != 0) return CT_EXIT_ERROR;
        rc = ct_data_write_caches(&cfg, stderr, stdout, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
        ct_config_free(&cfg);
        return rc;
    }
    if (npos < 2 || !to) {
        ct_errorf(err, "data export: expected a CONFIG and --to DIR");
        return CT_EXIT_USAGE;
    }
    long quality = jpeg ? strtol(jpeg, &end, 10) : 0, limit = 0;
    if (jpeg && (*end || quality < 1 || quality > 100)) {
        ct_errorf(err, "data export: --jpeg expects a quality 1..100, got '%s'", jpeg);
        return CT_EXIT_USAGE;
    }
    if (limit_s && ((limit = strtol(limit_s, &end, 10)) < 1 || *end || limit > 2147483647L)) {
        ct_errorf(err, "data export: --limit expects a count >= 1, got '%s'", limit_s);
        return CT_EXIT_USAGE;
    }
    ct_config cfg;
    if (ct_config_load(pos[1], &cfg, err) != 0) return CT_EXIT_ERROR;
    rc = export_all(&cfg, to, (int)limit, (int)quality, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
    ct_config_free(&cfg);
    return rc;
}
