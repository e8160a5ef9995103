//! The custom ops that decode a unit: the block decode (CPU decoder or `df11_decode.cu`) and,
//! on CUDA, the segment or packed decode of an element range.

use std::ops::Range;

use candle_core::{CpuStorage, CustomOp1, Layout, Shape};
use half::bf16;

use crate::codec::decode::{block_elements, decode_base, decode_blocks};
use crate::format::unit::{UnitLayout, UnitTensors};
use crate::nn::device_form::{OnDevice, Store};

/// The custom op: argument `sign_mantissa`, result the decoded BF16 of `blocks`.
pub(crate) struct DecodeOp<'a> {
    pub(crate) name: &'a str,
    pub(crate) layout: &'a UnitLayout,
    pub(crate) on: &'a OnDevice,
    pub(crate) blocks: Range<usize>,
    /// Set by the CPU path when the stream does not decode.
    pub(crate) defect: std::sync::Mutex<Option<crate::error::UnitDefect>>,
}

impl CustomOp1 for DecodeOp<'_> {
    fn name(&self) -> &'static str {
        "df11-decode"
    }

    // Without the `cuda` feature the CPU store is the only variant.
    #[allow(irrefutable_let_patterns)]
    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let Store::Cpu {
            encoded_exponent,
            luts,
            gaps,
            table,
        } = &self.on.store
        else {
            candle_core::bail!("df11: unit `{}` is not on the CPU", self.name)
        };
        let sm = match layout.contiguous_offsets() {
            Some((a, b)) => &storage.as_slice::<u8>()?[a..b],
            None => candle_core::bail!("df11: sign_mantissa must be contiguous"),
        };
        let t = UnitTensors {
            encoded_exponent,
            sign_mantissa: sm,
            luts,
            gaps,
            // The decoder takes positions and splits from the validated layout.
            output_positions: &[],
            split_positions: &[],
        };
        let elements = block_elements(self.layout, self.blocks.clone());
        let base = decode_base(self.layout, self.blocks.clone());
        let n = elements.end - base;
        let mut out = vec![bf16::ZERO; n];
        let dst = &mut out[elements.start - base..];
        decode_blocks(&t, self.layout, table, self.blocks.clone(), dst).map_err(|defect| {
            let msg = format!("df11: unit `{}`: {defect}", self.name);
            *self.defect.lock().expect("defect lock") = Some(defect);
            candle_core::Error::Msg(msg)
        })?;
        Ok((CpuStorage::BF16(out), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let Store::Cuda(unit) = &self.on.store else {
            candle_core::bail!("df11: unit `{}` is not on CUDA", self.name)
        };
        unit.decode(storage, layout, self.layout, self.blocks.clone())
    }
}

/// What [`SegmentDecodeOp`] decodes.
#[cfg(feature = "cuda")]
pub(crate) enum Wanted<'a> {
    /// One element range.
    Elements(Range<usize>),
    /// Rows `[start, start + row_len)` for each start, one after another (packed units with no
    /// tiled member, at most `ROWS_A_LAUNCH` rows: `crate::cuda::packed::kernels::decode_packed_rows`).
    Rows { starts: &'a [usize], row_len: usize },
}

/// The segment or packed kernel's decode of `wanted`: argument `sign_mantissa`, result BF16.
#[cfg(feature = "cuda")]
pub(crate) struct SegmentDecodeOp<'a> {
    pub(crate) name: &'a str,
    pub(crate) on: &'a OnDevice,
    pub(crate) wanted: Wanted<'a>,
}

#[cfg(feature = "cuda")]
impl CustomOp1 for SegmentDecodeOp<'_> {
    fn name(&self) -> &'static str {
        "df11-decode-segments"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("df11: the segment kernel runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;

        let Store::Cuda(unit) = &self.on.store else {
            candle_core::bail!("df11: unit `{}` is not on CUDA", self.name)
        };
        match (&self.wanted, unit.form()) {
            (Wanted::Elements(e), Some(form)) => {
                form.decode_range(storage, layout, e.clone(), storage.device())
            }
            (Wanted::Rows { starts, row_len }, _) => {
                let Some(p) = unit.packed() else {
                    candle_core::bail!("df11: unit `{}` is not packed", self.name)
                };
                crate::cuda::packed::kernels::decode_packed_rows(
                    p, storage, layout, starts, *row_len,
                )
            }
            (Wanted::Elements(_), None) => {
                candle_core::bail!("df11: unit `{}` has no segment index", self.name)
            }
        }
    }
}
