//! Diagnostics on the GPU:
//! 1. block-range (row) decodes of an embedding-sized unit against the whole-unit decode;
//! 2. `Df11Linear` (its weight is a view at an arbitrary offset of the decode buffer) against
//!    `candle_nn::Linear` holding the same weight in its own allocation, at Qwen3-8B layer shapes.
//!
//! `cargo run --release -p df11-benches --features cuda --bin gpu_diag`

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{synth, Df11Group, Df11Linear, UnitLayout};

fn rows_check(dev: &Device) -> anyhow::Result<()> {
    let (rows, hidden) = (151_936usize, 4096usize);
    let w = synth::normal_bf16(rows * hidden, 0.02, 3);
    let g = df11_benches::one_member_group("emb", &w, dev)?;
    let mut bad = 0;
    let mut s = 12345u64;
    for _ in 0..100 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let id = (s % rows as u64) as usize;
        let r: Vec<half::bf16> = g
            .decode_elements(id * hidden..(id + 1) * hidden)?
            .to_vec1()?;
        if r[..] != w[id * hidden..(id + 1) * hidden] || g.check_status().is_err() {
            bad += 1;
        }
    }
    println!("row decodes differing: {bad} / 100");
    Ok(())
}

fn linear_check(dev: &Device) -> anyhow::Result<()> {
    let (w, enc) = df11_benches::qwen3_8b_layer_unit(11);
    let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
    let names: Vec<String> = (0..7).map(|i| format!("m{i}.weight")).collect();
    let placement = df11_candle::UnitPlacement {
        options: df11_benches::options(),
        ..Default::default()
    };
    let g = Df11Group::new("layer", names, &enc.tensors(), layout, dev, &placement)?;
    let mut at = 0;
    for (i, &(o, k)) in synth::QWEN3_8B_LAYER.iter().enumerate() {
        let own = Tensor::from_slice(&w[at..at + o * k], (o, k), dev)?;
        at += o * k;
        let dense = candle_nn::Linear::new(own, None);
        let d11 = Df11Linear::new(g.clone(), i, o, k, None, DType::BF16)?;
        for batch in [1usize, 8, 64] {
            let x = Tensor::randn(0f32, 1.0, (1, batch, k), dev)?.to_dtype(DType::BF16)?;
            let a: Vec<half::bf16> = dense.forward(&x)?.flatten_all()?.to_vec1()?;
            let b: Vec<half::bf16> = d11.forward(&x)?.flatten_all()?.to_vec1()?;
            let diff = a
                .iter()
                .zip(&b)
                .filter(|(p, q)| p.to_bits() != q.to_bits())
                .count();
            let nan = b.iter().filter(|v| v.is_nan()).count();
            println!(
                "member {i} ({o}x{k}) batch {batch}: {diff} of {} outputs differ, {nan} NaN",
                a.len()
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let dev = Device::new_cuda(0)?;
    linear_check(&dev)?;
    rows_check(&dev)?;
    Ok(())
}
