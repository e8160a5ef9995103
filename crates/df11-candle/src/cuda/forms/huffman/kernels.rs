//! The fused DF11 decode + matrix-vector kernel over the Huffman form (segment index), and the
//! segment decode kernel, both in `kernels/df11_fused.cu`. Which path a product takes is decided
//! in [`crate::cuda::matmul`]; the packed form's kernels are in `crate::cuda::packed::kernels`.

use std::ops::Range;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchArgs, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, Layout, Shape};
use half::bf16;

use crate::cuda::huffman::segments::SegmentIndex;
use crate::cuda::launch::{
    bf16_view, check_gemv_call, cuda_only_op, gemv_name, launch_config, maxb_for, push_args,
    CudaOp2, CudaOut, Tiling, CHUNK_WIDTH, MODULE,
};
use crate::cuda::upload::{HostArray, Uploader};

const WARPS: usize = 8;
/// Per warp: the code stage (384 words) and 33 exponent slots of 72 bytes.
const WARP_BYTES: usize = 384 * 4 + 33 * 72;

/// A unit's segment index and decode table on the device.
pub(crate) struct SegmentBuffers {
    bases: CudaSlice<u32>,
    deltas: CudaSlice<u16>,
    table: CudaSlice<u32>,
}

/// A segment index on the host, as [`SegmentBuffers`] uploads it.
pub(crate) struct SegmentHost {
    bases: HostArray<u32>,
    deltas: HostArray<u16>,
    table: HostArray<u32>,
}

impl SegmentHost {
    pub(crate) fn new(index: SegmentIndex) -> Self {
        Self {
            bases: index.bases.into(),
            deltas: index.deltas.into(),
            table: index.table.into(),
        }
    }

    /// Moves the arrays into pinned memory (for staging).
    pub(crate) fn pin(
        &mut self,
        ctx: &std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaContext>,
    ) -> candle_core::Result<()> {
        self.bases.pin(ctx)?;
        self.deltas.pin(ctx)?;
        self.table.pin(ctx)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bases.bytes() + self.deltas.bytes() + self.table.bytes()
    }
}

impl SegmentBuffers {
    pub(crate) fn upload(up: &Uploader<'_>, index: &SegmentHost) -> candle_core::Result<Self> {
        Ok(Self {
            bases: up.put(&index.bases)?,
            deltas: up.put(&index.deltas)?,
            table: up.put(&index.table)?,
        })
    }

    pub(crate) fn device_bytes(&self) -> usize {
        4 * self.bases.len() + 2 * self.deltas.len() + 4 * self.table.len()
    }
}

/// What a segment kernel needs of a unit besides `sign_mantissa`.
pub(crate) struct UnitArgs<'a> {
    pub(crate) luts: &'a CudaSlice<u8>,
    pub(crate) codes: &'a CudaSlice<u8>,
    pub(crate) lut_rows: usize,
    /// Words of `codes` (padded with zeros to whole words).
    pub(crate) n_words: u32,
    pub(crate) n_elements: usize,
    pub(crate) segments: &'a SegmentBuffers,
}

/// `K` and `n_elements` as the segment kernels take them.
struct UnitScalars {
    k: i32,
    n_elements: i64,
}

impl UnitArgs<'_> {
    fn scalars(&self) -> UnitScalars {
        UnitScalars {
            k: self.lut_rows as i32,
            n_elements: self.n_elements as i64,
        }
    }

    /// Pushes the arguments both segment kernels open with (`df11_gemv_bf16_*` and
    /// `df11_decode_segments` in `kernels/df11_fused.cu`): `table, luts, K, codes, n_words,
    /// seg_base, seg_delta, sign_mantissa, n_elements`.
    fn push_unit<'b>(&'b self, b: &mut LaunchArgs<'b>, sm: &'b CudaSlice<u8>, s: &'b UnitScalars) {
        push_args!(b; &self.segments.table, self.luts, &s.k, self.codes, &self.n_words);
        push_args!(b; &self.segments.bases, &self.segments.deltas, sm, &s.n_elements);
    }
}

fn header_bytes(lut_rows: usize) -> usize {
    16384 + ((lut_rows * 256 + 15) & !15) + WARPS * WARP_BYTES
}

/// The fused DF11 product: arguments `sign_mantissa` (the whole unit) and `x` `[nb, cols]`;
/// result `[nb, rows]` = x · Wᵀ for the member at unit element `base`.
pub(crate) struct Df11GemvOp<'a> {
    pub(crate) unit: UnitArgs<'a>,
    pub(crate) base: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

cuda_only_op!(CustomOp2 for Df11GemvOp<'_>);

impl CudaOp2 for Df11GemvOp<'_> {
    const NAME: &'static str = "df11-fused-gemv";
    const WHAT: &'static str = "df11: the fused kernel";

    fn cuda(&self, sm: &CudaStorage, sm_l: &Layout, x: &CudaStorage, x_l: &Layout) -> CudaOut {
        let dev = sm.device().clone();
        let (rows, cols) = (self.rows, self.cols);
        let nb = check_gemv_call(sm_l, self.unit.n_elements, x_l, self.base, rows, cols)?;
        let Some(tiling) = Tiling::new(rows, cols) else {
            candle_core::bail!("df11: {cols} columns are too many for the fused kernel");
        };
        let maxb = maxb_for(nb);
        let name = gemv_name(false, maxb);
        let smem = header_bytes(self.unit.lut_rows) + tiling.partial_bytes(maxb);
        let cfg = launch_config(&dev, name, smem, tiling.tiles(rows))?;
        let xv = bf16_view(x, x_l, "x")?;
        let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
        let func = MODULE.func(&dev, name)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let unit = self.unit.scalars();
        let (nb_, rows_, cols_, base) = (nb as i32, rows as i32, cols as i32, self.base as i64);
        let (tile_rows, width) = (tiling.tile_rows as i32, CHUNK_WIDTH as i32);
        let mut b = func.builder();
        self.unit.push_unit(&mut b, sm, &unit);
        push_args!(b; &xv, &out, &nb_, &rows_, &cols_, &base, &tile_rows, &width);
        // SAFETY: buffers sized from the validated layout and the index built from the same
        // bytes; the kernel clamps every data-dependent index.
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}

/// Decodes unit elements `elements` with the segment kernel into a fresh BF16 buffer of
/// `elements.len()` values, launched on `launch`'s stream (the unit's device or a second stream
/// of its GPU), as `crate::cuda::packed::kernels::decode_packed_on` (the same rules for the
/// result's buffer).
pub(crate) fn decode_segments_on(
    unit: &UnitArgs<'_>,
    sm: &CudaStorage,
    sm_l: &Layout,
    elements: Range<usize>,
    launch: &CudaDevice,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let owner = sm.device().clone();
    crate::cuda::launch::check_same_gpu(&owner, launch)?;
    let dev = launch.clone();
    if sm_l.start_offset() != 0 || !sm_l.is_contiguous() {
        candle_core::bail!("df11: sign_mantissa must be a whole contiguous buffer");
    }
    if elements.end > unit.n_elements {
        candle_core::bail!("df11: elements {elements:?} outside the unit");
    }
    let len = elements.len();
    let out = crate::cuda::launch::alloc_out(&dev, len)?;
    if len > 0 {
        let name = "df11_decode_segments";
        let chunks = elements.end.div_ceil(2048) - elements.start / 2048;
        let cfg = launch_config(
            &dev,
            name,
            header_bytes(unit.lut_rows),
            chunks.div_ceil(WARPS),
        )?;
        let func = MODULE.func(&dev, name)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let scalars = unit.scalars();
        let (begin, end) = (elements.start as i64, elements.end as i64);
        let mut b = func.builder();
        unit.push_unit(&mut b, sm, &scalars);
        // out, begin, end, out_base (= begin: out holds exactly the elements).
        push_args!(b; &out, &begin, &end, &begin);
        // SAFETY: out holds elements.len() values, written at j - begin for j in elements.
        unsafe { b.launch(cfg) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, owner), Shape::from(len)))
}
