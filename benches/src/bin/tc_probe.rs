//! Times one `[rows, cols]` linear (N(0, 0.02) weights, one packed DF11 unit) at the given batch
//! sizes: cuBLAS BF16, the tensor-core twin and DF11 kernels (row order; the tile order, where the
//! streaming kernels take it, with them on and off), and the CUDA-core ones (up to 8 rows); checks
//! every DF11 output == the twin's bit for bit first. For kernel work and profiling
//! (`DF11_TC_STEPS` sets the sub-steps per item).
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
    // Row order unless a load below asks for the tile order.
    df11_candle::set_tile_members(false);
    let mut df11 = Vec::new();
    let mut tiled = Vec::new();
    let mut dense = Vec::new();
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let w = synth::normal_bf16(rows * cols, 0.02, 7 + i as u64);
        let enc =
            encode_unit(&[bytemuck::cast_slice(&w)]).map_err(|e| anyhow::anyhow!(e.reason))?;
        let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
        let names = vec!["w.weight".to_string()];
        let t = enc.tensors();
        let g = Df11Group::new_with_form(
            "w",
            names.clone(),
            &t,
            layout.clone(),
            &dev,
            ExponentForm::Packed,
        )?;
        anyhow::ensure!(g.is_packed(), "not packed");
        df11_candle::set_tile_members(true);
        let gt = Df11Group::new_shaped(
            "w",
            names,
            &t,
            layout,
            &dev,
            ExponentForm::Packed,
            &[Some((rows, cols))],
        );
        df11_candle::set_tile_members(false);
        let l = Df11Linear::new(g, 0, rows, cols, None, DType::BF16)?;
        dense.push(l.clone().decoded()?);
        df11.push(l);
        tiled.push(Df11Linear::new(gt?, 0, rows, cols, None, DType::BF16)?);
    }
    let mb = shapes.iter().map(|(r, c)| (r * c * 2) as f64).sum::<f64>() / 1e6;
    println!("{shapes:?} ({mb:.0} MB BF16)  batch | cuBLAS ms | TC twin ms | TC DF11 ms | TC tiled ms | streaming: TC twin ms | TC tiled ms | CC twin ms | CC DF11 ms | streaming tiled / cuBLAS");
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
        // TC_PROBE_NO_CHECK (kernel variants that sum in another order, scripts/gpu-tc-variants.sh):
        // a difference from the twin is printed with the largest difference from cuBLAS, not fatal.
        let lenient = std::env::var_os("TC_PROBE_NO_CHECK").is_some();
        let check = |ls: &[Df11Linear], what: &str| -> anyhow::Result<()> {
            for (i, x) in xs.iter().enumerate() {
                let a = ls[i].forward(x)?.flatten_all()?.to_vec1::<half::bf16>()?;
                let b = dense[i]
                    .forward(x)?
                    .flatten_all()?
                    .to_vec1::<half::bf16>()?;
                if a == b {
                    continue;
                }
                anyhow::ensure!(
                    lenient,
                    "{what}: DF11 differs from the twin at batch {batch}"
                );
                set_matmul_path(MatmulPath::Decode);
                let c = dense[i]
                    .forward(x)?
                    .flatten_all()?
                    .to_vec1::<half::bf16>()?;
                set_matmul_path(MatmulPath::Fused);
                let err = |v: &[half::bf16]| {
                    v.iter()
                        .zip(&c)
                        .map(|(p, q)| (p.to_f32() - q.to_f32()).abs())
                        .fold(0f32, f32::max)
                };
                let scale = c.iter().map(|q| q.to_f32().abs()).fold(0f32, f32::max);
                println!(
                    "  {what}, matrix {i}, batch {batch}: DF11 != twin; max |DF11 - cuBLAS| {:.3e}, |twin - cuBLAS| {:.3e} (max |cuBLAS| {scale:.3e})",
                    err(&a),
                    err(&b)
                );
            }
            Ok(())
        };
        set_fused_kernel(Some(FusedKernel::TensorCore));
        for stream in [false, true] {
            df11_candle::set_tc_stream(stream);
            check(&df11, "TC row order")?;
            check(&tiled, "TC tiled")?;
            out.push(time(&dev, 20, || run(&dense)));
            if !stream {
                out.push(time(&dev, 20, || run(&df11)));
            }
            out.push(time(&dev, 20, || run(&tiled)));
        }
        set_fused_kernel(Some(FusedKernel::CudaCore));
        if batch <= 8 {
            check(&df11, "CUDA-core")?;
            out.push(time(&dev, 20, || run(&dense)));
            out.push(time(&dev, 20, || run(&df11)));
        } else {
            out.extend([f64::NAN, f64::NAN]);
        }
        set_fused_kernel(None);
        println!(
            "{batch:>6} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.2}x",
            out[0] * 1e3,
            out[1] * 1e3,
            out[2] * 1e3,
            out[3] * 1e3,
            out[4] * 1e3,
            out[5] * 1e3,
            out[6] * 1e3,
            out[7] * 1e3,
            out[0] / out[5],
        );
    }
    Ok(())
}
