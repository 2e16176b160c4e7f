/* Two layers of the engine's CPU float32 steps (packed_layers.py), each in one pass over memory.
 *
 *   kvviz_silu_and_mul   out = silu(gate) * up, from the one packed product x [W_gate; W_up]^T
 *   kvviz_rms_norm       out = weight * (x / sqrt(mean(x^2) + eps)), row by row
 *
 * PyTorch would run three ops for the first (slice, SiLU, multiply) and six for the second (square,
 * mean, add, rsqrt, multiply, multiply), each a pass that allocates. Float32, row-major; the rows are
 * split over `num_threads` OpenMP threads when there are enough to pay for waking them.
 */
#include <math.h>

#include "exp_nonpositive.h"

#define PARALLEL_FROM 65536  /* elements below which one thread is quicker */

/* SiLU, x * sigmoid(x), with sigmoid from e = exp(-|x|) so that it never overflows:
 * 1 / (1 + e) for x >= 0 and e / (1 + e) below. */
static inline float silu(float x) {
    const float e = exp_nonpositive(-fabsf(x));
    return x * (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* gate_up (rows, 2I): each row the gate's I values then the up projection's (x [W_gate; W_up]^T).
 * out (rows, I) = silu(gate) * up. */
void kvviz_silu_and_mul(const float *gate_up, float *out, long rows, long inter, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * inter >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *gate = gate_up + r * 2 * inter, *up = gate + inter;
        float *dst = out + r * inter;
        for (long i = 0; i < inter; i++) dst[i] = silu(gate[i]) * up[i];
    }
}

/* x (rows, n) -> out (rows, n): each row scaled by 1 / sqrt(mean of its squares + eps), then times
 * weight (n). The squares are summed in 16 float lanes at once (omp simd), as PyTorch's vectorised
 * mean does, in another order: the results differ in the last bit or two. */
void kvviz_rms_norm(const float *x, const float *weight, float *out, long rows, long n, float eps,
                    int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * n >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *src = x + r * n;
        float *dst = out + r * n;
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (long i = 0; i < n; i++) squares += src[i] * src[i];
        const float scale = 1.0f / sqrtf(squares / (float)n + eps);
#pragma omp simd
        for (long i = 0; i < n; i++) dst[i] = weight[i] * (src[i] * scale);
    }
}
