//! Page-locked host memory for an offloaded unit's arrays, made fast: an anonymous mapping
//! advised to use transparent huge pages, its pages faulted in by every core, then registered
//! with the driver (`cuMemHostRegister`). `cuMemHostAlloc` locks ~2.4 GB/s on an H200's host
//! whatever the threads; this way locks 13-30 GB/s with 4-16 threads (`kernels/harness/
//! pinned_alloc.cu`, docs/PERFORMANCE.md), and the copy engine reads both at the same speed.

use std::marker::PhantomData;
use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{sys, CudaContext, DeviceRepr};
use candle_core::cuda_backend::WrapErr;
use rayon::prelude::*;

/// Arrays below this size take `cuMemHostAlloc` instead (a mapping rounds up to huge pages).
pub(crate) const MIN_BYTES: usize = 2 << 20;

/// `len` values of `T` in page-locked host memory registered with `ctx`'s device (zeroed when
/// made); unregistered and unmapped when dropped.
pub(crate) struct LockedHost<T> {
    map: memmap2::MmapMut,
    len: usize,
    ctx: Arc<CudaContext>,
    _values: PhantomData<T>,
}

// SAFETY: the memory is owned by this value alone (a private anonymous mapping); `T` values are
// plain device-representable data.
unsafe impl<T: Send> Send for LockedHost<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Sync> Sync for LockedHost<T> {}

impl<T: DeviceRepr> LockedHost<T> {
    /// Maps, faults in (all cores) and registers `len` values.
    pub(crate) fn new(ctx: &Arc<CudaContext>, len: usize) -> candle_core::Result<Self> {
        let bytes = (len * std::mem::size_of::<T>()).max(1).div_ceil(MIN_BYTES) * MIN_BYTES;
        let mut map = memmap2::MmapMut::map_anon(bytes).map_err(candle_core::Error::wrap)?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        // One write a 4 KiB page faults every page in (a whole huge page where the kernel
        // gives one), in parallel.
        map.par_chunks_mut(MIN_BYTES).for_each(|chunk| {
            for page in chunk.chunks_mut(4096) {
                page[0] = 0;
            }
        });
        ctx.bind_to_thread().w()?;
        // SAFETY: the range is a live mapping of `bytes` bytes owned by `map`, unregistered
        // before it is unmapped (Drop).
        unsafe { sys::cuMemHostRegister_v2(map.as_mut_ptr().cast(), bytes, 0) }
            .result()
            .w()?;
        Ok(Self {
            map,
            len,
            ctx: ctx.clone(),
            _values: PhantomData,
        })
    }

    /// The values.
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the mapping holds at least `len` values, page-aligned, initialised (zeroed
        // when made, written as `T` after).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast(), self.len) }
    }

    /// The values, to write.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().cast(), self.len) }
    }
}

impl<T> Drop for LockedHost<T> {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: registered in `new`; no copy reads it any more (its owner is dropped).
            let _ = unsafe { sys::cuMemHostUnregister(self.map.as_mut_ptr().cast()) };
        }
    }
}
