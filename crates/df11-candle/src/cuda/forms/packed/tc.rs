//! Launch code of the tensor-core fused products (`kernels/df11_tc.cu`): the DF11 kernel over a
//! member in the packed form ([`PackedTcOp`]) and its BF16 twin ([`TwinTcOp`]), 1 to
//! [`TC_LIMIT_ROWS`] rows of input a launch. Both tile a matrix the same way ([`TcTiling`]), which
//! with the kernels' fixed mma order makes their outputs bit-identical. The streaming kernels'
//! launch layout (`kernels/df11_tc_stream.cu`) is in [`stream`].

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, Layout, Shape};
use half::bf16;

use crate::cuda::launch::{
    bf16_view, check_rows, cuda_only_op, launch_config_in, push_args, smem_per_block_optin,
    CudaOp2, CudaOut,
};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::kernels::PackedBuffers;
#[cfg(feature = "experimental-kernels")]
use crate::cuda::packed::{tc_panel, tc_wg, ws};
use crate::cuda::pdl::{self, RawArgs};

mod stream;
pub(crate) mod tiling;
use crate::cuda::limits::{tc_shape, TC_LIMIT_ROWS};
use crate::options::Df11Options;
use stream::{stream_config, stream_module};
pub(crate) use tiling::TcTiling;

const MODULE: Module = fatbin_module!("df11_tc");
/// Bytes of the packed kernel's exponent table (4096 words) before the partial sums.
const TABLE_BYTES: usize = 16384;
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
/// `crate::cuda::packed::tile_order`).
pub(crate) struct PackedTcOp<'a> {
    pub(crate) unit: &'a PackedBuffers,
    pub(crate) base: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// The weight's options (tiling, streaming, PDL, the panel and warpgroup kernels).
    pub(crate) options: Df11Options,
}

/// What [`PackedTcOp`] multiplies: a part of one member in row order or a whole tiled member
/// (`tiled`), or two or three stacked tiled members (the streaming kernel only).
enum TcMatrix {
    Member { table: [u32; 2], tiled: bool },
    Stacked(Vec<([u32; 2], usize)>),
}

/// The row groups (of 8 rows) where the second and third of stacked members begin (`i32::MAX`:
/// none): the streaming kernel's `g1`, `g2`.
fn stacked_bounds(members: &[([u32; 2], usize)]) -> (i32, i32) {
    let mut bounds = [i32::MAX; 2];
    let mut groups = 0;
    for (i, (_, member_rows)) in members.iter().enumerate() {
        if i > 0 {
            bounds[i - 1] = groups as i32;
        }
        groups += member_rows / 8;
    }
    (bounds[0], bounds[1])
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

    /// Whether the warp-specialized DF11 kernel reads the matrix: whole tiled members in whole
    /// chunks whose tables change on its tiles' boundaries.
    #[cfg(feature = "experimental-kernels")]
    fn ws_fits(&self) -> bool {
        self.whole_chunks()
            && match self.matrix() {
                Some(TcMatrix::Member { tiled, .. }) => tiled,
                Some(TcMatrix::Stacked(members)) => {
                    let (g1, g2) = stacked_bounds(&members);
                    ws::fits(g1, g2)
                }
                None => false,
            }
    }

    /// Whether the streaming or panel kernel may take a tiled matrix (one member or stacked) at
    /// `nb` rows of input on `dev`.
    fn streams(&self, nb: usize, dev: &CudaDevice) -> candle_core::Result<bool> {
        if !self.whole_chunks() {
            return Ok(false);
        }
        let o = &self.options;
        #[cfg(feature = "experimental-kernels")]
        if tc_wg::takes(dev, self.cols, nb, o)? || tc_panel::takes(dev, self.rows, nb, false, o)? {
            return Ok(true);
        }
        if !o.streaming {
            return Ok(false);
        }
        let tiling = TcTiling::new(self.rows, self.cols, nb, o.tiles)?;
        Ok(tiling
            .stream_plan(nb, false, smem_per_block_optin(dev)?)
            .is_some())
    }

    /// Whether the op takes the matrix `[rows, cols]` at `base` of `unit` at `nb` rows of input
    /// on `dev`: a part of one member, or stacked members where the streaming kernel runs.
    pub(crate) fn takes(&self, nb: usize, dev: &CudaDevice) -> candle_core::Result<bool> {
        // Where the plan takes the warp-specialized kernels (for both formats), a matrix their
        // DF11 kernel cannot read is decoded for the twin's: the same bits as a BF16 model's.
        #[cfg(feature = "experimental-kernels")]
        if ws::takes(dev, self.cols, nb, &self.options)? {
            return Ok(self.ws_fits());
        }
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
                for (i, (table, _)) in members.iter().enumerate() {
                    tables[i] = *table;
                }
                let (g1, g2) = stacked_bounds(members);
                (tables, g1, g2, true)
            }
        };
        let o = &self.options;
        let tiling = TcTiling::new(rows, cols, nb, o.tiles)?;
        let xv = bf16_view(x, x_l, "x")?;
        let sm = sm.as_cuda_slice::<u8>()?;
        // Tiled members whose sub-steps are whole packed chunks: the warp-specialized kernels where
        // the plan takes them (for both formats: `takes` sent a matrix they cannot read to the
        // twin), else the warpgroup or panel kernel where the options turn them on, else the
        // streaming kernel (the same output as those two).
        #[cfg(feature = "experimental-kernels")]
        {
            let warp_specialized = ws::takes(&dev, cols, nb, o)?;
            let whole = tiled && self.whole_chunks();
            if warp_specialized && !(whole && ws::fits(g1, g2)) {
                candle_core::bail!(
                    "df11: the warp-specialized kernel cannot read the [{rows}, {cols}] matrix at element {base}"
                );
            }
            if whole {
                let matrix = tc_panel::PanelMatrix {
                    unit: u,
                    sign_mantissa: sm,
                    tables,
                    g1,
                    g2,
                    base,
                };
                let out = if warp_specialized {
                    ws::df11(&dev, &matrix, &xv, rows, cols, nb, o)?
                } else {
                    None
                };
                let out = match out {
                    Some(out) => Some(out),
                    None => tc_wg::df11(&dev, &tiling, &matrix, &xv, rows, cols, nb, o)?,
                };
                let out = match out {
                    Some(out) => Some(out),
                    None => tc_panel::df11(&dev, &tiling, &matrix, &xv, rows, cols, nb, o)?,
                };
                if let Some(out) = out {
                    return Ok((
                        CudaStorage::wrap_cuda_slice(out, dev),
                        Shape::from((nb, rows)),
                    ));
                }
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
            Some((cfg, name, _)) => (cfg, name, stream_module().0),
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
        if plan.is_some() && pdl::available(&dev, o.pdl)? {
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

/// The BF16 twin of [`PackedTcOp`]: arguments `w` `[rows, cols]` (BF16) and `x` `[nb, cols]`;
/// the weight's options.
pub(crate) struct TwinTcOp(pub(crate) Df11Options);

cuda_only_op!(CustomOp2 for TwinTcOp);

impl CudaOp2 for TwinTcOp {
    const NAME: &'static str = "bf16-twin-tc";
    const WHAT: &'static str = "df11: the tensor-core twin kernel";

    fn cuda(&self, w: &CudaStorage, w_l: &Layout, x: &CudaStorage, x_l: &Layout) -> CudaOut {
        let dev = w.device().clone();
        let (rows, cols) = w_l.shape().dims2()?;
        let nb = check_rows(x_l, cols, TC_LIMIT_ROWS)?;
        let o = &self.0;
        let tiling = TcTiling::new(rows, cols, nb, o.tiles)?;
        let wv = bf16_view(w, w_l, "the weight")?;
        let xv = bf16_view(x, x_l, "x")?;
        // The warp-specialized kernels where the plan takes them (as for DF11), else the warpgroup
        // or panel kernel where the options turn them on.
        #[cfg(feature = "experimental-kernels")]
        {
            let out = ws::twin(&dev, &wv, &xv, rows, cols, nb, o)?;
            let out = match out {
                Some(out) => Some(out),
                None => tc_wg::twin(&dev, &tiling, &wv, &xv, rows, cols, nb, o)?,
            };
            let out = match out {
                Some(out) => Some(out),
                None => tc_panel::twin(&dev, &tiling, &wv, &xv, rows, cols, nb, o)?,
            };
            if let Some(out) = out {
                return Ok((
                    CudaStorage::wrap_cuda_slice(out, dev),
                    Shape::from((nb, rows)),
                ));
            }
        }
        let streamed = if o.streaming {
            stream_config(&dev, &tiling, true, rows, nb)?
        } else {
            None
        };
        let plan = streamed.map(|(_, _, plan)| plan);
        let (cfg, name, module) = match streamed {
            Some((cfg, name, _)) => (cfg, name, stream_module().0),
            None => {
                let (cfg, _) = config(&dev, &tiling, true, rows, nb)?;
                (cfg, tiling.kernel(true), MODULE)
            }
        };
        let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
        let func = module.func(&dev, name)?;
        let (nb_, rows_, cols_) = (nb as i32, rows as i32, cols as i32);
        let (groups, steps) = (tiling.tile_groups as i32, tiling.steps as i32);
        // Not a programmatic dependent launch (cuda/runtime/pdl.rs): its weights may come from the
        // kernel just before it (a member decoded for the twin, `Df11Group`), and with settled
        // weights (a BF16 model's) PDL measured no gain for the twin (docs/PERFORMANCE.md). The
        // streaming kernel still triggers the kernel after it early.
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
