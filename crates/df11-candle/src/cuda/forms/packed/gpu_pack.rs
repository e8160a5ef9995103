//! The packed form built on the GPU at load (`kernels/df11_pack.cu`), with no decode on the
//! CPU: the unit's Huffman stream is decoded by the block kernel (`df11_decode`, which checks
//! every code, every window gap and every block end against the metadata the host validated,
//! and reports through its status word; the last block is also walked on the CPU, for the end of
//! the stream, which the kernel cannot see: a corrupt stream is refused here as the CPU walk
//! refuses it), then per member an exponent histogram, the code tables (chosen on the host by
//! [`table_of_histogram`], as the CPU build chooses them), the 3-bit codes, each chunk's lane
//! starts and escape count, and the escapes. The arrays are those [`PackedExponents::build`]
//! makes on the CPU, byte for byte (the GPU suite compares them).
//!
//! Loads take it by default (the GPU suite compares it with the CPU build array for array,
//! `tests/gpu_pack.rs`, and runs the models' DF11 == BF16 tests through it);
//! [`crate::Df11Options::gpu_pack`] off builds on the CPU instead.

use std::ops::Range;

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::CudaStorage;

use crate::cuda::launch::{launch_config_in, push_args};
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::kernels::PackedBuffers;
use crate::cuda::packed::tile_order::TileOrder;
use crate::cuda::packed::{codes_of_table, members_pack, table_of_histogram, PackedExponents};
use crate::error::{Df11Error, Result};
use crate::format::unit::{UnitLayout, UnitTensors};

const MODULE: Module = fatbin_module!("df11_pack");
/// Resident CTAs per SM the launches aim at (the kernels loop over their work).
const CTAS: u32 = 4;

/// The packed form of a unit on the device, as the GPU build leaves it.
pub(crate) struct DevicePacked {
    codes: CudaSlice<u32>,
    chunk_escapes: CudaSlice<u32>,
    lane_starts: CudaSlice<u8>,
    /// Padded as `PackedHost` pads it; `n_escapes` bytes are the list.
    escapes: CudaSlice<u8>,
    n_escapes: usize,
    tables: Vec<[u8; 8]>,
    members: Vec<Range<usize>>,
    /// Per member, its tile order if it is stored so.
    orders: Vec<Option<TileOrder>>,
    /// The unit's `sign_mantissa` in storage order, where a member is tiled.
    pub(crate) sign_mantissa: Option<CudaSlice<u8>>,
}

impl DevicePacked {
    /// Bytes of the form, as [`PackedExponents::device_bytes`] counts them.
    pub(crate) fn device_bytes(&self) -> usize {
        4 * self.codes.len()
            + 4 * self.chunk_escapes.len()
            + self.lane_starts.len()
            + self.n_escapes
            + 8 * self.tables.len()
    }

    /// [`Self::device_bytes`] in bits per element.
    pub(crate) fn fits(&self) -> bool {
        let n = self.members.last().map_or(0, |m| m.end).max(1);
        8.0 * self.device_bytes() as f64 / n as f64 <= crate::cuda::packed::MAX_BITS_PER_WEIGHT
    }

    /// The buffers the packed kernels take, and `sign_mantissa` in storage order where a member
    /// is tiled (it replaces the file's).
    pub(crate) fn into_buffers(
        self,
        device: &CudaDevice,
    ) -> candle_core::Result<(PackedBuffers, Option<CudaSlice<u8>>)> {
        let bytes = self.device_bytes();
        let buffers = PackedBuffers::from_device(
            device,
            self.codes,
            self.chunk_escapes,
            self.lane_starts,
            self.escapes,
            &self.tables,
            self.members,
            self.orders,
            bytes,
        )?;
        Ok((buffers, self.sign_mantissa))
    }

    /// The form copied back to the host as an offloaded unit keeps it, straight into pinned
    /// memory, with `sign_mantissa` in storage order where a member is tiled.
    pub(crate) fn into_pinned_host(
        self,
        device: &CudaDevice,
    ) -> candle_core::Result<(
        crate::cuda::packed::kernels::PackedHost,
        Option<crate::cuda::upload::HostArray<u8>>,
    )> {
        use crate::cuda::upload::HostArray;
        let bytes = self.device_bytes();
        let host = crate::cuda::packed::kernels::PackedHost::from_parts(
            HostArray::pinned_from_device(device, &self.codes)?,
            HostArray::pinned_from_device(device, &self.chunk_escapes)?,
            HostArray::pinned_from_device(device, &self.lane_starts)?,
            HostArray::pinned_from_device(device, &self.escapes)?,
            &self.tables,
            self.members,
            self.orders,
            bytes,
        );
        let sm = match &self.sign_mantissa {
            Some(s) => Some(HostArray::pinned_from_device(device, s)?),
            None => None,
        };
        // The copies are done before the device arrays are freed.
        device.cuda_stream().synchronize().w()?;
        Ok((host, sm))
    }

    /// The arrays copied back to the host, as [`PackedExponents`] holds them (for comparisons
    /// with the CPU build).
    pub(crate) fn to_host(&self, device: &CudaDevice) -> candle_core::Result<PackedExponents> {
        let mut escapes = device.clone_dtoh(&self.escapes)?;
        escapes.truncate(self.n_escapes);
        Ok(PackedExponents {
            codes: device.clone_dtoh(&self.codes)?,
            chunk_escapes: device.clone_dtoh(&self.chunk_escapes)?,
            lane_starts: device.clone_dtoh(&self.lane_starts)?,
            escapes,
            tables: self.tables.clone(),
            members: self.members.clone(),
        })
    }
}

/// A stream that does not decode on the device: the unit named as a loaded copy.
pub(crate) fn refused(name: &str, defect: crate::error::UnitDefect) -> Df11Error {
    Df11Error::InvalidUnit {
        path: std::path::PathBuf::from(format!("<loaded copy of {name}>")),
        unit: name.to_string(),
        defect,
    }
}

/// Builds the packed form of a validated unit on `device` from its stream, `sign_mantissa`
/// being the unit's `sign_mantissa` there; the members `orders` tiles are stored in the tile
/// order (with a `sign_mantissa` in that order), unless that form does not pack and the row
/// order does. `Ok(None)` where the CPU build gives `None` (members that do not allow it, a
/// chunk with more than 255 escapes before its last lane); a stream that does not decode is an
/// [`Df11Error::InvalidUnit`].
/// `decode` decodes the whole stream on `device` with the block kernel and checks its status
/// (the caller's Huffman form: `crate::cuda::unit`); it may be called twice.
pub(crate) fn build(
    device: &CudaDevice,
    name: &str,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    orders: &[Option<TileOrder>],
    decode: &dyn Fn() -> Result<CudaStorage>,
    profiled: bool,
) -> Result<Option<DevicePacked>> {
    let n = layout.n_elements;
    let members = layout.member_ranges();
    if !members_pack(&members, n) || n == 0 {
        return Ok(None);
    }
    let refuse = |defect| refused(name, defect);
    // 0. The end of the stream, on the CPU (one block): the block kernel reads bytes past the
    //    stream as zeros, so a stream whose last codes run past its end would decode there.
    use crate::load_profile::{timed, Phase};
    let settle = || {
        let _ = device.cuda_stream().synchronize();
    };
    timed(
        profiled,
        Phase::UnitCheck,
        0,
        || {},
        || {
            crate::cuda::exponent_walk::check_last_block(
                t,
                layout,
                &crate::DecodeTable::new(t.luts),
            )
        },
    )
    .map_err(refuse)?;
    let orders =
        crate::cuda::packed::tile_order::checked_orders(&members, orders).ok_or_else(|| {
            Df11Error::Usage(format!("`{name}`: a tile order does not match its member"))
        })?;
    if orders.iter().any(Option::is_some) {
        // Tiled: the exponents and sign_mantissa in storage order, the decoded values dropped
        // before packing (the build's peak: values, exponents and sign_mantissa, 4 bytes an
        // element).
        let (et, sm) = {
            let decoded = decode()?;
            timed(profiled, Phase::GpuTile, 2 * n, settle, || {
                tile(
                    device,
                    decoded.as_cuda_slice::<half::bf16>()?,
                    n,
                    &members,
                    &orders,
                )
            })?
        };
        let packed = timed(profiled, Phase::GpuPack, n, settle, || {
            pack(device, name, PackInput::Exponents(&et), n, &members)
        })?;
        if let Some(mut p) = packed {
            p.orders = orders;
            p.sign_mantissa = Some(sm);
            return Ok(Some(p));
        }
        // The tiled form does not pack (a chunk of the new order with too many escapes): row
        // order, from a second decode.
    }
    let decoded = decode()?;
    let w = decoded.as_cuda_slice::<half::bf16>()?;
    timed(profiled, Phase::GpuPack, 2 * n, settle, || {
        pack(device, name, PackInput::Values(w), n, &members)
    })
}

/// What the pack kernels read: decoded BF16 values, or exponents (their `_e` forms).
#[derive(Clone, Copy)]
enum PackInput<'a> {
    Values(&'a CudaSlice<half::bf16>),
    Exponents(&'a CudaSlice<u8>),
}

impl PackInput<'_> {
    /// Of a kernel's two forms, the one for this input.
    fn kernel(self, values: &'static str, exponents: &'static str) -> &'static str {
        match self {
            Self::Values(_) => values,
            Self::Exponents(_) => exponents,
        }
    }

    /// Pushes the input as a kernel's first argument.
    fn push<'b>(&'b self, b: &mut candle_core::cuda_backend::cudarc::driver::LaunchArgs<'b>) {
        match self {
            Self::Values(w) => {
                b.arg(*w);
            }
            Self::Exponents(e) => {
                b.arg(*e);
            }
        }
    }
}

/// The exponents of the decoded values `w` in storage order (the members `orders` tiles in the
/// tile order) and `sign_mantissa` in that order.
fn tile(
    device: &CudaDevice,
    w: &CudaSlice<half::bf16>,
    n: usize,
    members: &[Range<usize>],
    orders: &[Option<TileOrder>],
) -> Result<(CudaSlice<u8>, CudaSlice<u8>)> {
    let ends: Vec<i64> = members.iter().map(|m| m.end as i64).collect();
    let cols = crate::cuda::packed::kernels::member_cols(orders);
    let (ends, cols) = (device.clone_htod(&ends)?, device.clone_htod(&cols)?);
    // SAFETY: the kernel writes every element of both.
    let mut et = unsafe { device.alloc::<u8>(n) }?;
    let mut sm = unsafe { device.alloc::<u8>(n) }?;
    let f = MODULE.func(device, "df11_pack_tile")?;
    let (n_i64, nm) = (n as i64, members.len() as i32);
    let mut b = f.builder();
    push_args!(b; w, &n_i64, &ends, &cols, &nm, &mut et, &mut sm);
    let cfg = launch_config_in(
        device,
        &MODULE,
        "df11_pack_tile",
        0,
        n.div_ceil(8 * 256),
        CTAS,
    )?;
    // SAFETY: w, et and sm hold n elements; member ends ascend to n; a tiled member's columns
    // divide its size into whole groups of 8 rows (TileOrder::for_member), so every source index
    // lies inside its member.
    unsafe { b.launch(cfg) }.w()?;
    Ok((et, sm))
}

/// The packed form of the values or exponents `w` (storage order) of a unit of `n` elements,
/// members in row order (the caller sets the orders and `sign_mantissa` of a tiled build).
fn pack(
    device: &CudaDevice,
    name: &str,
    w: PackInput<'_>,
    n: usize,
    members: &[Range<usize>],
) -> Result<Option<DevicePacked>> {
    let stream = device.cuda_stream();
    let launch = |kernel: &'static str, work: usize| {
        launch_config_in(device, &MODULE, kernel, 0, work, CTAS)
    };
    let func = |kernel: &'static str| MODULE.func(device, kernel);
    let n_members = members.len();
    let n_i64 = n as i64;

    // 2. Each member's exponent histogram; the tables chosen on the host.
    let mut hist = device.alloc_zeros::<u32>(256 * n_members)?;
    for (m, r) in members.iter().enumerate() {
        let (begin, end) = (r.start as i64, r.end as i64);
        let mut view = hist.slice_mut(256 * m..256 * (m + 1));
        let kernel = w.kernel("df11_pack_hist", "df11_pack_hist_e");
        let f = func(kernel)?;
        let mut b = f.builder();
        w.push(&mut b);
        push_args!(b; &begin, &end, &mut view);
        // SAFETY: `w` holds n elements and r lies inside the unit; the view holds 256 counts.
        unsafe { b.launch(launch(kernel, r.len().div_ceil(4096))?) }.w()?;
    }
    let counts = device.clone_dtoh(&hist)?;
    let tables: Vec<[u8; 8]> = counts
        .chunks(256)
        .map(|h| {
            let h: [u64; 256] = std::array::from_fn(|e| h[e] as u64);
            table_of_histogram(&h)
        })
        .collect();
    let code_of: Vec<u8> = tables.iter().flat_map(codes_of_table).collect();
    let code_of = device.clone_htod(&code_of)?;
    let ends: Vec<i64> = members.iter().map(|m| m.end as i64).collect();
    let member_ends = device.clone_htod(&ends)?;

    // 3. The codes: three words per 32 elements, one word past the last code.
    let n_words = (3 * n).div_ceil(32) + 1;
    let n_triples = n_words.div_ceil(3);
    // SAFETY: the kernel writes every word of every triple.
    let mut codes = unsafe { device.alloc::<u32>(3 * n_triples) }?;
    {
        let kernel = w.kernel("df11_pack_codes", "df11_pack_codes_e");
        let f = func(kernel)?;
        let (nm, nt) = (n_members as i32, n_triples as i64);
        let mut b = f.builder();
        w.push(&mut b);
        push_args!(b; &n_i64, &code_of, &member_ends, &nm, &mut codes, &nt);
        // SAFETY: sizes as the kernel's header states (code_of 256 per member, ends ascending to
        // n, codes 3 * n_triples words).
        unsafe { b.launch(launch(kernel, n_triples.div_ceil(256))?) }.w()?;
    }

    // 4. Lane starts and chunk totals; a lane starting past 255 means no packed form.
    let n_chunks = n.div_ceil(crate::cuda::packed::CHUNK);
    // SAFETY: the kernel writes all 32 starts and the total of every chunk.
    let mut lane_starts = unsafe { device.alloc::<u8>(32 * n_chunks) }?;
    let mut chunk_counts = unsafe { device.alloc::<u32>(n_chunks) }?;
    let mut flags = device.alloc_zeros::<u32>(1)?;
    let nc = n_chunks as i64;
    {
        let f = func("df11_pack_lanes")?;
        let mut b = f.builder();
        push_args!(b; &codes, &n_i64, &nc, &mut lane_starts, &mut chunk_counts, &mut flags);
        // SAFETY: codes as written above; 32 starts and one count per chunk.
        unsafe { b.launch(launch("df11_pack_lanes", n_chunks.div_ceil(8))?) }.w()?;
    }
    if device.clone_dtoh(&flags)?[0] != 0 {
        return Ok(None);
    }
    let totals = device.clone_dtoh(&chunk_counts)?;
    let mut chunk_escapes = Vec::with_capacity(n_chunks + 1);
    let mut total = 0u64;
    for c in totals {
        chunk_escapes.push(total as u32);
        total += u64::from(c);
    }
    let total = usize::try_from(total)
        .ok()
        .filter(|&t| u32::try_from(t).is_ok())
        .ok_or_else(|| Df11Error::Usage(format!("`{name}`: too many escapes to pack")))?;
    chunk_escapes.push(total as u32);
    let chunk_escapes = device.clone_htod(&chunk_escapes)?;

    // 5. The escapes, padded with zeros as the packed kernels expect.
    let mut escapes = device.alloc_zeros::<u8>(total.div_ceil(4) * 4 + 16)?;
    {
        let kernel = w.kernel("df11_pack_escapes", "df11_pack_escapes_e");
        let f = func(kernel)?;
        let mut b = f.builder();
        w.push(&mut b);
        push_args!(b; &codes, &n_i64, &nc, &chunk_escapes, &lane_starts, &mut escapes);
        // SAFETY: each lane writes its escapes inside its chunk's range of the list, which the
        // scan above sized.
        unsafe { b.launch(launch(kernel, n_chunks.div_ceil(8))?) }.w()?;
    }
    stream.synchronize().w()?;
    Ok(Some(DevicePacked {
        codes,
        chunk_escapes,
        lane_starts,
        escapes,
        n_escapes: total,
        tables,
        members: members.to_vec(),
        orders: vec![None; members.len()],
        sign_mantissa: None,
    }))
}
