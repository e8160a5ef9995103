//! Which kernel multiplies by a weight: a fused kernel that decodes DF11 weights where they are
//! used (and, for dense BF16 weights, its twin), or a decode into a BF16 buffer followed by cuBLAS.
//!
//! There are two fused families, each a DF11 kernel and a BF16 twin that sum in the same order:
//! the tensor-core kernels (`kernels/df11_tc.cu`, [`FusedKernel::TensorCore`]: 1 to
//! [`TC_LIMIT_ROWS`] rows a launch, columns a multiple of 256, sm_80 and newer) and the CUDA-core
//! matrix-vector kernels (`kernels/df11_fused.cu`, [`FusedKernel::CudaCore`]: up to
//! [`FUSED_LIMIT_ROWS`] rows). A DF11 model and its BF16 original stay bit-identical in this
//! engine as long as both take the same kernel at the same batch size: [`fused_plan`] depends only
//! on the batch rows, the columns, the device and the settings here, never on the weight format
//! (a DF11 weight the DF11 kernel cannot take is decoded and given to the twin).
//!
//! The default ([`MatmulPath::Auto`]) takes the tensor-core kernels from [`TC_MIN_ROWS`] to
//! [`TC_MAX_ROWS`] rows where the shape allows, else the CUDA-core kernels up to
//! [`FUSED_MAX_ROWS`] rows: crossovers measured on an H100 (docs/PERFORMANCE.md).
//! [`Df11Options::matmul`] forces a path, [`Df11Options::tensor_cores`] keeps the fused path off
//! the tensor cores.

use candle_core::Device;

pub(crate) use crate::cuda::limits::tc_shape;
pub use crate::cuda::limits::{FUSED_LIMIT_ROWS, TC_LIMIT_ROWS};
use crate::options::Df11Options;
pub use crate::options::MatmulPath;

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

/// Rows (tokens) from which [`MatmulPath::Auto`] takes the tensor-core kernels, where the shape
/// allows them (below, the CUDA-core kernels are faster; docs/PERFORMANCE.md, "Tensor-core fused
/// products"). For widths whose members units tile ([`crate::TileMembers::tiles`])
/// the tensor-core kernels take every batch size from 1 row: the CUDA-core kernels cannot read a
/// tiled member.
pub const TC_MIN_ROWS: usize = 3;

/// Rows (tokens) up to which [`MatmulPath::Auto`] takes the tensor-core kernels (above, decode +
/// cuBLAS for DF11 and cuBLAS for BF16).
///
/// The plan is one for both formats (a BF16 model takes the twin where DF11 takes the streaming
/// kernel, so their bits agree), so the crossover weighs both. A Qwen3-8B layer as the decode step
/// launches it, on an H200 (`tc_probe layer` / `tc_probe prefill`, eager launches, ms;
/// docs/PERFORMANCE.md):
///
/// | rows | DF11 streaming | DF11 decode + cuBLAS | BF16 twin | BF16 cuBLAS |
/// |------|---------------:|---------------------:|----------:|------------:|
/// | 16   | 0.200          | 0.351                | 0.186     | 0.118       |
/// | 24   | 0.267          | 0.351                | 0.242     | 0.119       |
/// | 32   | 0.303          | 0.355                | 0.288     | 0.120       |
/// | 48   | 0.458          | 0.353                | 0.405     | 0.123       |
/// | 64   | 0.502          | 0.353                | 0.444     | 0.122       |
///
/// Up to 32 rows DF11 would gain 1.2-1.3x from the streaming kernel, but a BF16 model would lose
/// 2-2.4x to its twin; 16 keeps BF16 on cuBLAS above 16 rows.
pub const TC_MAX_ROWS: usize = 16;

/// The fused kernel family a product takes (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedKernel {
    /// `kernels/df11_tc.cu`: mma.sync over weights rebuilt in registers.
    TensorCore,
    /// `kernels/df11_fused.cu`: f32 FMAs, one accumulator per row.
    CudaCore,
}

impl FusedKernel {
    /// Most rows one launch of this family handles (larger batches are split into launches).
    pub fn limit_rows(self) -> usize {
        match self {
            Self::TensorCore => TC_LIMIT_ROWS,
            Self::CudaCore => FUSED_LIMIT_ROWS,
        }
    }
}

/// Whether a product with `rows` rows of input on `device` takes a fused kernel for a weight
/// with `cols` columns (given that the input allows it), and which, under `options`.
pub fn fused_plan(
    rows: usize,
    cols: usize,
    device: &Device,
    options: &Df11Options,
) -> Option<FusedKernel> {
    if !device.is_cuda() || !cfg!(feature = "cuda") || rows == 0 || !cols.is_multiple_of(8) {
        return None;
    }
    let tc = options.tensor_cores && tc_shape(cols) && tensor_cores(device);
    // The options, not the weight format: a BF16 model loaded alike plans alike.
    let tc_min = if options.tiles.tiles(cols) {
        1
    } else {
        TC_MIN_ROWS
    };
    match (options.matmul, tc) {
        (MatmulPath::Decode, _) => None,
        (MatmulPath::Fused, true) => Some(FusedKernel::TensorCore),
        (MatmulPath::Fused, false) => Some(FusedKernel::CudaCore),
        (MatmulPath::Auto, true) if (tc_min..=TC_MAX_ROWS).contains(&rows) => {
            Some(FusedKernel::TensorCore)
        }
        (MatmulPath::Auto, true)
            if rows <= TC_LIMIT_ROWS && warp_specialized_takes(rows, cols, device, options) =>
        {
            Some(FusedKernel::TensorCore)
        }
        (MatmulPath::Auto, true)
            if rows <= TC_LIMIT_ROWS && warpgroup_takes(rows, cols, device, options) =>
        {
            Some(FusedKernel::TensorCore)
        }
        (MatmulPath::Auto, _) if rows <= FUSED_MAX_ROWS => Some(FusedKernel::CudaCore),
        (MatmulPath::Auto, _) => None,
    }
}

/// Whether a product with `rows` rows of input on `device` takes a fused kernel for some weight
/// shape, under `options`.
pub fn use_fused(rows: usize, device: &Device, options: &Df11Options) -> bool {
    [8, 256, 2048]
        .into_iter()
        .any(|cols| fused_plan(rows, cols, device, options).is_some())
}

/// Whether the warpgroup tensor-core kernels (`kernels/df11_tc_wg.cu`: an `sm_90a` build on a
/// compute capability 9.0 GPU, widths of whole 2048-column chunks) take a product with `rows`
/// rows of input and `cols` columns on `device`. Only where [`Df11Options::warpgroup`] turns
/// them on (off by default: slower than decode + cuBLAS above 16 rows so far,
/// docs/PERFORMANCE.md), in builds with the `experimental-kernels` feature.
pub fn warpgroup_takes(rows: usize, cols: usize, device: &Device, options: &Df11Options) -> bool {
    #[cfg(feature = "experimental-kernels")]
    if let Device::Cuda(d) = device {
        return options.tiles.tiles_whole_chunks(cols)
            && crate::cuda::packed::tc_wg::takes(d, cols, rows, options).unwrap_or(false);
    }
    let _ = (rows, cols, device, options);
    false
}

/// Whether the warp-specialized kernels (`kernels/df11_ws_gemm.cu`: an `sm_90a` build on a
/// compute capability 9.0 GPU, widths of whole 2048-column chunks that the options tile) take a
/// product with `rows` rows of input and `cols` columns on `device`. Only where
/// [`Df11Options::warp_specialized`] turns them on (off by default: they speed DF11 up from 17
/// rows and slow BF16 down, docs/PERFORMANCE.md), in builds with the `experimental-kernels`
/// feature. For both formats alike: they sum in their own order.
pub fn warp_specialized_takes(
    rows: usize,
    cols: usize,
    device: &Device,
    options: &Df11Options,
) -> bool {
    #[cfg(feature = "experimental-kernels")]
    if let Device::Cuda(d) = device {
        return crate::cuda::packed::ws::takes(d, cols, rows, options).unwrap_or(false);
    }
    let _ = (rows, cols, device, options);
    false
}

/// Whether `x` can go through a fused kernel for a weight with `in_features` columns, and which
/// ([`fused_plan`]).
#[cfg(feature = "cuda")]
pub(crate) fn fused_kernel(
    x: &candle_core::Tensor,
    in_features: usize,
    options: &Df11Options,
) -> Option<FusedKernel> {
    if x.dtype() != candle_core::DType::BF16
        || !in_features.is_multiple_of(8)
        || x.dims().last() != Some(&in_features)
    {
        return None;
    }
    let rows = x.elem_count() / in_features.max(1);
    fused_plan(rows, in_features, x.device(), options)
}

/// Whether `device` has the mma.sync BF16 instructions (compute capability 8.0 or newer).
fn tensor_cores(device: &Device) -> bool {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute;
        let major = d
            .cuda_stream()
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        return major.is_ok_and(|m| m >= 8);
    }
    let _ = device;
    false
}
