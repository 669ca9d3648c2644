/* onnx_model.h: an ONNX model put together in memory and written as one ModelProto,
 * packed by protobuf-c with the messages generated from onnx.proto at build time.
 * Compiled only in builds with ONNX support (CT_HAVE_ONNX); io/onnx_export.h is
 * what the rest of ctrain calls.
 *
 * The model is one graph of float tensors (elem_type FLOAT), the default ONNX
 * domain at one opset version. The builder copies every name and string it is
 * given and owns every message; tensor data is BORROWED and must stay valid until
 * ct_onnx_write. As with json_write.h, running out of memory is remembered and
 * reported by ct_onnx_write, so a model can be described without checking each
 * call.
 */
#ifndef CT_ONNX_MODEL_H
#define CT_ONNX_MODEL_H

#include <stdint.h>

#include "common/error.h"

typedef struct ct_onnx_model ct_onnx_model;

typedef enum { CT_ONNX_ATTR_INT, CT_ONNX_ATTR_INTS, CT_ONNX_ATTR_FLOAT } ct_onnx_attr_type;

/* One attribute of a node: an int (i), up to 4 ints (ints[0..n_ints)) or a float. */
typedef struct ct_onnx_attr {
    const char *name;
    ct_onnx_attr_type type;
    int64_t i;
    int64_t ints[4];
    int n_ints;
    float f;
} ct_onnx_attr;

/* What ModelProto says about itself. */
typedef struct ct_onnx_header {
    int64_t ir_version;
    int64_t opset;              /* of the default domain "" */
    const char *producer_name, *producer_version;
    const char *graph_name;
} ct_onnx_header;

/* NULL when out of memory. */
ct_onnx_model *ct_onnx_model_new(void);
void ct_onnx_model_free(ct_onnx_model *m);

/* A graph input or output: a float tensor of shape dims[0..ndim); a dim < 0 is
 * the symbolic batch dimension "N". */
void ct_onnx_input(ct_onnx_model *m, const char *name, int ndim, const int64_t *dims);
void ct_onnx_output(ct_onnx_model *m, const char *name, int ndim, const int64_t *dims);

/* A float initializer of shape dims[0..ndim) (ndim 0: a scalar), holding the
 * product of dims floats from data (borrowed). */
void ct_onnx_initializer(ct_onnx_model *m, const char *name, int ndim, const int64_t *dims,
                         const float *data);

/* One node: output = op_type(inputs[0..n_in)) with attrs[0..n_attrs); name names
 * the node. */
void ct_onnx_node(ct_onnx_model *m, const char *op_type, const char *name, int n_in,
                  const char *const *inputs, const char *output, int n_attrs,
                  const ct_onnx_attr *attrs);

/* One metadata_props entry. */
void ct_onnx_meta(ct_onnx_model *m, const char *key, const char *value);

/* Packs the model and writes it to path atomically (io/atomic_file.h). Fails on
 * an earlier out-of-memory or a write error, naming path. */
int ct_onnx_write(ct_onnx_model *m, const ct_onnx_header *h, const char *path, ct_err *err);

#endif
