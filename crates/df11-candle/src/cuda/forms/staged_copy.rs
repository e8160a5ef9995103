//! Large host-to-device copies at load through pinned staging buffers.
//!
//! A copy from pageable memory (a safetensors file's mapped pages) goes through the driver's
//! own staging one piece at a time, with the calling thread touching every page: ~5-7 GB/s on
//! the H100 machine (`DF11_LOAD_PROFILE`, docs/PERFORMANCE.md). Here the rayon pool copies each
//! piece into one of [`SLOTS`] pinned buffers (the mapped pages faulted in by several threads)
//! while the DMA of the pieces before it runs on the compute stream; a buffer is refilled only
//! after its last DMA completed (its event). Arrays under [`STAGE_MIN`] bytes take the driver's
//! copy. [`crate::Df11Options::staged_copy`] off turns staging off (every copy the driver's).
//!
//! The pinned buffers (`SLOTS x PIECE` bytes a device) are made at the first large copy and
//! kept for the process. Copies are serialized by a lock held while the pool copies; loads run
//! on the caller's thread (a rayon task calling in could steal a task that waits on the lock).

use std::sync::Mutex;

use candle_core::cuda_backend::cudarc::driver::{
    result, sys, CudaSlice, CudaViewMut, DevicePtrMut, DeviceRepr,
};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{DType, Shape, Tensor};
use rayon::prelude::*;

/// Bytes a staging buffer holds.
const PIECE: usize = 16 << 20;
/// Staging buffers a device: the DMA of up to `SLOTS - 1` pieces runs while the next is filled.
const SLOTS: usize = 4;
/// Smaller arrays take the driver's copy (one call, nothing to overlap).
pub(crate) const STAGE_MIN: usize = 4 << 20;
/// What one thread copies of a piece.
const SPLIT: usize = 1 << 20;

/// One pinned buffer and the event recorded after its last DMA.
struct Slot {
    host: *mut u8,
    event: sys::CUevent,
}

/// A device's staging buffers.
struct Stager {
    ordinal: usize,
    slots: Vec<Slot>,
}

// SAFETY: the buffers are page-locked host memory and the events driver handles, both usable
// from any thread; every use goes through the `STAGERS` lock.
unsafe impl Send for Stager {}

static STAGERS: Mutex<Vec<Stager>> = Mutex::new(Vec::new());

impl Stager {
    fn new(ordinal: usize) -> candle_core::Result<Self> {
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            // SAFETY: plain allocation calls on the bound context; the pointers are owned here
            // (kept for the process).
            let host = unsafe { result::malloc_host(PIECE, 0) }.w()? as *mut u8;
            let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).w()?;
            slots.push(Slot { host, event });
        }
        Ok(Self { ordinal, slots })
    }
}

/// Copies `src` to the start of `dst` (which must hold at least `src.len()` bytes), in the
/// device's compute-stream order. The host returns once the last piece is queued; `src` is not
/// read after that. `staged`: large copies go through the pinned buffers
/// ([`crate::Df11Options::staged_copy`]); else the driver's copy.
pub(crate) fn copy_to_device(
    device: &CudaDevice,
    src: &[u8],
    dst: &mut CudaViewMut<'_, u8>,
    staged: bool,
) -> candle_core::Result<()> {
    if dst.len() < src.len() {
        candle_core::bail!("staged copy of {} bytes into {}", src.len(), dst.len());
    }
    let stream = device.cuda_stream();
    if src.len() < STAGE_MIN || !staged {
        let mut head = dst.slice_mut(0..src.len());
        return stream.memcpy_htod(src, &mut head).w();
    }
    stream.context().bind_to_thread().w()?;
    let ordinal = stream.context().ordinal();
    let mut stagers = STAGERS.lock().expect("staging lock");
    let at = match stagers.iter().position(|s| s.ordinal == ordinal) {
        Some(i) => i,
        None => {
            stagers.push(Stager::new(ordinal)?);
            stagers.len() - 1
        }
    };
    let slots = &stagers[at].slots;
    let (base, _sync) = dst.device_ptr_mut(&stream);
    for (i, piece) in src.chunks(PIECE).enumerate() {
        let slot = &slots[i % SLOTS];
        // SAFETY: a live event (never recorded: returns at once); after it, no DMA reads the
        // buffer, which holds PIECE >= piece.len() bytes and is only touched under the lock.
        let host = unsafe {
            result::event::synchronize(slot.event).w()?;
            std::slice::from_raw_parts_mut(slot.host, piece.len())
        };
        host.par_chunks_mut(SPLIT)
            .zip(piece.par_chunks(SPLIT))
            .for_each(|(d, s)| d.copy_from_slice(s));
        // SAFETY: `base + i * PIECE` is inside `dst` for piece.len() bytes (dst holds src's
        // length); the pinned buffer is not refilled before the event recorded after this copy.
        unsafe {
            result::memcpy_htod_async(base + (i * PIECE) as u64, &*host, stream.cu_stream()).w()?;
            result::event::record(slot.event, stream.cu_stream()).w()?;
        }
    }
    Ok(())
}

/// `values` in a new device buffer (staged where large and `staged`).
pub(crate) fn upload<T: DeviceRepr + bytemuck::Pod>(
    device: &CudaDevice,
    values: &[T],
    staged: bool,
) -> candle_core::Result<CudaSlice<T>> {
    // SAFETY: every element is written by the copy before anything reads the buffer (same
    // stream).
    let mut dst = unsafe { device.alloc::<T>(values.len()) }?;
    let bytes: &[u8] = bytemuck::cast_slice(values);
    {
        // SAFETY: the byte view covers exactly the buffer's elements.
        let mut view = unsafe { dst.transmute_mut::<u8>(bytes.len()) }
            .ok_or_else(|| candle_core::Error::Msg("staged copy: byte view".into()))?;
        copy_to_device(device, bytes, &mut view, staged)?;
    }
    Ok(dst)
}

/// A tensor of `dtype` and `shape` on `device` from its little-endian bytes (a safetensors
/// tensor's data), staged where large; `None` for dtypes left to candle's own upload.
pub(crate) fn tensor_from_bytes(
    device: &CudaDevice,
    bytes: &[u8],
    dtype: DType,
    shape: &Shape,
    staged: bool,
) -> candle_core::Result<Option<Tensor>> {
    if !staged
        || bytes.len() != shape.elem_count() * dtype.size_in_bytes()
        || bytes.len() < STAGE_MIN
    {
        return Ok(None);
    }
    // The bytes of a mapped file need not be aligned for the element type: copied as bytes.
    let n = shape.elem_count();
    macro_rules! typed {
        ($t:ty) => {{
            // SAFETY: written in full by the copy below before any read (same stream).
            let mut dst = unsafe { device.alloc::<$t>(n) }?;
            {
                // SAFETY: the byte view covers exactly the buffer's elements.
                let mut view = unsafe { dst.transmute_mut::<u8>(bytes.len()) }
                    .ok_or_else(|| candle_core::Error::Msg("staged copy: byte view".into()))?;
                copy_to_device(device, bytes, &mut view, staged)?;
            }
            candle_core::CudaStorage::wrap_cuda_slice(dst, device.clone())
        }};
    }
    let storage = match dtype {
        DType::BF16 => typed!(half::bf16),
        DType::F16 => typed!(half::f16),
        DType::F32 => typed!(f32),
        _ => return Ok(None),
    };
    Ok(Some(Tensor::from_storage(
        candle_core::Storage::Cuda(storage),
        shape.clone(),
        candle_core::op::BackpropOp::none(),
        false,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    fn cuda() -> CudaDevice {
        match candle_core::Device::new_cuda(0).expect("the GPU suite runs on a CUDA device") {
            candle_core::Device::Cuda(d) => d,
            _ => unreachable!(),
        }
    }

    #[test]
    fn staged_copies_arrive_byte_for_byte() {
        let device = cuda();
        // Below the threshold, at it, and over several rounds of the buffers with a ragged end.
        for (i, n) in [
            STAGE_MIN - 1,
            STAGE_MIN,
            2 * PIECE + 12_345,
            SLOTS * PIECE * 2 + 3,
        ]
        .into_iter()
        .enumerate()
        {
            let src = bytes(n, 7 + i as u64);
            let dst = upload(&device, &src, true).unwrap();
            assert_eq!(device.clone_dtoh(&dst).unwrap(), src, "{n} bytes");
        }
    }

    #[test]
    fn tensors_from_unaligned_file_bytes() {
        let device = cuda();
        let n = (STAGE_MIN / 2) + 4099;
        // Offset by one byte: a mapped file's tensor data need not be aligned for its type.
        let raw = bytes(2 * n + 1, 99);
        let data = &raw[1..];
        let shape = Shape::from((n,));
        let x = tensor_from_bytes(&device, data, DType::BF16, &shape, true)
            .unwrap()
            .expect("large enough to stage");
        let want = Tensor::from_raw_buffer(data, DType::BF16, &[n], &candle_core::Device::Cpu)
            .unwrap()
            .to_vec1::<half::bf16>()
            .unwrap();
        let got = x.to_vec1::<half::bf16>().unwrap();
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(got.len(), want.len());
        // Not staged where the options say so: left to candle.
        assert!(tensor_from_bytes(&device, data, DType::BF16, &shape, false)
            .unwrap()
            .is_none());
        // Small or unknown: left to candle.
        assert!(
            tensor_from_bytes(&device, &data[..64], DType::BF16, &Shape::from((32,)), true)
                .unwrap()
                .is_none()
        );
    }
}
