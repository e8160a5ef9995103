//! Peak GPU memory during a run. On CUDA: the high-water mark of the stream-ordered memory pool
//! candle allocates from (weights, activations, KV cache, decoded DF11 weights), or, where the
//! pool reports nothing, the largest `total - free` seen by the driver at a sample point.
//! `None` on the CPU.

use candle_core::Device;

/// Tracks the peak device memory of one run.
#[derive(Debug, Clone)]
pub struct PeakMemory {
    device: Device,
    sampled: Option<u64>,
}

impl PeakMemory {
    /// Starts tracking on `device`.
    pub fn new(device: &Device) -> Self {
        let mut m = Self {
            device: device.clone(),
            sampled: None,
        };
        m.sample();
        m
    }

    /// Records the memory in use now.
    pub fn sample(&mut self) {
        if let Some(used) = driver_used_bytes(&self.device) {
            self.sampled = Some(self.sampled.map_or(used, |p| p.max(used)));
        }
    }

    /// The peak in bytes; `None` when the device is not a GPU.
    pub fn peak(&mut self) -> Option<u64> {
        self.sample();
        match pool_peak_bytes(&self.device) {
            Some(p) if p > 0 => Some(p),
            _ => self.sampled,
        }
    }
}

#[cfg(feature = "cuda")]
fn driver_used_bytes(device: &Device) -> Option<u64> {
    use candle_core::cuda_backend::cudarc::driver::result;
    let Device::Cuda(dev) = device else {
        return None;
    };
    dev.cuda_stream().context().bind_to_thread().ok()?;
    let (free, total) = result::mem_get_info().ok()?;
    Some(total.saturating_sub(free) as u64)
}

#[cfg(feature = "cuda")]
fn pool_peak_bytes(device: &Device) -> Option<u64> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let Device::Cuda(dev) = device else {
        return None;
    };
    let stream = dev.cuda_stream();
    let ctx = stream.context();
    ctx.bind_to_thread().ok()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut high: u64 = 0;
    // SAFETY: plain driver queries on the bound context's device, writing into locals.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .ok()?;
        sys::cuMemPoolGetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            (&mut high as *mut u64).cast(),
        )
        .result()
        .ok()?;
    }
    Some(high)
}

#[cfg(not(feature = "cuda"))]
fn driver_used_bytes(_device: &Device) -> Option<u64> {
    None
}

#[cfg(not(feature = "cuda"))]
fn pool_peak_bytes(_device: &Device) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_on_cpu() {
        assert_eq!(PeakMemory::new(&Device::Cpu).peak(), None);
    }
}
