//! Ordering work between CUDA streams with raw driver events, the host never waiting: between
//! a device's compute stream and its copy stream ([`crate::cuda::upload`]), and between the streams
//! of two devices (a split model hands activations from one GPU to the next).
//!
//! cudarc's cross-context copy waits for the source's stream, but the source's stream does
//! not wait for the copy (cudarc tracks such reads only in contexts of several cudarc streams;
//! candle keeps one per device): [`wait_for`] adds that wait.

use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaContext};
use candle_core::cuda_backend::{CudaDevice, WrapErr};

/// Makes `waiter`'s stream wait, on the GPU, for the work queued so far on `producer`'s stream
/// (the two may be different GPUs).
///
/// Each half runs with its own stream's context current: candle's devices use the per-thread
/// default stream, a handle (`CU_STREAM_PER_THREAD`) that names the stream of whichever context
/// is current, so a wait queued with the producer's context current would make the producer
/// wait for itself.
pub fn wait_for(waiter: &CudaDevice, producer: &CudaDevice) -> candle_core::Result<()> {
    let (from, to) = (producer.cuda_stream(), waiter.cuda_stream());
    order(
        (from.context(), from.cu_stream()),
        (to.context(), to.cu_stream()),
    )
}

/// A stream and the context it belongs to (current while work is queued on it).
pub(crate) type Queue<'a> = (&'a CudaContext, sys::CUstream);

/// Records an event on `from` and makes `to` wait for it, each with its own context current.
pub(crate) fn order(from: Queue<'_>, to: Queue<'_>) -> candle_core::Result<()> {
    from.0.bind_to_thread().w()?;
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).w()?;
    // SAFETY: live handles; a stream may wait for an event of another context; the event is
    // destroyed after the wait is queued (allowed: its resources go once it completes).
    unsafe {
        let queued = result::event::record(event, from.1).and_then(|()| {
            to.0.bind_to_thread()?;
            result::stream::wait_event(to.1, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        });
        let _ = from.0.bind_to_thread();
        let _ = result::event::destroy(event);
        queued.w()
    }
}

/// Waits for `device`'s stream unless it is capturing a graph.
pub fn sync_unless_capturing(device: &CudaDevice) -> candle_core::Result<()> {
    let stream = device.cuda_stream();
    let capturing = stream.capture_status().ok()
        != Some(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    if capturing {
        return Ok(());
    }
    stream.synchronize().w()
}

/// The work queued on one stream up to a point (a recorded event), for another stream to wait
/// for later than it was recorded (decode-ahead: the compute stream waits only where it first
/// uses what the side stream decoded).
pub(crate) struct Marker(sys::CUevent);

// SAFETY: an event handle may be used from any thread; the driver serialises its use.
unsafe impl Send for Marker {}
// SAFETY: as above.
unsafe impl Sync for Marker {}

impl Marker {
    /// Marks the work queued on `on` so far.
    pub(crate) fn record(on: Queue<'_>) -> candle_core::Result<Self> {
        on.0.bind_to_thread().w()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).w()?;
        // SAFETY: live handles, `on`'s context current.
        if let Err(e) = unsafe { result::event::record(event, on.1) } {
            // SAFETY: the event was created above and is not used again.
            let _ = unsafe { result::event::destroy(event) };
            return Err(e).w();
        }
        Ok(Self(event))
    }

    /// Makes `waiter` wait (on the GPU) for the marked work.
    pub(crate) fn wait(&self, waiter: Queue<'_>) -> candle_core::Result<()> {
        waiter.0.bind_to_thread().w()?;
        // SAFETY: live handles, `waiter`'s context current; a stream may wait for an event of
        // any context.
        unsafe {
            result::stream::wait_event(
                waiter.1,
                self.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .w()
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        // SAFETY: destroying an event whose record or waits are pending is allowed (its
        // resources go once it completes); the handle is not used again.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// `device`'s stream as a [`Queue`].
pub(crate) fn queue(device: &CudaDevice) -> (std::sync::Arc<CudaContext>, sys::CUstream) {
    let s = device.cuda_stream();
    (s.context().clone(), s.cu_stream())
}
