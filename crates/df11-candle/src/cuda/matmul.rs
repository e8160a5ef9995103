//! Which kernel multiplies by a weight: the fused DF11 decode + matrix-vector kernel (and, for
//! dense BF16 weights, its twin), or a decode into a BF16 buffer followed by cuBLAS.
//!
//! The fused kernel and its BF16 twin sum in the same order (see `kernels/df11_fused.cu`), so a
//! DF11 model and its BF16 original stay bit-identical in this engine as long as both take the
//! same path at the same batch size: [`use_fused`] depends only on the batch rows, the device and
//! the setting here, never on the weight format.
//!
//! The default ([`MatmulPath::Auto`]) takes the fused path up to [`FUSED_MAX_ROWS`] rows, the
//! crossover measured on an H100 (docs/PERFORMANCE.md, "Fused matrix-vector"). Set
//! `DF11_MATMUL=fused|decode|auto` or call [`set_matmul_path`] to force either.

use candle_core::Device;

use crate::cuda::setting::Setting;

/// How linear layers multiply on CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulPath {
    /// Fused kernel up to [`FUSED_MAX_ROWS`] rows, decode + cuBLAS above.
    Auto,
    /// Fused kernel (twin for dense weights) at every batch size it supports (up to
    /// [`FUSED_LIMIT_ROWS`] rows per launch; larger batches are split into launches).
    Fused,
    /// Always decode into a BF16 buffer (dense weights: as they are) and call cuBLAS.
    Decode,
}

impl std::str::FromStr for MatmulPath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PATH.parse(s)
    }
}

/// Rows (tokens) up to which [`MatmulPath::Auto`] takes the fused kernel: the crossover measured
/// on an H100 for the seven matrices of a Qwen3-8B layer (docs/PERFORMANCE.md, `gpu_bench`), for
/// both device forms of the exponents (`crate::cuda::packed`):
///
/// | rows | fused, packed | decode + cuBLAS, packed | fused, Huffman | decode + cuBLAS, Huffman |
/// |------|--------------:|------------------------:|---------------:|-------------------------:|
/// | 1    | 0.194 ms      | 0.495 ms                | 0.258 ms       | 0.516 ms                 |
/// | 2    | 0.269 ms      | 0.492 ms                | 0.309 ms       | 0.512 ms                 |
/// | 4    | 0.391 ms      | 0.492 ms                | 0.454 ms       | 0.513 ms                 |
/// | 8    | 0.680 ms      | 0.491 ms                | 0.703 ms       | 0.512 ms                 |
pub const FUSED_MAX_ROWS: usize = 4;

/// Most rows one fused launch handles (the kernel keeps one accumulator per row in registers).
pub const FUSED_LIMIT_ROWS: usize = 8;

/// The path set for the process, else `DF11_MATMUL`'s; the paths' names (`cublas` is `decode`).
static PATH: Setting<MatmulPath> = Setting::new(
    "DF11_MATMUL",
    "matmul path",
    &[
        ("auto", MatmulPath::Auto),
        ("fused", MatmulPath::Fused),
        ("decode", MatmulPath::Decode),
        ("cublas", MatmulPath::Decode),
    ],
);

/// Sets the path for the whole process (overrides `DF11_MATMUL`).
pub fn set_matmul_path(path: MatmulPath) {
    PATH.set(path);
}

/// The path in force: [`set_matmul_path`]'s, else `DF11_MATMUL`'s, else [`MatmulPath::Auto`].
pub fn matmul_path() -> MatmulPath {
    PATH.get()
}

/// Whether a product with `rows` rows of input on `device` takes the fused kernel (given that
/// the weight and input allow it).
pub fn use_fused(rows: usize, device: &Device) -> bool {
    if !device.is_cuda() || !cfg!(feature = "cuda") || rows == 0 {
        return false;
    }
    match matmul_path() {
        MatmulPath::Auto => rows <= FUSED_MAX_ROWS,
        MatmulPath::Fused => true,
        MatmulPath::Decode => false,
    }
}
