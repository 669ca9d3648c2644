/* config_relocate.c: a run's config, read where the run now is (config.h,
 * ct_config_relocate).
 *
 * A run's resolved config names its data by absolute paths and its directory by
 * train.out (absolute). After the project moves (`mv proj proj2`), a data path
 * that no longer exists is looked for at the same place relative to the run's new
 * directory: /old/proj/data/x.gz was ../../data/x.gz from /old/proj/runs/cnn, so
 * from /new/proj2/runs/cnn it is /new/proj2/data/x.gz. The config is parsed again
 * with those paths and train.out as edits, so its text says where things are now.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config_internal.h"

/* Splits an absolute path into its components (in place in buf); returns the count. */
static int components(char *buf, char **part, int max) {
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok && n < max;
         tok = strtok_r(NULL, "/", &save))
        if (strcmp(tok, ".") != 0) part[n++] = tok;
    return n;
}

/* path (absolute) relative to dir (absolute), as "../../data/x.gz"; false when it
 * does not fit. */
static bool relative_to(const char *path, const char *dir, char *out, size_t n) {
    char a[PATH_MAX], b[PATH_MAX], *pa[256], *pb[256];
    snprintf(a, sizeof a, "%s", path);
    snprintf(b, sizeof b, "%s", dir);
    int na = components(a, pa, 256), nb = components(b, pb, 256), k = 0;
    while (k < na && k < nb && !strcmp(pa[k], pb[k])) k++;
    size_t used = 0;
    out[0] = 0;
    for (int i = k; i < nb; i++) used += (size_t)snprintf(out + used, n > used ? n - used : 0, "../");
    for (int i = k; i < na; i++)
        used += (size_t)snprintf(out + used, n > used ? n - used : 0, "%s%s", pa[i],
                                 i + 1 < na ? "/" : "");
    return used < n;
}

/* key="path" (YAML double-quoted) as an edit. */
static void add_path(ct_edit_list *m, const char *key, const char *path) {
    char value[2 * PATH_MAX + 8];
    ct_edit_list_add(m, key, "%s", ct_yaml_quoted(path, value, sizeof value));
}

/* data.<key> at path: when it is absolute and gone, its place relative to the run's new
 * directory, if something is there. */
static void relocate_one(ct_edit_list *m, const char *key, const char *path, const char *old_dir,
                         const char *new_dir) {
    char rel[PATH_MAX], cand[2 * PATH_MAX + 2], real[PATH_MAX];
    if (path[0] != '/' || access(path, F_OK) == 0 || strpbrk(path, "*?[")) return;
    if (!relative_to(path, old_dir, rel, sizeof rel)) return;
    snprintf(cand, sizeof cand, "%s/%s", new_dir, rel);
    if (!realpath(cand, real)) return;
    add_path(m, key, real);
}

int ct_config_relocate(ct_config *cfg, const char *old_given, const char *run_dir,
                       bool *moved_out, ct_err *err) {
    char new_dir[PATH_MAX], old_real[PATH_MAX], old_dir[PATH_MAX];
    if (moved_out) *moved_out = false;
    snprintf(old_dir, sizeof old_dir, "%s", old_given && *old_given ? old_given : cfg->train.out);
    if (!cfg->text || old_dir[0] != '/' || !realpath(run_dir, new_dir)) return 0;
    if (realpath(old_dir, old_real) && !strcmp(old_real, new_dir)) return 0; /* not moved */
    ct_edit_list m = {.n = 0};
    const ct_data_cfg *d = &cfg->data;
    if (d->n_train_images <= 1)
        relocate_one(&m, ct_data_key(d, true), d->train_images, old_dir, new_dir);
    relocate_one(&m, "data.train_labels", d->train_labels, old_dir, new_dir);
    relocate_one(&m, ct_data_key(d, false), d->test_images, old_dir, new_dir);
    relocate_one(&m, "data.test_labels", d->test_labels, old_dir, new_dir);
    if (cfg->train.out[0] == '/' && access(cfg->train.out, F_OK) != 0)
        add_path(&m, "train.out", new_dir);
    if (m.n == 0) return 0;
    if (ct_config_reparse(cfg, &m, err) != 0) return -1;
    if (moved_out) *moved_out = true;
    return 0;
}

static void adopt_one(ct_edit_list *m, const char *key, const char *was, const char *now) {
    if (!was[0] || !now[0] || !strcmp(was, now) || strpbrk(was, "*?[")) return;
    if (access(was, F_OK) == 0 || access(now, F_OK) != 0) return;
    add_path(m, key, now);
}

int ct_config_adopt_data_paths(ct_config *was, const ct_config *now, ct_err *err) {
    ct_edit_list m = {.n = 0};
    const ct_data_cfg *a = &was->data, *b = &now->data;
    bool same_format = a->format == b->format;
    if (same_format && a->n_train_images <= 1 && b->n_train_images <= 1)
        adopt_one(&m, ct_data_key(a, true), a->train_images, b->train_images);
    adopt_one(&m, "data.train_labels", a->train_labels, b->train_labels);
    if (same_format) adopt_one(&m, ct_data_key(a, false), a->test_images, b->test_images);
    adopt_one(&m, "data.test_labels", a->test_labels, b->test_labels);
    if (m.n == 0 || !was->text) {
        ct_edit_list_free(&m);
        return 0;
    }
    return ct_config_reparse(was, &m, err);
}
