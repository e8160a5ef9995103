//! Launch code of the warp-specialized products (`kernels/df11_ws_gemm.cu`, Hopper `sm_90a`):
//! producer warps decode a 128-row tile's DF11 weights (the packed form in the tile order, whole
//! chunks) into a shared-memory ring that consumer warpgroups multiply with wgmma, x (and the
//! twin's BF16 weights) brought by TMA; K split into runs of whole 512-column groups where a
//! product has too few tiles, the splits added in split order by the tile's last CTA.
//!
//! They sum in their own order, not in the tensor-core kernels' summation contract: the plan
//! takes them for both formats alike ([`crate::cuda::matmul::fused_plan`]), and a DF11 matrix
//! they cannot read ([`fits`]) is decoded and given to the twin, so a DF11 model and its BF16
//! original keep the same bits. Off by default ([`WsUse`]).

use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaSlice, CudaView, DevicePtr, DeviceRepr, LaunchConfig,
};
use candle_core::cuda_backend::CudaDevice;
use half::bf16;

use crate::cuda::launch::{launch_config_in, multiprocessors, smem_per_block_optin};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::tc_panel::{self, PanelMatrix};
use crate::cuda::packed::tc_wg;
use crate::cuda::pdl::{self, RawArgs};
use crate::options::{Df11Options, WsUse};

const MODULE: Module = fatbin_module!("df11_ws_gemm");

/// Weight rows of a tile (`WS_BM`) and columns of a stage (`WS_BK`).
const TILE_ROWS: usize = 128;
const STAGE_COLS: usize = 64;
/// Ring slots (`WS_STAGES`) and threads (`WS_THREADS`) of the kernel.
const STAGES: usize = 4;
const THREADS: u32 = 512;
/// Columns of a split's unit: a group of eight stages (two sub-steps' passes of a 2048-column
/// chunk).
const GROUP_COLS: usize = 512;
/// Most splits of K a product takes.
const MAX_SPLITS: usize = 16;

/// Most rows of x a launch takes (the kernel's largest x tile).
pub(crate) const WS_LIMIT_ROWS: usize = 64;

/// The x tile (the wgmma N side) for `nb` rows.
fn x_tile(nb: usize) -> usize {
    match nb {
        0..=16 => 16,
        17..=32 => 32,
        _ => 64,
    }
}

/// `ws_smem_bytes(RT)` of the kernel: the ring (1024-byte aligned inside) and its barriers.
fn smem_bytes(rt: usize) -> usize {
    STAGES * (TILE_ROWS + rt) * STAGE_COLS * 2 + 16 * STAGES + 1024
}

/// The kernels' static escape-bits table (`ts_bits`, DF11 only; counted against the device's
/// shared memory with the dynamic part).
const TABLE_BYTES: usize = 4096;

/// Whether the options want the kernels at `nb` rows of x.
fn wanted(nb: usize, options: &Df11Options) -> bool {
    match options.warp_specialized {
        WsUse::Off => false,
        WsUse::On => (17..=WS_LIMIT_ROWS).contains(&nb),
        WsUse::All => (9..=WS_LIMIT_ROWS).contains(&nb),
    }
}

/// Whether the warp-specialized kernels take a product over `cols` columns at `nb` rows of x on
/// `dev`: widths the options tile in whole 2048-column chunks (both formats: a DF11 matrix that
/// is not so tiled, or does not [`fits`], is decoded for the twin).
pub(crate) fn takes(
    dev: &CudaDevice,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<bool> {
    Ok(wanted(nb, options)
        && options.tiles.tiles_whole_chunks(cols)
        && tc_wg::available(dev)?
        && smem_bytes(x_tile(nb)) + TABLE_BYTES <= smem_per_block_optin(dev)?)
}

/// Whether the DF11 kernel reads the matrix: whole tiled members in whole chunks (the caller
/// checks that) whose tables change only on 128-row tile boundaries (`g1`, `g2`: row groups of
/// 8 where the second and third stacked members begin, `i32::MAX` for none).
pub(crate) fn fits(g1: i32, g2: i32) -> bool {
    let on_tile = |g: i32| g == i32::MAX || g % 16 == 0;
    on_tile(g1) && on_tile(g2)
}

/// Splits of K for a product of `tiles` tiles over `cols` columns on `sms` SMs: the most that
/// keep the launch within one wave of two CTAs an SM, at least one (measured faster than more
/// waves for both formats, docs/PERFORMANCE.md).
fn splits(tiles: usize, cols: usize, sms: usize) -> usize {
    ((2 * sms) / tiles.max(1)).clamp(1, (cols / GROUP_COLS).min(MAX_SPLITS))
}

/// A CUtensorMap (the kernel's `WsMap`): 128 opaque bytes, passed by value.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TensorMap([u64; 16]);

// SAFETY: plain bytes, the layout of the kernel's `WsMap` parameter.
unsafe impl DeviceRepr for TensorMap {}

/// A 2D tensor map of the BF16 matrix at `ptr` (`[outer, inner]`, row-major): boxes of 64
/// columns by `box_rows` rows, 128-byte swizzle, rows and columns past the matrix read as zeros.
fn tensor_map(
    ptr: sys::CUdeviceptr,
    outer: usize,
    inner: usize,
    box_rows: usize,
) -> candle_core::Result<TensorMap> {
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::uninit();
    let dims: [sys::cuuint64_t; 2] = [inner as u64, outer as u64];
    let strides: [sys::cuuint64_t; 1] = [(inner * 2) as u64];
    let boxes: [sys::cuuint32_t; 2] = [STAGE_COLS as u32, box_rows as u32];
    let elems: [sys::cuuint32_t; 2] = [1, 1];
    // SAFETY: the pointers are to local arrays of the lengths the rank (2) asks for; `map` is
    // written by the call before it is read.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elems.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        candle_core::bail!(
            "df11: cuTensorMapEncodeTiled failed ({r:?}) for a [{outer}, {inner}] matrix"
        );
    }
    // SAFETY: written by the successful call above.
    let map = unsafe { map.assume_init() };
    Ok(TensorMap(map.opaque))
}

/// A launch: its configuration and kernel, the splits' partial sums and the counters.
struct WsLaunch {
    cfg: LaunchConfig,
    name: &'static str,
    partial: CudaSlice<f32>,
    counters: std::rc::Rc<CudaSlice<u32>>,
}

/// Plans a launch, or `None` where the kernels do not take the product now (setting, device,
/// shape, no counters for this stream: the caller takes another kernel, for both formats alike).
fn plan(
    dev: &CudaDevice,
    twin: bool,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<WsLaunch>> {
    if !takes(dev, cols, nb, options)? || rows == 0 {
        return Ok(None);
    }
    let rt = x_tile(nb);
    let tiles = nb.div_ceil(rt) * rows.div_ceil(TILE_ROWS);
    // More tiles than counters, or weight tiles than a grid's y: another kernel, the same for both
    // formats.
    if tiles > tc_panel::MAX_GROUPS || rows.div_ceil(TILE_ROWS) > u16::MAX as usize {
        return Ok(None);
    }
    let Some(counters) = tc_panel::counters(dev)? else {
        return Ok(None);
    };
    let name = kernel(twin, rt);
    let smem = smem_bytes(rt);
    // Sets the function's dynamic shared memory; its grid is set here.
    let mut cfg = launch_config_in(dev, &MODULE, name, smem, 1, 1)?;
    let s = splits(tiles, cols, multiprocessors(dev)?);
    cfg.grid_dim = (
        nb.div_ceil(rt) as u32,
        rows.div_ceil(TILE_ROWS) as u32,
        s as u32,
    );
    cfg.block_dim = (THREADS, 1, 1);
    // SAFETY: with more than one split the kernel writes every partial sum before any is read;
    // with one it never touches the buffer (one element, so that it is a valid pointer).
    let partial = unsafe { dev.alloc::<f32>(if s > 1 { s * nb * rows } else { 1 }) }?;
    Ok(Some(WsLaunch {
        cfg,
        name,
        partial,
        counters,
    }))
}

/// The kernel for an x tile of `rt` rows.
fn kernel(twin: bool, rt: usize) -> &'static str {
    match (twin, rt) {
        (false, 16) => "df11_ws_gemm_16",
        (false, 32) => "df11_ws_gemm_32",
        (false, _) => "df11_ws_gemm_64",
        (true, 16) => "bf16_ws_gemm_16",
        (true, 32) => "bf16_ws_gemm_32",
        (true, _) => "bf16_ws_gemm_64",
    }
}

/// What a launch multiplies `x` by: a DF11 matrix (whole tiled members in whole chunks that
/// [`fits`]) or the twin's BF16 weights `[rows, cols]`.
enum Weights<'a, 'b> {
    Df11(&'a PanelMatrix<'b>),
    Bf16(&'a CudaView<'b, bf16>),
}

/// The DF11 product `x` (`[nb, cols]`) times the `[rows, cols]` matrix `m` transposed, or
/// `None` where the kernels do not run now (the caller takes another kernel; [`takes`] and the
/// same conditions hold for the twin). The caller has checked that the matrix is whole tiled
/// members in whole chunks and that it [`fits`].
pub(crate) fn df11(
    dev: &CudaDevice,
    m: &PanelMatrix<'_>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    product(dev, Weights::Df11(m), x, rows, cols, nb, options)
}

/// The twin's product `x` (`[nb, cols]`) times `w` (`[rows, cols]`, BF16) transposed, or `None`
/// where the kernels do not run now (as [`df11`]).
pub(crate) fn twin(
    dev: &CudaDevice,
    w: &CudaView<'_, bf16>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    product(dev, Weights::Bf16(w), x, rows, cols, nb, options)
}

/// Plans and launches one product of either format ([`df11`], [`twin`]).
fn product(
    dev: &CudaDevice,
    weights: Weights<'_, '_>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
    options: &Df11Options,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    let twin = matches!(weights, Weights::Bf16(_));
    let Some(p) = plan(dev, twin, rows, cols, nb, options)? else {
        return Ok(None);
    };
    let stream = dev.cuda_stream();
    let map = |v: &CudaView<'_, bf16>, outer: usize, box_rows: usize| {
        let (ptr, _guard) = v.device_ptr(&stream);
        tensor_map(ptr, outer, cols, box_rows)
    };
    let xmap = map(x, nb, x_tile(nb))?;
    // (The DF11 kernels take no weight map: theirs is unused.)
    let wmap = match weights {
        Weights::Bf16(w) => map(w, rows, TILE_ROWS)?,
        Weights::Df11(_) => TensorMap([0; 16]),
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = MODULE.func(dev, p.name)?;
    let (nb_, rows_, cols_) = (nb as i32, rows as i32, cols as i32);
    let base_ = match weights {
        Weights::Df11(m) => m.base as i64,
        Weights::Bf16(_) => 0,
    };
    let mut a = RawArgs::new(&stream);
    match weights {
        Weights::Df11(m) => m.push_weights(&mut a),
        Weights::Bf16(_) => {
            a.scalar(&wmap);
        }
    }
    a.scalar(&xmap).buffer(&out);
    a.buffer(&p.partial).buffer(&*p.counters);
    a.scalar(&nb_).scalar(&rows_).scalar(&cols_);
    if !twin {
        a.scalar(&base_);
    }
    // SAFETY: the kernels' host guarantees (kernels/df11_ws_gemm.cu): an sm_90a build on a 9.0
    // device (`takes`); x (and the twin's w) contiguous BF16 views of [nb, cols] ([rows, cols])
    // behind their tensor maps, cols a multiple of 2048 so that every row is 16-byte aligned; the
    // grid, dynamic shared memory, partial sums and this stream's zeroed counters (fewer tiles
    // than counters) of `plan`. DF11: whole chunks of tiled members (rows % 8 == 0, base % 2048
    // == 0: the caller's checks) whose tables change on tile boundaries (`fits`), validated
    // packed buffers. Arguments in WS_PACKED_ARGS / WS_TWIN_ARGS order. With PDL the kernels read
    // only DF11 weights before their griddepcontrol.wait (the twin's w may be the kernel
    // before's output).
    unsafe { pdl::launch_maybe(&func, p.cfg, &mut a, pdl::available(dev, options.pdl)?) }?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_fits_two_ctas_an_sm_of_an_h100() {
        // 228 KB an SM, 227 KB a CTA; two CTAs an SM with the DF11 kernels' static table.
        for nb in 1..=WS_LIMIT_ROWS {
            let rt = x_tile(nb);
            assert!(rt >= nb && rt.is_multiple_of(16));
            assert!(
                2 * (smem_bytes(rt) + TABLE_BYTES) <= 228 * 1024,
                "{nb} rows"
            );
            assert!(kernel(true, rt).starts_with("bf16"));
            assert!(kernel(false, rt).ends_with(&rt.to_string()));
        }
    }

    #[test]
    fn splits_stay_in_one_wave_and_in_whole_groups() {
        for (tiles, cols) in [
            (1, 2048),
            (32, 4096),
            (48, 4096),
            (192, 4096),
            (32, 12288),
            (500, 4096),
        ] {
            let s = splits(tiles, cols, 132);
            assert!(s >= 1 && s <= cols / GROUP_COLS && s <= MAX_SPLITS);
            assert!(s == 1 || tiles * s <= 2 * 132, "{tiles} tiles, {s} splits");
        }
        assert_eq!(splits(32, 4096, 132), 8);
        assert_eq!(splits(192, 4096, 132), 1);
    }

    #[test]
    fn a_stacked_matrix_fits_where_its_tables_change_on_tiles() {
        assert!(fits(i32::MAX, i32::MAX));
        assert!(fits(512, 640));
        assert!(!fits(8, i32::MAX));
        assert!(!fits(512, 520));
    }

    #[test]
    fn the_options_choose_the_rows() {
        let mut o = Df11Options::default();
        assert!(!(1..=64).any(|nb| wanted(nb, &o)));
        o.warp_specialized = WsUse::On;
        assert!((17..=64).all(|nb| wanted(nb, &o)) && !wanted(16, &o) && !wanted(65, &o));
        o.warp_specialized = WsUse::All;
        assert!((9..=64).all(|nb| wanted(nb, &o)) && !wanted(8, &o));
    }
}
