/* out = in^T for a float32 matrix, in tiles that stay in the L1 cache.
 *
 * The engine's decode steps compute each linear layer as W @ x^T (runner.py: the turned
 * product), which leaves the result as (out_features, N); the model wants (N, out_features).
 * PyTorch's strided copy moves that at 2-8 GB/s on the bench's CPU; reading and writing whole
 * 32 x 32 tiles keeps both sides in cache lines.
 *
 *   in  (rows, cols) row-major;  out (cols, rows) row-major
 */
#define TILE 32

void kvviz_transpose(const float *in, float *out, long rows, long cols, int num_threads) {
    const long row_tiles = (rows + TILE - 1) / TILE, col_tiles = (cols + TILE - 1) / TILE;
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * cols >= 65536)
    for (long tile = 0; tile < row_tiles * col_tiles; tile++) {
        const long r0 = tile / col_tiles * TILE, c0 = tile % col_tiles * TILE;
        const long r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols;
        for (long c = c0; c < c1; c++)
            for (long r = r0; r < r1; r++) out[c * rows + r] = in[r * cols + c];
    }
}
