/* act.h: the pointwise activations, one enum for the op table (graph.h
 * ct_op_desc.act), the reference ops (ref_ops.h), the CPU backend and the CUDA
 * kernels (kernels.h); elementwise.h holds their math. relu is not here: it has
 * paths of its own everywhere (it fuses into convs, pools, batch norms and adds).
 *
 *   gelu        x * Phi(x), Phi the standard normal CDF (the exact erf form,
 *               PyTorch's nn.GELU() default)
 *   silu        x * sigmoid(x)
 *   tanh, sigmoid
 *   leaky_relu  x > 0 ? x : slope * x (the layer's slope)
 */
#ifndef CT_ACT_H
#define CT_ACT_H

typedef enum ct_act {
    CT_ACT_NONE, /* the layer is not one of these */
    CT_ACT_GELU,
    CT_ACT_SILU,
    CT_ACT_TANH,
    CT_ACT_SIGMOID,
    CT_ACT_LEAKY_RELU,
    CT_ACT_COUNT
} ct_act;

#endif
