//! Times one `[rows, cols]` linear (N(0, 0.02) weights, one packed DF11 unit) at the given batch
//! sizes: cuBLAS BF16, the tensor-core twin and DF11 kernels (row order; the tile order, where the
//! streaming kernels take it, with them on and off), and the CUDA-core ones (up to 8 rows); checks
//! every DF11 output == the twin's bit for bit first. For kernel work and profiling
//! (`DF11_TC_STEPS` sets the sub-steps per item).
//!
//! `cargo run --release -p df11-benches --features cuda --bin tc_probe -- ROWS COLS BATCH...`
//! (ROWS = COLS = 0: the seven matrices of a Qwen3-8B layer, timed together as one.)
//!
//! `tc_probe layer BATCH...`: a Qwen3-8B layer's products as the decode step launches them (q/k/v
//! stacked, o, gate/up stacked, down: four launches), cuBLAS BF16, the twin and DF11 (tile order,
//! streaming, panel and warpgroup kernels), each timed eagerly and as a replayed
//! CUDA graph of the four launches (PDL edges where `DF11_PDL` allows), with the DF11 bytes read
//! per layer; checks every kernel's outputs bit for bit first (`TC_PROBE_NO_CHECK`: prints a
//! difference instead of stopping; `TC_PROBE_X=same`: every row of x the same; `TC_PROBE_ONLY=0,2`
//! and `TC_PROBE_REPEAT=n`: only some of the four launches, each n times, times per repeat).
//!
//! `tc_probe embed VOCAB HIDDEN BATCH...`: a `[VOCAB, HIDDEN]` DF11 embedding (packed) looking up
//! BATCH random tokens, as a decode step does (ids made from host tokens, then synchronized),
//! with the ids on the host and on the device, against candle's dense embedding of the same
//! table; checks the rows first. Microseconds a call (`DF11_EMBED_ROWS=off`: the decodes row by
//! row or by chunks of the table instead of the rows kernel).
//!
//! `tc_probe prefill M SLICE...`: the same layer's products at M rows the way a prompt runs them
//! (the weight decoded, then cuBLAS), whole and by slices of SLICE weight rows (each slice
//! decoded into a buffer the allocator reuses, multiplied, the outputs concatenated), against
//! BF16 whole and sliced the same way; checks DF11 sliced == BF16 sliced bit for bit.

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{
    encode_unit, synth, Df11Group, Df11Linear, Df11Options, ExponentForm, MatmulPath, TileMembers,
    UnitLayout, UnitPlacement, WgUse,
};

mod embed;
mod prefill;

/// The layers `ls` running by `options` (the probe switches paths and kernel families between
/// timings of the same weights).
fn using(ls: &[Df11Linear], options: Df11Options) -> Vec<Df11Linear> {
    ls.iter().map(|l| l.clone().with_options(options)).collect()
}

/// A one-member packed unit of `w` (`[rows, cols]`), tiled where `tiles` says.
fn packed_unit(
    dev: &Device,
    w: &[half::bf16],
    rows: usize,
    cols: usize,
    tiles: TileMembers,
) -> anyhow::Result<std::sync::Arc<Df11Group>> {
    let enc = encode_unit(&[bytemuck::cast_slice(w)]).map_err(|e| anyhow::anyhow!(e.reason))?;
    let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
    let placement = UnitPlacement {
        options: Df11Options {
            exponents: ExponentForm::Packed,
            tiles,
            ..df11_benches::options()
        },
        offloaded: false,
        shapes: vec![Some((rows, cols))],
    };
    let names = vec!["w.weight".to_string()];
    let g = Df11Group::new("w", names, &enc.tensors(), layout, dev, &placement)?;
    anyhow::ensure!(g.is_packed(), "not packed");
    Ok(g)
}

/// Seconds a call of `f`: the median of five timings of `iters` calls.
fn time(dev: &Device, iters: usize, f: impl FnMut()) -> f64 {
    df11_benches::median_seconds(dev, iters, 5, f)
}

/// A Qwen3-8B layer's linears as the decode step runs them: q/k/v and gate/up stacked by rows.
const LAYER_AS_LAUNCHED: [(usize, usize); 4] =
    [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)];

/// Per launch of `f` (which must launch the same work on every call): captured once as a CUDA
/// graph (after an eager warm-up under candle's upload cache, as the decode step captures), then
/// the graph replayed and timed like [`time`].
fn time_graph(dev: &Device, iters: usize, f: impl Fn()) -> anyhow::Result<f64> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let Device::Cuda(cuda) = dev else {
        anyhow::bail!("graphs need a CUDA device")
    };
    let stream = cuda.cuda_stream();
    let graph = {
        let _cache = cuda.enable_cuda_graph_htod_cache();
        f();
        dev.synchronize()?;
        stream.context().bind_to_thread()?;
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        f();
        stream
            .end_capture(sys::CUgraphInstantiate_flags(0))?
            .ok_or_else(|| anyhow::anyhow!("the capture recorded nothing"))?
    };
    Ok(time(dev, iters, || graph.launch().unwrap()))
}

/// The linears of `shapes` (N(0, 0.02) weights): DF11 in the tile order, and their decoded twins.
/// Members tiled as the engine's default does, so that the products plan as the engine's do
/// (the sub-steps an item of tiled widths).
fn tiled_linears(
    dev: &Device,
    shapes: &[(usize, usize)],
) -> anyhow::Result<(Vec<Df11Linear>, Vec<Df11Linear>, usize)> {
    let (mut df11, mut dense, mut bytes) = (Vec::new(), Vec::new(), 0);
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let w = synth::normal_bf16(rows * cols, 0.02, 7 + i as u64);
        let g = packed_unit(dev, &w, rows, cols, TileMembers::Chunked)?;
        bytes += g.device_bytes();
        let l = Df11Linear::new(g, 0, rows, cols, None, DType::BF16)?;
        dense.push(l.clone().decoded()?);
        df11.push(l);
    }
    Ok((df11, dense, bytes))
}

/// The tensor-core kernel families `tc_probe layer` times (each DF11 and its twin).
#[derive(Clone, Copy)]
enum Family {
    /// The streaming kernels (`kernels/df11_tc_stream.cu`).
    Stream,
    /// The panel kernels ([`Df11Options::panel`]).
    Panel,
    /// The warpgroup kernels ([`Df11Options::warpgroup`], Hopper sm_90a builds; elsewhere the
    /// streaming kernels again).
    Warpgroup,
}

const FAMILIES: [Family; 3] = [Family::Stream, Family::Panel, Family::Warpgroup];

impl Family {
    fn name(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Panel => "panel",
            Self::Warpgroup => "warpgroup",
        }
    }

    /// `options` with this family taking the fused products.
    fn options(self, options: Df11Options) -> Df11Options {
        Df11Options {
            matmul: MatmulPath::Fused,
            tensor_cores: true,
            streaming: true,
            panel: matches!(self, Self::Panel),
            warpgroup: if matches!(self, Self::Warpgroup) {
                WgUse::All
            } else {
                WgUse::Off
            },
            ..options
        }
    }
}

/// `tc_probe layer BATCH...` (module doc).
fn layer_mode(dev: &Device, batches: &[usize]) -> anyhow::Result<()> {
    let (df11, dense, bytes) = tiled_linears(dev, &LAYER_AS_LAUNCHED)?;
    println!(
        "Qwen3-8B layer as launched {LAYER_AS_LAUNCHED:?}: DF11 {:.1} MB on the device",
        bytes as f64 / 1e6
    );
    let names: Vec<&str> = FAMILIES.iter().map(|f| f.name()).collect();
    let cols: String = names
        .iter()
        .map(|n| format!(" | twin {n} | DF11 {n}"))
        .collect();
    let ratios: String = names
        .iter()
        .map(|n| format!(" | cuBLAS / DF11 {n} / cuBLAS / twin {n}"))
        .collect();
    println!(
        "batch | cuBLAS{cols} (eager / graph ms) | DF11 {} TB/s{ratios} (graphs)",
        names[names.len() - 1]
    );
    let base = df11_benches::options();
    let decode = Df11Options {
        matmul: MatmulPath::Decode,
        ..base
    };
    for &batch in batches {
        // TC_PROBE_X=same: every row of x the same random row (the products are the same work;
        // a measurement of how much the inputs' values move the timing).
        let same = std::env::var("TC_PROBE_X").is_ok_and(|v| v == "same");
        let xs: Vec<Tensor> = LAYER_AS_LAUNCHED
            .iter()
            .map(|&(_, c)| {
                let rows = if same { 1 } else { batch };
                let x = Tensor::randn(0f32, 1.0, (rows, c), dev)?.to_dtype(DType::BF16)?;
                x.broadcast_as((batch, c))?.contiguous()
            })
            .collect::<candle_core::Result<_>>()?;
        // TC_PROBE_ONLY=0,2: only those of the four launches; TC_PROBE_REPEAT=n: each n times
        // (the times printed are per repeat): a launch's own cost, tails included.
        let only: Vec<usize> = std::env::var("TC_PROBE_ONLY").map_or((0..4).collect(), |v| {
            v.split(',').filter_map(|i| i.trim().parse().ok()).collect()
        });
        let repeat: usize = std::env::var("TC_PROBE_REPEAT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        let run = |ls: &[Df11Linear]| {
            for _ in 0..repeat {
                for (i, (l, x)) in ls.iter().zip(&xs).enumerate() {
                    if only.contains(&i) {
                        l.forward(x).unwrap();
                    }
                }
            }
        };
        // Every kernel's output, bit for bit: DF11 and the twin, panel kernels on and off.
        let outputs = |ls: &[Df11Linear]| -> anyhow::Result<Vec<Vec<half::bf16>>> {
            xs.iter()
                .zip(ls)
                .map(|(x, l)| Ok(l.forward(x)?.flatten_all()?.to_vec1::<half::bf16>()?))
                .collect()
        };
        let mut seen = Vec::new();
        for family in FAMILIES {
            let o = family.options(base);
            seen.push((
                format!("DF11, {}", family.name()),
                outputs(&using(&df11, o))?,
            ));
            seen.push((
                format!("twin, {}", family.name()),
                outputs(&using(&dense, o))?,
            ));
        }
        // TC_PROBE_NO_CHECK: a difference is printed, not fatal (diagnostic kernel variants).
        let lenient = std::env::var_os("TC_PROBE_NO_CHECK").is_some();
        for (name, o) in &seen[1..] {
            if *o != seen[0].1 && lenient {
                eprintln!("{name} differs from {} at batch {batch}", seen[0].0);
                continue;
            }
            anyhow::ensure!(
                *o == seen[0].1,
                "{name} differs from {} at batch {batch}",
                seen[0].0
            );
        }
        let cublas_dense = using(&dense, decode);
        let cublas = (
            time(dev, 20, || run(&cublas_dense)),
            time_graph(dev, 20, || run(&cublas_dense))?,
        );
        let mut timed = Vec::new();
        for family in FAMILIES {
            let o = family.options(base);
            for ls in [using(&dense, o), using(&df11, o)] {
                timed.push((
                    time(dev, 20, || run(&ls)),
                    time_graph(dev, 20, || run(&ls))?,
                ));
            }
        }
        let per = repeat as f64;
        let cublas = (cublas.0 / per, cublas.1 / per);
        let timed: Vec<(f64, f64)> = timed.iter().map(|t| (t.0 / per, t.1 / per)).collect();
        let ms = |t: (f64, f64)| format!("{:.4} / {:.4}", t.0 * 1e3, t.1 * 1e3);
        let mut line = format!("{batch:>5} | {}", ms(cublas));
        for pair in timed.chunks(2) {
            line += &format!(" | {} | {}", ms(pair[0]), ms(pair[1]));
        }
        // The last family's DF11: TB/s of the whole layer's bytes (not printed for a subset of
        // the launches), and every family's DF11 and twin against cuBLAS (graphs).
        let last = timed[timed.len() - 1];
        let tbs = if only.len() == LAYER_AS_LAUNCHED.len() {
            bytes as f64 / last.1 / 1e12
        } else {
            f64::NAN
        };
        line += &format!(" | {tbs:.2}");
        for pair in timed.chunks(2) {
            line += &format!(
                " | {:.2}x / {:.2}x",
                cublas.1 / pair[1].1,
                cublas.1 / pair[0].1
            );
        }
        println!("{line}");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    df11_benches::install_tuning();
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // The numbers after a mode's name.
    let numbers = || {
        raw[1..]
            .iter()
            .map(|a| a.parse())
            .collect::<Result<Vec<usize>, _>>()
    };
    if raw.first().map(String::as_str) == Some("prefill") {
        let v = numbers()?;
        anyhow::ensure!(v.len() >= 2, "usage: tc_probe prefill M SLICE...");
        return prefill::prefill_mode(&Device::new_cuda(0)?, v[0], &v[1..]);
    }
    if raw.first().map(String::as_str) == Some("embed") {
        let v = numbers()?;
        anyhow::ensure!(v.len() >= 3, "usage: tc_probe embed VOCAB HIDDEN BATCH...");
        return embed::embed_mode(&Device::new_cuda(0)?, v[0], v[1], &v[2..]);
    }
    if raw.first().map(String::as_str) == Some("layer") {
        let batches = numbers()?;
        anyhow::ensure!(!batches.is_empty(), "usage: tc_probe layer BATCH...");
        return layer_mode(&Device::new_cuda(0)?, &batches);
    }
    let args: Vec<usize> = raw
        .into_iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(args.len() >= 3, "usage: tc_probe ROWS COLS BATCH...");
    let shapes = if args[0] == 0 {
        synth::QWEN3_8B_LAYER.to_vec()
    } else {
        vec![(args[0], args[1])]
    };
    let dev = Device::new_cuda(0)?;
    let base = df11_benches::options();
    let mut df11 = Vec::new();
    let mut tiled = Vec::new();
    let mut dense = Vec::new();
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let w = synth::normal_bf16(rows * cols, 0.02, 7 + i as u64);
        // Row order, and the tile order where the shape allows it.
        let g = packed_unit(&dev, &w, rows, cols, TileMembers::Off)?;
        let gt = packed_unit(&dev, &w, rows, cols, TileMembers::Chunked)?;
        let l = Df11Linear::new(g, 0, rows, cols, None, DType::BF16)?;
        dense.push(l.clone().decoded()?);
        df11.push(l);
        tiled.push(Df11Linear::new(gt, 0, rows, cols, None, DType::BF16)?);
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
        let decode = Df11Options {
            matmul: MatmulPath::Decode,
            ..base
        };
        let cublas_dense = using(&dense, decode);
        out.push(time(&dev, 20, || run(&cublas_dense)));
        // TC_PROBE_NO_CHECK (kernel variants that sum in another order, scripts/gpu-tc-variants.sh):
        // a difference from the twin is printed with the largest difference from cuBLAS, not fatal.
        let lenient = std::env::var_os("TC_PROBE_NO_CHECK").is_some();
        let check = |ls: &[Df11Linear], twins: &[Df11Linear], what: &str| -> anyhow::Result<()> {
            for (i, x) in xs.iter().enumerate() {
                let a = ls[i].forward(x)?.flatten_all()?.to_vec1::<half::bf16>()?;
                let b = twins[i]
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
                let c = cublas_dense[i]
                    .forward(x)?
                    .flatten_all()?
                    .to_vec1::<half::bf16>()?;
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
        for streaming in [false, true] {
            // Row-order members plan as `DF11_TILE=off` does, tiled ones as the default.
            let row_order = Df11Options {
                matmul: MatmulPath::Fused,
                tensor_cores: true,
                streaming,
                tiles: TileMembers::Off,
                ..base
            };
            let tiled_order = Df11Options {
                tiles: TileMembers::Chunked,
                ..row_order
            };
            let (d, dt) = (using(&dense, row_order), using(&dense, tiled_order));
            let (r, t) = (using(&df11, row_order), using(&tiled, tiled_order));
            check(&r, &d, "TC row order")?;
            check(&t, &dt, "TC tiled")?;
            out.push(time(&dev, 20, || run(&dt)));
            if !streaming {
                out.push(time(&dev, 20, || run(&r)));
            }
            out.push(time(&dev, 20, || run(&t)));
        }
        let cuda_core = Df11Options {
            matmul: MatmulPath::Fused,
            tensor_cores: false,
            tiles: TileMembers::Off,
            ..base
        };
        if batch <= 8 {
            let (d, r) = (using(&dense, cuda_core), using(&df11, cuda_core));
            check(&r, &d, "CUDA-core")?;
            out.push(time(&dev, 20, || run(&d)));
            out.push(time(&dev, 20, || run(&r)));
        } else {
            out.extend([f64::NAN, f64::NAN]);
        }
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
