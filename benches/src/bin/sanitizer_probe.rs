//! Which device writes compute-sanitizer's initcheck sees: runs one small operation per stage
//! and copies its output to the host, printing the stage first (stderr, where the sanitizer
//! writes too), so a report in the log falls under the stage that caused it. Stages: a candle
//! element-wise kernel (`add`), a cuBLAS BF16 and F32 product, a copy kernel reading the cuBLAS
//! output, and `Df11Linear`'s fused kernels (CUDA-core at 1 row, tensor-core at 8 rows).
//!
//! `compute-sanitizer --tool initcheck target/release/sanitizer_probe` (GPU suite:
//! scripts/gpu-suite-run.sh runs it next to the initcheck of the kernel tests).

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{synth, Df11Linear};

fn stage(name: &str, f: impl FnOnce() -> anyhow::Result<usize>) -> anyhow::Result<()> {
    eprintln!("=== stage {name}");
    let n = f()?;
    eprintln!("=== stage {name} done ({n} values copied to the host)");
    Ok(())
}

fn host(t: &Tensor) -> anyhow::Result<usize> {
    Ok(t.flatten_all()?
        .to_dtype(DType::F32)?
        .to_vec1::<f32>()?
        .len())
}

fn main() -> anyhow::Result<()> {
    let dev = Device::new_cuda(0)?;
    let (rows, cols, out) = (8usize, 256usize, 512usize);
    let xs: Vec<f32> = (0..rows * cols)
        .map(|i| ((i % 17) as f32 - 8.0) / 8.0)
        .collect();
    let x = Tensor::from_vec(xs, (rows, cols), &dev)?.to_dtype(DType::BF16)?;
    let wv = synth::normal_bf16(out * cols, 0.02, 11);
    let w = Tensor::from_slice(&wv, (out, cols), &dev)?;
    stage("candle add (element-wise kernel)", || host(&(&x + &x)?))?;
    stage("cuBLAS BF16 product", || host(&x.matmul(&w.t()?)?))?;
    stage("cuBLAS F32 product", || {
        let (x, w) = (x.to_dtype(DType::F32)?, w.to_dtype(DType::F32)?);
        host(&x.matmul(&w.t()?)?)
    })?;
    stage("copy kernel reading a cuBLAS output", || {
        host(&x.matmul(&w.t()?)?.t()?.contiguous()?)
    })?;
    let group = df11_benches::one_member_group("probe", &wv, &dev)?;
    let linear = Df11Linear::new(group, 0, out, cols, None, DType::BF16)?;
    stage("Df11Linear, 1 row (CUDA-core fused kernel)", || {
        host(&linear.forward(&x.narrow(0, 0, 1)?)?)
    })?;
    stage("Df11Linear, 8 rows (tensor-core fused kernel)", || {
        host(&linear.forward(&x)?)
    })?;
    Ok(())
}
