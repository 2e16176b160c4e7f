/* exp(x) for x <= 0 in plain arithmetic, so that loops calling it vectorise (libm's expf does
 * not without -ffast-math). Shared by paged_attention.c (softmax) and layer_ops.c (SiLU). */
#ifndef KVVIZ_EXP_NONPOSITIVE_H
#define KVVIZ_EXP_NONPOSITIVE_H

#include <math.h>
#include <stdint.h>

/* exp(x) for x <= 0, vectorisable: x = k ln2 + r, |r| <= ln2/2, exp(r) by its Taylor series to
 * r^7 (relative error about 1e-7, float32's own), 2^k put straight into the exponent bits. */
static inline float exp_nonpositive(float x) {
    x = x > -87.0f ? x : -87.0f;  /* exp(-87) is 1.6e-38: beneath it, the weight is 0 anyway */
    const float k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  /* round to nearest: 1.5 * 2^23 */
    const float r = x - k * 0.693145752f - k * 1.42860677e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { float f; int32_t i; } scale = {.i = ((int32_t)k + 127) << 23};
    return p * scale.f;
}

#endif
