/* image_source.c: samples read from their files per batch (image_source.h). */
#include "data/image_source.h"

#include <stdlib.h>
#include <string.h>

#include "data/image_convert.h"
#include "data/image_file.h"

/* random_resized_crop: the file kept at data.resize (as image_set.c's store does),
 * or the cache's kept image, the epoch's box of it resampled to H x W. */
static int sample_rrc(const ct_image_source *s, uint32_t epoch, int k, const char *path,
                      uint8_t *out, ct_err *err) {
    if (s->cached_kept) {
        const ct_image_store *st = s->cached_kept;
        int i = s->cached_index[k];
        if (ct_rrc_cut(&s->aug, epoch, (uint32_t)k, st->px + st->offset[i], s->c, st->w[i],
                       st->h[i], s->h, s->w, out) != 0)
            return ct_errorf(err, "%s: out of memory", path);
        return 0;
    }
    ct_image img;
    if (ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, s->resize, s->resize, &img, err) != 0)
        return -1;
    int rw, rh, rc = 0;
    ct_image_resized_size(img.w, img.h, s->resize, &rw, &rh);
    uint8_t *kept = NULL;
    if (rw < s->w || rh < s->h)
        rc = ct_errorf(err, "%s: a %dx%d image resized to %dx%d (data.resize %d) is smaller "
                       "than the model's %dx%d input", path, img.w, img.h, rw, rh, s->resize,
                       s->w, s->h);
    else if (!(kept = malloc((size_t)s->c * rw * rh)))
        rc = ct_errorf(err, "%s: out of memory", path);
    else
        rc = ct_image_to_input(&img, path, s->c, rh, rw, false, kept, err);
    ct_image_free(&img);
    if (rc == 0 &&
        ct_rrc_cut(&s->aug, epoch, (uint32_t)k, kept, s->c, rw, rh, s->h, s->w, out) != 0)
        rc = ct_errorf(err, "%s: out of memory", path);
    free(kept);
    return rc;
}

int ct_image_source_sample(void *ctx, uint32_t epoch, int k, uint8_t *out, ct_err *err) {
    const ct_image_source *s = ctx;
    const char *path = s->files.path[k];
    int rc;
    if (s->cached) {
        size_t sample = (size_t)s->c * s->h * s->w;
        memcpy(out, s->cached + (size_t)s->cached_index[k] * sample, sample);
        rc = 0;
    } else if (s->aug.rrc) {
        rc = sample_rrc(s, epoch, k, path, out, err);
    } else {
        int min_w, min_h;
        ct_image img;
        ct_image_input_needs(s->h, s->w, s->resize, &min_w, &min_h);
        rc = ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, min_w, min_h, &img, err);
        if (rc == 0) {
            rc = ct_image_to_input_resized(&img, path, s->c, s->h, s->w, s->resize, false, out,
                                           err);
            ct_image_free(&img);
        }
    }
    if (rc != 0) {
        ct_err why = *err;
        return ct_errorf(err, "%s: %s (data.in_memory: false reads each image when its batch "
                         "needs it; `ctrain data inspect` lists the unreadable ones)",
                         s->what ? s->what : "an image set", why.msg);
    }
    if (ct_image_aug_on(&s->aug)) {
        ct_jitter jit = ct_jitter_draw(&s->aug, epoch, (uint32_t)k);
        ct_jitter_apply(out, s->c, s->h, s->w, &jit);
    }
    return 0;
}

int ct_image_source_dataset(const ct_image_source *src, ct_dataset *ds, ct_err *err) {
    int n = src->files.count;
    *ds = (ct_dataset){.labels = malloc((size_t)(n ? n : 1)), .count = n, .channels = src->c,
                       .rows = src->h, .cols = src->w, .num_classes = src->num_classes};
    if (!ds->labels) return ct_errorf(err, "out of memory for %d labels", n);
    for (int i = 0; i < n; i++) ds->labels[i] = (uint8_t)src->files.label[i];
    return 0;
}

int ct_image_files_part(const ct_image_files *all, const uint8_t *keep, int want,
                        ct_image_files *part, ct_err *err) {
    memset(part, 0, sizeof *part);
    int n = 0;
    for (int i = 0; i < all->count; i++) n += !keep || keep[i] == want;
    part->path = calloc((size_t)(n ? n : 1), sizeof *part->path);
    part->label = malloc((size_t)(n ? n : 1) * sizeof *part->label);
    if (!part->path || !part->label) {
        ct_image_files_free(part);
        return ct_errorf(err, "out of memory for a list of %d files", n);
    }
    for (int i = 0; i < all->count; i++) {
        if (keep && keep[i] != want) continue;
        if (!(part->path[part->count] = strdup(all->path[i]))) {
            ct_image_files_free(part);
            return ct_errorf(err, "out of memory for a list of %d files", n);
        }
        part->label[part->count++] = all->label[i];
    }
    return 0;
}

void ct_image_source_free(ct_image_source *src) {
    if (!src) return;
    ct_image_files_free(&src->files);
    free(src->cached_index);
    memset(src, 0, sizeof *src);
}
