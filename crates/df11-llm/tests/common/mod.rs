//! What the CUDA kernel tests of this crate share: the device, random BF16 tensors, a small
//! generator for positions and slots and its seed.
#![allow(dead_code)] // each test binary uses its own share

use candle_core::{DType, Device, Tensor};

pub fn cuda() -> Device {
    df11_llm::open_cuda(0).expect("the cuda feature is on but no CUDA device opened")
}

pub fn randn(shape: &[usize], dev: &Device) -> Tensor {
    Tensor::randn(0f32, 1.0, shape, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

pub fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// A small xorshift for positions and slots.
pub struct Rng(pub u64);
impl Rng {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

pub fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1
}
