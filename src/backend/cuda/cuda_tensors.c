/* cuda_tensors.c: the helpers every CUDA op uses (see cuda_internal.h, "shared
 * helpers"): a node's input and input-gradient regions, its parameter and gradient
 * views, the cuDNN workspace size, 4-D descriptors and their release, and the
 * sync_debug check after a launch. They read the backend's state and call nothing
 * above them: the ops and the vtable file (cuda_backend.c) both stand on them.
 */
#include "backend/cuda/cuda_internal.h"

float *ct_cuda_in_k(ct_cuda *b, int i, int k) {
    int s = b->g->nodes[i].src[k];
    return s < 0 ? b->x : b->nodes[s].act;
}
float *ct_cuda_in(ct_cuda *b, int i) { return ct_cuda_in_k(b, i, 0); }

float *ct_cuda_gin_k(ct_cuda *b, int i, int k) {
    const ct_node *n = &b->g->nodes[i];
    if (k >= n->n_src || n->src[k] < 0) return NULL;
    return n->gin_add[k] ? b->nodes[i].gin_part[k] : b->nodes[n->src[k]].gact;
}
float *ct_cuda_gin(ct_cuda *b, int i) { return ct_cuda_gin_k(b, i, 0); }

static float *param_view(const ct_cuda *b, float *base, const ct_cuda_node *nd, bool bias) {
    int k = bias ? nd->g->bias : nd->g->weight;
    return k < 0 || !base ? NULL : base + b->g->params[k].offset;
}

float *ct_cuda_param(ct_cuda *b, const ct_cuda_node *nd, bool bias) {
    return param_view(b, b->params, nd, bias);
}

float *ct_cuda_grad(ct_cuda *b, const ct_cuda_node *nd, bool bias) {
    return param_view(b, b->grads, nd, bias);
}

void ct_cuda_need_ws(ct_cuda *b, size_t bytes) {
    if (bytes > b->ws_bytes) b->ws_bytes = bytes;
}

int ct_cuda_tensor_desc(cudnnTensorDescriptor_t *d, int n, int c, int h, int w, ct_err *err) {
    CT_CUDNN(err, cudnnCreateTensorDescriptor(d));
    CT_CUDNN(err, cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    return 0;
}

void ct_cuda_node_release(ct_cuda_node *nd) {
    if (nd->in_desc) cudnnDestroyTensorDescriptor(nd->in_desc);
    if (nd->out_desc) cudnnDestroyTensorDescriptor(nd->out_desc);
    if (nd->bias_desc) cudnnDestroyTensorDescriptor(nd->bias_desc);
    if (nd->w_desc) cudnnDestroyFilterDescriptor(nd->w_desc);
    for (int k = 0; k < 3; k++)
        if (nd->conv[k]) cudnnDestroyConvolutionDescriptor(nd->conv[k]), nd->conv[k] = NULL;
    if (nd->pool) cudnnDestroyPoolingDescriptor(nd->pool);
    nd->in_desc = nd->out_desc = nd->bias_desc = NULL;
    nd->w_desc = NULL;
    nd->pool = NULL;
}

int ct_cuda_debug_sync(ct_cuda *b, const char *what, ct_err *err) {
    if (!b->o.sync_debug) return 0;
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) {
        ct_cudart_failed(err, "cudaStreamSynchronize", e);
        return ct_err_prefix(err, "%s", what);
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) {
        ct_cudart_failed(err, "cudaGetLastError", e);
        return ct_err_prefix(err, "%s", what);
    }
    return 0;
}
