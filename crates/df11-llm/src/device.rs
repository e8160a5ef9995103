//! Picking the device and the compute dtype.

use candle_core::{DType, Device};

use crate::args::ComputeDtype;
use crate::error::{LlmError, Result};

/// The CPU when `cpu` is set or CUDA is not compiled in, else CUDA device 0.
pub fn select_device(cpu: bool) -> Result<Device> {
    if cpu || !cfg!(feature = "cuda") {
        return Ok(Device::Cpu);
    }
    Ok(Device::new_cuda(0)?)
}

/// The CUDA devices of `ordinals`, each created once (a device index twice, or one this machine
/// does not have, is an error naming it).
pub fn cuda_devices(ordinals: &[usize]) -> Result<Vec<Device>> {
    for (i, o) in ordinals.iter().enumerate() {
        if ordinals[..i].contains(o) {
            return Err(LlmError::Usage(format!(
                "--devices: device {o} is named twice"
            )));
        }
    }
    let count = cuda_device_count();
    if let Some(&missing) = ordinals.iter().find(|&&o| o >= count) {
        return Err(LlmError::NoSuchDevice {
            index: missing,
            count,
        });
    }
    ordinals.iter().map(|&o| Ok(Device::new_cuda(o)?)).collect()
}

/// CUDA devices this machine has (0 without CUDA or without a driver).
pub fn cuda_device_count() -> usize {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::result;
        if result::init().is_ok() {
            return result::device::get_count().map_or(0, |n| n.max(0) as usize);
        }
    }
    0
}

/// The requested dtype, or the default for `device`: BF16 on a GPU, F32 on the CPU (where
/// candle's BF16 matmul is emulated and slow).
pub fn select_dtype(requested: Option<ComputeDtype>, device: &Device) -> DType {
    match requested {
        Some(d) => d.into(),
        None if device.is_cpu() => DType::F32,
        None => DType::BF16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_checked() {
        let e = cuda_devices(&[0, 0]).unwrap_err().to_string();
        assert!(e.contains("device 0 is named twice"), "{e}");
        if cuda_device_count() < 8 {
            let e = cuda_devices(&[7]).unwrap_err();
            assert!(matches!(e, LlmError::NoSuchDevice { index: 7, .. }), "{e}");
            assert!(e.to_string().contains("CUDA device 7"), "{e}");
        }
    }

    #[test]
    fn cpu_defaults_to_f32() {
        let dev = select_device(true).unwrap();
        assert!(dev.is_cpu());
        assert_eq!(select_dtype(None, &dev), DType::F32);
        assert_eq!(select_dtype(Some(ComputeDtype::Bf16), &dev), DType::BF16);
    }
}
