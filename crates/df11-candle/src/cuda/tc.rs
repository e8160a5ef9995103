//! Launch code of the tensor-core fused products (`kernels/df11_tc.cu`): the DF11 kernel over a
//! member in the packed form ([`PackedTcOp`]) and its BF16 twin ([`TwinTcOp`]), 1 to
//! [`TC_LIMIT_ROWS`] rows of input a launch. Both tile a matrix the same way ([`TcTiling`]), which
//! with the kernels' fixed mma order makes their outputs bit-identical. The streaming kernels'
//! launch layout (`kernels/df11_tc_stream.cu`) is in [`stream`].

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, Layout, Shape};
use half::bf16;

use crate::cuda::launch::{
    bf16_view, check_rows, cuda_only_op, launch_config_in, push_args, smem_per_block_optin,
    CudaOp2, CudaOut,
};
use crate::cuda::matmul::{tc_shape, TC_LIMIT_ROWS};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed_kernels::PackedBuffers;
use crate::cuda::pdl::{self, RawArgs};
use crate::cuda::{tc_panel, tc_wg};

mod stream;
pub use stream::set_tc_stream;
pub(crate) use stream::STREAM_TABLE_BYTES;
use stream::{stream_config, stream_module, STREAM};

const MODULE: Module = fatbin_module!("df11_tc");
/// Bytes of the packed kernel's exponent table (4096 words) before the partial sums.
const TABLE_BYTES: usize = 16384;
/// Partial-sum bytes a CTA tile may take.
const MAX_PARTIAL_BYTES: usize = 64 * 1024;

/// How both tensor-core kernels split a `[rows, cols]` product with `nb` rows of input: items of
/// 8 weight rows x one 2048-column chunk x `steps` of its 8 sub-steps (the summation order depends
/// on `steps`), `tile_groups` row groups per CTA tile (it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcTiling {
    pub(crate) steps: usize,
    pub(crate) tile_groups: usize,
    items_per_group: usize,
    m_tiles: usize,
}

impl TcTiling {
    pub(crate) fn new(rows: usize, cols: usize, nb: usize) -> candle_core::Result<Self> {
        if !tc_shape(cols) || rows == 0 || nb == 0 || nb > TC_LIMIT_ROWS {
            candle_core::bail!("df11: tensor-core kernel called with {nb} x [{rows}, {cols}]");
        }
        let m_tiles = match nb {
            0..=16 => 1,
            17..=32 => 2,
            _ => 4,
        };
        // Two sub-steps per item measured fastest at every batch for `df11_tc.cu` (1 to 512
        // rows, docs/PERFORMANCE.md, session 10: 32-64 rows 35% faster than 8); eight (a whole
        // chunk an item) for the streaming kernels at 1 to 16 rows (session 22, H200, tc_probe
        // layer, DF11 ms a Qwen3-8B layer, 8 against 2 or 4 sub-steps: 0.114 / 0.122 at 1 row,
        // 0.135 / 0.145 at 8, 0.186 / 0.193 at 16; the twin 0.111 / 0.111, 0.122 / 0.122,
        // 0.153 / 0.181; sessions 12-21 took 2 at 1-2 rows and 4 at 3-16);
        // more where a row group's partial sums would pass the budget (very wide rows). Depends
        // on (cols, nb) and the settings only, never on the weight format.
        let chunks = cols.div_ceil(2048);
        let first = if streams_whole_chunk_items(cols, nb) {
            8
        } else {
            2
        };
        let steps = steps_override().unwrap_or_else(|| {
            [2, 4, 8]
                .into_iter()
                .filter(|&s| s >= first)
                .find(|&s| chunks * (8 / s) * nb * 32 <= MAX_PARTIAL_BYTES)
                .unwrap_or(8)
        });
        let items_per_group = chunks * (8 / steps);
        // Enough items per tile for the 8 warps, within the partial-sum budget.
        let per_group = items_per_group * nb * 32;
        let tile_groups = tile_groups_override()
            .unwrap_or_else(|| 8usize.div_ceil(items_per_group))
            .min((MAX_PARTIAL_BYTES / per_group).max(1))
            .min(rows.div_ceil(8));
        Ok(Self {
            steps,
            tile_groups,
            items_per_group,
            m_tiles,
        })
    }

    /// Items of a row group: its chunks times the items of a chunk.
    pub(crate) fn items_per_group(&self) -> usize {
        self.items_per_group
    }

    fn tiles(&self, rows: usize) -> usize {
        rows.div_ceil(8).div_ceil(self.tile_groups)
    }

    fn partial_bytes(&self, nb: usize) -> usize {
        self.tile_groups * self.items_per_group * nb * 32
    }

    fn kernel(&self, twin: bool) -> &'static str {
        match (twin, self.m_tiles) {
            (false, 1) => "df11_tc_packed_1",
            (false, 2) => "df11_tc_packed_2",
            (false, _) => "df11_tc_packed_4",
            (true, 1) => "bf16_tc_1",
            (true, 2) => "bf16_tc_2",
            (true, _) => "bf16_tc_4",
        }
    }

    /// `TC_MIN_CTAS(MT)` of kernels/df11_tc.cu: the CTAs per SM the kernel is compiled for.
    fn ctas_per_sm(&self) -> u32 {
        if self.m_tiles == 1 {
            3
        } else {
            2
        }
    }
}

/// Whether a product over `cols` columns with `nb` rows of input takes eight sub-steps per item
/// (a whole chunk): 1 to 16 rows on widths whose members are tiled in whole chunks (the products
/// the streaming kernels take, in DF11 and BF16 alike). Not whether streaming is on:
/// `DF11_TC_STREAM` changes speed, never a bit, so `df11_tc.cu` sums such products in eight
/// sub-steps too.
fn streams_whole_chunk_items(cols: usize, nb: usize) -> bool {
    (1..=16).contains(&nb) && crate::cuda::tile_order::tiles_whole_chunks(cols)
}

/// `DF11_TC_STEPS` (1, 2, 4 or 8): sub-steps per item, for measurements. It changes the summation
/// order of both kernels alike.
fn steps_override() -> Option<usize> {
    static STEPS: OnceLock<Option<usize>> = OnceLock::new();
    *STEPS.get_or_init(|| {
        std::env::var("DF11_TC_STEPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|s: &usize| [1, 2, 4, 8].contains(s))
    })
}

/// `DF11_TC_TILE_GROUPS` (1 to 32): row groups per CTA tile, for measurements (within the
/// partial-sum budget); it changes no bit of output.
fn tile_groups_override() -> Option<usize> {
    static GROUPS: OnceLock<Option<usize>> = OnceLock::new();
    *GROUPS.get_or_init(|| {
        std::env::var("DF11_TC_TILE_GROUPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|v: &usize| (1..=32).contains(v))
    })
}

/// Launches `tiling`'s kernel (`twin` or packed) with `args` pushed after nothing: the caller
/// pushes every argument in the kernel's order.
fn config(
    dev: &CudaDevice,
    tiling: &TcTiling,
    twin: bool,
    rows: usize,
    nb: usize,
) -> candle_core::Result<(
    candle_core::cuda_backend::cudarc::driver::LaunchConfig,
    usize,
)> {
    let smem = if twin { 0 } else { TABLE_BYTES } + tiling.partial_bytes(nb);
    let name = tiling.kernel(twin);
    let cfg = launch_config_in(
        dev,
        &MODULE,
        name,
        smem,
        tiling.tiles(rows),
        tiling.ctas_per_sm(),
    )?;
    Ok((cfg, smem))
}

/// The tensor-core DF11 product over packed exponents: arguments `sign_mantissa` (the whole unit)
/// and `x` `[nb, cols]`; result `[nb, rows]` = x · Wᵀ for the member matrix at unit element `base`
/// (a multiple of 256, inside one member in row order, or a whole member in the tile order,
/// `crate::cuda::tile_order`).
pub(crate) struct PackedTcOp<'a> {
    pub(crate) unit: &'a PackedBuffers,
    pub(crate) base: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

/// What [`PackedTcOp`] multiplies: a part of one member in row order or a whole tiled member
/// (`tiled`), or two or three stacked tiled members (the streaming kernel only).
enum TcMatrix {
    Member { table: [u32; 2], tiled: bool },
    Stacked(Vec<([u32; 2], usize)>),
}

impl PackedTcOp<'_> {
    fn matrix(&self) -> Option<TcMatrix> {
        let (u, base, rows, cols) = (self.unit, self.base, self.rows, self.cols);
        if !tc_shape(cols) || !base.is_multiple_of(256) {
            return None;
        }
        if let (Some(table), Some(tiled)) = (
            u.table_of(&(base..base + rows * cols)),
            u.matrix_order(base, rows, cols),
        ) {
            return Some(TcMatrix::Member { table, tiled });
        }
        u.stacked_members(base, rows, cols).map(TcMatrix::Stacked)
    }

    /// Whether every sub-step of the (tiled) matrix is a whole chunk of the packed form.
    fn whole_chunks(&self) -> bool {
        self.cols.is_multiple_of(2048) && self.base.is_multiple_of(2048)
    }

    /// Whether the streaming or panel kernel may take a tiled matrix (one member or stacked) at
    /// `nb` rows of input on `dev`.
    fn streams(&self, nb: usize, dev: &CudaDevice) -> candle_core::Result<bool> {
        if !self.whole_chunks() {
            return Ok(false);
        }
        if tc_wg::takes(dev, self.cols, nb)? || tc_panel::takes(dev, self.rows, nb, false)? {
            return Ok(true);
        }
        if !STREAM.get() {
            return Ok(false);
        }
        let tiling = TcTiling::new(self.rows, self.cols, nb)?;
        Ok(tiling
            .stream_plan(nb, false, smem_per_block_optin(dev)?)
            .is_some())
    }

    /// Whether the op takes the matrix `[rows, cols]` at `base` of `unit` at `nb` rows of input
    /// on `dev`: a part of one member, or stacked members where the streaming kernel runs.
    pub(crate) fn takes(&self, nb: usize, dev: &CudaDevice) -> candle_core::Result<bool> {
        Ok(match self.matrix() {
            Some(TcMatrix::Member { .. }) => true,
            Some(TcMatrix::Stacked(_)) => self.streams(nb, dev)?,
            None => false,
        })
    }
}

cuda_only_op!(CustomOp2 for PackedTcOp<'_>);

impl CudaOp2 for PackedTcOp<'_> {
    const NAME: &'static str = "df11-packed-tc";
    const WHAT: &'static str = "df11: the tensor-core kernel";

    fn cuda(&self, sm: &CudaStorage, sm_l: &Layout, x: &CudaStorage, x_l: &Layout) -> CudaOut {
        let dev = sm.device().clone();
        let u = self.unit;
        let (rows, cols, base) = (self.rows, self.cols, self.base);
        if sm_l.start_offset() != 0
            || !sm_l.is_contiguous()
            || sm_l.shape().elem_count() != u.n_elements()
        {
            candle_core::bail!("df11: sign_mantissa must be the unit's whole contiguous buffer");
        }
        let nb = check_rows(x_l, cols, TC_LIMIT_ROWS)?;
        let Some(matrix) = self.matrix() else {
            candle_core::bail!(
                "df11: the [{rows}, {cols}] matrix at element {base} is not a part of one member in row order, a whole tiled member or stacked tiled members"
            );
        };
        // The members' tables and the row groups where the second and third begin (the
        // streaming kernel's TsTables).
        let (tables, g1, g2, tiled) = match &matrix {
            TcMatrix::Member { table, tiled } => ([*table; 3], i32::MAX, i32::MAX, *tiled),
            TcMatrix::Stacked(members) => {
                let mut tables = [members[0].0; 3];
                let mut bounds = [i32::MAX; 2];
                let mut groups = 0;
                for (i, (table, member_rows)) in members.iter().enumerate() {
                    tables[i] = *table;
                    if i > 0 {
                        bounds[i - 1] = groups as i32;
                    }
                    groups += member_rows / 8;
                }
                (tables, bounds[0], bounds[1], true)
            }
        };
        let tiling = TcTiling::new(rows, cols, nb)?;
        let xv = bf16_view(x, x_l, "x")?;
        let sm = sm.as_cuda_slice::<u8>()?;
        // Tiled members whose sub-steps are whole packed chunks: the panel kernel where
        // `DF11_TC_PANEL` is on, else the streaming kernel (the same output).
        if tiled && self.whole_chunks() {
            let matrix = tc_panel::PanelMatrix {
                unit: u,
                sign_mantissa: sm,
                tables,
                g1,
                g2,
                base,
            };
            if let Some(out) = tc_wg::df11(&dev, &tiling, &matrix, &xv, rows, cols, nb)? {
                return Ok((
                    CudaStorage::wrap_cuda_slice(out, dev),
                    Shape::from((nb, rows)),
                ));
            }
            if let Some(out) = tc_panel::df11(&dev, &tiling, &matrix, &xv, rows, cols, nb)? {
                return Ok((
                    CudaStorage::wrap_cuda_slice(out, dev),
                    Shape::from((nb, rows)),
                ));
            }
        }
        // Tiled members whose sub-steps are whole packed chunks stream them (the same output).
        let streamed = if tiled && self.streams(nb, &dev)? {
            stream_config(&dev, &tiling, false, rows, nb)?
        } else {
            None
        };
        if streamed.is_none() && matches!(matrix, TcMatrix::Stacked(_)) {
            candle_core::bail!("df11: stacked members need the streaming tensor-core kernel");
        }
        let plan = streamed.map(|(_, _, plan)| plan);
        let (cfg, name, module) = match streamed {
            Some((cfg, name, _)) => (cfg, name, stream_module()?.0),
            None => {
                let (cfg, _) = config(&dev, &tiling, false, rows, nb)?;
                (cfg, tiling.kernel(false), MODULE)
            }
        };
        let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
        let func = module.func(&dev, name)?;
        let (nb_, rows_, cols_, base_) = (nb as i32, rows as i32, cols as i32, base as i64);
        let (groups, steps) = (tiling.tile_groups as i32, tiling.steps as i32);
        let tiled_ = tiled as i32;
        let [[t0, t1], [t0b, t1b], [t0c, t1c]] = tables;
        let nslots = plan.map_or(0, |p| p.nslots);
        if plan.is_some() && pdl::available(&dev)? {
            let stream = dev.cuda_stream();
            let mut a = RawArgs::new(&stream);
            u.push_packed_raw(&mut a);
            a.scalar(&t0)
                .scalar(&t1)
                .scalar(&t0b)
                .scalar(&t1b)
                .scalar(&t0c)
                .scalar(&t1c);
            a.scalar(&g1)
                .scalar(&g2)
                .buffer(sm)
                .buffer(&xv)
                .buffer(&out);
            a.scalar(&nb_).scalar(&rows_).scalar(&cols_).scalar(&base_);
            a.scalar(&groups).scalar(&steps).scalar(&nslots);
            // SAFETY: the streaming kernel's arguments in its order (TS_PACKED_ARGS), the same
            // as the other branch's (whose SAFETY note holds here); the kernel reads only the
            // weights before its griddepcontrol.wait.
            unsafe { pdl::launch(&func, cfg, &mut a) }?;
        } else {
            let mut b = func.builder();
            u.push_packed(&mut b);
            push_args!(b; &t0, &t1);
            if plan.is_some() {
                push_args!(b; &t0b, &t1b, &t0c, &t1c, &g1, &g2);
            }
            push_args!(b; sm);
            push_args!(b; &xv, &out, &nb_, &rows_, &cols_, &base_, &groups, &steps);
            if plan.is_some() {
                push_args!(b; &nslots);
            } else {
                push_args!(b; &tiled_);
            }
            // SAFETY: the matrix lies inside one member of the unit (table_of), in row order or the
            // whole member in the tile order (matrix_order: rows % 8 == 0 there), or is whole
            // consecutive tiled members (stacked_members, streaming only); base and cols are
            // multiples of 256, x holds nb rows of cols; the packed buffers cover the unit and
            // escape reads are clamped in the kernel. Streaming: every sub-step is a whole chunk of
            // the unit (tiled, base and cols multiples of 2048), whose codes, sign_mantissa, lane
            // starts and escapes (from the validated chunk_escapes, copies clamped to the buffer)
            // lie in the buffers; each buffer is a whole allocation (CudaSlice), so its 16-byte
            // copies are aligned.
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}

/// The BF16 twin of [`PackedTcOp`]: arguments `w` `[rows, cols]` (BF16) and `x` `[nb, cols]`.
pub(crate) struct TwinTcOp;

cuda_only_op!(CustomOp2 for TwinTcOp);

impl CudaOp2 for TwinTcOp {
    const NAME: &'static str = "bf16-twin-tc";
    const WHAT: &'static str = "df11: the tensor-core twin kernel";

    fn cuda(&self, w: &CudaStorage, w_l: &Layout, x: &CudaStorage, x_l: &Layout) -> CudaOut {
        let dev = w.device().clone();
        let (rows, cols) = w_l.shape().dims2()?;
        let nb = check_rows(x_l, cols, TC_LIMIT_ROWS)?;
        let tiling = TcTiling::new(rows, cols, nb)?;
        let wv = bf16_view(w, w_l, "the weight")?;
        let xv = bf16_view(x, x_l, "x")?;
        if let Some(out) = tc_wg::twin(&dev, &tiling, &wv, &xv, rows, cols, nb)? {
            return Ok((
                CudaStorage::wrap_cuda_slice(out, dev),
                Shape::from((nb, rows)),
            ));
        }
        if let Some(out) = tc_panel::twin(&dev, &tiling, &wv, &xv, rows, cols, nb)? {
            return Ok((
                CudaStorage::wrap_cuda_slice(out, dev),
                Shape::from((nb, rows)),
            ));
        }
        let streamed = if STREAM.get() {
            stream_config(&dev, &tiling, true, rows, nb)?
        } else {
            None
        };
        let plan = streamed.map(|(_, _, plan)| plan);
        let (cfg, name, module) = match streamed {
            Some((cfg, name, _)) => (cfg, name, stream_module()?.0),
            None => {
                let (cfg, _) = config(&dev, &tiling, true, rows, nb)?;
                (cfg, tiling.kernel(true), MODULE)
            }
        };
        let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
        let func = module.func(&dev, name)?;
        let (nb_, rows_, cols_) = (nb as i32, rows as i32, cols as i32);
        let (groups, steps) = (tiling.tile_groups as i32, tiling.steps as i32);
        // Not a programmatic dependent launch (cuda/pdl.rs): its weights may come from the
        // kernel just before it (a member decoded for the twin, `Df11Group`), and with settled
        // weights (a BF16 model's) PDL measured no gain for the twin (docs/PERFORMANCE.md,
        // session 15). The streaming kernel still triggers the kernel after it early.
        let nslots = plan.map_or(0, |p| p.nslots);
        let mut b = func.builder();
        push_args!(b; &wv, &xv, &out, &nb_, &rows_, &cols_, &groups, &steps);
        if plan.is_some() {
            push_args!(b; &nslots);
        }
        // SAFETY: w and x are contiguous, 16-byte aligned BF16 views of [rows, cols] and
        // [nb, cols], cols a multiple of 256 (both kernels take the same arguments).
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_fits_the_budget_and_covers_the_rows() {
        for (rows, cols) in [
            (8, 256),
            (1024, 4096),
            (12288, 4096),
            (4096, 12288),
            (5, 5120),
            (64, 28672),
        ] {
            for nb in [1, 7, 16, 17, 33, 64] {
                let t = TcTiling::new(rows, cols, nb).unwrap();
                assert!(t.partial_bytes(nb) <= MAX_PARTIAL_BYTES.max(t.items_per_group * nb * 32));
                assert!(t.tiles(rows) * t.tile_groups * 8 >= rows);
                assert_eq!(8 % t.steps, 0);
                // Two sub-steps per item wherever the partial sums fit (eight for the streaming
                // kernels' 1 to 16 rows on tiled widths).
                let first = if streams_whole_chunk_items(cols, nb) {
                    8
                } else {
                    2
                };
                if cols.div_ceil(2048) * (8 / first) * nb * 32 <= MAX_PARTIAL_BYTES {
                    assert_eq!(t.steps, first, "[{rows}, {cols}] x {nb}");
                }
            }
        }
        assert!(TcTiling::new(8, 264, 1).is_err());
    }
}
