//! Launch code of the warpgroup tensor-core kernels (`kernels/df11_tc_wg.cu`, Hopper `sm_90a`):
//! the weights decoded into wgmma A registers, x read by the tensor core from shared memory in
//! the summation contract's k-slot order (written by `wg_x_order` just before), the columns of a
//! 64-row tile split over warpgroups and their items' sums added in item order by the one that
//! finishes a tile. Same summation contract as every tensor-core kernel (`kernels/df11_tc.cu`):
//! the choice changes speed, never a bit of output.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use half::bf16;

use crate::cuda::launch::{launch_config_in, smem_per_block_optin};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::tc::tiling::TcTiling;
use crate::cuda::packed::tc_panel::{self, PanelMatrix};
use crate::cuda::pdl::{self, RawArgs};
use crate::options::{Df11Options, WgUse};

const BUILT: Module = fatbin_module!("df11_tc_wg");

/// The kernels' module: the build's, or for kernel measurements a PTX file's built from
/// `kernels/df11_tc_wg.cu` for `compute_90a` with other `-D` settings (`crate::tuning`).
fn module() -> Module {
    match crate::tuning::get().and_then(|t| t.wg_ptx.as_ref()) {
        Some(ptx) => Module::ptx("df11_tc_wg_override", ptx),
        None => BUILT,
    }
}

/// A warp's four stages (two sub-steps of two row groups) of `TS_STAGE` (DF11) or
/// `TS_TWIN_STAGE` bytes (kernels/df11_tc_stream.cuh), four warps a warpgroup.
const DF11_RING_BYTES: usize = 4 * 4 * 3120;
const TWIN_RING_BYTES: usize = 4 * 4 * 4096;
/// The DF11 kernels' static escape table (the streaming kernels' `ts_tab`).
const TABLE_BYTES: usize = crate::cuda::packed::tc::tiling::STREAM_TABLE_BYTES;
/// `WG_HEAD` bytes of barriers, flags and counters before the x slots.
const HEAD_BYTES: usize = 512;

/// `WG_XD(N)`: x slots of `64 N` bytes a warpgroup.
fn x_slots(n: usize) -> usize {
    if n >= 64 {
        4
    } else {
        8
    }
}

/// Most rows of x a launch takes: the tensor-core limit (`N` = 64; 65 to 128 rows would need a
/// kernel with N = 128 and that limit raised).
pub(crate) const WG_LIMIT_ROWS: usize = crate::cuda::limits::TC_LIMIT_ROWS;

/// Rows of x from which `on` takes the warpgroup kernels (where they run).
pub(crate) const WG_MIN_ROWS: usize = 9;

/// Whether the kernels were built for `sm_90a` (build.rs compiles them so for
/// `CUDA_COMPUTE_CAP=90` only).
const BUILT_FOR_90A: bool = matches!(env!("DF11_PTX_COMPUTE_CAP").as_bytes(), b"90");

/// Whether `dev` runs the warpgroup kernels: an `sm_90a` build on a compute capability 9.0 GPU.
pub(crate) fn available(dev: &CudaDevice) -> candle_core::Result<bool> {
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
    if !BUILT_FOR_90A {
        return Ok(false);
    }
    let ctx = dev.cuda_stream().context().clone();
    let major = ctx
        .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .w()?;
    let minor = ctx
        .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .w()?;
    Ok(major == 9 && minor == 0)
}

/// Whether the options want the warpgroup kernels at `nb` rows of x ([`WgUse`]: off by
/// default, measured slower than the streaming and panel kernels at every row count so far,
/// docs/PERFORMANCE.md; `On` takes them from 9 rows, `All` at every batch).
fn wanted(nb: usize, options: &Df11Options) -> bool {
    match options.warpgroup {
        WgUse::Off => false,
        WgUse::On => (WG_MIN_ROWS..=WG_LIMIT_ROWS).contains(&nb),
        WgUse::All => (1..=WG_LIMIT_ROWS).contains(&nb),
    }
}

/// The kernels' N (x rows of a wgmma) for `nb` rows.
fn n_for(nb: usize) -> usize {
    match nb {
        0..=16 => 16,
        17..=32 => 32,
        _ => 64,
    }
}

/// Dynamic shared memory and warpgroups of a launch (`wg_smem_bytes` of the kernel): as many
/// warpgroups as fit, at most 3 (the kernel's launch bounds); `None` where one does not fit a
/// device that allows `optin` bytes.
fn layout(n: usize, twin: bool, optin: usize) -> Option<(usize, usize)> {
    let (ring, table) = if twin {
        (TWIN_RING_BYTES, 0)
    } else {
        (DF11_RING_BYTES, TABLE_BYTES)
    };
    (1..=3)
        .rev()
        .map(|wgs| (HEAD_BYTES + wgs * (x_slots(n) * n * 64 + ring), wgs))
        .find(|&(smem, _)| smem + table <= optin)
}

/// Whether a warpgroup launch takes a product over `cols` columns at `nb` rows of x on `dev`
/// (DF11: the caller also checks the matrix is tiled members in whole chunks).
pub(crate) fn takes(
    dev: &CudaDevice,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<bool> {
    Ok(wanted(nb, options)
        && cols.is_multiple_of(2048)
        && cols <= 2048 * 256
        && available(dev)?
        && layout(n_for(nb), false, smem_per_block_optin(dev)?).is_some())
}

/// A launch: its configuration and kernel, x in contract order, the partial sums and the
/// counters.
struct WgLaunch {
    cfg: LaunchConfig,
    name: &'static str,
    xp: CudaSlice<bf16>,
    partial: CudaSlice<f32>,
    counters: std::rc::Rc<CudaSlice<u32>>,
}

/// Writes x in contract order for the launch and plans it, or `None` where the kernels do not
/// take the product now (setting, device, shape, a capture without counters: the caller takes
/// another kernel, with the same output).
#[allow(clippy::too_many_arguments)]
fn plan(
    dev: &CudaDevice,
    tiling: &TcTiling,
    twin: bool,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<WgLaunch>> {
    if !takes(dev, cols, nb, options)? {
        return Ok(None);
    }
    let n = n_for(nb);
    let Some((smem, wgs)) = layout(n, twin, smem_per_block_optin(dev)?) else {
        return Ok(None);
    };
    let Some(counters) = tc_panel::counters(dev)? else {
        return Ok(None);
    };
    let tiles = rows.div_ceil(64);
    if tiles > tc_panel::MAX_GROUPS {
        return Ok(None); // more 64-row tiles than counters: another kernel, the same output
    }
    let ntasks = tiles * tiling.items_per_group();
    // SAFETY: the order kernel writes every element of xp; the product writes every task's
    // sums before any is read.
    let xp = unsafe { dev.alloc::<bf16>(cols * n) }?;
    let partial = unsafe { dev.alloc::<f32>(ntasks * nb * 64) }?;
    let order = module().func(dev, "wg_x_order")?;
    let pieces = cols / 32 * 4 * n;
    let order_cfg = LaunchConfig {
        grid_dim: (pieces.div_ceil(256).min(4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (nb_, cols_, n_) = (nb as i32, cols as i32, n as i32);
    let stream = dev.cuda_stream();
    let mut a = RawArgs::new(&stream);
    a.buffer(x).buffer(&xp);
    a.scalar(&nb_).scalar(&cols_).scalar(&n_);
    // SAFETY: x is a contiguous [nb, cols] BF16 view, xp holds cols * n BF16 (n >= nb, cols a
    // multiple of 2048); the kernel waits for the kernel before it before reading x.
    unsafe { pdl::launch_maybe(&order, order_cfg, &mut a, pdl::available(dev, options.pdl)?) }?;
    let name = kernel(twin, n);
    // One CTA an SM (fewer where there are fewer tasks): its warpgroups' first tasks go one to a
    // CTA (the kernel's task order), so every SM works before any takes a second.
    let mut cfg = launch_config_in(dev, &module(), name, smem, ntasks, 1)?;
    cfg.block_dim = ((128 * wgs) as u32, 1, 1);
    Ok(Some(WgLaunch {
        cfg,
        name,
        xp,
        partial,
        counters,
    }))
}

/// The product kernel for N rows of x.
fn kernel(twin: bool, n: usize) -> &'static str {
    match (twin, n) {
        (false, 16) => "df11_tc_wg_16",
        (false, 32) => "df11_tc_wg_32",
        (false, _) => "df11_tc_wg_64",
        (true, 16) => "bf16_tc_wg_16",
        (true, 32) => "bf16_tc_wg_32",
        (true, _) => "bf16_tc_wg_64",
    }
}

/// The DF11 product `x` (`[nb, cols]`) times the `[rows, cols]` matrix `m` transposed, by the
/// warpgroup kernel, or `None` where it does not run now (the caller takes another kernel, with
/// the same output). The caller has checked what `PackedTcOp` checks: the matrix is whole tiled
/// members in whole chunks.
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
    let Some(p) = plan(dev, tiling, false, x, rows, cols, nb, options)? else {
        return Ok(None);
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = module().func(dev, p.name)?;
    let (nb_, rows_, cols_, base_) = (nb as i32, rows as i32, cols as i32, m.base as i64);
    let steps = tiling.steps as i32;
    let stream = dev.cuda_stream();
    let mut a = RawArgs::new(&stream);
    m.push_weights(&mut a);
    a.buffer(&p.xp).buffer(&out);
    a.buffer(&p.partial).buffer(&*p.counters);
    a.scalar(&nb_).scalar(&rows_).scalar(&cols_).scalar(&base_);
    a.scalar(&steps);
    // SAFETY: the streaming kernel's guarantees (whole chunks of a tiled member or of stacked
    // tiled members, validated buffers: the caller's checks), x in contract order for this N
    // (`plan`), the partial sums of every task and this thread's zeroed counters for the stream
    // (one per 64-row tile, fewer than the row groups they are sized for); arguments in
    // WG_PACKED_ARGS order. With PDL it reads only the weights before its griddepcontrol.wait.
    unsafe { pdl::launch_maybe(&func, p.cfg, &mut a, pdl::available(dev, options.pdl)?) }?;
    Ok(Some(out))
}

/// The twin's product `x` (`[nb, cols]`) times `w` (`[rows, cols]`, BF16) transposed, by the
/// warpgroup kernel, or `None` where it does not run now (as [`df11`]).
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
    let Some(p) = plan(dev, tiling, true, x, rows, cols, nb, options)? else {
        return Ok(None);
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = module().func(dev, p.name)?;
    let (nb_, rows_, cols_, steps) = (nb as i32, rows as i32, cols as i32, tiling.steps as i32);
    let stream = dev.cuda_stream();
    let mut a = RawArgs::new(&stream);
    a.buffer(w).buffer(&p.xp).buffer(&out);
    a.buffer(&p.partial).buffer(&*p.counters);
    a.scalar(&nb_).scalar(&rows_).scalar(&cols_).scalar(&steps);
    // SAFETY: w is a contiguous, 16-byte aligned BF16 view of [rows, cols] (`bf16_view`), cols
    // a multiple of 2048 (`takes`); x in contract order, partial sums and counters as for
    // [`df11`]; arguments in WG_TWIN_ARGS order. The kernel waits for the kernel before it
    // before it reads anything (its weights may be that kernel's output).
    unsafe { pdl::launch_maybe(&func, p.cfg, &mut a, pdl::available(dev, options.pdl)?) }?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_batch_has_a_kernel_that_fits_an_h100() {
        let optin = 227 * 1024;
        for nb in 1..=WG_LIMIT_ROWS {
            let n = n_for(nb);
            assert!(n >= nb && n.is_multiple_of(16));
            for twin in [false, true] {
                assert_eq!(kernel(twin, n).starts_with("bf16"), twin);
                let (smem, wgs) = layout(n, twin, optin).unwrap();
                let table = if twin { 0 } else { TABLE_BYTES };
                assert!(smem + table <= optin && wgs >= 2, "{nb} rows, twin {twin}");
            }
        }
    }
}
