/* The gated activation of a packed MLP (packed_layers.py), in one pass over memory.
 *
 *   kvviz_silu_and_mul   out = silu(gate) * up, from the one packed product x [W_gate; W_up]^T
 *
 * PyTorch would slice, run SiLU and multiply in three ops, each allocating. Float32, row-major;
 * the rows are split over `num_threads` OpenMP threads when there are enough to pay for waking them.
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
