//! What the FLUX tests share: the fixture (`tests/fixtures/models/flux-tiny`, found at run time
//! as the GPU suite's carried binaries need), its recorded references, and comparisons.
#![allow(dead_code)] // each test binary uses its own share

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};

/// The FLUX fixture's folder.
pub fn fixture() -> PathBuf {
    df11_candle::fixtures::fixtures().join("models/flux-tiny")
}

/// `reference.safetensors`: diffusers' recorded tensors (f32), on the CPU.
pub fn reference() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture().join("reference.safetensors"), &Device::Cpu).unwrap()
}

/// `reference.json`: the run's settings, ids and scalars.
pub fn reference_json() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap())
        .unwrap()
}

/// The largest `|a - b|` (same shapes), in f32.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a = a
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    let b = b
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// The bits of `t` (any float dtype, widened to f32 exactly), for bitwise comparisons.
pub fn f32_bits(t: &Tensor) -> Vec<u32> {
    let t = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    t.to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}
