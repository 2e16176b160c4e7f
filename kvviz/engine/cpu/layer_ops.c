/* The small per-layer operations of a CPU decode step, each in one pass over memory.
 *
 * A decode step runs a few rows through every layer. PyTorch then spends more time dispatching
 * and allocating for each small elementwise op than computing it, and its strided copies move
 * only 2-8 GB/s on the bench's CPU. These do in one pass what takes PyTorch three to seven ops:
 *
 *   kvviz_transpose             out = in^T                                    (runner.py: turned linears)
 *   kvviz_silu_and_mul          out = silu(gate) * up                         (fused_layers.py: gated MLPs)
 *   kvviz_silu_and_mul_turned   the same from the turned layout, transposed back
 *   kvviz_rms_norm              out = weight * x / sqrt(mean(x^2) + eps)      (runner.py: RMSNorm)
 *
 * All float32, row-major. Work is split over `num_threads` OpenMP threads when it is big enough
 * to pay for waking them.
 */
#include <math.h>

#include "exp_nonpositive.h"

#define TILE 32              /* transposing in 32 x 32 tiles keeps both sides in cache lines */
#define PARALLEL_FROM 65536  /* elements below which one thread is quicker */

/* SiLU, x * sigmoid(x), with sigmoid from e = exp(-|x|) so that it never overflows:
 * 1 / (1 + e) for x >= 0 and e / (1 + e) below. */
static inline float silu(float x) {
    const float e = exp_nonpositive(-fabsf(x));
    return x * (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* in (rows, cols) -> out (cols, rows), a tile at a time. With gate_up, the tile is first
 * replaced by silu(gate) * up, gate the tile's rows and up the rows `rows` further on. */
static void transpose_tiles(const float *in, const float *up, float *out, long rows, long cols, int num_threads) {
    const long row_tiles = (rows + TILE - 1) / TILE, col_tiles = (cols + TILE - 1) / TILE;
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * cols >= PARALLEL_FROM)
    for (long tile = 0; tile < row_tiles * col_tiles; tile++) {
        const long r0 = tile / col_tiles * TILE, c0 = tile % col_tiles * TILE;
        const long r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols;
        float block[TILE][TILE];
        for (long r = r0; r < r1; r++) {
            const float *row = in + r * cols;
            if (up) {
                const float *up_row = up + r * cols;
                for (long c = c0; c < c1; c++) block[r - r0][c - c0] = silu(row[c]) * up_row[c];
            } else {
                for (long c = c0; c < c1; c++) block[r - r0][c - c0] = row[c];
            }
        }
        for (long c = c0; c < c1; c++)
            for (long r = r0; r < r1; r++) out[c * rows + r] = block[r - r0][c - c0];
    }
}

void kvviz_transpose(const float *in, float *out, long rows, long cols, int num_threads) {
    transpose_tiles(in, 0, out, rows, cols, num_threads);
}

/* gate_up (2I, N): the turned product [W_gate; W_up] @ x^T, rows [0, I) the gate, [I, 2I) the
 * up projection. out (N, I) = silu(gate)^T * up^T: the activation, the product and the
 * transpose back to the model's layout in one pass. */
void kvviz_silu_and_mul_turned(const float *gate_up, float *out, long inter, long tokens, int num_threads) {
    transpose_tiles(gate_up, gate_up + inter * tokens, out, inter, tokens, num_threads);
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

/* x (rows, dim) -> out (rows, dim): each row scaled to unit root-mean-square, times weight
 * (plus 1 when weight_offset is 1: Gemma stores weight - 1). */
void kvviz_rms_norm(const float *x, const float *weight, float *out, long rows, long dim, float eps,
                    float weight_offset, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * dim >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *row = x + r * dim;
        float *dst = out + r * dim;
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (long d = 0; d < dim; d++) squares += row[d] * row[d];
        const float scale = 1.0f / sqrtf(squares / (float)dim + eps);
        for (long d = 0; d < dim; d++) dst[d] = (weight[d] + weight_offset) * (row[d] * scale);
    }
}
