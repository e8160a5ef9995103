//! What a DF11 device form does on the GPU ([`DeviceForm`]), implemented by the packed form and
//! by the Huffman form with a segment index (`CudaUnit::form` hands a unit's form out).

use std::ops::Range;

use candle_core::cuda_backend::CudaDevice;
use candle_core::{CudaStorage, Layout, Shape, Tensor};

use super::huffman::kernels::{decode_segments_on, Df11GemvOp};
use super::huffman::HuffmanBuffers;
use super::packed::kernels::{decode_packed_on, PackedBuffers, PackedGemvOp};
use super::packed::tc::PackedTcOp;
use crate::cuda::matmul::FusedKernel;
use crate::error::Result;
use crate::options::Df11Options;

/// One matrix of a unit: `rows` x `cols` weights, row-major, from unit element `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Matrix {
    pub(crate) base: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl Matrix {
    /// Whether the fused kernels can address it: `base` and `cols` multiples of 8 (an 8-group
    /// of codes never straddles two rows).
    pub(crate) fn fusable(&self) -> bool {
        self.base.is_multiple_of(8) && self.cols.is_multiple_of(8)
    }
}

/// What a weight in a DF11 device form can do on the GPU, given its `sign_mantissa` bytes (the
/// operations' argument tensor).
pub(crate) trait DeviceForm {
    /// Unit elements `elements`, decoded into a fresh BF16 buffer of `elements.len()` values,
    /// with the kernel launched on `launch`'s stream (the unit's own device, or a second stream
    /// of its GPU for decode-ahead: whoever drops the buffer orders that stream after the work
    /// that reads it).
    fn decode_range(
        &self,
        sign_mantissa: &CudaStorage,
        sm_layout: &Layout,
        elements: Range<usize>,
        launch: &CudaDevice,
    ) -> candle_core::Result<(CudaStorage, Shape)>;

    /// `x2 · Wᵀ` for `matrix` (`x2`: `[nb, cols]` BF16, contiguous, at most
    /// `kernel.limit_rows()` rows) through `kernel`'s fused kernel for this form, or `None`
    /// where that kernel cannot take the matrix (the caller decodes it and runs the BF16 twin,
    /// which gives the same bits).
    fn fused_matmul(
        &self,
        sign_mantissa: &Tensor,
        x2: &Tensor,
        matrix: Matrix,
        kernel: FusedKernel,
        options: &Df11Options,
    ) -> Result<Option<Tensor>>;
}

impl DeviceForm for PackedBuffers {
    fn decode_range(
        &self,
        sign_mantissa: &CudaStorage,
        sm_layout: &Layout,
        elements: Range<usize>,
        launch: &CudaDevice,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        decode_packed_on(self, sign_mantissa, sm_layout, elements, launch)
    }

    fn fused_matmul(
        &self,
        sign_mantissa: &Tensor,
        x2: &Tensor,
        m: Matrix,
        kernel: FusedKernel,
        options: &Df11Options,
    ) -> Result<Option<Tensor>> {
        match kernel {
            FusedKernel::TensorCore => {
                let op = PackedTcOp {
                    unit: self,
                    base: m.base,
                    rows: m.rows,
                    cols: m.cols,
                    options: *options,
                };
                let nb = x2.elem_count() / m.cols.max(1);
                let takes = match x2.device() {
                    candle_core::Device::Cuda(dev) => op.takes(nb, dev)?,
                    _ => false,
                };
                Ok(takes
                    .then(|| sign_mantissa.apply_op2_no_bwd(x2, &op))
                    .transpose()?)
            }
            // A member in the tile order is read by the tensor-core kernels only.
            FusedKernel::CudaCore
                if m.fusable() && self.matrix_order(m.base, m.rows, m.cols) == Some(false) =>
            {
                let op = PackedGemvOp {
                    unit: self,
                    base: m.base,
                    rows: m.rows,
                    cols: m.cols,
                };
                Ok(Some(sign_mantissa.apply_op2_no_bwd(x2, &op)?))
            }
            FusedKernel::CudaCore => Ok(None),
        }
    }
}

/// The Huffman form through its segment index (`CudaUnit::form` offers it only with one).
impl DeviceForm for HuffmanBuffers {
    fn decode_range(
        &self,
        sign_mantissa: &CudaStorage,
        sm_layout: &Layout,
        elements: Range<usize>,
        launch: &CudaDevice,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let Some(unit) = self.segment_args() else {
            candle_core::bail!("df11: this Huffman unit has no segment index")
        };
        decode_segments_on(&unit, sign_mantissa, sm_layout, elements, launch)
    }

    fn fused_matmul(
        &self,
        sign_mantissa: &Tensor,
        x2: &Tensor,
        m: Matrix,
        kernel: FusedKernel,
        _options: &Df11Options,
    ) -> Result<Option<Tensor>> {
        // The tensor-core kernels read packed exponents only.
        let unit = match self.segment_args() {
            Some(unit) if kernel == FusedKernel::CudaCore && m.fusable() => unit,
            _ => return Ok(None),
        };
        let op = Df11GemvOp {
            unit,
            base: m.base,
            rows: m.rows,
            cols: m.cols,
        };
        Ok(Some(sign_mantissa.apply_op2_no_bwd(x2, &op)?))
    }
}
