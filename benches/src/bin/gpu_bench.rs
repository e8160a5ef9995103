//! GPU bench: the Qwen3-8B-sized layer unit (192,937,984 N(0, 0.02) BF16 weights), built on the
//! machine that runs it. Prints, in one run: the block kernel's and the segment kernel's decode
//! time and GB/s of BF16 output, the device copy bandwidth, and the layer's 7 linears at batch 1
//! to 512: BF16 through cuBLAS, DF11 decode + cuBLAS, the CUDA-core fused kernels (DF11 and twin,
//! up to 16 rows) and the tensor-core fused kernels (DF11 packed and twin, up to 64 rows a
//! launch); with the ratios against cuBLAS BF16. Every fused DF11 output is checked equal to its
//! twin's, bit for bit, before it is timed.
//!
//! `cargo run --release -p df11-benches --features cuda --bin gpu_bench [-- --json FILE]`

use std::time::Instant;

use candle_core::{DType, Device, Module, Tensor};
use df11_benches::{median_seconds as time, qwen3_8b_layer_unit};
use df11_candle::{
    synth, Df11Group, Df11Linear, Df11Options, ExponentForm, FusedKernel, Linear, MatmulPath,
    TileMembers, UnitLayout, UnitPlacement,
};
/// Median seconds per call of `f`, over `reps` timed runs of `iters` calls each (after warm-up).
fn main() -> anyhow::Result<()> {
    df11_benches::install_tuning();
    let json_out = std::env::args().skip_while(|a| a != "--json").nth(1);
    let dev = Device::new_cuda(0)?;
    // Products planned for row order (the tiled unit's members take the tensor-core kernels in
    // the tile order all the same); loads in row order unless told the shapes below.
    let base = Df11Options {
        tiles: TileMembers::Off,
        ..df11_benches::options()
    };
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
    let load = |exponents| {
        let t = Instant::now();
        let placement = UnitPlacement {
            options: Df11Options { exponents, ..base },
            ..Default::default()
        };
        let g = Df11Group::new(
            "layer",
            members.clone(),
            &enc.tensors(),
            layout.clone(),
            &dev,
            &placement,
        );
        (g, t.elapsed().as_secs_f64())
    };
    let (group, huffman_load_s) = load(ExponentForm::Huffman);
    let (packed, packed_load_s) = load(ExponentForm::Packed);
    let (group, packed) = (group?, packed?);
    anyhow::ensure!(packed.is_packed(), "the packed unit is not packed");
    // The same unit told its members' shapes: stored in the tensor-core tile order.
    let shapes: Vec<Option<(usize, usize)>> =
        synth::QWEN3_8B_LAYER.iter().copied().map(Some).collect();
    let t = Instant::now();
    let placement = UnitPlacement {
        options: Df11Options {
            exponents: ExponentForm::Packed,
            tiles: TileMembers::Chunked,
            ..base
        },
        offloaded: false,
        shapes: shapes.clone(),
    };
    let tiled = Df11Group::new(
        "layer",
        members.clone(),
        &enc.tensors(),
        layout.clone(),
        &dev,
        &placement,
    )?;
    let tiled_load_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        (0..shapes.len()).all(|i| tiled.tile_order(i).is_some()),
        "the tiled unit's members are not all tiled"
    );
    println!("tiled packed unit loaded in {tiled_load_s:.1} s");
    let bits = |g: &Df11Group| 8.0 * g.device_bytes() as f64 / n as f64;
    println!(
        "device memory: Huffman + segment index {:.3} bits/weight (loaded in {huffman_load_s:.1} s), \
         packed {:.3} bits/weight (loaded in {packed_load_s:.1} s); BF16 16",
        bits(&group),
        bits(&packed)
    );

    // Exactness on the GPU before any timing: both decode kernels.
    let decoded = group.decode()?;
    let host: Vec<half::bf16> = decoded.to_vec1()?;
    anyhow::ensure!(
        host == weights,
        "block-kernel decode differs from the original weights"
    );
    let seg: Vec<half::bf16> = group.decode_elements(0..n)?.to_vec1()?;
    anyhow::ensure!(
        seg == weights,
        "segment-kernel decode differs from the original weights"
    );
    let pk: Vec<half::bf16> = packed.decode_elements(0..n)?.to_vec1()?;
    anyhow::ensure!(
        pk == weights,
        "packed decode differs from the original weights"
    );
    let tk: Vec<half::bf16> = tiled.decode_elements(0..n)?.to_vec1()?;
    anyhow::ensure!(
        tk == weights,
        "tiled decode differs from the original weights"
    );
    group.check_status()?;
    drop((host, seg, pk, tk));
    eprintln!("GPU decode (block, segment and packed kernels): bit-exact");

    let out_bytes = 2.0 * n as f64;
    let t_decode = time(&dev, 20, 7, || {
        let _ = group.decode().unwrap();
    });
    let decode_gbs = out_bytes / t_decode / 1e9;
    let t_seg = time(&dev, 20, 7, || {
        let _ = group.decode_elements(0..n).unwrap();
    });
    let seg_gbs = out_bytes / t_seg / 1e9;
    let t_packed = time(&dev, 20, 7, || {
        let _ = packed.decode_elements(0..n).unwrap();
    });
    let packed_gbs = out_bytes / t_packed / 1e9;
    let t_tiled_decode = time(&dev, 20, 7, || {
        let _ = tiled.decode_elements(0..n).unwrap();
    });
    let t_copy = time(&dev, 20, 7, || {
        let _ = decoded.copy().unwrap();
    });
    let copy_gbs = 2.0 * out_bytes / t_copy / 1e9;
    group.check_status()?;
    println!(
        "decode, block kernel: {:.3} ms, {decode_gbs:.0} GB/s of BF16 output",
        t_decode * 1e3
    );
    println!(
        "decode, segment kernel: {:.3} ms, {seg_gbs:.0} GB/s of BF16 output",
        t_seg * 1e3
    );
    println!(
        "decode, packed kernel: {:.3} ms, {packed_gbs:.0} GB/s of BF16 output; tiled: {:.3} ms, {:.0} GB/s",
        t_packed * 1e3,
        t_tiled_decode * 1e3,
        out_bytes / t_tiled_decode / 1e9
    );
    println!(
        "device copy: {:.3} ms for {:.0} MB, {copy_gbs:.0} GB/s (read + write); decode bound ~{:.0} GB/s",
        t_copy * 1e3,
        out_bytes / 1e6,
        copy_gbs * out_bytes / (out_bytes + enc.total_bytes() as f64)
    );

    // The 7 linears: BF16 weights on the device (df11_candle::Linear::Dense, which takes the
    // twin kernel on the fused path) vs Df11Linear.
    let mut dense = Vec::new();
    let mut df11 = Vec::new();
    let mut df11p = Vec::new();
    let mut df11t = Vec::new();
    let mut at = 0;
    for (i, &(o, k)) in synth::QWEN3_8B_LAYER.iter().enumerate() {
        let w = decoded
            .narrow(0, at, o * k)?
            .reshape((o, k))?
            .contiguous()?;
        at += o * k;
        dense.push(Linear::dense(w, None, base));
        df11.push(Df11Linear::new(group.clone(), i, o, k, None, DType::BF16)?);
        df11p.push(Df11Linear::new(packed.clone(), i, o, k, None, DType::BF16)?);
        df11t.push(Df11Linear::new(tiled.clone(), i, o, k, None, DType::BF16)?);
    }
    drop(decoded);
    let run_all = |ls: &dyn Fn(usize, &Tensor) -> candle_core::Result<Tensor>, xs: &[Tensor]| {
        for (i, x) in xs.iter().enumerate() {
            let _ = ls(i, x).unwrap();
        }
    };
    let mut rows = Vec::new();
    println!(
        "batch | cuBLAS BF16 ms | DF11 decode+cuBLAS ms (Huffman / packed / tiled) | CUDA-core: twin / DF11 Huffman / DF11 packed ms | tensor-core: twin / DF11 packed / DF11 tiled ms | TC tiled/cuBLAS speed | TC twin/cuBLAS speed | TC max |diff| vs cuBLAS"
    );
    for batch in [1usize, 2, 4, 8, 16, 32, 64, 128, 512] {
        let xs: Vec<Tensor> = synth::QWEN3_8B_LAYER
            .iter()
            .map(|&(_, k)| Tensor::randn(0f32, 1.0, (batch, k), &dev)?.to_dtype(DType::BF16))
            .collect::<candle_core::Result<_>>()?;
        // The four sets of layers running by `o`.
        let with = |o: Df11Options| {
            let d: Vec<Linear> = dense.iter().map(|l| l.clone().with_options(o)).collect();
            let each = |ls: &[Df11Linear]| -> Vec<Df11Linear> {
                ls.iter().map(|l| l.clone().with_options(o)).collect()
            };
            (d, each(&df11), each(&df11p), each(&df11t))
        };
        let decode = with(Df11Options {
            matmul: MatmulPath::Decode,
            ..base
        });
        let bf16_fwd = |i: usize, x: &Tensor| decode.0[i].forward(x);
        let df11_fwd = |i: usize, x: &Tensor| decode.1[i].forward(x);
        let packed_fwd = |i: usize, x: &Tensor| decode.2[i].forward(x);
        let tiled_fwd = |i: usize, x: &Tensor| decode.3[i].forward(x);
        // Decode path: Df11Linear == cuBLAS Linear bit for bit.
        let mut cublas_out = Vec::new();
        for (i, x) in xs.iter().enumerate() {
            let a: Vec<half::bf16> = bf16_fwd(i, x)?.flatten_all()?.to_vec1()?;
            let b: Vec<half::bf16> = df11_fwd(i, x)?.flatten_all()?.to_vec1()?;
            let c: Vec<half::bf16> = packed_fwd(i, x)?.flatten_all()?.to_vec1()?;
            let d: Vec<half::bf16> = tiled_fwd(i, x)?.flatten_all()?.to_vec1()?;
            anyhow::ensure!(
                a == b && a == c && a == d,
                "decode path: Df11Linear differs from Linear at batch {batch}"
            );
            cublas_out.push(a);
        }
        let t_cublas = time(&dev, 20, 7, || run_all(&bf16_fwd, &xs));
        let t_decode_path = time(&dev, 10, 7, || run_all(&df11_fwd, &xs));
        let t_packed_decode = time(&dev, 10, 7, || run_all(&packed_fwd, &xs));
        let t_tiled_path = time(&dev, 10, 7, || run_all(&tiled_fwd, &xs));
        // Fused paths: DF11 == its BF16 twin bit for bit (the Huffman form on the tensor-core
        // path is decoded and given to the twin); both close to cuBLAS.
        let fused = |kernel: FusedKernel| -> anyhow::Result<(f64, f64, f64, f32, f64)> {
            let sets = with(Df11Options {
                matmul: MatmulPath::Fused,
                tensor_cores: kernel == FusedKernel::TensorCore,
                ..base
            });
            let bf16_fwd = |i: usize, x: &Tensor| sets.0[i].forward(x);
            let df11_fwd = |i: usize, x: &Tensor| sets.1[i].forward(x);
            let packed_fwd = |i: usize, x: &Tensor| sets.2[i].forward(x);
            let tiled_fwd = |i: usize, x: &Tensor| sets.3[i].forward(x);
            let mut max_diff = 0f32;
            for (i, x) in xs.iter().enumerate() {
                let a: Vec<half::bf16> = bf16_fwd(i, x)?.flatten_all()?.to_vec1()?;
                let b: Vec<half::bf16> = df11_fwd(i, x)?.flatten_all()?.to_vec1()?;
                let c: Vec<half::bf16> = packed_fwd(i, x)?.flatten_all()?.to_vec1()?;
                let d: Vec<half::bf16> = tiled_fwd(i, x)?.flatten_all()?.to_vec1()?;
                anyhow::ensure!(
                    a == b && a == c && a == d,
                    "{kernel:?} fused path: DF11 differs from its BF16 twin at batch {batch}"
                );
                for (p, q) in c.iter().zip(&cublas_out[i]) {
                    max_diff = max_diff.max((p.to_f32() - q.to_f32()).abs());
                }
            }
            let t_twin = time(&dev, 20, 7, || run_all(&bf16_fwd, &xs));
            let t_huffman = if kernel == FusedKernel::CudaCore {
                time(&dev, 20, 7, || run_all(&df11_fwd, &xs))
            } else {
                f64::NAN // decode + twin: not a kernel of its own
            };
            let t_packed = time(&dev, 20, 7, || run_all(&packed_fwd, &xs));
            // Tiled members take the tensor-core kernel only (else decode + twin).
            let t_tiled = if kernel == FusedKernel::TensorCore {
                time(&dev, 20, 7, || run_all(&tiled_fwd, &xs))
            } else {
                f64::NAN
            };
            Ok((t_twin, t_huffman, t_packed, max_diff, t_tiled))
        };
        let nan = (f64::NAN, f64::NAN, f64::NAN, f32::NAN, f64::NAN);
        let cc = if batch <= 16 {
            fused(FusedKernel::CudaCore)?
        } else {
            nan
        };
        let tc = fused(FusedKernel::TensorCore)?;
        println!(
            "{batch:>5} | {:>14.3} | {:>19.3} / {:.3} / {:.3} | {:>8.3} / {:.3} / {:.3} | {:>8.3} / {:.3} / {:.3} | {:>10.2}x | {:>10.2}x | {:.4}",
            t_cublas * 1e3,
            t_decode_path * 1e3,
            t_packed_decode * 1e3,
            t_tiled_path * 1e3,
            cc.0 * 1e3,
            cc.1 * 1e3,
            cc.2 * 1e3,
            tc.0 * 1e3,
            tc.2 * 1e3,
            tc.4 * 1e3,
            t_cublas / tc.4,
            t_cublas / tc.0,
            tc.3,
        );
        let ms = |t: f64| {
            if t.is_nan() {
                serde_json::Value::Null
            } else {
                (t * 1e3).into()
            }
        };
        rows.push(serde_json::json!({
            "batch": batch, "cublas_bf16_ms": t_cublas * 1e3,
            "df11_decode_ms": t_decode_path * 1e3, "packed_decode_ms": t_packed_decode * 1e3,
            "cuda_core_twin_ms": ms(cc.0), "cuda_core_huffman_ms": ms(cc.1),
            "cuda_core_packed_ms": ms(cc.2), "tc_twin_ms": ms(tc.0), "tc_packed_ms": ms(tc.2),
            "tc_tiled_ms": ms(tc.4), "tiled_decode_ms": t_tiled_path * 1e3,
            "tc_max_abs_diff_vs_cublas": tc.3,
        }));
    }
    group.check_status()?;
    if let Some(path) = json_out {
        let v = serde_json::json!({
            "weights": n, "decode_ms": t_decode * 1e3, "decode_gbs": decode_gbs,
            "segment_decode_ms": t_seg * 1e3, "segment_decode_gbs": seg_gbs,
            "packed_decode_ms": t_packed * 1e3, "packed_decode_gbs": packed_gbs,
            "tiled_packed_decode_ms": t_tiled_decode * 1e3,
            "huffman_bits_per_weight": bits(&group), "packed_bits_per_weight": bits(&packed),
            "copy_gbs": copy_gbs, "linears": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}
