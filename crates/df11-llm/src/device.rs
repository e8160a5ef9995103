//! Picking the device and the compute dtype.

use candle_core::{DType, Device};

use crate::args::ComputeDtype;
use crate::error::Result;

/// The CPU when `cpu` is set or CUDA is not compiled in, else CUDA device 0.
pub fn select_device(cpu: bool) -> Result<Device> {
    if cpu || !cfg!(feature = "cuda") {
        return Ok(Device::Cpu);
    }
    Ok(Device::new_cuda(0)?)
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
    fn cpu_defaults_to_f32() {
        let dev = select_device(true).unwrap();
        assert!(dev.is_cpu());
        assert_eq!(select_dtype(None, &dev), DType::F32);
        assert_eq!(select_dtype(Some(ComputeDtype::Bf16), &dev), DType::BF16);
    }
}
