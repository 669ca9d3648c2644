/* cmd_export.c: `ctrain export --checkpoint FILE [--safetensors OUT] [--onnx OUT]`: a
 * trained model for other tools, in either form or both, each written atomically.
 *
 * --safetensors: the model's weights alone. OUT holds every tensor of the
 * checkpoint but the optimizer's state ("optimizer.*"), under the checkpoint's
 * PyTorch state_dict names (buffers such as running_mean and num_batches_tracked
 * included), with the metadata safetensors.torch.save_file writes
 * ({"format": "pt"}) and a data CRC32; F32 and I64 as stored (tensors of other
 * types, in foreign files, become F32).
 *
 * --onnx: the model for inference, as io/onnx_export.h describes; its layers come
 * from the config the checkpoint embeds, so it must be a ctrain checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "graph/graph.h"
#include "io/checkpoint.h"
#include "io/onnx_export.h"
#include "train/datasets.h"
#include "train/model.h"

static int export_weights(const ct_checkpoint *ck, const char *in, const char *out,
                          ct_err *err) {
    ct_ckpt_tensor *keep = calloc(ck->n_tensors ? (size_t)ck->n_tensors : 1, sizeof *keep);
    int n = 0, rc = -1;
    if (!keep) return ct_errorf(err, "%s: out of memory", in);
    for (int i = 0; i < ck->n_tensors; i++)
        if (strncmp(ck->tensors[i].name, "optimizer.", 10) != 0) keep[n++] = ck->tensors[i];
    if (n == 0) {
        ct_errorf(err, "%s: no weights to export (only optimizer state)", in);
        goto done;
    }
    const ct_ckpt_meta meta[] = {{"format", "pt"}};
    rc = ct_checkpoint_write(out, keep, n, meta, 1, err);
    if (rc == 0)
        fprintf(ct_report_stream(out), "Wrote %s: %d tensors of %s (optimizer state left out)\n",
                out, n, in);
done:
    free(keep); /* the tensors themselves belong to ck */
    return rc;
}

static int export_onnx(const ct_checkpoint *ck, const char *in, const char *out, ct_err *err) {
    ct_config cfg;
    memset(&cfg, 0, sizeof cfg);
    ct_graph *g = calloc(1, sizeof *g);
    int rc = -1;
    if (!g) return ct_errorf(err, "%s: out of memory", in);
    if (ct_model_config_from_checkpoint(ck, in, &cfg, err) != 0) goto done;
    if (ct_graph_build(&cfg, g, err) != 0) goto done;
    ct_pixel_prep prep = ct_data_prep(&cfg, false); /* as evaluation feeds the model */
    ct_onnx_source src = {.cfg = &cfg, .graph = g, .ck = ck, .ck_path = in, .prep = &prep};
    rc = ct_onnx_export(&src, out, err);
    if (rc == 0)
        fprintf(ct_report_stream(out),
                "Wrote %s: ONNX opset %d, input [N, %d, %d, %d], logits [N, %d], from %s\n", out,
                CT_ONNX_OPSET, g->input.c, g->input.h, g->input.w, g->num_classes, in);
done:
    ct_config_free(&cfg);
    free(g);
    return rc;
}

int ct_cmd_export(int argc, char **argv, ct_err *err) {
    const char *checkpoint = NULL, *safetensors = NULL, *onnx = NULL, *pos[1];
    ct_argspec specs[] = {
        {"checkpoint", 1, &checkpoint, NULL, NULL},
        {"safetensors", 1, &safetensors, NULL, NULL},
        {"onnx", 1, &onnx, NULL, NULL},
    };
    int npos, rc = ct_parse_args("export", argc, argv, specs,
                                 (int)(sizeof specs / sizeof specs[0]), pos, 0, &npos, err);
    if (rc) return rc;
    if (!checkpoint) {
        ct_errorf(err, "export: --checkpoint FILE is required");
        return CT_EXIT_USAGE;
    }
    if (!safetensors && !onnx) {
        ct_errorf(err, "export: say what to write: --safetensors OUT, --onnx OUT or both");
        return CT_EXIT_USAGE;
    }
    if (onnx && ct_onnx_check_support(err) != 0) return CT_EXIT_ERROR;
    ct_checkpoint ck;
    if (ct_checkpoint_read(checkpoint, &ck, err) != 0) return CT_EXIT_ERROR;
    rc = 0;
    if (onnx) rc = export_onnx(&ck, checkpoint, onnx, err);
    if (rc == 0 && safetensors) rc = export_weights(&ck, checkpoint, safetensors, err);
    ct_checkpoint_free(&ck);
    return rc == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
}
