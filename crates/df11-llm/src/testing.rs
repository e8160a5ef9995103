//! Helpers for the model crates' tests: fixture paths, reference.json, inputs, the test device,
//! the binary under test. They panic on missing data: a test must not pass without it.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use df11_candle::{ModelWeights, WeightFormat};
use serde_json::Value;

use crate::{Architecture, CausalLm, LoadBar, ModelConfig};

/// The path of binary `name` for an end-to-end test: `$DF11_BIN_DIR/<name>` when that variable is
/// set (test binaries carried to another machine, e.g. the GPU suite, with the model binaries
/// beside them), else `built`, the path cargo compiled in (`env!("CARGO_BIN_EXE_<name>")`).
pub fn binary(name: &str, built: &str) -> PathBuf {
    match std::env::var_os("DF11_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => PathBuf::from(built),
    }
}

/// `tests/fixtures` of the workspace, resolved at run time from `CARGO_MANIFEST_DIR` (falling
/// back to the compile-time value). Panics when missing: a test must not pass without data.
pub fn fixtures() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = PathBuf::from(manifest).join("../../tests/fixtures");
    assert!(
        dir.join("models").is_dir(),
        "fixtures not found at {}",
        dir.display()
    );
    dir
}

/// `tests/fixtures/models/<name>/<kind>` (kind: `bf16` or `df11`).
pub fn model_dir(name: &str, kind: &str) -> PathBuf {
    let d = fixtures().join("models").join(name).join(kind);
    assert!(d.is_dir(), "fixture folder missing: {}", d.display());
    d
}

/// The fixture's reference.json.
pub fn reference(name: &str) -> Value {
    let path = fixtures().join("models").join(name).join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("reference.json parses")
}

/// A JSON array of integers.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// `[1, seq]` u32 ids on the CPU.
pub fn input(ids: &[u32]) -> Tensor {
    input_on(ids, &Device::Cpu)
}

/// `[1, seq]` u32 ids on `device`.
pub fn input_on(ids: &[u32], device: &Device) -> Tensor {
    Tensor::new(ids, device).unwrap().unsqueeze(0).unwrap()
}

/// The device of the device-level tests: CUDA device 0 when built with the `cuda` feature (the
/// GPU suite), else the CPU. With `cuda` on and no GPU this fails loudly.
pub fn test_device() -> Device {
    #[cfg(feature = "cuda")]
    {
        Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened")
    }
    #[cfg(not(feature = "cuda"))]
    {
        Device::Cpu
    }
}

/// The reference greedy tokens that can be compared: up to (excluding) the first step whose
/// recorded top-1/top-2 margin is below `min_margin`.
pub fn comparable_greedy(reference: &Value, min_margin: f64) -> Vec<u32> {
    let greedy = &reference["greedy"];
    let tokens = ids(&greedy["tokens"]);
    let margins = floats(&greedy["margins"]);
    assert_eq!(tokens.len(), margins.len());
    let n = margins
        .iter()
        .position(|m| *m < min_margin)
        .unwrap_or(tokens.len());
    tokens[..n].to_vec()
}

/// A forward pass's output as bits (f32, or bf16 widened), for bit-for-bit comparisons.
pub fn logit_bits(t: &Tensor) -> Vec<u32> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|x| u32::from(x.to_bits()))
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// Logit bits of `prompt` and of three decode steps after it (from an empty cache).
fn prompt_and_steps<M: CausalLm>(model: &mut M, prompt: &[u32]) -> Vec<Vec<u32>> {
    model.reset();
    let device = test_device();
    let mut out = vec![logit_bits(
        &model.forward(&input_on(prompt, &device), 0).unwrap(),
    )];
    for (i, t) in [3u32, 141, 7].into_iter().enumerate() {
        let step = model.forward(&input_on(&[t], &device), prompt.len() + i);
        out.push(logit_bits(&step.unwrap()));
    }
    out
}

/// What every model crate checks to show DF11 is lossless: for each fixture in `models`, the DF11
/// folder and the BF16 folder, loaded by architecture `A` on [`test_device`] and run by the same
/// code, give bit-identical logits in f32 and in bf16 compute, at the prompt and at three decode
/// steps (on CUDA the steps take the fused kernel and its BF16 twin). The DF11 model must hold
/// compressed units, the BF16 one none, and the logits must not be trivially equal.
pub fn assert_df11_logits_equal_bf16<A: Architecture>(models: &[&str]) {
    let open = |name: &str, kind: &str, dtype: DType| {
        let dir = model_dir(name, kind);
        let format = if kind == "df11" {
            WeightFormat::Df11
        } else {
            WeightFormat::Dense
        };
        let weights = ModelWeights::open(&dir, format, &test_device(), dtype).unwrap();
        let config = ModelConfig::open(&dir).unwrap();
        let model = A::load(&config, &weights, &LoadBar::hidden()).unwrap();
        (model, weights.loaded_unit_bytes())
    };
    for name in models {
        let prompt = ids(&reference(name)["prompt_ids"]);
        for dtype in [DType::F32, DType::BF16] {
            let (mut df11, df11_units) = open(name, "df11", dtype);
            let (mut bf16, bf16_units) = open(name, "bf16", dtype);
            assert!(
                df11_units > 0,
                "{name}: the DF11 model holds no compressed unit"
            );
            assert_eq!(bf16_units, 0, "{name}");
            let a = prompt_and_steps(&mut df11, &prompt);
            let b = prompt_and_steps(&mut bf16, &prompt);
            assert_eq!(a.len(), b.len());
            for (step, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    x == y,
                    "{name} {dtype:?}: step {step}: DF11 and BF16 logits differ"
                );
            }
            assert!(
                a[0].iter().collect::<std::collections::HashSet<_>>().len() > 100,
                "{name}: trivial logits"
            );
        }
    }
}
