//! Peak GPU memory during a run. On CUDA: the high-water mark of the stream-ordered memory pool
//! candle allocates from (weights, activations, KV cache, decoded DF11 weights), or, where the
//! pool reports nothing, the largest `total - free` seen by the driver at a sample point.
//! `None` on the CPU.

use std::path::Path;

use candle_core::Device;

use crate::error::{LlmError, Result};

/// Tracks the peak device memory of one run, on one device or on each device of a split model.
#[derive(Debug, Clone)]
pub struct PeakMemory {
    devices: Vec<(Device, Option<u64>)>,
}

impl PeakMemory {
    /// Starts tracking on `device`.
    pub fn new(device: &Device) -> Self {
        Self::on_devices(std::slice::from_ref(device))
    }

    /// Starts tracking on each of `devices`.
    pub fn on_devices(devices: &[Device]) -> Self {
        let mut m = Self {
            devices: devices.iter().map(|d| (d.clone(), None)).collect(),
        };
        m.sample();
        m
    }

    /// Records the memory in use now.
    pub fn sample(&mut self) {
        for (device, sampled) in &mut self.devices {
            if let Some(used) = driver_used_bytes(device) {
                *sampled = Some(sampled.map_or(used, |p| p.max(used)));
            }
        }
    }

    /// The peak of each device, in bytes; `None` for a device that is not a GPU.
    pub fn peaks(&mut self) -> Vec<Option<u64>> {
        self.sample();
        self.devices
            .iter()
            .map(|(device, sampled)| match pool_peak_bytes(device) {
                Some(p) if p > 0 => Some(p),
                _ => *sampled,
            })
            .collect()
    }

    /// The peak in bytes, summed over the devices; `None` when no device is a GPU.
    pub fn peak(&mut self) -> Option<u64> {
        self.peaks().into_iter().flatten().reduce(|a, b| a + b)
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

/// `(free, total)` bytes of the GPU `device`, as the driver reports them; `None` on the CPU.
pub fn device_memory(device: &Device) -> Option<(u64, u64)> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        use candle_core::cuda_backend::cudarc::driver::result;
        dev.cuda_stream().context().bind_to_thread().ok()?;
        let (free, total) = result::mem_get_info().ok()?;
        return Some((free as u64, total as u64));
    }
    let _ = device;
    None
}

/// Bytes of the weight files (`*.safetensors`) in `dir`: what a model's weights take at least
/// once loaded (the device forms of DF11 are a little larger than the stream, never smaller).
pub fn weight_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// `Err(OutOfMemory)` naming both sizes when `needed` bytes exceed the `free` ones of a device
/// with `total`; checked before loading, so that a model too large fails at once and clearly.
pub fn check_fits(path: &Path, device: &str, needed: u64, free: u64, total: u64) -> Result<()> {
    if needed > free {
        return Err(LlmError::OutOfMemory {
            path: path.to_path_buf(),
            device: device.to_string(),
            needed,
            free,
            total,
        });
    }
    Ok(())
}

/// Whether `e` is the CUDA driver's out-of-memory error (however candle wrapped it).
pub fn is_out_of_memory(e: &LlmError) -> bool {
    let text = format!("{e:?}");
    text.contains("CUDA_ERROR_OUT_OF_MEMORY") || text.contains("OutOfMemory")
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
        assert_eq!(device_memory(&Device::Cpu), None);
    }

    #[test]
    fn a_model_too_large_names_both_sizes() {
        let dir = Path::new("/models/big");
        let gib = 1u64 << 30;
        assert!(check_fits(dir, "cuda:0", 10 * gib, 11 * gib, 80 * gib).is_ok());
        let e = check_fits(dir, "cuda:0", 12 * gib + gib / 2, 11 * gib, 80 * gib).unwrap_err();
        assert!(is_out_of_memory(&e));
        assert_eq!(
            e.to_string(),
            "/models/big: out of GPU memory: loading needs at least 12.50 GiB (the weights), \
             cuda:0 has 11.00 GiB free of 80.00 GiB"
        );
        assert!(!is_out_of_memory(&LlmError::Interrupted));
    }

    #[test]
    fn weight_files_are_summed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.safetensors"), [0u8; 100]).unwrap();
        std::fs::write(dir.path().join("b.safetensors"), [0u8; 23]).unwrap();
        std::fs::write(dir.path().join("config.json"), [0u8; 1000]).unwrap();
        assert_eq!(weight_file_bytes(dir.path()), 123);
        assert_eq!(weight_file_bytes(&dir.path().join("missing")), 0);
    }
}
