//! Launch code of the team tensor-core kernels (`kernels/df11_tc_team.cu`): a CTA's decoder
//! warps decode each sub-step of a tile of row groups once into shared memory, and one
//! multiplier warp per 16 rows of input multiplies it; the DF11 kernel over tiled members in
//! whole 2048-column chunks (one, or stacked) and its BF16 twin over any matrix of whole chunks.
//! Same summation contract as every tensor-core kernel (`kernels/df11_tc.cu`): whether they run
//! changes speed, never a bit of output.

use std::sync::OnceLock;

use candle_core::cuda_backend::cudarc::driver::sys::{
    CUdevice_attribute, CUfunction_attribute_enum,
};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use half::bf16;

use super::TcTiling;
use crate::cuda::launch::{push_args, smem_per_block_optin};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::pdl::{self, RawArgs};
use crate::cuda::setting::Setting;
use crate::cuda::tc_panel::PanelMatrix;

const MODULE: Module = fatbin_module!("df11_tc_team");
/// The DF11 kernels' static escape table (`ts_tab`, kernels/df11_tc_stream.cuh).
const TABLE_BYTES: usize = 8 * 4096;
/// A row group's sub-step in a slot (`TT_SLOT_RG`): 8 passes x 32 lanes x 16 bytes.
const SLOT_RG_BYTES: usize = 4096;
/// A row of x in a slot (`TT_X_ROW`): the sub-step's 256 columns.
const X_ROW_BYTES: usize = 512;
/// A DF11 decoder's stages: `TS_DEPTH` (2) of `TS_STAGE` (3120) bytes.
const DECODER_STAGES_BYTES: usize = 2 * 3120;
/// The kernels' launch bounds: 512 threads.
const MAX_WARPS: usize = 16;
/// Most slots a ring may have (`TT_MAX_SLOTS`: two named barriers a slot, 16 in all).
const MAX_SLOTS: usize = 7;
/// Most rows of input one launch takes (`TC_LIMIT_ROWS`: the tiling's four m-tiles).
pub(crate) const TEAM_LIMIT_ROWS: usize = 64;
/// Rows of input from which `DF11_TC_TEAM=auto` (the default) takes the team kernels: below,
/// the streaming kernels (docs/PERFORMANCE.md, session 20).
pub(crate) const TEAM_MIN_ROWS: usize = 17;

/// When the team kernels take the products they can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamUse {
    /// From [`TEAM_MIN_ROWS`] rows of input.
    Auto,
    /// At every row count.
    On,
    /// Never.
    Off,
}

/// `DF11_TC_TEAM` (`auto`, the default, `on` or `off`).
static TEAM: Setting<TeamUse> = Setting::new(
    "DF11_TC_TEAM",
    "team setting",
    &[
        ("auto", TeamUse::Auto),
        ("on", TeamUse::On),
        ("off", TeamUse::Off),
    ],
);

/// Sets when the team kernels run, for the whole process (overrides `DF11_TC_TEAM`; outputs are
/// the same either way).
pub fn set_tc_team(use_: TeamUse) {
    TEAM.set(use_);
}

/// Whether the setting wants the team kernels at `nb` rows of input.
fn wanted(nb: usize) -> bool {
    match TEAM.get() {
        TeamUse::Auto => (TEAM_MIN_ROWS..=TEAM_LIMIT_ROWS).contains(&nb),
        TeamUse::On => (1..=TEAM_LIMIT_ROWS).contains(&nb),
        TeamUse::Off => false,
    }
}

/// Whether products over `cols` columns at `nb` rows of input on a device that allows `optin`
/// bytes of shared memory a block go through the team kernels where the weights allow (the
/// setting, whole 2048-column chunks, the layout fits): a question of shape, device and
/// settings, never of the weight format.
pub(crate) fn covers(cols: usize, nb: usize, optin: usize) -> bool {
    wanted(nb)
        && cols.is_multiple_of(2048)
        && cols <= 2048 * 256
        && layout(nb, false, 4, optin).is_some()
}

/// A measurement override (`DF11_TC_TEAM_R`, `_DECODERS`, `_SLOTS`): the value where it parses
/// and `ok` accepts it.
fn knob(
    name: &'static str,
    cell: &'static OnceLock<Option<usize>>,
    ok: fn(usize) -> bool,
) -> Option<usize> {
    *cell.get_or_init(|| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&v| ok(v))
    })
}

fn r_override() -> Option<usize> {
    static R: OnceLock<Option<usize>> = OnceLock::new();
    knob("DF11_TC_TEAM_R", &R, |v| v == 2 || v == 4)
}

fn decoders_override() -> Option<usize> {
    static D: OnceLock<Option<usize>> = OnceLock::new();
    knob("DF11_TC_TEAM_DECODERS", &D, |v| {
        (1..=MAX_WARPS).contains(&v)
    })
}

fn slots_override() -> Option<usize> {
    static S: OnceLock<Option<usize>> = OnceLock::new();
    knob("DF11_TC_TEAM_SLOTS", &S, |v| (2..=MAX_SLOTS).contains(&v))
}

fn per_tile_override() -> Option<usize> {
    static Q: OnceLock<Option<usize>> = OnceLock::new();
    knob("DF11_TC_TEAM_PER_TILE", &Q, |v| [1, 2, 4].contains(&v))
}

/// A team launch's shape: row groups a tile, decoder and multiplier warps (`per_tile` a
/// 16-row m-tile of x, each taking `r / per_tile` row groups), ring slots, dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    r: usize,
    decoders: usize,
    per_tile: usize,
    multipliers: usize,
    slots: usize,
    smem: usize,
}

/// A slot's bytes (`TT_SLOT_RG` a row group, `TT_X_ROW` a row of x).
fn slot_bytes(r: usize, nb: usize) -> usize {
    r * SLOT_RG_BYTES + nb * X_ROW_BYTES
}

/// The layout at `nb` rows of input with `r` row groups a tile, or `None` where it does not fit
/// a block of `optin` bytes of shared memory. Decoders: `P` a row group, taking alternate
/// sub-steps (DF11: 8 in all where they fit; twin: two a row group), with more slots than `P`
/// (a decoder waits for its next slot before it hands over the current one) and a multiple of it.
/// Multipliers: four
/// in all where the m-tiles allow (the mma spread over an SM's four tensor cores), each m-tile's
/// row groups split among its own. Slots: four where they fit, at least `P + 1`.
fn layout(nb: usize, twin: bool, r: usize, optin: usize) -> Option<Layout> {
    let m_tiles = if nb <= 8 { 1 } else { nb.div_ceil(16) };
    let per_tile = per_tile_override().unwrap_or((4 / m_tiles).max(1)).min(r);
    let per_tile = [4, 2, 1]
        .into_iter()
        .find(|&q| q <= per_tile && r.is_multiple_of(q))?;
    let multipliers = m_tiles * per_tile;
    let want = decoders_override().map_or(if twin { 2 } else { 8 / r }, |d| (d / r).max(1));
    let table = if twin { 0 } else { TABLE_BYTES };
    [8, 4, 2, 1]
        .into_iter()
        .filter(|&p| p <= want)
        .find_map(|p| {
            let decoders = r * p;
            if decoders + multipliers > MAX_WARPS {
                return None;
            }
            let fixed = if twin {
                0
            } else {
                decoders * DECODER_STAGES_BYTES
            };
            let room = optin.checked_sub(fixed + table)? / slot_bytes(r, nb);
            // A multiple of P: the sub-steps of a slot then all fall to the same decoder warps,
            // so no two of them wait on a slot's EMPTY barrier at once (two waiting groups
            // would complete one phase with the wrong warps: a hang seen at 64 rows with P = 4
            // over 3 slots).
            let slots = slots_override()
                .unwrap_or(4)
                .max(2 * p)
                .min(room)
                .min(MAX_SLOTS);
            let slots = slots - slots % p;
            (slots > p).then_some(Layout {
                r,
                decoders,
                per_tile,
                multipliers,
                slots,
                smem: slots * slot_bytes(r, nb) + fixed,
            })
        })
}

/// Row groups a tile for a matrix of `groups` row groups on `sms` SMs (one CTA each): the one
/// whose tiles fill the last wave best, 4 on a tie (fewer, larger tiles).
fn tile_groups(groups: usize, sms: usize) -> usize {
    if let Some(r) = r_override() {
        return r;
    }
    let fill = |r: usize| {
        let tiles = groups.div_ceil(r);
        tiles as f64 / (tiles.div_ceil(sms) * sms) as f64
    };
    if fill(2) > fill(4) + 0.05 {
        2
    } else {
        4
    }
}

fn kernel(r: usize, nb: usize, twin: bool) -> &'static str {
    match (twin, r, nb <= 8) {
        (false, 2, true) => "df11_tc_team_2_low",
        (false, 2, false) => "df11_tc_team_2_m",
        (false, _, true) => "df11_tc_team_4_low",
        (false, _, false) => "df11_tc_team_4_m",
        (true, 2, true) => "bf16_tc_team_2_low",
        (true, 2, false) => "bf16_tc_team_2_m",
        (true, _, true) => "bf16_tc_team_4_low",
        (true, _, false) => "bf16_tc_team_4_m",
    }
}

/// A launch: its configuration, kernel and layout.
struct Launch {
    cfg: LaunchConfig,
    name: &'static str,
    layout: Layout,
}

/// The team launch of a `[rows, cols]` product at `nb` rows of input, or `None` where the
/// setting, the shape or the device's shared memory leave it to the other kernels.
fn plan(
    dev: &CudaDevice,
    rows: usize,
    cols: usize,
    nb: usize,
    twin: bool,
) -> candle_core::Result<Option<Launch>> {
    let optin = smem_per_block_optin(dev)?;
    if !covers(cols, nb, optin) || rows == 0 {
        return Ok(None);
    }
    let ctx = dev.cuda_stream().context().clone();
    let sms = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .w()? as usize;
    let groups = rows.div_ceil(8);
    let r = tile_groups(groups, sms);
    let Some(layout) = layout(nb, twin, r, optin) else {
        return Ok(None);
    };
    let name = kernel(r, nb, twin);
    if layout.smem > 48 * 1024 {
        // Set on every such launch: the attribute belongs to the function handle of this
        // context's module (cheap).
        MODULE
            .func(dev, name)?
            .set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                layout.smem as i32,
            )
            .w()?;
    }
    let tiles = groups.div_ceil(r);
    let cfg = LaunchConfig {
        grid_dim: (tiles.min(sms) as u32, 1, 1),
        block_dim: (32 * (layout.decoders + layout.multipliers) as u32, 1, 1),
        shared_mem_bytes: layout.smem as u32,
    };
    Ok(Some(Launch { cfg, name, layout }))
}

/// Whether the team DF11 kernel takes a `[rows, cols]` product of tiled members in whole chunks
/// at `nb` rows of input on `dev` (the setting, the width and the device's shared memory).
pub(crate) fn takes(dev: &CudaDevice, cols: usize, nb: usize) -> candle_core::Result<bool> {
    Ok(covers(cols, nb, smem_per_block_optin(dev)?))
}

/// The DF11 product `x` (`[nb, cols]`) times the `[rows, cols]` matrix `m` transposed, by the
/// team kernel, or `None` where it does not run (the caller takes the streaming or row-order
/// kernel, with the same output). The caller has checked what `PackedTcOp` checks: the matrix is
/// whole tiled members in whole chunks.
pub(crate) fn df11(
    dev: &CudaDevice,
    tiling: &TcTiling,
    m: &PanelMatrix<'_>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    let Some(p) = plan(dev, rows, cols, nb, false)? else {
        return Ok(None);
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = MODULE.func(dev, p.name)?;
    let (nb_, rows_, cols_, base_) = (nb as i32, rows as i32, cols as i32, m.base as i64);
    let steps = tiling.steps as i32;
    let (decoders, slots) = (p.layout.decoders as i32, p.layout.slots as i32);
    let per_tile = p.layout.per_tile as i32;
    let [[t0, t1], [t0b, t1b], [t0c, t1c]] = m.tables;
    let stream = dev.cuda_stream();
    let mut a = RawArgs::new(&stream);
    m.unit.push_packed_raw(&mut a);
    a.scalar(&t0).scalar(&t1).scalar(&t0b).scalar(&t1b);
    a.scalar(&t0c).scalar(&t1c).scalar(&m.g1).scalar(&m.g2);
    a.buffer(m.sign_mantissa).buffer(x).buffer(&out);
    a.scalar(&nb_).scalar(&rows_).scalar(&cols_).scalar(&base_);
    a.scalar(&steps)
        .scalar(&decoders)
        .scalar(&slots)
        .scalar(&per_tile);
    // SAFETY: the streaming kernel's guarantees (whole chunks of a tiled member or of stacked
    // tiled members, validated buffers: the caller's checks); the block is 32 (decoders +
    // multipliers) threads with `per_tile` multipliers (dividing the tile's row groups) per 16
    // rows of x (one m-tile at 8 or fewer), decoders a power-of-two multiple of the tile's row
    // groups, 2 to 7 slots and the dynamic shared memory of `tt_smem_bytes` (`layout`);
    // arguments in TT_PACKED_ARGS order. With PDL it reads only the weights before its
    // griddepcontrol.wait (x, y after).
    unsafe { pdl::launch_maybe(&func, p.cfg, &mut a, pdl::available(dev)?) }?;
    Ok(Some(out))
}

/// The twin's product `x` (`[nb, cols]`) times `w` (`[rows, cols]`, BF16) transposed, by the
/// team kernel, or `None` where it does not run (as [`df11`]).
pub(crate) fn twin(
    dev: &CudaDevice,
    tiling: &TcTiling,
    w: &CudaView<'_, bf16>,
    x: &CudaView<'_, bf16>,
    rows: usize,
    cols: usize,
    nb: usize,
) -> candle_core::Result<Option<CudaSlice<bf16>>> {
    let Some(p) = plan(dev, rows, cols, nb, true)? else {
        return Ok(None);
    };
    // SAFETY: every output is written by the kernel.
    let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
    let func = MODULE.func(dev, p.name)?;
    let (nb_, rows_, cols_, steps) = (nb as i32, rows as i32, cols as i32, tiling.steps as i32);
    let (decoders, slots) = (p.layout.decoders as i32, p.layout.slots as i32);
    let per_tile = p.layout.per_tile as i32;
    let mut b = func.builder();
    push_args!(b; w, x, &out, &nb_, &rows_, &cols_, &steps, &decoders, &slots, &per_tile);
    // SAFETY: w and x are contiguous, 16-byte aligned BF16 views of [rows, cols] and [nb, cols]
    // (`bf16_view`), cols a multiple of 2048 (`covers`); the block and shared memory as in
    // [`df11`] (one decoder a row group, more slots than decoders a row group); arguments in
    // TT_TWIN_ARGS order.
    unsafe { b.launch(p.cfg) }.w()?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_fit_the_block_and_the_barriers() {
        let optin = 227 * 1024;
        for nb in 1..=TEAM_LIMIT_ROWS {
            for twin in [false, true] {
                for r in [2, 4] {
                    let l = layout(nb, twin, r, optin).expect("fits an H100");
                    assert!(l.decoders + l.multipliers <= MAX_WARPS);
                    assert_eq!(l.decoders % r, 0);
                    assert!((l.decoders / r).is_power_of_two());
                    assert_eq!(r % l.per_tile, 0);
                    assert!((2..=MAX_SLOTS).contains(&l.slots));
                    assert!(l.slots > l.decoders / r && l.slots % (l.decoders / r) == 0);
                    let m_tiles = l.multipliers / l.per_tile;
                    assert!(16 * m_tiles >= nb && (nb > 8 || m_tiles == 1));
                    let table = if twin { 0 } else { TABLE_BYTES };
                    assert!(l.smem + table <= optin);
                    assert_eq!(
                        l.smem,
                        l.slots * slot_bytes(r, nb)
                            + if twin {
                                0
                            } else {
                                l.decoders * DECODER_STAGES_BYTES
                            }
                    );
                }
            }
        }
    }

    #[test]
    fn tile_groups_fill_the_last_wave() {
        // A Qwen3-8B layer's products on 132 SMs: q/k/v stacked (768 row groups) takes 2.
        assert_eq!(tile_groups(768, 132), 2);
        assert_eq!(tile_groups(512, 132), 4);
        assert_eq!(tile_groups(3072, 132), 4);
    }
}
