//! What the fused product kernels can take at all: rows a launch and the shapes of the
//! tensor-core kernels. The bottom of the CUDA modules' imports: the launch checks, the tile
//! order, the kernels and the plan ([`crate::cuda::matmul`]) all read these.

/// Most rows one CUDA-core fused launch handles (the kernel keeps one accumulator per row in
/// registers).
pub const FUSED_LIMIT_ROWS: usize = 8;

/// Most rows one tensor-core launch handles (four 16-row m-tiles).
pub const TC_LIMIT_ROWS: usize = 64;

/// Whether the tensor-core kernels take a weight with `cols` columns: whole 256-column passes,
/// and at most 256 chunks of 2048.
pub(crate) fn tc_shape(cols: usize) -> bool {
    cols > 0 && cols.is_multiple_of(256) && cols <= 2048 * 256
}
