//! Moving activations between the devices of a split model ([`crate::placement`]).
//!
//! Between two CUDA devices the copy is a peer copy on the receiving device's stream, ordered
//! after the sending stream's work by an event (cudarc's cross-context `memcpy_dtod`), and the
//! sending stream's later work after the copy (`df11_candle::cuda::streams`), with peer
//! access enabled once per pair where the hardware allows it (else the driver stages through the
//! host). Anything else goes through candle's `to_device`, and so do a split's hand-overs where
//! [`SplitCopy::peer`] is off (for diagnosis).

use candle_core::{Device, Tensor};

use crate::error::Result;

/// How a split model's activations cross between GPUs ([`hand_over`]; a field of
/// [`crate::DecodeOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitCopy {
    /// A peer copy on the receiving device's stream, ordered by events (`DF11_PEER_COPY`); off,
    /// candle's copy through the host (diagnosis).
    pub peer: bool,
    /// The host also waits for both devices around each copy (`DF11_SPLIT_SYNC`; diagnosis: no
    /// work of one device then overlaps the other's across the boundary).
    pub host_sync: bool,
}

impl Default for SplitCopy {
    fn default() -> Self {
        Self {
            peer: true,
            host_sync: false,
        }
    }
}

/// `t` on `device`: `t` itself when it is already there, else a contiguous copy.
pub fn to_device(t: &Tensor, device: &Device) -> Result<Tensor> {
    if t.device().same_device(device) {
        return Ok(t.clone());
    }
    #[cfg(feature = "cuda")]
    if let (Device::Cuda(_), Device::Cuda(dst)) = (t.device(), device) {
        return cuda::peer_copy(&t.contiguous()?, dst);
    }
    Ok(t.to_device(device)?)
}

/// A segment's outputs on the next segment's device, ordered on the GPUs by events (the copy
/// after the sender's work, the sender's later work after the copy); the host does not wait.
/// `copy` says how ([`SplitCopy`]: peer copies or candle's, the host waiting or not).
///
/// History: on two H100s the split left one GPU's tokens after 4-9 steps until the devices got
/// streams of their own (`crate::device::open_cuda`; the per-thread default stream's handle is
/// resolved against whichever context is current, so one of the two waits landed on the wrong
/// GPU) and the waits bound each stream's context. Since, every ordering setting gives one
/// GPU's tokens over 32 steps of the 8B-shaped model, both device orders, graph and no graph
/// (`scripts/gpu-split-check.sh`, docs/PERFORMANCE.md).
pub fn hand_over(carry: &[Tensor], to: &Device, copy: SplitCopy) -> Result<Vec<Tensor>> {
    let crossing = carry.first().is_some_and(|t| !t.device().same_device(to));
    let sync = crossing && copy.host_sync;
    if sync {
        carry[0].device().synchronize()?;
    }
    let moved = carry
        .iter()
        .map(|t| match copy.peer {
            true => to_device(t, to),
            false if t.device().same_device(to) => Ok(t.clone()),
            false => Ok(t.to_device(to)?),
        })
        .collect::<Result<Vec<_>>>()?;
    if sync {
        to.synchronize()?;
    }
    Ok(moved)
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{sys, CudaSlice, DeviceRepr};
    use candle_core::cuda_backend::{CudaDType, CudaDevice, WrapErr};
    use candle_core::op::BackpropOp;
    use candle_core::{CudaStorage, DType, Storage, Tensor};

    use crate::error::{LlmError, Result};

    /// Ordinal pairs whose peer access was asked for already.
    static PEERS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

    /// Lets `dst`'s context read `src`'s memory directly, where the hardware allows (once per
    /// pair; failure only leaves the host-staged copy).
    fn enable_peer_access(src: &CudaDevice, dst: &CudaDevice) {
        let (s, d) = (
            src.cuda_stream().context().clone(),
            dst.cuda_stream().context().clone(),
        );
        let pair = (s.ordinal(), d.ordinal());
        let mut done = PEERS.lock().expect("peer lock");
        if pair.0 == pair.1 || done.contains(&pair) {
            return;
        }
        done.push(pair);
        // SAFETY: driver queries and a context setting on live contexts; errors are ignored
        // (already enabled, or no peer path: the copy then goes through the host).
        unsafe {
            let mut can: i32 = 0;
            if sys::cuDeviceCanAccessPeer(&mut can, d.cu_device(), s.cu_device())
                != sys::CUresult::CUDA_SUCCESS
                || can == 0
            {
                return;
            }
            if d.bind_to_thread().is_ok() {
                let _ = sys::cuCtxEnablePeerAccess(s.cu_ctx(), 0);
            }
        }
    }

    fn copy_slice<T: CudaDType + DeviceRepr>(
        storage: &CudaStorage,
        start: usize,
        len: usize,
        dst: &CudaDevice,
    ) -> Result<CudaStorage> {
        let src = storage.as_cuda_slice::<T>()?.slice(start..start + len);
        let stream = dst.cuda_stream();
        // SAFETY: every element is written by the copy before the storage is used.
        let mut out: CudaSlice<T> = unsafe { stream.alloc::<T>(len) }.w()?;
        // cudarc's cross-context copy waits for the sender's stream (an event recorded there);
        // between two streams of one context (two devices on one GPU) it does not, with event
        // tracking off (`crate::device::open_cuda`): that wait is added here. Nothing makes the
        // sender's later work, which may reuse the source's memory once it is freed, wait for
        // the copy: that wait is added after it.
        let sender = storage.device();
        if sender.cuda_stream().context().cu_ctx() == stream.context().cu_ctx() {
            df11_candle::cuda::streams::wait_for(dst, sender)?;
        }
        stream.memcpy_dtod(&src, &mut out).w()?;
        df11_candle::cuda::streams::wait_for(sender, dst)?;
        Ok(CudaStorage::wrap_cuda_slice(out, dst.clone()))
    }

    /// A copy of contiguous `t` on `dst`.
    pub(super) fn peer_copy(t: &Tensor, dst: &CudaDevice) -> Result<Tensor> {
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cuda(src) = &*storage else {
            return Err(LlmError::Usage("peer copy of a tensor not on CUDA".into()));
        };
        enable_peer_access(src.device(), dst);
        let (start, len) = (layout.start_offset(), layout.shape().elem_count());
        if len == 0 {
            drop(storage);
            return Ok(t.to_device(&candle_core::Device::Cuda(dst.clone()))?);
        }
        let out = match t.dtype() {
            DType::BF16 => copy_slice::<half::bf16>(src, start, len, dst)?,
            DType::F16 => copy_slice::<half::f16>(src, start, len, dst)?,
            DType::F32 => copy_slice::<f32>(src, start, len, dst)?,
            DType::U32 => copy_slice::<u32>(src, start, len, dst)?,
            DType::I64 => copy_slice::<i64>(src, start, len, dst)?,
            DType::U8 => copy_slice::<u8>(src, start, len, dst)?,
            _ => {
                drop(storage);
                return Ok(t.to_device(&candle_core::Device::Cuda(dst.clone()))?);
            }
        };
        drop(storage);
        Ok(Tensor::from_storage(
            Storage::Cuda(out),
            t.shape().clone(),
            BackpropOp::none(),
            false,
        ))
    }
}
