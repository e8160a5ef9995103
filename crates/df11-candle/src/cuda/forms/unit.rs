//! The CUDA path: a unit's device buffers and the launch of the decode kernel
//! (`kernels/df11_decode.cu`, compiled by the build script and embedded here).
//!
//! The kernel trusts only metadata the host validated ([`UnitLayout`]); whatever the bitstream
//! and gaps hold, it stays in bounds and reports inconsistencies in a status word, which
//! [`CudaUnit::check_status`] reads. The exponents' device form built on the host (the CPU part
//! of a load, kept pinned for an offloaded unit) is in `unit/host.rs`.

use std::ops::Range;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::sys::{
    CUdevice_attribute, CUfunction_attribute_enum,
};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, Layout, Shape};

use crate::codec::decode::{block_elements, decode_base};
use crate::cuda::launch::push_args;
use crate::cuda::module::{fatbin_module, Module};
use crate::cuda::packed::ExponentForm;
use crate::cuda::tile_order::TileOrder;
use crate::cuda::upload::Uploader;
use crate::error::{Df11Error, Result, UnitDefect};
use crate::format::unit::{UnitLayout, UnitTensors};

mod host;
mod stream_decode;

pub(crate) use host::HostExponents;
pub use stream_decode::build_on_gpu_to_host;
use stream_decode::decode_stream;

const MODULE: Module = fatbin_module!("df11_decode");
const KERNEL: &str = "df11_decode";
const THREADS: u32 = 512;

/// Shared-memory bytes for the kernel's tables and per-thread stages (`DF11_HDR(K)`).
fn header_bytes(k: usize) -> usize {
    1024 * k + 96 + THREADS as usize * 36
}

/// Status flags of the kernel (`DF11_ERR_*`).
const FLAGS: [(u32, &str); 6] = [
    (
        1,
        "a block decoded a number of codes different from its output_positions span",
    ),
    (2, "invalid code (LUT chain too deep or bad code length)"),
    (
        4,
        "a thread's codes do not end where the next window's gap says",
    ),
    (8, "a block does not fit the shared memory given"),
    (16, "misaligned buffer"),
    (32, "bad launch arguments"),
];

/// Devices whose default memory pool already keeps freed memory.
static POOLS_KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// Makes the device's default (stream-ordered) memory pool keep freed memory instead of
/// returning it to the driver at every synchronisation. Decoded weights are allocated and freed
/// at every forward; without this each allocation maps fresh pages (measured: ~15% of the decode
/// time of a Qwen3-8B layer). Freed memory stays reusable by every allocation on the device, as
/// with PyTorch's caching allocator.
fn keep_pool_memory(device: &CudaDevice) {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let ordinal = device.cuda_stream().context().ordinal();
    let mut kept = POOLS_KEPT.lock().expect("pool lock");
    if kept.contains(&ordinal) {
        return;
    }
    kept.push(ordinal);
    let cu_device = device.cuda_stream().context().cu_device();
    // SAFETY: plain driver calls on a live context's device; failure only leaves the default.
    unsafe {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        if sys::cuDeviceGetDefaultMemPool(&mut pool, cu_device) == sys::CUresult::CUDA_SUCCESS {
            let mut threshold: u64 = u64::MAX;
            let _ = sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut std::ffi::c_void,
            );
        }
    }
}

/// A unit's exponents on one CUDA device (`sign_mantissa` is the op's argument tensor).
pub(crate) struct CudaUnit {
    device: CudaDevice,
    exponents: Exponents,
}

/// The two device forms of a unit's exponents.
enum Exponents {
    /// The DF11 stream as in the file, for the block kernel, plus the segment index.
    Huffman(HuffmanBuffers),
    /// Re-packed at load (`crate::cuda::packed`): no Huffman stream on the device.
    Packed(crate::cuda::packed_kernels::PackedBuffers),
}

struct HuffmanBuffers {
    /// The segment index for the fused and segment kernels (`None`: stream too long for it).
    segments: Option<crate::cuda::fused::SegmentBuffers>,
    luts: CudaSlice<u8>,
    codes: CudaSlice<u8>,
    gaps: CudaSlice<u8>,
    positions: CudaSlice<u32>,
    status: std::sync::Mutex<CudaSlice<u32>>,
    lut_rows: usize,
    smem: u32,
    ctas_per_sm: u32,
    sms: u32,
}

/// The Huffman form's arrays on the device.
struct HuffmanArrays {
    luts: CudaSlice<u8>,
    /// The stream padded with zero bytes as [`HuffmanHost`] pads it.
    codes: CudaSlice<u8>,
    gaps: CudaSlice<u8>,
    positions: CudaSlice<u32>,
    segments: Option<crate::cuda::fused::SegmentBuffers>,
}

impl CudaUnit {
    /// Puts a unit's exponents on `device` in `form`: the packed form built on the GPU
    /// from the stream (`crate::cuda::gpu_pack`, with `sign_mantissa` already there) where it
    /// applies, else [`HostExponents::build`] on the CPU, then [`CudaUnit::upload`]. A packed
    /// form stores the members `orders` tiles in the tile order and comes with the unit's
    /// `sign_mantissa` in that order (on the device), which replaces the file's.
    pub(crate) fn new(
        device: &CudaDevice,
        name: &str,
        t: &UnitTensors<'_>,
        layout: &UnitLayout,
        options: &crate::Df11Options,
        orders: &[Option<TileOrder>],
        sign_mantissa: (&CudaStorage, &Layout),
    ) -> Result<(Self, Option<CudaSlice<u8>>)> {
        let form = options.exponents;
        let debug_sync = options.debug_sync.load;
        if form != ExponentForm::Huffman && options.gpu_pack {
            keep_pool_memory(device);
            let decode = || decode_stream(device, name, t, layout, sign_mantissa, options);
            let profiled = options.profile_load;
            let built =
                crate::cuda::gpu_pack::build(device, name, t, layout, orders, &decode, profiled)?;
            match built {
                Some(p) if form == ExponentForm::Packed || p.fits() => {
                    let (buffers, sm) = p.into_buffers(device)?;
                    let unit = Self {
                        device: device.clone(),
                        exponents: Exponents::Packed(buffers),
                    };
                    return Ok((unit.debug_sync(debug_sync)?, sm));
                }
                // No packed form, or too large for `auto`: the Huffman form, as on the CPU.
                _ => {
                    let (host, _) =
                        HostExponents::build(name, t, layout, ExponentForm::Huffman, &[])?;
                    let unit =
                        Self::upload(&Uploader::Now(device), &host)?.debug_sync(debug_sync)?;
                    return Ok((unit, None));
                }
            }
        }
        let settle = || {
            let _ = device.cuda_stream().synchronize();
        };
        crate::load_profile::timed(
            options.profile_load,
            crate::load_profile::Phase::HostBuild,
            t.sign_mantissa.len(),
            settle,
            || {
                let (host, sm) = HostExponents::build(name, t, layout, form, orders)?;
                let sm = match sm {
                    Some(sm) => Some(device.clone_htod(&sm)?),
                    None => None,
                };
                Ok((
                    Self::upload(&Uploader::Now(device), &host)?.debug_sync(debug_sync)?,
                    sm,
                ))
            },
        )
    }

    /// Where `wait` ([`crate::DebugSync::load`]), waits for the unit's copies and builds (the
    /// host arrays they read are dropped after this returns).
    fn debug_sync(self, wait: bool) -> Result<Self> {
        if wait {
            crate::cuda::streams::sync_unless_capturing(&self.device)?;
        }
        Ok(self)
    }

    /// The Huffman form without a segment index, uploaded at once (no CPU decode): what the
    /// block kernel needs, for the GPU build of the packed form.
    pub(crate) fn huffman_without_index(
        device: &CudaDevice,
        t: &UnitTensors<'_>,
        layout: &UnitLayout,
        staged: bool,
    ) -> Result<Self> {
        // Straight from the file's bytes to the device: no host copy (the stream's padding is
        // zeroed on the device). A host copy of the stream cost ~60% of a model's load.
        keep_pool_memory(device);
        let n = t.encoded_exponent.len();
        let mut codes = device.alloc_zeros::<u8>(n.div_ceil(4) * 4 + 4)?;
        crate::cuda::staged_copy::copy_to_device(
            device,
            t.encoded_exponent,
            &mut codes.slice_mut(0..n),
            staged,
        )?;
        let arrays = HuffmanArrays {
            luts: device.clone_htod(t.luts)?,
            codes,
            gaps: device.clone_htod(t.gaps)?,
            positions: device.clone_htod(&layout.output_positions)?,
            segments: None,
        };
        Self::huffman(device, arrays, layout.lut_rows, layout.max_block_elements)
    }

    /// Puts a host form on the uploader's device.
    pub(crate) fn upload(up: &Uploader<'_>, host: &HostExponents) -> Result<Self> {
        let device = up.device();
        keep_pool_memory(device);
        let h = match host {
            HostExponents::Packed(p) => {
                return Ok(Self {
                    device: device.clone(),
                    exponents: Exponents::Packed(
                        crate::cuda::packed_kernels::PackedBuffers::upload(up, p)?,
                    ),
                })
            }
            HostExponents::Huffman(h) => h,
        };
        let arrays = HuffmanArrays {
            luts: up.put(&h.luts)?,
            codes: up.put(&h.codes)?,
            gaps: up.put(&h.gaps)?,
            positions: up.put(&h.positions)?,
            segments: match &h.segments {
                Some(index) => Some(crate::cuda::fused::SegmentBuffers::upload(up, index)?),
                None => None,
            },
        };
        Self::huffman(device, arrays, h.lut_rows, h.max_block)
    }

    /// The Huffman form around its arrays on `device`, with the block kernel's launch settings
    /// (`max_block`: the most elements a block outputs, the validated layout's).
    fn huffman(
        device: &CudaDevice,
        arrays: HuffmanArrays,
        lut_rows: usize,
        max_block: usize,
    ) -> Result<Self> {
        let HuffmanArrays {
            luts,
            codes,
            gaps,
            positions,
            segments,
        } = arrays;
        let status = std::sync::Mutex::new(device.alloc_zeros::<u32>(1)?);
        let func = MODULE.func(device, KERNEL)?;
        let ctx = device.cuda_stream().context().clone();
        let sms = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .w()? as u32;
        let max_smem = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .w()? as usize;
        // The kernel's direct mode (sign_mantissa read from global memory at copy-out): measured
        // as fast as its staged mode on real-sized units, and it needs the least shared memory.
        let cap = (max_block + 30) & !15;
        let smem = header_bytes(lut_rows) + cap;
        if smem > max_smem {
            return Err(Df11Error::Usage(format!(
                "a block of this unit needs {smem} bytes of shared memory; the device has {max_smem}"
            )));
        }
        let smem = smem as u32;
        // The attribute belongs to this device's copy of the function (each CudaDevice loads its
        // own module), so it is set whenever a unit needs it rather than once per process.
        if smem > 48 * 1024 {
            func.set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                max_smem as i32,
            )
            .w()?;
        }
        let ctas_per_sm = func
            .occupancy_max_active_blocks_per_multiprocessor(THREADS, smem as usize, None)
            .w()?
            .max(1);
        Ok(Self {
            device: device.clone(),
            exponents: Exponents::Huffman(HuffmanBuffers {
                segments,
                luts,
                codes,
                gaps,
                positions,
                status,
                lut_rows,
                smem,
                ctas_per_sm,
                sms,
            }),
        })
    }

    /// The packed exponents, if the unit is kept packed.
    pub(crate) fn packed(&self) -> Option<&crate::cuda::packed_kernels::PackedBuffers> {
        match &self.exponents {
            Exponents::Packed(p) => Some(p),
            Exponents::Huffman(_) => None,
        }
    }

    /// Device bytes besides `sign_mantissa`.
    pub(crate) fn device_bytes(&self) -> usize {
        match &self.exponents {
            Exponents::Packed(p) => p.device_bytes(),
            Exponents::Huffman(h) => {
                h.luts.len()
                    + h.codes.len()
                    + h.gaps.len()
                    + 4 * h.positions.len()
                    + h.segments.as_ref().map_or(0, |s| s.device_bytes())
            }
        }
    }

    /// What the segment kernels need, if the unit is kept as Huffman with a segment index.
    pub(crate) fn segment_args(
        &self,
        layout: &UnitLayout,
    ) -> Option<crate::cuda::fused::UnitArgs<'_>> {
        let Exponents::Huffman(h) = &self.exponents else {
            return None;
        };
        Some(crate::cuda::fused::UnitArgs {
            luts: &h.luts,
            codes: &h.codes,
            lut_rows: h.lut_rows,
            n_words: (h.codes.len() / 4) as u32,
            n_elements: layout.n_elements,
            segments: h.segments.as_ref()?,
        })
    }

    /// Decodes `blocks` into a fresh BF16 buffer whose element 0 is unit element
    /// [`decode_base`]`(layout, blocks)`.
    pub(crate) fn decode(
        &self,
        sign_mantissa: &CudaStorage,
        sm_layout: &Layout,
        layout: &UnitLayout,
        blocks: Range<usize>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = sign_mantissa.device().clone();
        if sm_layout.start_offset() != 0 || !sm_layout.is_contiguous() {
            candle_core::bail!("df11: sign_mantissa must be a whole contiguous buffer");
        }
        let elements = block_elements(layout, blocks.clone());
        // The kernel writes element i at out[i - out_base]; out_base is 16-aligned so its
        // vectorised stores stay aligned.
        let out_base = decode_base(layout, blocks.clone());
        let h = match &self.exponents {
            Exponents::Huffman(h) => h,
            // Packed units have no block stream: decode the same elements (all of them valid).
            Exponents::Packed(p) => {
                return crate::cuda::packed_kernels::decode_packed(
                    p,
                    sign_mantissa,
                    sm_layout,
                    out_base..elements.end,
                )
            }
        };
        let len = elements.end - out_base;
        let mut out = crate::cuda::launch::alloc_out(&dev, len)?;
        // The values before the first block's first element (at most 15: the base is rounded
        // down to 16 for aligned stores) are not decoded: zero them, so the buffer holds no
        // unwritten memory (a caller narrows past them, but copies take the whole buffer).
        let head = elements.start.saturating_sub(out_base).min(len);
        if head > 0 {
            let mut head_view = out.slice_mut(0..head);
            dev.cuda_stream().memset_zeros(&mut head_view).w()?;
        }
        if !blocks.is_empty() {
            let sm = sign_mantissa.as_cuda_slice::<u8>()?;
            let func = MODULE.func(&dev, KERNEL)?;
            let n_blocks = blocks.len() as u32;
            let grid = n_blocks.min(h.sms * h.ctas_per_sm);
            let cfg = LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: h.smem,
            };
            let k = h.lut_rows as i32;
            let n_bytes = layout.n_bytes as i32;
            let n_elements = layout.n_elements as i32;
            let n_positions = h.positions.len() as i32;
            let (begin, end, base) = (blocks.start as i32, blocks.end as i32, out_base as i32);
            let status = h.status.lock().expect("status lock");
            let mut b = func.builder();
            push_args!(b; &h.luts, &h.codes, sm, &h.positions, &h.gaps, &out);
            push_args!(b; &k, &n_bytes, &n_elements, &n_positions, &*status);
            push_args!(b; &begin, &end, &base);
            // SAFETY: every buffer is sized from the validated layout, which is what the kernel
            // indexes by; the kernel guards all data-dependent reads and writes.
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from(len)))
    }

    /// Reads the status word (a device sync), clears it, and turns set flags into an error.
    pub(crate) fn check_status(&self) -> std::result::Result<(), UnitDefect> {
        let fail = |e: candle_core::Error| {
            UnitDefect::Stream(format!("could not read the decode status: {e}"))
        };
        let Exponents::Huffman(h) = &self.exponents else {
            return Ok(()); // packed: checked by the CPU decode at load, no kernel flags
        };
        let mut status = h.status.lock().expect("status lock");
        let flags = self.device.clone_dtoh(&*status).map_err(fail)?[0];
        if flags == 0 {
            return Ok(());
        }
        self.device
            .cuda_stream()
            .memset_zeros(&mut *status)
            .w()
            .map_err(fail)?;
        let what: Vec<&str> = FLAGS
            .iter()
            .filter(|(f, _)| flags & f != 0)
            .map(|(_, s)| *s)
            .collect();
        Err(UnitDefect::Stream(format!(
            "GPU decode reported: {}",
            what.join("; ")
        )))
    }
}
