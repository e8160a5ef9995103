//! Launch code of the panel tensor-core kernels (`kernels/df11_tc_panel.cu`): a CTA's 8 warps on
//! the same columns of 8 row groups, so x is read once a CTA instead of once a row group, and the
//! columns of a row group split over CTAs, their items' sums added in item order by the warp that
//! finishes a row group's last item. Same summation contract as every tensor-core kernel
//! (`kernels/df11_tc.cu`): the choice changes speed, never a bit of output.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaSlice, CudaView, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use half::bf16;

use crate::cuda::launch::{launch_config_in, push_args, smem_per_block_optin};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::kernels::PackedBuffers;
use crate::cuda::packed::tc::tiling::TcTiling;
use crate::cuda::pdl::{self, RawArgs};
use crate::options::Df11Options;

const MODULE: Module = fatbin_module!("df11_tc_panel");
/// Row groups a launch may have: the counters a device keeps per host thread.
pub(crate) const MAX_GROUPS: usize = 1 << 16;
/// A warp's two stages of `TS_STAGE` (DF11) or `TS_TWIN_STAGE` bytes
/// (kernels/df11_tc_stream.cuh), 8 warps.
const DF11_RING_BYTES: usize = 8 * 2 * 3120;
const TWIN_RING_BYTES: usize = 8 * 2 * 4096;
/// The DF11 kernels' static escape table (the streaming kernels' `ts_tab`).
const TABLE_BYTES: usize = crate::cuda::packed::tc::tiling::STREAM_TABLE_BYTES;

/// Whether the panel kernels are wanted for a `[rows, _]` product (the options and the
/// counters' reach; not whether the launch finds its counters). Off by default
/// ([`Df11Options::panel`]): measured slower than the streaming kernels at every batch size so
/// far (docs/PERFORMANCE.md); kept for measurements and as the base of the 9-64-row kernel.
pub(crate) fn wanted(rows: usize, options: &Df11Options) -> bool {
    options.panel && rows.div_ceil(8) <= MAX_GROUPS
}

thread_local! {
    /// Row-group counters per host thread, CUDA context and stream: launches on two streams may
    /// overlap (df11-llm gives each device object a stream of its own, and two of them may share
    /// a GPU), and so may two threads' on the per-thread default stream (one handle for every
    /// thread). Never replaced: a captured graph keeps the address.
    static COUNTERS: RefCell<Counters> = RefCell::new(HashMap::new());
}

/// Counters by (CUDA context, stream handle).
type Counters = HashMap<(usize, usize), Rc<CudaSlice<u32>>>;

/// This thread's zeroed counters for `dev`'s stream, created at first use, or `None` where they
/// do not exist yet and the stream is capturing a graph (an allocation there would belong to the
/// graph; the caller takes another kernel, with the same output).
pub(crate) fn counters(dev: &CudaDevice) -> candle_core::Result<Option<Rc<CudaSlice<u32>>>> {
    let stream = dev.cuda_stream();
    let key = (
        stream.context().cu_ctx() as usize,
        stream.cu_stream() as usize,
    );
    if let Some(c) = COUNTERS.with(|m| m.borrow().get(&key).cloned()) {
        return Ok(Some(c));
    }
    let capturing = stream.capture_status().ok()
        != Some(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    if capturing {
        return Ok(None);
    }
    let c = Rc::new(dev.alloc_zeros::<u32>(MAX_GROUPS)?);
    COUNTERS.with(|m| m.borrow_mut().insert(key, c.clone()));
    Ok(Some(c))
}

/// A panel launch: its configuration and kernel, the partial sums' buffer and the counters.
struct PanelLaunch {
    cfg: LaunchConfig,
    name: &'static str,
    partial: CudaSlice<f32>,
    counters: Rc<CudaSlice<u32>>,
}

/// The kernel for `nb` rows of input: 8 (one m-tile, nb <= 8), 1, 2 or 4 m-tiles.
fn kernel(nb: usize, twin: bool) -> &'static str {
    match (twin, nb) {
        (false, 0..=8) => "df11_tc_panel_8",
        (false, 9..=16) => "df11_tc_panel_1",
        (false, 17..=32) => "df11_tc_panel_2",
        (false, _) => "df11_tc_panel_4",
        (true, 0..=8) => "bf16_tc_panel_8",
        (true, 9..=16) => "bf16_tc_panel_1",
        (true, 17..=32) => "bf16_tc_panel_2",
        (true, _) => "bf16_tc_panel_4",
    }
}

/// Bytes of one x stage a row of input (`TP_X_ROW`: 256 columns).
const X_ROW_BYTES: usize = 512;

/// Shared memory an SM shares among its CTAs (H100: 228 KiB, 1 KiB of it reserved per CTA).
const SM_SHARED_BYTES: usize = 228 * 1024;

/// Dynamic shared memory of a launch at `nb` rows of input (two x stages, then the warps'
/// rings) and the CTAs an SM runs: 2 up to 32 rows where they fit (the kernels' launch bounds),
/// else 1; `None` where one CTA does not fit a device that allows `optin` bytes.
fn layout(nb: usize, twin: bool, optin: usize) -> Option<(usize, u32)> {
    let (ring, table) = if twin {
        (TWIN_RING_BYTES, 0)
    } else {
        (DF11_RING_BYTES, TABLE_BYTES)
    };
    let smem = 2 * nb * X_ROW_BYTES + ring;
    if smem + table > optin {
        return None;
    }
    let two = nb <= 32 && 2 * (smem + table + 1024) <= SM_SHARED_BYTES;
    Some((smem, if two { 2 } else { 1 }))
}

/// Whether a panel launch of a `[rows, _]` product at `nb` rows of input is wanted and fits `dev`
/// (it may still find no counters under a graph capture: [`plan`]).
pub(crate) fn takes(
    dev: &CudaDevice,
    rows: usize,
    nb: usize,
    twin: bool,
    options: &Df11Options,
) -> candle_core::Result<bool> {
    Ok(wanted(rows, options) && layout(nb, twin, smem_per_block_optin(dev)?).is_some())
}

/// The panel launch of a `[rows, cols]` product (`tiling`'s items) at `nb` rows of input, or
/// `None` where the panel kernels are not wanted or cannot run now (see [`counters`]).
fn plan(
    dev: &CudaDevice,
    tiling: &TcTiling,
    twin: bool,
    rows: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<PanelLaunch>> {
    if !wanted(rows, options) {
        return Ok(None);
    }
    let Some((smem, per_sm)) = layout(nb, twin, smem_per_block_optin(dev)?) else {
        return Ok(None);
    };
    let Some(counters) = counters(dev)? else {
        return Ok(None);
    };
    let groups = rows.div_ceil(8);
    let ipg = tiling.items_per_group();
    // SAFETY: every item's sums are written by the kernel before any is read.
    let partial = unsafe { dev.alloc::<f32>(groups * ipg * nb * 8) }?;
    let tasks = groups.div_ceil(8) * ipg;
    let name = kernel(nb, twin);
    let cfg = launch_config_in(dev, &MODULE, name, smem, tasks, per_sm)?;
    Ok(Some(PanelLaunch {
        cfg,
        name,
        partial,
        counters,
    }))
}

/// A DF11 matrix the panel kernel multiplies: tiled members of `unit` in whole chunks from unit
/// element `base` (one, or two or three stacked), their tables and the row groups where the
/// second and third begin (`i32::MAX`: none).
pub(crate) struct PanelMatrix<'a> {
    pub(crate) unit: &'a PackedBuffers,
    pub(crate) sign_mantissa: &'a CudaSlice<u8>,
    pub(crate) tables: [[u32; 2]; 3],
    pub(crate) g1: i32,
    pub(crate) g2: i32,
    pub(crate) base: usize,
}

impl<'a> PanelMatrix<'a> {
    /// Pushes the matrix's arguments as the panel, warpgroup and streaming DF11 kernels take them
    /// first: the unit's packed buffers, the three tables, g1, g2, sign_mantissa.
    pub(crate) fn push_weights(&'a self, a: &mut RawArgs<'a>) {
        let [[t0, t1], [t0b, t1b], [t0c, t1c]] = &self.tables;
        self.unit.push_packed_raw(a);
        a.scalar(t0).scalar(t1).scalar(t0b).scalar(t1b);
        a.scalar(t0c).scalar(t1c).scalar(&self.g1).scalar(&self.g2);
        a.buffer(self.sign_mantissa);
    }
}

/// The DF11 product `x` (`[nb, cols]`) times the `[rows, cols]` matrix `m` transposed, by the
/// panel kernel, or `None` where it does not run now (setting, shared memory, a capture
/// without counters: the caller takes the streaming kernel, with the same output). The caller
/// has checked what `PackedTcOp` checks: the matrix is whole tiled members in whole chunks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn df11(
    dev: &CudaDevice,
    tiling: &TcTiling,
    m: &PanelMatrix<'_>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    let Some(p) = plan(dev, tiling, false, rows, nb, options)? else {
        return Ok(None);
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = MODULE.func(dev, p.name)?;
    let (nb_, rows_, cols_, base_) = (nb as i32, rows as i32, cols as i32, m.base as i64);
    let steps = tiling.steps as i32;
    let stream = dev.cuda_stream();
    let mut a = RawArgs::new(&stream);
    m.push_weights(&mut a);
    a.buffer(x).buffer(&out);
    a.buffer(&p.partial).buffer(&*p.counters);
    a.scalar(&nb_).scalar(&rows_).scalar(&cols_).scalar(&base_);
    a.scalar(&steps);
    // SAFETY: the streaming kernel's guarantees (whole chunks of a tiled member or of stacked
    // tiled members, validated buffers: the caller's checks), with the partial sums' buffer of
    // the row groups' items (`plan`) and this thread's zeroed counters for the stream, one per
    // row group; arguments in TP_PACKED_ARGS order. With PDL it reads only the weights before
    // its griddepcontrol.wait.
    unsafe { pdl::launch_maybe(&func, p.cfg, &mut a, pdl::available(dev, options.pdl)?) }?;
    Ok(Some(out))
}

/// The twin's product `x` (`[nb, cols]`) times `w` (`[rows, cols]`, BF16) transposed, by the
/// panel kernel, or `None` where it does not run now (as [`df11`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn twin(
    dev: &CudaDevice,
    tiling: &TcTiling,
    w: &CudaView<'_, bf16>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    let Some(p) = plan(dev, tiling, true, rows, nb, options)? else {
        return Ok(None);
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = MODULE.func(dev, p.name)?;
    let (nb_, rows_, cols_, steps) = (nb as i32, rows as i32, cols as i32, tiling.steps as i32);
    let mut b = func.builder();
    push_args!(b; w, x, &out, &p.partial, &*p.counters, &nb_, &rows_, &cols_, &steps);
    // SAFETY: w and x are contiguous, 16-byte aligned BF16 views of [rows, cols] and [nb, cols]
    // (`bf16_view`), cols a multiple of 256 (`TcTiling::new`); the partial sums' buffer holds
    // the row groups' items and the counters one zero per row group (`plan`); arguments in
    // TP_TWIN_ARGS order.
    unsafe { b.launch(p.cfg) }.w()?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_cover_every_batch_and_fit_an_sm() {
        for nb in 1..=64 {
            for twin in [false, true] {
                let name = kernel(nb, twin);
                assert_eq!(name.starts_with("bf16"), twin);
            }
        }
        let optin = 227 * 1024;
        for nb in 1..=64 {
            for twin in [false, true] {
                let (smem, per_sm) = layout(nb, twin, optin).unwrap();
                let table = if twin { 0 } else { TABLE_BYTES };
                assert!(per_sm as usize * (smem + table + 1024) <= SM_SHARED_BYTES);
                assert!(per_sm == 1 || nb <= 32);
                if nb <= 32 {
                    assert_eq!(per_sm, 2, "{nb} rows, twin {twin}");
                }
            }
        }
        let on = Df11Options {
            panel: true,
            ..Df11Options::default()
        };
        assert!(wanted(8 * MAX_GROUPS, &on) && !wanted(8 * MAX_GROUPS + 1, &on));
        assert!(!wanted(8, &Df11Options::default()));
    }
}
