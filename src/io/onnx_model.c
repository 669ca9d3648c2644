/* onnx_model.c: the ModelProto builder of onnx_model.h over protobuf-c's generated
 * onnx.proto messages. Every message and string lives in one list of allocations
 * freed together; the lists of nodes, initializers, inputs, outputs and metadata
 * grow by doubling. */
#include "io/onnx_model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "io/atomic_file.h"
#include "onnx.pb-c.h"

/* One allocation of the model's: a header, then the caller's bytes. */
typedef struct block {
    struct block *next;
    max_align_t data[];
} block;

struct ct_onnx_model {
    block *blocks;
    bool failed; /* out of memory somewhere: ct_onnx_write fails */
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    Onnx__ValueInfoProto **inputs, **outputs;
    size_t n_inputs, cap_inputs, n_outputs, cap_outputs;
    Onnx__StringStringEntryProto **meta;
    size_t n_meta, cap_meta;
};

/* Appends item (when not NULL) to the growable array arr[0..n) of capacity cap. */
#define PUSH(m, arr, n, cap, item)                                          \
    do {                                                                    \
        if (!(item)) break;                                                 \
        if ((n) == (cap)) {                                                 \
            size_t c_ = (cap) ? 2 * (cap) : 16;                             \
            void *p_ = realloc((arr), c_ * sizeof *(arr));                  \
            if (!p_) {                                                      \
                (m)->failed = true;                                         \
                break;                                                      \
            }                                                               \
            (arr) = p_;                                                     \
            (cap) = c_;                                                     \
        }                                                                   \
        (arr)[(n)++] = (item);                                              \
    } while (0)

/* n zeroed bytes owned by m, or NULL (m->failed set). */
static void *take(ct_onnx_model *m, size_t n) {
    block *b = calloc(1, sizeof *b + n);
    if (!b) {
        m->failed = true;
        return NULL;
    }
    b->next = m->blocks;
    m->blocks = b;
    return b->data;
}

static char *copy_str(ct_onnx_model *m, const char *s) {
    size_t n = strlen(s) + 1;
    char *c = take(m, n);
    if (c) memcpy(c, s, n);
    return c;
}

ct_onnx_model *ct_onnx_model_new(void) { return calloc(1, sizeof(ct_onnx_model)); }

void ct_onnx_model_free(ct_onnx_model *m) {
    if (!m) return;
    for (block *b = m->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(m->nodes);
    free(m->inits);
    free(m->inputs);
    free(m->outputs);
    free(m->meta);
    free(m);
}

/* A float tensor's type: dims[0..ndim), a dim < 0 the symbolic "N". */
static Onnx__ValueInfoProto *value_info(ct_onnx_model *m, const char *name, int ndim,
                                        const int64_t *dims) {
    Onnx__ValueInfoProto *v = take(m, sizeof *v);
    Onnx__TypeProto *type = take(m, sizeof *type);
    Onnx__TypeProto__Tensor *tensor = take(m, sizeof *tensor);
    Onnx__TensorShapeProto *shape = take(m, sizeof *shape);
    Onnx__TensorShapeProto__Dimension **dim = take(m, (size_t)ndim * sizeof *dim);
    if (!v || !type || !tensor || !shape || (ndim > 0 && !dim)) return NULL;
    for (int i = 0; i < ndim; i++) {
        Onnx__TensorShapeProto__Dimension *d = take(m, sizeof *d);
        if (!d) return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] < 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = copy_str(m, "N");
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        dim[i] = d;
    }
    onnx__tensor_shape_proto__init(shape);
    shape->n_dim = (size_t)ndim;
    shape->dim = dim;
    onnx__type_proto__tensor__init(tensor);
    tensor->has_elem_type = 1;
    tensor->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tensor->shape = shape;
    onnx__type_proto__init(type);
    type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type->tensor_type = tensor;
    onnx__value_info_proto__init(v);
    v->name = copy_str(m, name);
    v->type = type;
    return v;
}

void ct_onnx_input(ct_onnx_model *m, const char *name, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *v = value_info(m, name, ndim, dims);
    PUSH(m, m->inputs, m->n_inputs, m->cap_inputs, v);
}

void ct_onnx_output(ct_onnx_model *m, const char *name, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *v = value_info(m, name, ndim, dims);
    PUSH(m, m->outputs, m->n_outputs, m->cap_outputs, v);
}

void ct_onnx_initializer(ct_onnx_model *m, const char *name, int ndim, const int64_t *dims,
                         const float *data) {
    Onnx__TensorProto *t = take(m, sizeof *t);
    int64_t *d = take(m, (size_t)(ndim > 0 ? ndim : 1) * sizeof *d);
    if (!t || !d) return;
    onnx__tensor_proto__init(t);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        d[i] = dims[i];
        count *= (size_t)dims[i];
    }
    t->n_dims = (size_t)ndim;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->name = copy_str(m, name);
    /* float_data is packed little-endian by protobuf-c whatever the host's order;
     * packing only reads it */
    t->n_float_data = count;
    t->float_data = (float *)data;
    PUSH(m, m->inits, m->n_inits, m->cap_inits, t);
}

static Onnx__AttributeProto *attribute(ct_onnx_model *m, const ct_onnx_attr *a) {
    Onnx__AttributeProto *p = take(m, sizeof *p);
    if (!p) return NULL;
    onnx__attribute_proto__init(p);
    p->name = copy_str(m, a->name);
    p->has_type = 1;
    switch (a->type) {
    case CT_ONNX_ATTR_INT:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        p->has_i = 1;
        p->i = a->i;
        break;
    case CT_ONNX_ATTR_INTS:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        p->ints = take(m, sizeof a->ints);
        if (!p->ints) return NULL;
        memcpy(p->ints, a->ints, (size_t)a->n_ints * sizeof *a->ints);
        p->n_ints = (size_t)a->n_ints;
        break;
    case CT_ONNX_ATTR_FLOAT:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        p->has_f = 1;
        p->f = a->f;
        break;
    }
    return p;
}

void ct_onnx_node(ct_onnx_model *m, const char *op_type, const char *name, int n_in,
                  const char *const *inputs, const char *output, int n_attrs,
                  const ct_onnx_attr *attrs) {
    Onnx__NodeProto *n = take(m, sizeof *n);
    char **in = take(m, (size_t)n_in * sizeof *in);
    char **out = take(m, sizeof *out);
    Onnx__AttributeProto **at = take(m, (size_t)(n_attrs > 0 ? n_attrs : 1) * sizeof *at);
    if (!n || !in || !out || !at) return;
    onnx__node_proto__init(n);
    for (int i = 0; i < n_in; i++) in[i] = copy_str(m, inputs[i]);
    out[0] = copy_str(m, output);
    for (int i = 0; i < n_attrs; i++) at[i] = attribute(m, &attrs[i]);
    n->op_type = copy_str(m, op_type);
    n->name = copy_str(m, name);
    n->n_input = (size_t)n_in;
    n->input = in;
    n->n_output = 1;
    n->output = out;
    n->n_attribute = (size_t)n_attrs;
    n->attribute = at;
    PUSH(m, m->nodes, m->n_nodes, m->cap_nodes, n);
}

void ct_onnx_meta(ct_onnx_model *m, const char *key, const char *value) {
    Onnx__StringStringEntryProto *e = take(m, sizeof *e);
    if (!e) return;
    onnx__string_string_entry_proto__init(e);
    e->key = copy_str(m, key);
    e->value = copy_str(m, value);
    PUSH(m, m->meta, m->n_meta, m->cap_meta, e);
}

int ct_onnx_write(ct_onnx_model *m, const ct_onnx_header *h, const char *path, ct_err *err) {
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
    opset.domain = "";
    opset.has_version = 1;
    opset.version = h->opset;
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    graph.name = (char *)h->graph_name;
    graph.n_node = m->n_nodes;
    graph.node = m->nodes;
    graph.n_initializer = m->n_inits;
    graph.initializer = m->inits;
    graph.n_input = m->n_inputs;
    graph.input = m->inputs;
    graph.n_output = m->n_outputs;
    graph.output = m->outputs;
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = h->ir_version;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = (char *)h->producer_name;
    model.producer_version = (char *)h->producer_version;
    model.graph = &graph;
    model.n_metadata_props = m->n_meta;
    model.metadata_props = m->meta;
    if (m->failed) return ct_errorf(err, "%s: out of memory", path);
    size_t n = onnx__model_proto__get_packed_size(&model);
    if (n > INT32_MAX) /* protobuf's own limit, which readers enforce */
        return ct_errorf(err, "%s: the model would take %zu bytes; ONNX files hold at most 2 GiB",
                         path, n);
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) return ct_errorf(err, "%s: out of memory (%zu bytes)", path, n);
    onnx__model_proto__pack(&model, buf);
    int rc = ct_atomic_write_file(path, buf, n, err);
    free(buf);
    return rc;
}
