//! Small fused inference ops on CUDA (`kernels/llm_ops.cu`), for the models' forward pass: one
//! launch where candle's building blocks need several. At batch 1 a decode step is hundreds of
//! small launches, so their number, not their arithmetic, is what costs.
//!
//! Every op takes `pdl`: whether it may be launched as a programmatic dependent launch
//! ([`df11_candle::Df11Options::pdl`], `df11_candle::cuda::pdl`); the result is the same bits either way.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, DType, Layout, Tensor};
use half::bf16;

use df11_candle::cuda::launch::{cuda_only_op, CudaOp1, CudaOp2, CudaOut};
use df11_candle::cuda::module::{fatbin_module, Module};
use df11_candle::cuda::pdl::launch_kernel;

const MODULE: Module = fatbin_module!("llm_ops");
/// `OPS_THREADS` of kernels/llm_ops.cu.
const OPS_THREADS: u32 = 256;
/// `ARGMAX_THREADS` and `ARGMAX_CHUNK` of kernels/llm_ops.cu.
const ARGMAX_THREADS: u32 = 256;
const ARGMAX_CHUNK: usize = 4096;

/// One CTA per row (the row kernels: RMSNorm, softmax).
fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (OPS_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `n` values (the elementwise kernels).
fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(OPS_THREADS as usize).min(65_535) as u32, 1, 1),
        block_dim: (OPS_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// transformers' RMSNorm of BF16 activations in one launch:
/// `w * bf16(x * rsqrt(mean(x²) + eps))`, the mean in f32 over the last dimension. `x` and `w`
/// must be BF16 tensors on one CUDA device, `w` of the last dimension's size.
pub fn rms_norm_bf16(x: &Tensor, w: &Tensor, eps: f32, pdl: bool) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op2_no_bwd(&w.contiguous()?, &RmsNormOp { eps, pdl })
}

/// Attention probabilities from BF16 scores, no mask, in one launch:
/// `bf16(softmax(f32(bf16(x * scale))))` over the last dimension of a BF16 CUDA tensor.
pub fn softmax_scaled_bf16(x: &Tensor, scale: f32, pdl: bool) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&SoftmaxOp { scale, pdl })
}

/// The gated MLP's activation in one launch: `bf16(bf16(silu(gate)) * up)` (silu in f32) for
/// BF16 CUDA tensors of one shape.
pub fn silu_mul_bf16(gate: &Tensor, up: &Tensor, pdl: bool) -> candle_core::Result<Tensor> {
    gate.contiguous()?
        .apply_op2_no_bwd(&up.contiguous()?, &SiluMulOp { pdl })
}

/// The greedy token of each row in one launch: the index of the largest value along the last
/// dimension of a BF16 or F32 CUDA tensor, as `torch.argmax` picks it (NaN above every number,
/// -0 equal to +0, the first index among equal values). Returns u32 indices of the other
/// dimensions' shape; at most 65,535 rows. (candle's `argmax` walks a row with one block of
/// strided loads: ~130 µs for Qwen3's 151,936 logits on an H100, 2% of a decode step; here 4096
/// values a CTA, then one warp a row merges the CTAs' results.)
pub fn argmax_last_dim(x: &Tensor, pdl: bool) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&ArgmaxOp { pdl })
}

/// A contiguous BF16 view of a CUDA tensor's storage.
fn view<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    op: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, bf16>> {
    if s.dtype() != DType::BF16 {
        candle_core::bail!("{op} takes BF16 tensors");
    }
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(s.as_cuda_slice::<bf16>()?.slice(a..b)),
        None => candle_core::bail!("{op} takes contiguous tensors"),
    }
}

struct SoftmaxOp {
    scale: f32,
    pdl: bool,
}

cuda_only_op!(CustomOp1 for SoftmaxOp);

impl CudaOp1 for SoftmaxOp {
    const NAME: &'static str = "softmax-scaled-bf16";
    const WHAT: &'static str = "softmax_scaled_bf16";

    fn cuda(&self, x: &CudaStorage, l: &Layout) -> CudaOut {
        let n = *l.shape().dims().last().unwrap_or(&0);
        let xv = view(x, l, "softmax_scaled_bf16")?;
        let rows = xv.len().checked_div(n).unwrap_or(0);
        let dev = x.device().clone();
        let out = df11_candle::cuda::launch::alloc_out(&dev, xv.len())?;
        if rows > 0 {
            let func = MODULE.func(&dev, "softmax_scaled_bf16")?;
            let cfg = per_row(rows);
            let n_arg = n as i32;
            // SAFETY: x and out hold rows * n BF16 values; the kernel waits (pdl_begin) first.
            unsafe { launch_kernel!(dev, self.pdl, func, cfg; &xv, &out, &n_arg, &self.scale) }?;
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), l.shape().clone()))
    }
}

struct SiluMulOp {
    pdl: bool,
}

cuda_only_op!(CustomOp2 for SiluMulOp);

impl CudaOp2 for SiluMulOp {
    const NAME: &'static str = "silu-mul-bf16";
    const WHAT: &'static str = "silu_mul_bf16";

    fn cuda(&self, g: &CudaStorage, g_l: &Layout, u: &CudaStorage, u_l: &Layout) -> CudaOut {
        if g_l.shape() != u_l.shape() {
            candle_core::bail!(
                "silu_mul_bf16: shapes {:?} and {:?}",
                g_l.shape(),
                u_l.shape()
            );
        }
        let gv = view(g, g_l, "silu_mul_bf16")?;
        let uv = view(u, u_l, "silu_mul_bf16")?;
        let n = gv.len();
        let dev = g.device().clone();
        let out = df11_candle::cuda::launch::alloc_out(&dev, n)?;
        if n > 0 {
            let func = MODULE.func(&dev, "silu_mul_bf16")?;
            let cfg = elementwise(n);
            let n_arg = n as i64;
            // SAFETY: g, u and out hold n BF16 values; the kernel waits (pdl_begin) first.
            unsafe { launch_kernel!(dev, self.pdl, func, cfg; &gv, &uv, &out, &n_arg) }?;
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), g_l.shape().clone()))
    }
}

/// [`silu_mul_bf16`] of the two halves of the last dimension of `x` (`[..., 2 * inter]`: gate
/// first, up second, as a stacked gate/up projection writes them) in one launch, without
/// copying the halves out first: `[..., inter]`.
pub fn silu_mul_halves_bf16(x: &Tensor, pdl: bool) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&SiluMulHalvesOp { pdl })
}

struct SiluMulHalvesOp {
    pdl: bool,
}

cuda_only_op!(CustomOp1 for SiluMulHalvesOp);

impl CudaOp1 for SiluMulHalvesOp {
    const NAME: &'static str = "silu-mul-halves-bf16";
    const WHAT: &'static str = "silu_mul_halves_bf16";

    fn cuda(&self, x: &CudaStorage, l: &Layout) -> CudaOut {
        let width = *l.shape().dims().last().unwrap_or(&0);
        if !width.is_multiple_of(2) {
            candle_core::bail!("silu_mul_halves_bf16: an odd last dimension ({width})");
        }
        let xv = view(x, l, "silu_mul_halves_bf16")?;
        let inter = width / 2;
        let rows = xv.len().checked_div(width).unwrap_or(0);
        let dev = x.device().clone();
        let out = df11_candle::cuda::launch::alloc_out(&dev, rows * inter)?;
        let n = rows * inter;
        if n > 0 {
            let func = MODULE.func(&dev, "silu_mul_halves_bf16")?;
            let cfg = elementwise(n);
            let (rows_arg, inter_arg) = (rows as i64, inter as i64);
            // SAFETY: x holds rows * 2 inter BF16 values, out rows * inter; the kernel waits
            // (pdl_begin) first.
            unsafe { launch_kernel!(dev, self.pdl, func, cfg; &xv, &out, &rows_arg, &inter_arg) }?;
        }
        let mut dims = l.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = inter;
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), dims.into()))
    }
}

struct ArgmaxOp {
    pdl: bool,
}

cuda_only_op!(CustomOp1 for ArgmaxOp);

impl CudaOp1 for ArgmaxOp {
    const NAME: &'static str = "argmax-last-dim";
    const WHAT: &'static str = "argmax_last_dim";

    fn cuda(&self, x: &CudaStorage, l: &Layout) -> CudaOut {
        let dims = l.shape().dims();
        let n = *dims.last().unwrap_or(&0);
        if n == 0 || n > u32::MAX as usize {
            candle_core::bail!("argmax_last_dim: a last dimension of {n}");
        }
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("argmax_last_dim takes a contiguous tensor");
        };
        let rows = (b - a) / n;
        if rows > 65_535 {
            candle_core::bail!("argmax_last_dim: {rows} rows (at most 65,535)");
        }
        let chunks = n.div_ceil(ARGMAX_CHUNK);
        let dev = x.device().clone();
        let out = unsafe { dev.alloc::<u32>(rows) }?;
        if rows > 0 {
            let best = unsafe { dev.alloc::<u64>(rows * chunks) }?;
            let n_arg = n as i64;
            let cfg = LaunchConfig {
                grid_dim: (chunks as u32, rows as u32, 1),
                block_dim: (ARGMAX_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            match x.dtype() {
                DType::BF16 => {
                    let xv = x.as_cuda_slice::<bf16>()?.slice(a..b);
                    let func = MODULE.func(&dev, "argmax_chunks_bf16")?;
                    // SAFETY: x holds rows * n contiguous BF16 values, best rows * chunks u64; the
                    // kernel waits (pdl_begin) first.
                    unsafe { launch_kernel!(dev, self.pdl, func, cfg; &xv, &best, &n_arg) }?;
                }
                DType::F32 => {
                    let xv = x.as_cuda_slice::<f32>()?.slice(a..b);
                    let func = MODULE.func(&dev, "argmax_chunks_f32")?;
                    // SAFETY: as above, F32 values.
                    unsafe { launch_kernel!(dev, self.pdl, func, cfg; &xv, &best, &n_arg) }?;
                }
                other => candle_core::bail!("argmax_last_dim takes BF16 or F32, not {other:?}"),
            }
            let func = MODULE.func(&dev, "argmax_pick")?;
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: 0,
            };
            let chunks_arg = chunks as i32;
            // SAFETY: best holds rows * chunks u64 (all written above), out rows u32; the kernel
            // waits (pdl_begin) first.
            unsafe { launch_kernel!(dev, self.pdl, func, cfg; &best, &out, &chunks_arg) }?;
        }
        let shape = dims[..dims.len() - 1].to_vec();
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape.into()))
    }
}

struct RmsNormOp {
    eps: f32,
    pdl: bool,
}

cuda_only_op!(CustomOp2 for RmsNormOp);

impl CudaOp2 for RmsNormOp {
    const NAME: &'static str = "rms-norm-bf16";
    const WHAT: &'static str = "rms_norm_bf16";

    fn cuda(&self, x: &CudaStorage, x_l: &Layout, w: &CudaStorage, w_l: &Layout) -> CudaOut {
        if x.dtype() != DType::BF16 || w.dtype() != DType::BF16 {
            candle_core::bail!("rms_norm_bf16 takes BF16 tensors");
        }
        let n = w_l.shape().elem_count();
        let dims = x_l.shape().dims();
        if dims.last() != Some(&n) || n == 0 {
            candle_core::bail!("rms_norm_bf16: weight of {n} for input {dims:?}");
        }
        let (Some((xa, xb)), Some((wa, wb))) = (x_l.contiguous_offsets(), w_l.contiguous_offsets())
        else {
            candle_core::bail!("rms_norm_bf16 takes contiguous tensors");
        };
        let rows = (xb - xa) / n;
        let dev = x.device().clone();
        let xv = x.as_cuda_slice::<bf16>()?.slice(xa..xb);
        let wv = w.as_cuda_slice::<bf16>()?.slice(wa..wb);
        let out = unsafe { dev.alloc::<bf16>(rows * n) }?;
        if rows > 0 {
            let func = MODULE.func(&dev, "rms_norm_bf16")?;
            let cfg = per_row(rows);
            let n_arg = n as i32;
            // SAFETY: x holds rows * n BF16 values, w holds n, out rows * n; the kernel waits
            // (pdl_begin) first.
            unsafe { launch_kernel!(dev, self.pdl, func, cfg; &xv, &wv, &out, &n_arg, &self.eps) }?;
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), x_l.shape().clone()))
    }
}
