//! Shared setup for the benchmarks: the Qwen3-8B-sized layer unit every bench measures, one
//! matrix as a unit on a device (the GPU diagnostics), and the GPU benches' timer.

use std::sync::Arc;

use candle_core::Device;
use df11_candle::{encode_unit, synth, Df11Group, EncodedUnit, UnitLayout};
use half::bf16;

/// Seconds a call of `f` (which queues work on `dev`): three calls to warm up, then `reps`
/// timings of `iters` calls each, synchronized, and their median.
pub fn median_seconds(dev: &Device, iters: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    dev.synchronize().unwrap();
    let mut v: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                f();
            }
            dev.synchronize().unwrap();
            t.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `w` compressed as a one-member unit `{name}` (member `{name}.weight`) and loaded on `device`.
pub fn one_member_group(name: &str, w: &[bf16], device: &Device) -> anyhow::Result<Arc<Df11Group>> {
    let enc = encode_unit(&[bytemuck::cast_slice(w)]).map_err(|e| anyhow::anyhow!(e.reason))?;
    let layout = UnitLayout::validate(&enc.tensors()).map_err(|d| anyhow::anyhow!("{d}"))?;
    let member = vec![format!("{name}.weight")];
    let placement = df11_candle::UnitPlacement {
        options: options(),
        ..Default::default()
    };
    Ok(Df11Group::new(
        name,
        member,
        &enc.tensors(),
        layout,
        device,
        &placement,
    )?)
}

/// The options of a bench run: the `DF11_*` variables' (`df11_candle::options::VARIABLES`),
/// else the defaults; a bad value stops the run with its message.
pub fn options() -> df11_candle::Df11Options {
    df11_candle::Df11Options::from_vars(|n| std::env::var(n).ok()).unwrap_or_else(|e| panic!("{e}"))
}

/// Puts the measurement overrides of the `DF11_TC_*` variables in force
/// (`df11_candle::tuning::VARIABLES`); a bad value stops the run with its message.
#[cfg(feature = "cuda")]
pub fn install_tuning() {
    let tuning = df11_candle::tuning::Tuning::from_vars(|n| std::env::var(n).ok())
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = df11_candle::tuning::install(tuning);
}

/// The BF16 weights of a Qwen3-8B-shaped layer (192,937,984 of N(0, 0.02)) and their encoding.
pub fn qwen3_8b_layer_unit(seed: u64) -> (Vec<bf16>, EncodedUnit) {
    let n: usize = synth::QWEN3_8B_LAYER.iter().map(|(o, i)| o * i).sum();
    let w = synth::normal_bf16(n, 0.02, seed);
    let enc = encode_unit(&member_bytes(&w)).expect("normal weights encode");
    (w, enc)
}

/// The layer's weights split into its seven members, as byte slices.
pub fn member_bytes(w: &[bf16]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    for (o, i) in synth::QWEN3_8B_LAYER {
        out.push(bytemuck::cast_slice(&w[at..at + o * i]));
        at += o * i;
    }
    out
}
