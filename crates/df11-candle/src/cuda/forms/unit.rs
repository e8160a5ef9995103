//! A unit's exponents on one CUDA device, in one of the device forms ([`super::huffman`],
//! [`super::packed`]): how they are built and put on the device at load, and the operations
//! every form offers, dispatched to the form. The exponents' device form built on the host (the
//! CPU part of a load, kept pinned for an offloaded unit) is in `unit/host.rs`.

use std::ops::Range;

use candle_core::cuda_backend::cudarc::driver::CudaSlice;
use candle_core::cuda_backend::CudaDevice;
use candle_core::{CudaStorage, Layout, Shape};

use super::huffman::{kernels::UnitArgs, HuffmanArrays, HuffmanBuffers};
use super::packed::kernels::PackedBuffers;
use crate::cuda::packed::tile_order::TileOrder;
use crate::cuda::packed::ExponentForm;
use crate::cuda::upload::Uploader;
use crate::error::{Result, UnitDefect};
use crate::format::unit::{UnitLayout, UnitTensors};

mod host;
mod stream_decode;

pub(crate) use host::HostExponents;
pub use stream_decode::build_on_gpu_to_host;
pub(crate) use stream_decode::offloaded_host_form;
use stream_decode::{gpu_packed, GpuPacked};

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

/// The device forms of a unit's exponents.
enum Exponents {
    /// The DF11 stream as in the file, plus the segment index.
    Huffman(HuffmanBuffers),
    /// Re-packed at load (`crate::cuda::packed`): no Huffman stream on the device.
    Packed(PackedBuffers),
}

impl CudaUnit {
    /// Puts a unit's exponents on `device` in `form`: the packed form built on the GPU
    /// from the stream (`crate::cuda::packed::gpu_pack`, with `sign_mantissa` already there) where it
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
        match gpu_packed(device, name, t, layout, options, orders, sign_mantissa)? {
            GpuPacked::Packed(p) => {
                let (buffers, sm) = p.into_buffers(device)?;
                let unit = Self {
                    device: device.clone(),
                    exponents: Exponents::Packed(buffers),
                };
                return Ok((unit.debug_sync(debug_sync)?, sm));
            }
            GpuPacked::Huffman => {
                let (host, _) = HostExponents::build(name, t, layout, ExponentForm::Huffman, &[])?;
                let unit = Self::upload(&Uploader::Now(device), &host)?.debug_sync(debug_sync)?;
                return Ok((unit, None));
            }
            GpuPacked::NotAsked => {}
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
        Ok(Self {
            device: device.clone(),
            exponents: Exponents::Huffman(HuffmanBuffers::new(
                device,
                arrays,
                layout.lut_rows,
                layout.max_block_elements,
                layout.n_elements,
            )?),
        })
    }

    /// Puts a host form on the uploader's device.
    pub(crate) fn upload(up: &Uploader<'_>, host: &HostExponents) -> Result<Self> {
        let device = up.device();
        keep_pool_memory(device);
        let h = match host {
            HostExponents::Packed(p) => {
                return Ok(Self {
                    device: device.clone(),
                    exponents: Exponents::Packed(PackedBuffers::upload(up, p)?),
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
                Some(index) => Some(super::huffman::kernels::SegmentBuffers::upload(up, index)?),
                None => None,
            },
        };
        Ok(Self {
            device: device.clone(),
            exponents: Exponents::Huffman(HuffmanBuffers::new(
                device,
                arrays,
                h.lut_rows,
                h.max_block,
                h.n_elements,
            )?),
        })
    }

    /// The packed exponents, if the unit is kept packed.
    pub(crate) fn packed(&self) -> Option<&PackedBuffers> {
        match &self.exponents {
            Exponents::Packed(p) => Some(p),
            Exponents::Huffman(_) => None,
        }
    }

    /// Device bytes besides `sign_mantissa`.
    pub(crate) fn device_bytes(&self) -> usize {
        match &self.exponents {
            Exponents::Packed(p) => p.device_bytes(),
            Exponents::Huffman(h) => h.device_bytes(),
        }
    }

    /// What the segment kernels need, if the unit is kept as Huffman with a segment index.
    pub(crate) fn segment_args(&self) -> Option<UnitArgs<'_>> {
        match &self.exponents {
            Exponents::Huffman(h) => h.segment_args(),
            Exponents::Packed(_) => None,
        }
    }

    /// The unit's form as the operations every form offers ([`super::DeviceForm`]), if it can
    /// decode any element range (packed, or Huffman with a segment index).
    pub(crate) fn form(&self) -> Option<&dyn super::DeviceForm> {
        match &self.exponents {
            Exponents::Packed(p) => Some(p),
            Exponents::Huffman(h) => h.segment_args().map(|_| h as &dyn super::DeviceForm),
        }
    }

    /// Decodes `blocks` into a fresh BF16 buffer whose element 0 is unit element
    /// [`crate::codec::decode::decode_base`]`(layout, blocks)`.
    pub(crate) fn decode(
        &self,
        sign_mantissa: &CudaStorage,
        sm_layout: &Layout,
        layout: &UnitLayout,
        blocks: Range<usize>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match &self.exponents {
            Exponents::Huffman(h) => h.decode_blocks(sign_mantissa, sm_layout, layout, blocks),
            // Packed units have no block stream: decode the same elements (all of them valid).
            Exponents::Packed(p) => {
                if sm_layout.start_offset() != 0 || !sm_layout.is_contiguous() {
                    candle_core::bail!("df11: sign_mantissa must be a whole contiguous buffer");
                }
                let elements = crate::codec::decode::block_elements(layout, blocks.clone());
                let out_base = crate::codec::decode::decode_base(layout, blocks);
                super::packed::kernels::decode_packed(
                    p,
                    sign_mantissa,
                    sm_layout,
                    out_base..elements.end,
                )
            }
        }
    }

    /// Reads the Huffman form's status word (a device sync), clears it, and turns set flags
    /// into an error; a packed unit was checked by the CPU decode at load.
    pub(crate) fn check_status(&self) -> std::result::Result<(), UnitDefect> {
        match &self.exponents {
            Exponents::Huffman(h) => h.check_status(&self.device),
            Exponents::Packed(_) => Ok(()),
        }
    }
}
