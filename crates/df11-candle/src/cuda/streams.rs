//! Ordering work between CUDA streams with raw driver events, the host never waiting: between
//! a device's compute stream and its copy stream ([`super::upload`]), and between the streams
//! of two devices (a split model hands activations from one GPU to the next).
//!
//! cudarc orders a cross-context copy only for contexts that track events (those with more
//! than one cudarc stream); candle keeps one stream per device, so nothing orders a copy
//! between two GPUs unless the caller does: [`wait_for`].

use candle_core::cuda_backend::cudarc::driver::{result, sys};
use candle_core::cuda_backend::{CudaDevice, WrapErr};

/// Makes `waiter`'s stream wait, on the GPU, for the work queued so far on `producer`'s stream
/// (the two may be different GPUs).
pub fn wait_for(waiter: &CudaDevice, producer: &CudaDevice) -> candle_core::Result<()> {
    let from = producer.cuda_stream();
    from.context().bind_to_thread().w()?;
    order(from.cu_stream(), waiter.cuda_stream().cu_stream())
}

/// Records an event on `from` (whose context is current) and makes `to` wait for it.
pub(crate) fn order(from: sys::CUstream, to: sys::CUstream) -> candle_core::Result<()> {
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).w()?;
    // SAFETY: live handles; a stream may wait for an event of another context; the event is
    // destroyed after the wait is queued (allowed: its resources go once it completes).
    unsafe {
        let queued = result::event::record(event, from).and_then(|()| {
            result::stream::wait_event(to, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        });
        let _ = result::event::destroy(event);
        queued.w()
    }
}
