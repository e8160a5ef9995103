//! The BF16 twin of the fused DF11 kernel: the same GEMV over a dense BF16 weight, with the same
//! tiling and summation order, so a BF16 model and its DF11 form give the same bits on every
//! path (`kernels/README.md`, "the summation contract").

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, DType, Layout, Shape, Tensor};
use half::bf16;

use crate::cuda::launch::{
    apply_rows, bf16_view, cuda_only_op, gemv_name, launch_config, maxb_for, push_args, CudaOp2,
    CudaOut, Tiling, CHUNK_WIDTH, MODULE,
};
use crate::cuda::matmul::{fused_kernel, FusedKernel, FUSED_LIMIT_ROWS};
use crate::cuda::packed::tc::TwinTcOp;
use crate::options::Df11Options;

/// `x · wᵀ (+ bias)` through a BF16 twin kernel, when `w` is a BF16 CUDA matrix and `x` may take
/// a fused path under `options` ([`fused_kernel`]); `None` otherwise.
pub(crate) fn twin_linear(
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    options: &Df11Options,
) -> candle_core::Result<Option<Tensor>> {
    let (out, cols) = w.dims2()?;
    if w.dtype() != DType::BF16 || !w.device().is_cuda() {
        return Ok(None);
    }
    let Some(kernel) = fused_kernel(x, cols, options) else {
        return Ok(None);
    };
    let w = w.contiguous()?;
    apply_rows(x, cols, out, bias, kernel.limit_rows(), |x2| {
        twin_matmul(&w, x2, kernel, options)
    })
    .map(Some)
}

/// `x2 · wᵀ` (`x2`: `[nb, cols]`, at most `kernel.limit_rows()` rows) through `kernel`'s twin.
pub(crate) fn twin_matmul(
    w: &Tensor,
    x2: &Tensor,
    kernel: FusedKernel,
    options: &Df11Options,
) -> candle_core::Result<Tensor> {
    match kernel {
        FusedKernel::TensorCore => w.apply_op2_no_bwd(x2, &TwinTcOp(*options)),
        FusedKernel::CudaCore => w.apply_op2_no_bwd(x2, &TwinGemvOp),
    }
}

/// The BF16 twin of `Df11GemvOp`: arguments `w` `[rows, cols]` (BF16) and `x` `[nb, cols]`.
pub(crate) struct TwinGemvOp;

cuda_only_op!(CustomOp2 for TwinGemvOp);

impl CudaOp2 for TwinGemvOp {
    const NAME: &'static str = "bf16-twin-gemv";
    const WHAT: &'static str = "df11: the twin kernel";

    fn cuda(&self, w: &CudaStorage, w_l: &Layout, x: &CudaStorage, x_l: &Layout) -> CudaOut {
        let dev = w.device().clone();
        let (rows, cols) = w_l.shape().dims2()?;
        let nb = x_l.shape().elem_count() / cols;
        if nb == 0 || nb > FUSED_LIMIT_ROWS || !cols.is_multiple_of(8) {
            candle_core::bail!("df11: twin kernel called with {nb} rows, cols {cols}");
        }
        let Some(tiling) = Tiling::new(rows, cols) else {
            candle_core::bail!("df11: {cols} columns are too many for the twin kernel");
        };
        let maxb = maxb_for(nb);
        let name = gemv_name(true, maxb);
        let cfg = launch_config(&dev, name, tiling.partial_bytes(maxb), tiling.tiles(rows))?;
        let wv = bf16_view(w, w_l, "the weight")?;
        let xv = bf16_view(x, x_l, "x")?;
        let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
        let func = MODULE.func(&dev, name)?;
        let (nb_, rows_, cols_) = (nb as i32, rows as i32, cols as i32);
        let (tile_rows, width) = (tiling.tile_rows as i32, CHUNK_WIDTH as i32);
        let mut b = func.builder();
        push_args!(b; &wv, &xv, &out, &nb_, &rows_, &cols_, &tile_rows, &width);
        // SAFETY: w and x are contiguous BF16 views of [rows, cols] and [nb, cols].
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}
