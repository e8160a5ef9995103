//! The Huffman form's device buffers and the block kernel's launch.

use std::ops::Range;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute_enum;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, Layout, Shape};

use super::kernels;
use crate::codec::decode::{block_elements, decode_base};
use crate::cuda::launch::{multiprocessors, push_args, smem_per_block_optin};
use crate::cuda::module::{fatbin_module, Module};
use crate::error::{Df11Error, Result, UnitDefect};
use crate::format::unit::UnitLayout;

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

/// The Huffman form on the device: the DF11 stream as in the file, for the block kernel
/// (`kernels/df11_decode.cu`), plus the segment index for the kernels of [`kernels`].
pub(crate) struct HuffmanBuffers {
    /// The segment index for the fused and segment kernels (`None`: stream too long for it).
    segments: Option<kernels::SegmentBuffers>,
    luts: CudaSlice<u8>,
    codes: CudaSlice<u8>,
    gaps: CudaSlice<u8>,
    positions: CudaSlice<u32>,
    status: std::sync::Mutex<CudaSlice<u32>>,
    lut_rows: usize,
    smem: u32,
    ctas_per_sm: u32,
    sms: u32,
    /// The unit's element count (the validated layout's).
    n_elements: usize,
}

/// The Huffman form's arrays on the device.
pub(crate) struct HuffmanArrays {
    pub(crate) luts: CudaSlice<u8>,
    /// The stream padded with zero bytes as [`HuffmanHost`] pads it.
    pub(crate) codes: CudaSlice<u8>,
    pub(crate) gaps: CudaSlice<u8>,
    pub(crate) positions: CudaSlice<u32>,
    pub(crate) segments: Option<kernels::SegmentBuffers>,
}

impl HuffmanBuffers {
    /// The Huffman form around its arrays on `device`, with the block kernel's launch settings
    /// (`lut_rows`, `max_block`: the most elements a block outputs, and `n_elements`: the
    /// validated layout's).
    pub(crate) fn new(
        device: &CudaDevice,
        arrays: HuffmanArrays,
        lut_rows: usize,
        max_block: usize,
        n_elements: usize,
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
        let sms = multiprocessors(device)? as u32;
        let max_smem = smem_per_block_optin(device)?;
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
            n_elements,
        })
    }

    /// Device bytes (`sign_mantissa` aside).
    pub(crate) fn device_bytes(&self) -> usize {
        self.luts.len()
            + self.codes.len()
            + self.gaps.len()
            + 4 * self.positions.len()
            + self.segments.as_ref().map_or(0, |s| s.device_bytes())
    }

    /// What the segment kernels need, if the form has a segment index.
    pub(crate) fn segment_args(&self) -> Option<kernels::UnitArgs<'_>> {
        Some(kernels::UnitArgs {
            luts: &self.luts,
            codes: &self.codes,
            lut_rows: self.lut_rows,
            n_words: (self.codes.len() / 4) as u32,
            n_elements: self.n_elements,
            segments: self.segments.as_ref()?,
        })
    }

    /// Decodes `blocks` with the block kernel into a fresh BF16 buffer whose element 0 is unit
    /// element [`decode_base`]`(layout, blocks)`.
    pub(crate) fn decode_blocks(
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
            let grid = n_blocks.min(self.sms * self.ctas_per_sm);
            let cfg = LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: self.smem,
            };
            let k = self.lut_rows as i32;
            let n_bytes = layout.n_bytes as i32;
            let n_elements = layout.n_elements as i32;
            let n_positions = self.positions.len() as i32;
            let (begin, end, base) = (blocks.start as i32, blocks.end as i32, out_base as i32);
            let status = self.status.lock().expect("status lock");
            let mut b = func.builder();
            push_args!(b; &self.luts, &self.codes, sm, &self.positions, &self.gaps, &out);
            push_args!(b; &k, &n_bytes, &n_elements, &n_positions, &*status);
            push_args!(b; &begin, &end, &base);
            // SAFETY: every buffer is sized from the validated layout, which is what the kernel
            // indexes by; the kernel guards all data-dependent reads and writes.
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from(len)))
    }

    /// Reads the status word (a device sync), clears it, and turns set flags into an error.
    pub(crate) fn check_status(&self, device: &CudaDevice) -> std::result::Result<(), UnitDefect> {
        let fail = |e: candle_core::Error| {
            UnitDefect::Stream(format!("could not read the decode status: {e}"))
        };
        let mut status = self.status.lock().expect("status lock");
        let flags = device.clone_dtoh(&*status).map_err(fail)?[0];
        if flags == 0 {
            return Ok(());
        }
        device
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
