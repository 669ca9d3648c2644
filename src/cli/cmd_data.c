/* cmd_data.c: `ctrain data export CONFIG --to DIR [--jpeg Q] [--limit N]`: a config's
 * data sets written as image folders (data.format folder reads them back):
 * DIR/train, DIR/val (with data.val_split) and DIR/test, each with a subfolder per
 * class (data.class_names, else the class index zero-padded so that byte order is
 * index order) holding one PNG (or JPEG) per sample, named by its index in the set,
 * zero-padded. The folders come back in the set's order by class, and in each
 * class by index. DIR must not exist yet: nothing already there is overwritten. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "config/config.h"
#include "data/image_write.h"
#include "train/datasets.h"

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

/* The first `limit` samples of ds (0: all) into dir/<class>/<index>.png|jpg. */
static int export_set(const ct_config *cfg, const ct_dataset *ds, const char *dir, int limit,
                      int quality, int *written, ct_err *err) {
    int n = limit > 0 && limit < ds->count ? limit : ds->count;
    int cw = digits(ds->num_classes - 1), iw = digits(ds->count - 1);
    size_t sample = (size_t)ds->channels * ds->rows * ds->cols;
    if (make_dir(dir, err) != 0) return -1;
    for (int i = 0; i < n; i++) {
        char class_dir[CT_PATH_MAX], path[CT_PATH_MAX];
        const char *name = ct_config_class_name(cfg, ds->labels[i]);
        int a = name ? snprintf(class_dir, sizeof class_dir, "%s/%s", dir, name)
                     : snprintf(class_dir, sizeof class_dir, "%s/%0*d", dir, cw, ds->labels[i]);
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

int ct_cmd_data(int argc, char **argv, ct_err *err) {
    const char *to = NULL, *jpeg = NULL, *limit_s = NULL, *pos[2];
    ct_argspec specs[] = {
        {"to", 1, &to, NULL, NULL},
        {"jpeg", 1, &jpeg, NULL, NULL},
        {"limit", 1, &limit_s, NULL, NULL},
    };
    int npos, rc = ct_parse_args("data", argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                                 pos, 2, &npos, err);
    if (rc) return rc;
    if (npos < 1 || strcmp(pos[0], "export") != 0) {
        ct_errorf(err, "data: expected 'export CONFIG --to DIR' (e.g. ctrain data export "
                  "configs/mlp.yaml --to digits)");
        return CT_EXIT_USAGE;
    }
    if (npos < 2 || !to) {
        ct_errorf(err, "data export: expected a CONFIG and --to DIR");
        return CT_EXIT_USAGE;
    }
    char *end = NULL;
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
