//! CUDA kernels over a unit kept as [`PackedExponents`]: the fused decode + matrix-vector
//! product (`df11_gemv_packed_*` in `kernels/df11_fused.cu`, same summation order as the BF16
//! twin) and the decode to BF16 (`kernels/df11_packed.cu`).

use std::ops::Range;

use candle_core::backend::BackendStorage;
use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{
    CudaContext, CudaSlice, LaunchArgs, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, Layout, Shape};
use half::bf16;

use crate::cuda::launch::{
    bf16_view, check_gemv_call, cuda_only_op, launch_config_in, launch_config_with, maxb_for,
    push_args, CudaOp2, CudaOut, Tiling, CHUNK_WIDTH, MODULE,
};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::tile_order::{self, TileOrder};
use crate::cuda::packed::PackedExponents;
use crate::cuda::pdl::RawArgs;
use crate::cuda::upload::{HostArray, Uploader};

mod rows;
pub(crate) use rows::{decode_packed_rows, ROWS_A_LAUNCH};

const DECODE_MODULE: Module = fatbin_module!("df11_packed");
/// CTAs an SM a decode grid holds at most: 4 (`df11_decode_packed_tiled` is compiled for 4), and
/// 3 for `df11_decode_packed_pieces` (`DP_PIECES_CTAS`: two blocks' inputs in registers).
const DECODE_CTAS: u32 = 4;
const DECODE_PIECES_CTAS: u32 = 3;

/// A unit's packed exponents on the device.
pub(crate) struct PackedBuffers {
    codes: CudaSlice<u32>,
    chunk_escapes: CudaSlice<u32>,
    lane_starts: CudaSlice<u8>,
    n_chunks: u32,
    escapes: CudaSlice<u8>,
    /// Bytes of the escape buffer (the list padded with zeros to whole words, plus 16).
    n_escapes: u32,
    /// Per member, codes 0-3 and 4-7 as little-endian words.
    tables: CudaSlice<u32>,
    host_tables: Vec<[u32; 2]>,
    member_ends: CudaSlice<i64>,
    /// Per member, the columns of a member stored in the tile order, else 0.
    member_cols: CudaSlice<i32>,
    members: Vec<Range<usize>>,
    orders: Vec<Option<TileOrder>>,
    n_elements: usize,
    bytes: usize,
}

/// The decode kernel's per-member column counts: a tiled member's columns, else 0.
pub(crate) fn member_cols(orders: &[Option<TileOrder>]) -> Vec<i32> {
    orders
        .iter()
        .map(|o| o.map_or(0, |o| o.cols as i32))
        .collect()
}

/// A member's table as the kernels take it: codes 0-3 and 4-7 as little-endian words.
fn table_words(t: &[u8; 8]) -> [u32; 2] {
    [
        u32::from_le_bytes([t[0], t[1], t[2], t[3]]),
        u32::from_le_bytes([t[4], t[5], t[6], t[7]]),
    ]
}

/// What [`PackedBuffers`] uploads, laid out as the kernels read it, on the host.
pub(crate) struct PackedHost {
    codes: HostArray<u32>,
    chunk_escapes: HostArray<u32>,
    lane_starts: HostArray<u8>,
    /// The escape list padded with zeros to whole words, plus 16 bytes: the kernels read a
    /// lane's escapes as three aligned words from where they start.
    escapes: HostArray<u8>,
    /// Per member, codes 0-3 and 4-7 as little-endian words.
    tables: HostArray<u32>,
    host_tables: Vec<[u32; 2]>,
    member_ends: HostArray<i64>,
    member_cols: HostArray<i32>,
    members: Vec<Range<usize>>,
    orders: Vec<Option<TileOrder>>,
    n_elements: usize,
    bytes: usize,
}

impl PackedHost {
    /// The form of `p`, built over a unit whose members are in `orders` (one per member).
    pub(crate) fn new(p: PackedExponents, orders: Vec<Option<TileOrder>>) -> Self {
        let bytes = p.device_bytes();
        let mut escapes = p.escapes;
        let padded = escapes.len().div_ceil(4) * 4 + 16;
        escapes.resize(padded, 0);
        Self::from_parts(
            p.codes.into(),
            p.chunk_escapes.into(),
            p.lane_starts.into(),
            escapes.into(),
            &p.tables,
            p.members,
            orders,
            bytes,
        )
    }

    /// The form from arrays already on the host (the GPU build copied back): `escapes` padded
    /// as [`PackedHost::new`] pads it, `bytes` the form's size as
    /// [`PackedExponents::device_bytes`] counts it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        codes: HostArray<u32>,
        chunk_escapes: HostArray<u32>,
        lane_starts: HostArray<u8>,
        escapes: HostArray<u8>,
        tables: &[[u8; 8]],
        members: Vec<Range<usize>>,
        orders: Vec<Option<TileOrder>>,
        bytes: usize,
    ) -> Self {
        debug_assert_eq!(orders.len(), members.len());
        let host_tables: Vec<[u32; 2]> = tables.iter().map(table_words).collect();
        let flat: Vec<u32> = host_tables.iter().flatten().copied().collect();
        let ends: Vec<i64> = members.iter().map(|m| m.end as i64).collect();
        Self {
            codes,
            chunk_escapes,
            lane_starts,
            escapes,
            tables: flat.into(),
            host_tables,
            member_ends: ends.into(),
            member_cols: member_cols(&orders).into(),
            n_elements: members.last().map_or(0, |m| m.end),
            members,
            orders,
            bytes,
        }
    }

    /// Moves the arrays into pinned memory (for staging).
    pub(crate) fn pin(&mut self, ctx: &Arc<CudaContext>) -> candle_core::Result<()> {
        self.codes.pin(ctx)?;
        self.chunk_escapes.pin(ctx)?;
        self.lane_starts.pin(ctx)?;
        self.escapes.pin(ctx)?;
        self.tables.pin(ctx)?;
        self.member_ends.pin(ctx)?;
        self.member_cols.pin(ctx)
    }

    /// Host bytes of the arrays.
    pub(crate) fn host_bytes(&self) -> usize {
        self.codes.bytes()
            + self.chunk_escapes.bytes()
            + self.lane_starts.bytes()
            + self.escapes.bytes()
            + self.tables.bytes()
            + self.member_ends.bytes()
            + self.member_cols.bytes()
    }
}

impl PackedBuffers {
    /// The form from arrays already on the device (the GPU build, `crate::cuda::packed::gpu_pack`):
    /// `escapes` padded as [`PackedHost`] pads it, `bytes` the form's size as
    /// [`PackedExponents::device_bytes`] counts it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_device(
        device: &candle_core::cuda_backend::CudaDevice,
        codes: CudaSlice<u32>,
        chunk_escapes: CudaSlice<u32>,
        lane_starts: CudaSlice<u8>,
        escapes: CudaSlice<u8>,
        tables: &[[u8; 8]],
        members: Vec<Range<usize>>,
        orders: Vec<Option<TileOrder>>,
        bytes: usize,
    ) -> candle_core::Result<Self> {
        let host_tables: Vec<[u32; 2]> = tables.iter().map(table_words).collect();
        let flat: Vec<u32> = host_tables.iter().flatten().copied().collect();
        let ends: Vec<i64> = members.iter().map(|m| m.end as i64).collect();
        Ok(Self {
            n_chunks: (chunk_escapes.len() - 1) as u32,
            n_escapes: escapes.len() as u32,
            codes,
            chunk_escapes,
            lane_starts,
            escapes,
            tables: device.clone_htod(&flat)?,
            host_tables,
            member_ends: device.clone_htod(&ends)?,
            member_cols: device.clone_htod(&member_cols(&orders))?,
            n_elements: members.last().map_or(0, |m| m.end),
            members,
            orders,
            bytes,
        })
    }

    /// Uploads `p` through `up`.
    pub(crate) fn upload(up: &Uploader<'_>, p: &PackedHost) -> candle_core::Result<Self> {
        Ok(Self {
            codes: up.put(&p.codes)?,
            chunk_escapes: up.put(&p.chunk_escapes)?,
            lane_starts: up.put(&p.lane_starts)?,
            n_chunks: (p.chunk_escapes.len() - 1) as u32,
            n_escapes: p.escapes.len() as u32,
            escapes: up.put(&p.escapes)?,
            tables: up.put(&p.tables)?,
            host_tables: p.host_tables.clone(),
            member_ends: up.put(&p.member_ends)?,
            member_cols: up.put(&p.member_cols)?,
            members: p.members.clone(),
            orders: p.orders.clone(),
            n_elements: p.n_elements,
            bytes: p.bytes,
        })
    }

    /// Bytes of the packed form on the device.
    pub(crate) fn device_bytes(&self) -> usize {
        self.bytes
    }

    /// The member holding all of `elements`, if one does.
    fn member_of(&self, elements: &Range<usize>) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.start <= elements.start && elements.end <= m.end)
    }

    /// The code table (codes 0-3, 4-7 as little-endian words) of the member holding all of
    /// `elements`, if one does.
    pub(crate) fn table_of(&self, elements: &Range<usize>) -> Option<[u32; 2]> {
        self.member_of(elements).map(|m| self.host_tables[m])
    }

    /// How the `[rows, cols]` matrix at unit element `base` is stored, if one member holds it:
    /// `Some(true)` when it is a whole member in the tile order, `Some(false)` in row order (a
    /// part of a tiled member is neither: `None`).
    pub(crate) fn matrix_order(&self, base: usize, rows: usize, cols: usize) -> Option<bool> {
        let range = base..base.checked_add(rows.checked_mul(cols)?)?;
        let m = self.member_of(&range)?;
        match self.orders[m] {
            None => Some(false),
            Some(o) => {
                (self.members[m] == range && o.rows == rows && o.cols == cols).then_some(true)
            }
        }
    }

    /// The members stacked as the `[rows, cols]` matrix at unit element `base`, if it is two or
    /// three consecutive whole members, each in the tile order with `cols` columns: each one's
    /// code table and rows, in order (the streaming tensor-core kernel multiplies them in one
    /// launch).
    pub(crate) fn stacked_members(
        &self,
        base: usize,
        rows: usize,
        cols: usize,
    ) -> Option<Vec<([u32; 2], usize)>> {
        let end = base.checked_add(rows.checked_mul(cols)?)?;
        let first = self.members.iter().position(|m| m.start == base)?;
        let mut out = Vec::new();
        let mut at = base;
        for m in first..self.members.len() {
            if at == end || out.len() == 3 {
                break;
            }
            let o = self.orders[m]?;
            if o.cols != cols || self.members[m].start != at || self.members[m].end > end {
                return None;
            }
            out.push((self.host_tables[m], o.rows));
            at = self.members[m].end;
        }
        (at == end && out.len() >= 2).then_some(out)
    }

    /// Whether a member is stored in the tile order (the plain decode kernels then do not apply).
    pub(crate) fn has_tiled_member(&self) -> bool {
        self.orders.iter().any(Option::is_some)
    }

    /// Member `member`'s tile order, if it is stored so.
    pub(crate) fn tile_order(&self, member: usize) -> Option<TileOrder> {
        self.orders.get(member).copied().flatten()
    }

    /// The storage elements holding row-major unit elements `elements`: the same range, widened
    /// in a tiled member to whole groups of 8 rows.
    fn storage_of(&self, elements: &Range<usize>) -> Range<usize> {
        if elements.is_empty() {
            return elements.clone();
        }
        // The tiled member holding element j: its start and the elements of 8 of its rows.
        let group_of = |j: usize| {
            let m = self.members.iter().position(|m| m.contains(&j))?;
            let o = self.orders[m]?;
            Some((self.members[m].start, 8 * o.cols))
        };
        let start = match group_of(elements.start) {
            Some((s, g)) => s + (elements.start - s) / g * g,
            None => elements.start,
        };
        let end = match group_of(elements.end - 1) {
            Some((s, g)) => s + (elements.end - s).div_ceil(g) * g,
            None => elements.end,
        };
        start..end
    }

    /// Elements of the unit.
    pub(crate) fn n_elements(&self) -> usize {
        self.n_elements
    }

    /// Pushes the arguments both packed kernels open with (`df11_gemv_packed_bf16_*` in
    /// `kernels/df11_fused.cu`, `df11_decode_packed` in `kernels/df11_packed.cu`): `codes,
    /// chunk_escapes, lane_starts, n_chunks, escapes, n_escapes`.
    pub(crate) fn push_packed<'b>(&'b self, b: &mut LaunchArgs<'b>) {
        push_args!(b; &self.codes, &self.chunk_escapes, &self.lane_starts, &self.n_chunks);
        push_args!(b; &self.escapes, &self.n_escapes);
    }

    /// [`Self::push_packed`] for a programmatic dependent launch (`pdl`).
    pub(crate) fn push_packed_raw<'b>(&'b self, a: &mut RawArgs<'b>) {
        a.buffer(&self.codes)
            .buffer(&self.chunk_escapes)
            .buffer(&self.lane_starts);
        a.scalar(&self.n_chunks)
            .buffer(&self.escapes)
            .scalar(&self.n_escapes);
    }
}

/// The fused product over packed exponents: arguments `sign_mantissa` (the whole unit) and `x`
/// `[nb, cols]`; result `[nb, rows]` = x · Wᵀ for the member matrix at unit element `base`.
pub(crate) struct PackedGemvOp<'a> {
    pub(crate) unit: &'a PackedBuffers,
    pub(crate) base: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

cuda_only_op!(CustomOp2 for PackedGemvOp<'_>);

impl CudaOp2 for PackedGemvOp<'_> {
    const NAME: &'static str = "df11-packed-gemv";
    const WHAT: &'static str = "df11: the fused kernel";

    fn cuda(&self, sm: &CudaStorage, sm_l: &Layout, x: &CudaStorage, x_l: &Layout) -> CudaOut {
        let dev = sm.device().clone();
        let u = self.unit;
        let (rows, cols) = (self.rows, self.cols);
        let nb = check_gemv_call(sm_l, u.n_elements, x_l, self.base, rows, cols)?;
        // One member's table decodes the whole matrix: it must lie inside one member.
        let Some(member) = u.member_of(&(self.base..self.base + rows * cols)) else {
            candle_core::bail!(
                "df11: the matrix at element {} is not inside one member",
                self.base
            );
        };
        let Some(tiling) = Tiling::new(rows, cols) else {
            candle_core::bail!("df11: {cols} columns are too many for the fused kernel");
        };
        let maxb = maxb_for(nb);
        let name = match maxb {
            1 => "df11_gemv_packed_bf16_1",
            2 => "df11_gemv_packed_bf16_2",
            4 => "df11_gemv_packed_bf16_4",
            _ => "df11_gemv_packed_bf16_8",
        };
        // The 4096-entry table, then the partial sums.
        let smem = 16384 + tiling.partial_bytes(maxb);
        // `__launch_bounds__(256, FG_PACKED_MIN_CTAS(MAXB))` in kernels/df11_fused.cu.
        let ctas = if maxb == 1 { 4 } else { 3 };
        let cfg = launch_config_with(&dev, name, smem, tiling.tiles(rows), ctas)?;
        let xv = bf16_view(x, x_l, "x")?;
        let out = unsafe { dev.alloc::<bf16>(nb * rows) }?;
        let func = MODULE.func(&dev, name)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let [t0, t1] = u.host_tables[member];
        let n_elements = u.n_elements as i64;
        let (nb_, rows_, cols_, base) = (nb as i32, rows as i32, cols as i32, self.base as i64);
        let (tile_rows, width) = (tiling.tile_rows as i32, CHUNK_WIDTH as i32);
        let mut b = func.builder();
        u.push_packed(&mut b);
        push_args!(b; &t0, &t1, sm, &n_elements);
        push_args!(b; &xv, &out, &nb_, &rows_, &cols_, &base, &tile_rows, &width);
        // SAFETY: the packed buffers were built by the host for this unit (codes for every
        // 8-group, an offset per 256 elements); the matrix lies inside the unit; escape reads are
        // clamped in the kernel.
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((nb, rows)),
        ))
    }
}

/// Decodes unit elements `elements` into a fresh BF16 buffer of `elements.len()` values.
pub(crate) fn decode_packed(
    unit: &PackedBuffers,
    sm: &CudaStorage,
    sm_l: &Layout,
    elements: Range<usize>,
) -> candle_core::Result<(CudaStorage, Shape)> {
    decode_packed_on(unit, sm, sm_l, elements, sm.device())
}

/// [`decode_packed`] with the output allocated and the kernel launched on `launch`'s stream (a
/// second stream of the unit's GPU: decode-ahead), the result still a storage of the unit's
/// device. Its buffer is freed on `launch`'s stream: whoever drops it orders that stream after
/// the work that reads it first.
pub(crate) fn decode_packed_on(
    unit: &PackedBuffers,
    sm: &CudaStorage,
    sm_l: &Layout,
    elements: Range<usize>,
    launch: &CudaDevice,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let owner = sm.device().clone();
    crate::cuda::launch::check_same_gpu(&owner, launch)?;
    let dev = launch.clone();
    if sm_l.start_offset() != 0
        || !sm_l.is_contiguous()
        || sm_l.shape().elem_count() != unit.n_elements
    {
        candle_core::bail!("df11: sign_mantissa must be the unit's whole contiguous buffer");
    }
    if elements.start > elements.end || elements.end > unit.n_elements {
        candle_core::bail!("df11: elements {elements:?} outside the unit");
    }
    let len = elements.len();
    let out = crate::cuda::launch::alloc_out(&dev, len)?;
    if len > 0 {
        // Whole pieces of tiled members (a prompt's or a large batch's product: whole members)
        // take the pipelined kernel; other ranges of units with a tiled member the kernel that
        // writes each 8-group to its row-major place (visiting whole row groups of tiled
        // members); the others the plain one.
        let tiled = unit.orders.iter().any(Option::is_some);
        let pieces = tiled && tile_order::whole_pieces(&unit.members, &unit.orders, &elements);
        let name = if pieces {
            "df11_decode_packed_pieces"
        } else if tiled {
            "df11_decode_packed_tiled"
        } else {
            "df11_decode_packed"
        };
        let visit = unit.storage_of(&elements);
        let chunks = visit.end.div_ceil(2048) - visit.start / 2048;
        // 256 threads, a chunk per warp, one wave of the CTAs an SM holds.
        let ctas = if pieces {
            DECODE_PIECES_CTAS
        } else {
            DECODE_CTAS
        };
        let cfg = launch_config_in(&dev, &DECODE_MODULE, name, 0, chunks.div_ceil(8), ctas)?;
        let func = DECODE_MODULE.func(&dev, name)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let n_members = unit.members.len() as i32;
        let n_elements = unit.n_elements as i64;
        let (begin, end) = (elements.start as i64, elements.end as i64);
        let (visit_begin, visit_end) = (visit.start as i64, visit.end as i64);
        let mut b = func.builder();
        unit.push_packed(&mut b);
        if pieces {
            push_args!(b; &unit.tables, &unit.member_ends, &unit.member_cols, &n_members, sm);
            push_args!(b; &out, &begin, &end);
        } else if tiled {
            push_args!(b; &unit.tables, &unit.member_ends, &unit.member_cols, &n_members, sm);
            push_args!(b; &n_elements, &out, &begin, &end, &visit_begin, &visit_end);
        } else {
            push_args!(b; &unit.tables, &unit.member_ends, &n_members, sm, &n_elements);
            push_args!(b; &out, &begin, &end);
        }
        // SAFETY: out holds elements.len() values, written at o - begin for the row-major
        // elements o in `elements` only (tiled: the visited storage range, whole row groups of
        // tiled members, lies inside the unit, and member_cols is what the kernel expects per
        // member; plain: o is the storage element itself); the packed buffers cover the unit.
        unsafe { b.launch(cfg) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, owner), Shape::from(len)))
}
