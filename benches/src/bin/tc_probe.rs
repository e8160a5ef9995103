//! Times one `[rows, cols]` linear (N(0, 0.02) weights, one packed DF11 unit) at the given batch
//! sizes: cuBLAS BF16, the tensor-core twin and DF11 kernels, and the CUDA-core ones (up to 8
//! rows); checks DF11 == twin bit for bit first. For kernel work and profiling
//! (`DF11_TC_STEPS`, `DF11_TC_VARIANT` pick the tensor-core build).
//!
//! `cargo run --release -p df11-benches --features cuda --bin tc_probe -- ROWS COLS BATCH...`
//! (ROWS = COLS = 0: the seven matrices of a Qwen3-8B layer, timed together as one.)

use std::time::Instant;

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{
    encode_unit, set_fused_kernel, set_matmul_path, synth, Df11Group, Df11Linear, ExponentForm,
    FusedKernel, MatmulPath, UnitLayout,
};

fn time(dev: &Device, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    dev.synchronize().unwrap();
    let mut v: Vec<f64> = (0..5)
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
    v[2]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(args.len() >= 3, "usage: tc_probe ROWS COLS BATCH...");
    let shapes = if args[0] == 0 {
        synth::QWEN3_8B_LAYER.to_vec()
    } else {
        vec![(args[0], args[1])]
    };
    let dev = Device::new_cuda(0)?;
    let mut df11 = Vec::new();
    let mut dense = Vec::new();
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let w = synth::normal_bf16(rows * cols, 0.02, 7 + i as u64);
        let enc =
            encode_unit(&[bytemuck::cast_slice(&w)]).map_err(|e| anyhow::anyhow!(e.reason))?;
        let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
        let names = vec!["w.weight".to_string()];
        let t = enc.tensors();
        let g = Df11Group::new_with_form("w", names, &t, layout, &dev, ExponentForm::Packed)?;
        anyhow::ensure!(g.is_packed(), "not packed");
        let l = Df11Linear::new(g, 0, rows, cols, None, DType::BF16)?;
        dense.push(l.clone().decoded()?);
        df11.push(l);
    }
    let mb = shapes.iter().map(|(r, c)| (r * c * 2) as f64).sum::<f64>() / 1e6;
    println!("{shapes:?} ({mb:.0} MB BF16)  batch | cuBLAS ms | TC twin ms | TC DF11 ms | CC twin ms | CC DF11 ms | TC DF11 GB/s of BF16");
    for &batch in &args[2..] {
        let xs: Vec<Tensor> = shapes
            .iter()
            .map(|&(_, c)| Tensor::randn(0f32, 1.0, (batch, c), &dev)?.to_dtype(DType::BF16))
            .collect::<candle_core::Result<_>>()?;
        let run = |ls: &[Df11Linear]| {
            for (l, x) in ls.iter().zip(&xs) {
                l.forward(x).unwrap();
            }
        };
        let mut out = Vec::new();
        set_matmul_path(MatmulPath::Decode);
        out.push(time(&dev, 20, || run(&dense)));
        set_matmul_path(MatmulPath::Fused);
        for kernel in [FusedKernel::TensorCore, FusedKernel::CudaCore] {
            set_fused_kernel(Some(kernel));
            if kernel == FusedKernel::CudaCore && batch > 8 {
                out.extend([f64::NAN, f64::NAN]);
                continue;
            }
            for (i, x) in xs.iter().enumerate() {
                let a = df11[i].forward(x)?.flatten_all()?.to_vec1::<half::bf16>()?;
                let b = dense[i]
                    .forward(x)?
                    .flatten_all()?
                    .to_vec1::<half::bf16>()?;
                anyhow::ensure!(
                    a == b,
                    "{kernel:?}: DF11 differs from the twin at batch {batch}"
                );
            }
            out.push(time(&dev, 20, || run(&dense)));
            out.push(time(&dev, 20, || run(&df11)));
        }
        set_fused_kernel(None);
        println!(
            "{batch:>6} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.0}",
            out[0] * 1e3,
            out[1] * 1e3,
            out[2] * 1e3,
            out[3] * 1e3,
            out[4] * 1e3,
            mb / 1e3 / out[2]
        );
    }
    Ok(())
}
