//! Small-batch products on CUDA through `kernels/df11_fused.cu`: the fused DF11 decode +
//! matrix-vector kernel, its BF16 twin (same summation order, dense weight), and the segment
//! decode kernel. Which path a product takes is decided in [`crate::matmul`].

use std::ops::Range;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::sys::{
    CUdevice_attribute, CUfunction_attribute_enum,
};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CpuStorage, CudaStorage, CustomOp2, DType, Layout, Shape, Tensor};
use half::bf16;

use crate::matmul::{use_fused, FUSED_LIMIT_ROWS};
use crate::segments::SegmentIndex;

pub(crate) const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/df11_fused.ptx"));
pub(crate) const MODULE: &str = "df11_fused";
const THREADS: u32 = 256;
const WARPS: usize = 8;
/// Per warp: the code stage (384 words) and 33 exponent slots of 72 bytes.
const WARP_BYTES: usize = 384 * 4 + 33 * 72;
/// Columns per chunk (one warp's work item); the twin and the DF11 kernel must agree on it.
pub(crate) const CHUNK_WIDTH: usize = 2048;
const MAX_ITEMS: usize = 256;
/// CTAs per SM the kernels are compiled for (`__launch_bounds__(256, 4)`).
const CTAS_PER_SM: u32 = 4;

/// A unit's segment index and decode table on the device.
pub(crate) struct SegmentBuffers {
    bases: CudaSlice<u32>,
    deltas: CudaSlice<u16>,
    table: CudaSlice<u32>,
}

impl SegmentBuffers {
    pub(crate) fn new(device: &CudaDevice, index: &SegmentIndex) -> candle_core::Result<Self> {
        Ok(Self {
            bases: device.clone_htod(&index.bases)?,
            deltas: device.clone_htod(&index.deltas)?,
            table: device.clone_htod(&index.table)?,
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

pub(crate) fn launch_config(
    dev: &CudaDevice,
    name: &'static str,
    smem: usize,
    work: usize,
) -> candle_core::Result<LaunchConfig> {
    launch_config_with(dev, name, smem, work, CTAS_PER_SM)
}

/// [`launch_config`] for a kernel compiled for `ctas_per_sm` resident CTAs per SM: the grid is
/// at most one wave of them (each CTA loops over its share of the work).
pub(crate) fn launch_config_with(
    dev: &CudaDevice,
    name: &'static str,
    smem: usize,
    work: usize,
    ctas_per_sm: u32,
) -> candle_core::Result<LaunchConfig> {
    let ctx = dev.cuda_stream().context().clone();
    let max = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .w()? as usize;
    if smem > max {
        candle_core::bail!(
            "df11: the fused kernel needs {smem} bytes of shared memory, the device has {max}"
        );
    }
    if smem > 48 * 1024 {
        // Set on every such launch: the attribute belongs to the function handle, and each
        // CudaDevice (e.g. one per test) loads its own copy of the module. The call is cheap.
        let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
        func.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .w()?;
    }
    let sms = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .w()? as u32;
    Ok(LaunchConfig {
        grid_dim: ((work as u32).clamp(1, sms * ctas_per_sm), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    })
}

/// How the GEMV kernels split a `[rows, cols]` matrix: chunks of [`CHUNK_WIDTH`] columns (the
/// summation order depends on it: the same for both kernels) and rows per CTA tile (it does not).
pub(crate) struct Tiling {
    pub(crate) nchunks: usize,
    pub(crate) tile_rows: usize,
}

impl Tiling {
    pub(crate) fn new(rows: usize, cols: usize) -> Option<Self> {
        let nchunks = cols.div_ceil(CHUNK_WIDTH);
        if nchunks > MAX_ITEMS {
            return None;
        }
        // Items per tile a multiple of the 8 warps where possible (lcm(8, nchunks)).
        let gcd = (1..=8)
            .rev()
            .find(|d| 8 % d == 0 && nchunks.is_multiple_of(*d))
            .unwrap_or(1);
        let mut tile_rows = 8 / gcd;
        if tile_rows * nchunks > MAX_ITEMS {
            tile_rows = (MAX_ITEMS / nchunks).max(1);
        }
        Some(Self {
            nchunks,
            tile_rows: tile_rows.min(rows.max(1)),
        })
    }

    pub(crate) fn tiles(&self, rows: usize) -> usize {
        rows.div_ceil(self.tile_rows)
    }

    pub(crate) fn partial_bytes(&self, maxb: usize) -> usize {
        self.tile_rows * self.nchunks * maxb * 4
    }
}

pub(crate) fn maxb_for(nb: usize) -> usize {
    match nb {
        0..=1 => 1,
        2 => 2,
        3..=4 => 4,
        _ => 8,
    }
}

fn gemv_name(twin: bool, maxb: usize) -> &'static str {
    match (twin, maxb) {
        (false, 1) => "df11_gemv_bf16_1",
        (false, 2) => "df11_gemv_bf16_2",
        (false, 4) => "df11_gemv_bf16_4",
        (false, _) => "df11_gemv_bf16_8",
        (true, 1) => "bf16_gemv_bf16_1",
        (true, 2) => "bf16_gemv_bf16_2",
        (true, 4) => "bf16_gemv_bf16_4",
        (true, _) => "bf16_gemv_bf16_8",
    }
}

fn header_bytes(lut_rows: usize) -> usize {
    16384 + ((lut_rows * 256 + 15) & !15) + WARPS * WARP_BYTES
}

/// A contiguous BF16 view of `s` whose first element is 16-byte aligned.
pub(crate) fn bf16_view<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, bf16>> {
    match l.contiguous_offsets() {
        Some((a, b)) if a.is_multiple_of(8) => Ok(s.as_cuda_slice::<bf16>()?.slice(a..b)),
        _ => {
            candle_core::bail!("df11: the fused kernel needs {what} contiguous and 16-byte aligned")
        }
    }
}

/// Whether `x` can go through a fused kernel for a weight with `in_features` columns, and with
/// how many rows.
pub(crate) fn fused_rows(x: &Tensor, in_features: usize) -> Option<usize> {
    if x.dtype() != DType::BF16
        || !in_features.is_multiple_of(8)
        || x.dims().last() != Some(&in_features)
    {
        return None;
    }
    let rows = x.elem_count() / in_features.max(1);
    use_fused(rows, x.device()).then_some(rows)
}

/// Runs `op` (which maps `[rows <= 8, cols]` to `[rows, out]`) over `x` of shape `[..., cols]` in
/// launches of at most [`FUSED_LIMIT_ROWS`] rows, and adds `bias` the way `candle_nn::Linear` does.
pub(crate) fn apply_rows(
    x: &Tensor,
    cols: usize,
    out: usize,
    bias: Option<&Tensor>,
    mut op: impl FnMut(&Tensor) -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    let rows = x.elem_count() / cols;
    let x2 = x.reshape((rows, cols))?.contiguous()?;
    // The kernels read x with 16-byte loads: a view starting mid-vector is copied first.
    let x2 = if !x2.layout().start_offset().is_multiple_of(8) {
        x2.copy()?
    } else {
        x2
    };
    let y = if rows <= FUSED_LIMIT_ROWS {
        op(&x2)?
    } else {
        let parts = (0..rows)
            .step_by(FUSED_LIMIT_ROWS)
            .map(|r| {
                op(&x2
                    .narrow(0, r, FUSED_LIMIT_ROWS.min(rows - r))?
                    .contiguous()?)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&parts, 0)?
    };
    let mut shape = x.dims().to_vec();
    *shape.last_mut().expect("x has a last dimension") = out;
    let y = y.reshape(shape)?;
    match bias {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// `x · wᵀ (+ bias)` through the BF16 twin kernel, when `w` is a BF16 CUDA matrix and `x` may take
/// the fused path ([`fused_rows`]); `None` otherwise.
pub(crate) fn twin_linear(
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    let (out, cols) = w.dims2()?;
    if w.dtype() != DType::BF16 || !w.device().is_cuda() || fused_rows(x, cols).is_none() {
        return Ok(None);
    }
    apply_rows(x, cols, out, bias, |x2| w.apply_op2_no_bwd(x2, &TwinGemvOp)).map(Some)
}

/// Checks a fused DF11 product before launch: `sign_mantissa` (layout `sm_l`) is the unit's whole
/// buffer of `n_elements`, `x` (layout `x_l`) holds 1 to [`FUSED_LIMIT_ROWS`] rows of `cols`, `cols`
/// and `base` are multiples of 8 and the `[rows, cols]` matrix at `base` lies inside the unit.
/// Returns the number of rows of `x`.
pub(crate) fn check_gemv_call(
    sm_l: &Layout,
    n_elements: usize,
    x_l: &Layout,
    base: usize,
    rows: usize,
    cols: usize,
) -> candle_core::Result<usize> {
    if sm_l.start_offset() != 0 || !sm_l.is_contiguous() || sm_l.shape().elem_count() != n_elements
    {
        candle_core::bail!("df11: sign_mantissa must be the unit's whole contiguous buffer");
    }
    let nb = x_l.shape().elem_count().checked_div(cols).unwrap_or(0);
    if nb == 0 || nb > FUSED_LIMIT_ROWS || !cols.is_multiple_of(8) || !base.is_multiple_of(8) {
        candle_core::bail!("df11: fused kernel called with {nb} rows, cols {cols}, base {base}");
    }
    if rows
        .checked_mul(cols)
        .and_then(|n| n.checked_add(base))
        .is_none_or(|end| end > n_elements)
    {
        candle_core::bail!(
            "df11: the [{rows}, {cols}] matrix at element {base} is outside the unit"
        );
    }
    Ok(nb)
}

/// The fused DF11 product: arguments `sign_mantissa` (the whole unit) and `x` `[nb, cols]`;
/// result `[nb, rows]` = x · Wᵀ for the member at unit element `base`.
pub(crate) struct Df11GemvOp<'a> {
    pub(crate) unit: UnitArgs<'a>,
    pub(crate) base: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl CustomOp2 for Df11GemvOp<'_> {
    fn name(&self) -> &'static str {
        "df11-fused-gemv"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("df11: the fused kernel runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        sm: &CudaStorage,
        sm_l: &Layout,
        x: &CudaStorage,
        x_l: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
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
        let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let u = &self.unit;
        let (k, n_words, n_elements) = (u.lut_rows as i32, u.n_words, u.n_elements as i64);
        let (nb_, rows_, cols_, base) = (nb as i32, rows as i32, cols as i32, self.base as i64);
        let (tile_rows, width) = (tiling.tile_rows as i32, CHUNK_WIDTH as i32);
        let mut b = func.builder();
        b.arg(&u.segments.table);
        b.arg(u.luts);
        b.arg(&k);
        b.arg(u.codes);
        b.arg(&n_words);
        b.arg(&u.segments.bases);
        b.arg(&u.segments.deltas);
        b.arg(sm);
        b.arg(&n_elements);
        b.arg(&xv);
        b.arg(&out);
        b.arg(&nb_);
        b.arg(&rows_);
        b.arg(&cols_);
        b.arg(&base);
        b.arg(&tile_rows);
        b.arg(&width);
        // SAFETY: buffers sized from the validated layout and the index built from the same
        // bytes; the kernel clamps every data-dependent index.
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}

/// The BF16 twin of [`Df11GemvOp`]: arguments `w` `[rows, cols]` (BF16) and `x` `[nb, cols]`.
pub(crate) struct TwinGemvOp;

impl CustomOp2 for TwinGemvOp {
    fn name(&self) -> &'static str {
        "bf16-twin-gemv"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("df11: the twin kernel runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        w: &CudaStorage,
        w_l: &Layout,
        x: &CudaStorage,
        x_l: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
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
        let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
        let (nb_, rows_, cols_) = (nb as i32, rows as i32, cols as i32);
        let (tile_rows, width) = (tiling.tile_rows as i32, CHUNK_WIDTH as i32);
        let mut b = func.builder();
        b.arg(&wv);
        b.arg(&xv);
        b.arg(&out);
        b.arg(&nb_);
        b.arg(&rows_);
        b.arg(&cols_);
        b.arg(&tile_rows);
        b.arg(&width);
        // SAFETY: w and x are contiguous BF16 views of [rows, cols] and [nb, cols].
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}

/// Decodes unit elements `elements` with the segment kernel into a fresh BF16 buffer of
/// `elements.len()` values.
pub(crate) fn decode_segments(
    unit: &UnitArgs<'_>,
    sm: &CudaStorage,
    sm_l: &Layout,
    elements: Range<usize>,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let dev = sm.device().clone();
    if sm_l.start_offset() != 0 || !sm_l.is_contiguous() {
        candle_core::bail!("df11: sign_mantissa must be a whole contiguous buffer");
    }
    if elements.end > unit.n_elements {
        candle_core::bail!("df11: elements {elements:?} outside the unit");
    }
    let len = elements.len();
    let out = unsafe { dev.alloc::<bf16>(len.max(1)) }?;
    if len > 0 {
        let name = "df11_decode_segments";
        let chunks = elements.end.div_ceil(2048) - elements.start / 2048;
        let cfg = launch_config(
            &dev,
            name,
            header_bytes(unit.lut_rows),
            chunks.div_ceil(WARPS),
        )?;
        let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let (k, n_words, n_elements) = (unit.lut_rows as i32, unit.n_words, unit.n_elements as i64);
        let (begin, end) = (elements.start as i64, elements.end as i64);
        let mut b = func.builder();
        b.arg(&unit.segments.table);
        b.arg(unit.luts);
        b.arg(&k);
        b.arg(unit.codes);
        b.arg(&n_words);
        b.arg(&unit.segments.bases);
        b.arg(&unit.segments.deltas);
        b.arg(sm);
        b.arg(&n_elements);
        b.arg(&out);
        b.arg(&begin);
        b.arg(&end);
        b.arg(&begin);
        // SAFETY: out holds elements.len() values, written at j - begin for j in elements.
        unsafe { b.launch(cfg) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from(len)))
}
