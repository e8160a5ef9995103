//! GPU bench: the Qwen3-8B-sized layer unit (192,937,984 N(0, 0.02) BF16 weights), built on the
//! machine that runs it. Prints, in one run: decode time and GB/s of BF16 output, the device copy
//! bandwidth, the layer's 7 BF16 linears (candle / cuBLAS) at batch 1, 8, 32, 128, 512, the same
//! with `Df11Linear` (decode + matmul), and the ratios.
//!
//! `cargo run --release -p df11-benches --features cuda --bin gpu_bench [-- --json FILE]`

use std::time::Instant;

use candle_core::{DType, Device, Module, Tensor};
use df11_benches::qwen3_8b_layer_unit;
use df11_candle::{synth, Df11Group, Df11Linear, UnitLayout};

/// Median seconds per call of `f`, over `reps` timed runs of `iters` calls each (after warm-up).
fn time(dev: &Device, iters: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    dev.synchronize().unwrap();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            dev.synchronize().unwrap();
            t.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let json_out = std::env::args().skip_while(|a| a != "--json").nth(1);
    let dev = Device::new_cuda(0)?;
    let t0 = Instant::now();
    let (weights, enc) = qwen3_8b_layer_unit(7);
    let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
    let n = layout.n_elements;
    eprintln!(
        "unit: {n} weights, {:.3} bits/weight, K={}, built in {:.1} s",
        enc.total_bytes() as f64 * 8.0 / n as f64,
        layout.lut_rows,
        t0.elapsed().as_secs_f64()
    );
    let members: Vec<String> = df11_candle::patterns::LAYER_MEMBERS
        .iter()
        .map(|m| format!("layer.{m}.weight"))
        .collect();
    let group = Df11Group::new("layer", members, &enc.tensors(), layout.clone(), &dev)?;

    // Exactness on the GPU before any timing.
    let decoded = group.decode()?;
    let host: Vec<half::bf16> = decoded.to_vec1()?;
    anyhow::ensure!(
        host == weights,
        "GPU decode differs from the original weights"
    );
    group.check_status()?;
    drop(host);
    eprintln!("GPU decode: bit-exact");

    let out_bytes = 2.0 * n as f64;
    let t_decode = time(&dev, 20, 7, || {
        let _ = group.decode().unwrap();
    });
    let decode_gbs = out_bytes / t_decode / 1e9;
    let t_copy = time(&dev, 20, 7, || {
        let _ = decoded.copy().unwrap();
    });
    let copy_gbs = 2.0 * out_bytes / t_copy / 1e9;
    group.check_status()?;
    println!(
        "decode: {:.3} ms, {decode_gbs:.0} GB/s of BF16 output",
        t_decode * 1e3
    );
    println!(
        "device copy: {:.3} ms for {:.0} MB, {copy_gbs:.0} GB/s (read + write); decode bound ~{:.0} GB/s",
        t_copy * 1e3,
        out_bytes / 1e6,
        copy_gbs * out_bytes / (out_bytes + enc.total_bytes() as f64)
    );

    // The 7 linears, BF16 weights on the device vs Df11Linear.
    let mut dense = Vec::new();
    let mut df11 = Vec::new();
    let mut at = 0;
    for (i, &(o, k)) in synth::QWEN3_8B_LAYER.iter().enumerate() {
        let w = decoded
            .narrow(0, at, o * k)?
            .reshape((o, k))?
            .contiguous()?;
        at += o * k;
        dense.push(candle_nn::Linear::new(w, None));
        df11.push(Df11Linear::new(group.clone(), i, o, k, None, DType::BF16)?);
    }
    drop(decoded);
    let mut rows = Vec::new();
    println!("batch | BF16 linears ms | Df11Linear ms | ratio (BF16 time / DF11 time)");
    for batch in [1usize, 8, 32, 128, 512] {
        let xs: Vec<Tensor> = synth::QWEN3_8B_LAYER
            .iter()
            .map(|&(_, k)| Tensor::randn(0f32, 1.0, (batch, k), &dev)?.to_dtype(DType::BF16))
            .collect::<candle_core::Result<_>>()?;
        // Bit-identity at this batch size, then timing.
        for ((d, f), x) in dense.iter().zip(&df11).zip(&xs) {
            let a: Vec<half::bf16> = d.forward(x)?.flatten_all()?.to_vec1()?;
            let b: Vec<half::bf16> = f.forward(x)?.flatten_all()?.to_vec1()?;
            anyhow::ensure!(a == b, "Df11Linear differs from Linear at batch {batch}");
        }
        let t_dense = time(&dev, 20, 7, || {
            for (l, x) in dense.iter().zip(&xs) {
                let _ = l.forward(x).unwrap();
            }
        });
        let t_df11 = time(&dev, 10, 7, || {
            for (l, x) in df11.iter().zip(&xs) {
                let _ = l.forward(x).unwrap();
            }
        });
        println!(
            "{batch:>5} | {:>15.3} | {:>13.3} | {:.2}x",
            t_dense * 1e3,
            t_df11 * 1e3,
            t_dense / t_df11
        );
        rows.push(
            serde_json::json!({"batch": batch, "bf16_ms": t_dense * 1e3, "df11_ms": t_df11 * 1e3}),
        );
    }
    group.check_status()?;
    if let Some(path) = json_out {
        let v = serde_json::json!({
            "weights": n, "decode_ms": t_decode * 1e3, "decode_gbs": decode_gbs,
            "copy_gbs": copy_gbs, "linears": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}
