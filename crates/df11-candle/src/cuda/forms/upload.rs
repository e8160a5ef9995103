//! How a unit's host arrays reach its device: at once for a resident unit at load, or, for an
//! offloaded unit being staged ([`crate::nn::offload`]), on the device's copy stream from
//! pinned memory, so the copy runs while the compute stream works on the layer before.
//!
//! Ordering of a staged copy (all on the GPU, the host never waits): each destination is
//! allocated on the compute stream (candle's stream-ordered pool); the copy stream waits for an
//! event recorded there, copies, and records the `ready` event; the compute stream waits for
//! `ready` where the unit is first used ([`Ready::wait`]). Its memory is freed on the compute
//! stream after the work queued on it, and reused in that order.
//!
//! The copy stream is a raw driver stream, not a cudarc one: creating a cudarc stream would put
//! the context in multi-stream mode and make every candle allocation record events (and those
//! records would land inside captured CUDA graphs).

use std::sync::{Arc, Mutex};

use candle_core::cuda_backend::cudarc::driver::{
    result, sys, CudaContext, CudaSlice, DevicePtr, DeviceRepr, PinnedHostSlice, ValidAsZeroBits,
};
use candle_core::cuda_backend::{CudaDevice, WrapErr};

use super::locked_host::{LockedHost, MIN_BYTES as MIN_LOCKED_BYTES};

/// An array of a unit's device form on the host: ordinary memory while it is only uploaded
/// once, pinned (page-locked) while it is kept for staging.
pub(crate) enum HostArray<T> {
    Pageable(Vec<T>),
    Pinned(PinnedHostSlice<T>),
    /// Large arrays of an offloaded unit ([`LockedHost`]: locked in parallel).
    Locked(LockedHost<T>),
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + 'static> HostArray<T> {
    /// The values.
    pub(crate) fn slice(&self) -> candle_core::Result<&[T]> {
        match self {
            Self::Pageable(v) => Ok(v),
            Self::Pinned(p) => p.as_slice().w(),
            Self::Locked(l) => Ok(l.as_slice()),
        }
    }

    /// Elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Pageable(v) => v.len(),
            Self::Pinned(p) => p.len(),
            Self::Locked(l) => l.as_slice().len(),
        }
    }

    /// Bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }

    /// Moves the values into pinned memory of `ctx` (nothing when already pinned or empty).
    pub(crate) fn pin(&mut self, ctx: &Arc<CudaContext>) -> candle_core::Result<()> {
        let Self::Pageable(v) = self else {
            return Ok(());
        };
        if v.is_empty() {
            return Ok(());
        }
        // SAFETY: every element is written from `v` before the memory is read.
        let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<T>(v.len(), 0) }.w()?;
        pinned.as_mut_slice().w()?.copy_from_slice(v);
        *self = Self::Pinned(pinned);
        Ok(())
    }
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + 'static> HostArray<T> {
    /// `values` in new page-locked memory of `ctx` (one copy, in parallel, no pageable array
    /// in between).
    pub(crate) fn pinned_copy(ctx: &Arc<CudaContext>, values: &[T]) -> candle_core::Result<Self>
    where
        T: Send + Sync,
    {
        if values.is_empty() {
            return Ok(Self::Pageable(Vec::new()));
        }
        if std::mem::size_of_val(values) >= MIN_LOCKED_BYTES {
            use rayon::prelude::*;
            let mut locked = LockedHost::new(ctx, values.len())?;
            locked
                .as_mut_slice()
                .par_chunks_mut(1 << 20)
                .zip(values.par_chunks(1 << 20))
                .for_each(|(d, s)| d.copy_from_slice(s));
            return Ok(Self::Locked(locked));
        }
        // SAFETY: every element is written from `values` before the memory is read.
        let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<T>(values.len(), 0) }.w()?;
        pinned.as_mut_slice().w()?.copy_from_slice(values);
        Ok(Self::Pinned(pinned))
    }

    /// The device array `src` copied straight into new page-locked memory (an offloaded unit's
    /// form built on the GPU: a pageable copy first would cost a page fault per 4 KiB). The copy
    /// is queued on `device`'s stream: synchronize it before the values are read or `src` freed.
    pub(crate) fn pinned_from_device(
        device: &CudaDevice,
        src: &CudaSlice<T>,
    ) -> candle_core::Result<Self> {
        if src.is_empty() {
            return Ok(Self::Pageable(Vec::new()));
        }
        let stream = device.cuda_stream();
        if src.len() * std::mem::size_of::<T>() >= MIN_LOCKED_BYTES {
            let mut locked = LockedHost::new(stream.context(), src.len())?;
            stream.memcpy_dtoh(src, locked.as_mut_slice()).w()?;
            return Ok(Self::Locked(locked));
        }
        // SAFETY: the copy below writes every element before the memory is read (reads wait
        // for the copy's event).
        let mut pinned =
            unsafe { stream.context().alloc_pinned_with_flags::<T>(src.len(), 0) }.w()?;
        stream.memcpy_dtoh(src, &mut pinned).w()?;
        Ok(Self::Pinned(pinned))
    }
}

impl<T> From<Vec<T>> for HostArray<T> {
    fn from(v: Vec<T>) -> Self {
        Self::Pageable(v)
    }
}

/// Where uploads go.
pub(crate) enum Uploader<'a> {
    /// Copied now, in the compute stream's order.
    Now(&'a CudaDevice),
    /// Copied on the device's copy stream ([`Staging`]).
    Staged(&'a Staging),
}

impl Uploader<'_> {
    /// The device.
    pub(crate) fn device(&self) -> &CudaDevice {
        match self {
            Self::Now(d) => d,
            Self::Staged(s) => &s.device,
        }
    }

    /// `src` in a new device buffer.
    pub(crate) fn put<T: DeviceRepr + ValidAsZeroBits + Copy + 'static>(
        &self,
        src: &HostArray<T>,
    ) -> candle_core::Result<CudaSlice<T>> {
        let values = src.slice()?;
        match self {
            Self::Staged(s)
                if matches!(src, HostArray::Pinned(_) | HostArray::Locked(_))
                    && !values.is_empty() =>
            {
                s.copy(values)
            }
            _ => self.device().clone_htod(values),
        }
    }
}

/// A raw driver stream or event handle (plain addresses the driver owns).
#[derive(Clone, Copy)]
struct Handle<H>(H);
// SAFETY: driver handles may be used from any thread of the process.
unsafe impl<H> Send for Handle<H> {}
// SAFETY: as above; the driver serialises use of a stream.
unsafe impl<H> Sync for Handle<H> {}

/// Copy streams, one per device ordinal (made on first use, kept for the process).
static COPY_STREAMS: Mutex<Vec<(usize, Handle<sys::CUstream>)>> = Mutex::new(Vec::new());

fn copy_stream(device: &CudaDevice) -> candle_core::Result<sys::CUstream> {
    let ctx = device.cuda_stream().context().clone();
    let ordinal = ctx.ordinal();
    let mut streams = COPY_STREAMS.lock().expect("copy stream lock");
    if let Some((_, s)) = streams.iter().find(|(o, _)| *o == ordinal) {
        return Ok(s.0);
    }
    ctx.bind_to_thread().w()?;
    let stream = result::stream::create(result::stream::StreamKind::NonBlocking).w()?;
    streams.push((ordinal, Handle(stream)));
    Ok(stream)
}

/// An event the compute stream waits for before it uses a staged unit.
pub(crate) struct Ready {
    event: Handle<sys::CUevent>,
    device: CudaDevice,
}

impl Ready {
    /// Makes the compute stream wait for the copies (queued; the host does not wait).
    pub(crate) fn wait(&self) -> candle_core::Result<()> {
        let stream = self.device.cuda_stream();
        stream.context().bind_to_thread().w()?;
        // SAFETY: both handles are live; the wait is queued on the compute stream.
        unsafe {
            result::stream::wait_event(
                stream.cu_stream(),
                self.event.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .w()
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        // SAFETY: destroying an event whose record is pending is allowed (its resources are
        // released once it completes); the handle is not used again.
        unsafe {
            let _ = result::event::destroy(self.event.0);
        }
    }
}

/// The staging of one unit: the copies queued so far on the device's copy stream.
pub(crate) struct Staging {
    device: CudaDevice,
    stream: Handle<sys::CUstream>,
}

impl Staging {
    /// Starts staging a unit on `device`'s copy stream.
    pub(crate) fn begin(device: &CudaDevice) -> candle_core::Result<Self> {
        Ok(Self {
            device: device.clone(),
            stream: Handle(copy_stream(device)?),
        })
    }

    /// `values` (pinned) in a new buffer: allocated on the compute stream, copied on the copy
    /// stream once the allocation is in place.
    fn copy<T: DeviceRepr>(&self, values: &[T]) -> candle_core::Result<CudaSlice<T>> {
        let compute = self.device.cuda_stream();
        // SAFETY: the buffer is written by the copy before anything reads it (the compute
        // stream waits for `ready` first).
        let dst = unsafe { self.device.alloc::<T>(values.len()) }?;
        crate::cuda::streams::order(
            (compute.context(), compute.cu_stream()),
            (compute.context(), self.stream.0),
        )?;
        compute.context().bind_to_thread().w()?;
        {
            let (ptr, _guard) = dst.device_ptr(&compute);
            // SAFETY: `values` is pinned host memory that outlives the copy (the staged unit
            // keeps its host arrays for the process); `dst` holds `values.len()` elements.
            unsafe { result::memcpy_htod_async(ptr, values, self.stream.0) }.w()?;
        }
        Ok(dst)
    }

    /// The event that marks every copy queued so far.
    pub(crate) fn finish(self) -> candle_core::Result<Ready> {
        self.device.cuda_stream().context().bind_to_thread().w()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).w()?;
        // SAFETY: live handles.
        unsafe { result::event::record(event, self.stream.0) }.w()?;
        Ok(Ready {
            event: Handle(event),
            device: self.device,
        })
    }
}
