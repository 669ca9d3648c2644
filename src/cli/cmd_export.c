/* cmd_export.c: `ctrain export --checkpoint FILE --safetensors OUT`: a model's
 * weights alone, for other tools. OUT holds every tensor of the checkpoint but the
 * optimizer's state ("optimizer.*"), under the checkpoint's PyTorch state_dict names
 * (buffers such as running_mean and num_batches_tracked included), with the
 * metadata safetensors.torch.save_file writes ({"format": "pt"}) and a data
 * CRC32; F32 and I64 as stored (tensors of other types, in foreign files, become
 * F32). Written atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/checkpoint.h"

static int export_weights(const char *in, const char *out, ct_err *err) {
    ct_checkpoint ck;
    if (ct_checkpoint_read(in, &ck, err) != 0) return -1;
    ct_ckpt_tensor *keep = calloc(ck.n_tensors ? (size_t)ck.n_tensors : 1, sizeof *keep);
    int n = 0, rc = -1;
    if (!keep) {
        ct_errorf(err, "%s: out of memory", in);
        goto done;
    }
    for (int i = 0; i < ck.n_tensors; i++)
        if (strncmp(ck.tensors[i].name, "optimizer.", 10) != 0) keep[n++] = ck.tensors[i];
    if (n == 0) {
        ct_errorf(err, "%s: no weights to export (only optimizer state)", in);
        goto done;
    }
    const ct_ckpt_meta meta[] = {{"format", "pt"}};
    rc = ct_checkpoint_write(out, keep, n, meta, 1, err);
    if (rc == 0) printf("Wrote %s: %d tensors of %s (optimizer state left out)\n", out, n, in);
done:
    free(keep); /* the tensors themselves belong to ck */
    ct_checkpoint_free(&ck);
    return rc;
}

int ct_cmd_export(int argc, char **argv, ct_err *err) {
    const char *checkpoint = NULL, *safetensors = NULL, *pos[1];
    ct_argspec specs[] = {
        {"checkpoint", 1, &checkpoint, NULL, NULL},
        {"safetensors", 1, &safetensors, NULL, NULL},
    };
    int npos, rc = ct_parse_args("export", argc, argv, specs,
                                 (int)(sizeof specs / sizeof specs[0]), pos, 0, &npos, err);
    if (rc) return rc;
    if (!checkpoint) {
        ct_errorf(err, "export: --checkpoint FILE is required");
        return CT_EXIT_USAGE;
    }
    if (!safetensors) {
        ct_errorf(err, "export: say what to write: --safetensors OUT");
        return CT_EXIT_USAGE;
    }
    return export_weights(checkpoint, safetensors, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
}
