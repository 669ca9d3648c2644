/* onnx_export.h: a trained model as an ONNX file, for inference with other tools
 * (onnxruntime, ...).
 *
 * The graph of a config with a checkpoint's weights, in inference mode (batch norms
 * use their running statistics, dropout is the identity), as ONNX opset 17 (IR
 * version 8, the default domain only), written atomically:
 *   input  "input"   float [N, C, H, W], N symbolic: images normalized as ctrain
 *                    feeds them, x = (pixel / 255 - mean[c]) / std[c]
 *   output "logits"  float [N, num_classes], before softmax
 * Each graph node becomes (graph.h, config.h):
 *   conv2d          Conv (kernel_shape, strides, pads), bias input when it has one
 *   maxpool2d       MaxPool (padding never wins); avgpool2d AveragePool with
 *                   count_include_pad = 1; both floor mode
 *   linear          Gemm with transB = 1 (the weight stays [out, in])
 *   batchnorm2d/1d  BatchNormalization (scale, bias, running mean and variance,
 *                   epsilon = the layer's eps)
 *   relu, tanh, sigmoid, flatten (axis 1), global_avgpool (GlobalAveragePool),
 *   leaky_relu (LeakyRelu, alpha = slope): one op each
 *   gelu            exact: x * 0.5 * (1 + Erf(x / sqrt(2))) from Mul, Erf, Add
 *                   (opset 17 has no Gelu)
 *   silu            x * Sigmoid(x)
 *   residual        Add of the block's body and shortcut outputs
 *   dropout         nothing (Identity when it is the last layer)
 * Initializers keep the checkpoint's PyTorch state_dict names ("layers.0.weight",
 * "layers.1.running_var"); the constants of gelu are "ctrain.gelu.*". A node's
 * output is named by its module path ("layers.3.body.0"); the steps of a layer
 * that takes several ops are "<path>/<step>".
 * metadata_props, so that a consumer can prepare its input:
 *   "normalization"  "x = (pixel / 255 - mean[c]) / std[c]"
 *   "mean", "std"    JSON arrays of C numbers (the floats ctrain uses, shortest form)
 *   "num_classes"    the logits' size
 *   "name"           the model's name (config name)
 *   "class_names"    data.class_names as a JSON array of strings, when the config
 *                    has them
 *   "image_size"     models trained on image files (data.format folder or list):
 *                    how an image is brought to [H, W] before normalization, as
 *                    "resize N, center crop" (data.resize N: shorter side to N,
 *                    aspect kept, then the centre H x W) or "resample" (the whole
 *                    image to H x W)
 *
 * Builds without ONNX support (CT_HAVE_ONNX) fail with one line saying so.
 */
#ifndef CT_ONNX_EXPORT_H
#define CT_ONNX_EXPORT_H

#include "common/error.h"
#include "config/config.h"
#include "data/pixels.h"
#include "graph/graph.h"
#include "io/checkpoint.h"

#define CT_ONNX_OPSET 17
#define CT_ONNX_IR_VERSION 8 /* what opset 17 needs */

/* What an export reads; all borrowed. */
typedef struct ct_onnx_source {
    const ct_config *cfg;      /* the model's config (name, class names) */
    const ct_graph *graph;     /* built from cfg (ct_graph_build) */
    const ct_checkpoint *ck;   /* the weights and buffers, by state_dict name */
    const char *ck_path;       /* names the checkpoint in messages */
    const ct_pixel_prep *prep; /* the normalization the model is fed (evaluation) */
} ct_onnx_source;

/* 0 when this build can write ONNX files, else -1 with the one line that says it
 * cannot (ct_onnx_export fails with it too). */
int ct_onnx_check_support(ct_err *err);

/* Writes src's model to path. Fails with one line: no ONNX support, a tensor
 * missing from the checkpoint or of the wrong shape (naming the tensor and its
 * layer), or a write error. */
int ct_onnx_export(const ct_onnx_source *src, const char *path, ct_err *err);

#endif
