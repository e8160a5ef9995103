//! The FLUX transformer on the bundled tiny fixture (tests/fixtures/models/flux-tiny: a
//! diffusers FLUX.1-dev-shaped and a schnell-shaped transformer, random weights, compressed by
//! the official dfloat11 0.5.0): the DF11 transformer == the BF16 one bit for bit, in f32 and
//! BF16, per-block files and single file alike; both within the fixture's tolerance of diffusers'
//! own outputs for the same inputs (tests/fixtures/flux-tiny.md).

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use df11_candle::{ModelWeights, WeightFormat};
use flux_df11::{FluxConfig, FluxError, FluxInputs, FluxTransformer};

/// The test device: CUDA device 0 with the `cuda` feature (the GPU suite), else the CPU.
fn device() -> Device {
    #[cfg(feature = "cuda")]
    {
        Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened")
    }
    #[cfg(not(feature = "cuda"))]
    {
        Device::Cpu
    }
}

/// The transformer of `base` (its config) loaded from `weights_dir` as `format`.
fn transformer(
    base: &str,
    weights_dir: &str,
    format: WeightFormat,
    dtype: DType,
) -> (FluxTransformer, ModelWeights) {
    let config =
        FluxConfig::open(&common::fixture().join(base).join("transformer/config.json")).unwrap();
    let weights = ModelWeights::open(
        &common::fixture().join(weights_dir),
        format,
        &device(),
        dtype,
    )
    .unwrap();
    (FluxTransformer::load(&config, &weights).unwrap(), weights)
}

/// The bits of `t` (f32 or BF16), for bitwise comparisons.
fn bits(t: &Tensor) -> Vec<u32> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u32)
            .collect(),
        _ => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    }
}

/// The standalone check's inputs (`tcheck.*`) on the test device, and its output in `dtype`.
fn run(t: &FluxTransformer, r: &HashMap<String, Tensor>, guidance: bool) -> Tensor {
    let on = |name: &str| r[&format!("tcheck.{name}")].to_device(&device()).unwrap();
    let (hidden, text, pooled) = (
        on("hidden_states"),
        on("encoder_hidden_states"),
        on("pooled_projections"),
    );
    let (timestep, g) = (on("timestep"), on("guidance"));
    let (img_ids, txt_ids) = (on("img_ids"), on("txt_ids"));
    t.forward(&FluxInputs {
        hidden_states: &hidden,
        encoder_hidden_states: &text,
        pooled_projections: &pooled,
        timestep: &timestep,
        guidance: guidance.then_some(&g),
        img_ids: &img_ids,
        txt_ids: &txt_ids,
    })
    .unwrap()
}

/// Tolerances against diffusers' outputs (max |output| ~0.44): f32 1e-5 (the fixture's f32
/// against f64: 8e-8; measured here 6e-8); BF16 8e-3, four BF16 steps at 0.5 (the fixture's BF16
/// against f64: 2.3e-3; measured here 2e-3, one step: two BF16 implementations round
/// differently along the way).
fn tolerance(dtype: DType) -> f32 {
    if dtype == DType::F32 {
        1e-5
    } else {
        8e-3
    }
}

fn check_variant(base: &str, df11_dirs: &[&str], guidance: bool, reference_prefix: &str) {
    let r = common::reference();
    for dtype in [DType::F32, DType::BF16] {
        let (bf16, dense) = transformer(
            base,
            &format!("{base}/transformer"),
            WeightFormat::Dense,
            dtype,
        );
        assert_eq!(dense.loaded_unit_bytes(), 0);
        let want = run(&bf16, &r, guidance);
        let name = if dtype == DType::F32 {
            "output_f32"
        } else {
            "output_bf16"
        };
        let diffusers = &r[&format!("{reference_prefix}.{name}")];
        let err = common::max_abs_diff(&want, diffusers);
        eprintln!("{base} {dtype:?}: max abs diff from diffusers {err:.3e}");
        assert!(
            err <= tolerance(dtype),
            "{base} {dtype:?}: {err} from diffusers' output"
        );
        for dir in df11_dirs {
            let (df11, weights) = transformer(base, dir, WeightFormat::Df11, dtype);
            assert!(
                weights.loaded_unit_bytes() > 0,
                "{dir}: no compressed unit loaded"
            );
            let got = run(&df11, &r, guidance);
            assert!(
                bits(&got) == bits(&want),
                "{dir} {dtype:?}: DF11 differs from BF16"
            );
        }
    }
}

#[test]
fn dev_transformer_df11_equals_bf16_and_matches_diffusers() {
    check_variant("base", &["df11", "df11-single"], true, "tcheck");
}

#[test]
fn schnell_transformer_df11_equals_bf16_and_matches_diffusers() {
    check_variant("base-schnell", &["df11-schnell"], false, "tcheck_schnell");
}

#[test]
fn bad_inputs_and_configs_are_refused_by_name() {
    let r = common::reference();
    let (t, _) = transformer("base", "df11", WeightFormat::Df11, DType::F32);
    let on = |name: &str| r[&format!("tcheck.{name}")].to_device(&device()).unwrap();
    let (hidden, text, pooled) = (
        on("hidden_states"),
        on("encoder_hidden_states"),
        on("pooled_projections"),
    );
    let (timestep, img_ids, txt_ids) = (on("timestep"), on("img_ids"), on("txt_ids"));
    let inputs = FluxInputs {
        hidden_states: &hidden,
        encoder_hidden_states: &text,
        pooled_projections: &pooled,
        timestep: &timestep,
        guidance: None,
        img_ids: &img_ids,
        txt_ids: &txt_ids,
    };
    let e = t.forward(&inputs).unwrap_err();
    assert!(
        matches!(e, FluxError::Input(ref m) if m.contains("guidance")),
        "{e}"
    );
    let g = on("guidance");
    let wrong = hidden.narrow(2, 0, 32).unwrap();
    let e = t
        .forward(&FluxInputs {
            hidden_states: &wrong,
            guidance: Some(&g),
            ..inputs
        })
        .unwrap_err();
    assert!(e.to_string().contains("hidden_states"), "{e}");
    let e = t
        .forward(&FluxInputs {
            img_ids: &txt_ids,
            guidance: Some(&g),
            ..inputs
        })
        .unwrap_err();
    assert!(e.to_string().contains("img_ids"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let text =
        std::fs::read_to_string(common::fixture().join("base/transformer/config.json")).unwrap();
    std::fs::write(
        &path,
        text.replace("\"attention_head_dim\": 16", "\"attention_head_dim\": 15"),
    )
    .unwrap();
    let e = FluxConfig::open(&path).unwrap_err();
    assert!(
        e.to_string().contains("axes_dims_rope") && e.to_string().contains("config.json"),
        "{e}"
    );
    std::fs::write(&path, "{ not json").unwrap();
    assert!(matches!(
        FluxConfig::open(&path),
        Err(FluxError::Config { .. })
    ));
}
