//! `Df11Backend`: candle-transformers' own models loaded from the fixtures' `df11/` folders give
//! logits bit-identical to the same models loaded from `bf16/` with candle's safetensors
//! `VarBuilder`; every tensor it serves equals the BF16 checkpoint's; typed errors.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, mistral, phi3, qwen2, qwen3};
use df11_candle::{Df11Backend, Df11Error};

type Step = Box<dyn FnMut(&Tensor, usize) -> candle_core::Result<Tensor>>;

/// candle's own loader over `bf16/model.safetensors`.
fn bf16_var_builder(model: &str, dtype: DType, device: &Device) -> VarBuilder<'static> {
    let file = common::model_dir(model, "bf16").join("model.safetensors");
    // SAFETY: the fixture files are not modified while the test runs.
    unsafe { VarBuilder::from_mmaped_safetensors(&[file], dtype, device) }.expect("bf16 fixture")
}

fn df11_backend(model: &str) -> Df11Backend {
    Df11Backend::open(common::model_dir(model, "df11")).expect("df11 fixture")
}

fn config_text(model: &str) -> String {
    std::fs::read_to_string(common::model_dir(model, "df11").join("config.json")).unwrap()
}

fn prompt_ids(model: &str) -> Vec<u32> {
    let path = common::fixtures()
        .join("models")
        .join(model)
        .join("reference.json");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    r["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// candle-transformers' model for `arch`, as a step function `(ids, offset) -> logits`.
fn build(arch: &str, config: &str, vb: VarBuilder<'static>) -> candle_core::Result<Step> {
    let parse = |e: serde_json::Error| candle_core::Error::msg(format!("{arch} config: {e}"));
    Ok(match arch {
        "qwen3" => {
            let cfg: qwen3::Config = serde_json::from_str(config).map_err(parse)?;
            let mut m = qwen3::ModelForCausalLM::new(&cfg, vb)?;
            Box::new(move |x, offset| m.forward(x, offset))
        }
        "qwen2" => {
            let cfg: qwen2::Config = serde_json::from_str(config).map_err(parse)?;
            let mut m = qwen2::ModelForCausalLM::new(&cfg, vb)?;
            Box::new(move |x, offset| m.forward(x, offset))
        }
        "mistral" => {
            let cfg: mistral::Config = serde_json::from_str(config).map_err(parse)?;
            let mut m = mistral::Model::new(&cfg, vb)?;
            Box::new(move |x, offset| m.forward(x, offset))
        }
        "phi3" => {
            let cfg: phi3::Config = serde_json::from_str(config).map_err(parse)?;
            let mut m = phi3::Model::new(&cfg, vb)?;
            Box::new(move |x, offset| m.forward(x, offset))
        }
        "llama" => {
            let cfg: llama::LlamaConfig = serde_json::from_str(config).map_err(parse)?;
            let cfg = cfg.into_config(false);
            let mut cache = llama::Cache::new(true, vb.dtype(), &cfg, vb.device())?;
            let m = llama::Llama::load(vb, &cfg)?;
            Box::new(move |x, offset| m.forward(x, offset, &mut cache))
        }
        other => panic!("no builder for {other}"),
    })
}

/// Last-position logits as f32 bits (exact for BF16 and F32 logits).
fn logit_bits(logits: &Tensor) -> Vec<u32> {
    let v: Vec<f32> = logits
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

/// Prefill on the reference prompt, then two greedy steps with the KV cache; the logits of the
/// DF11-loaded model must equal those of the BF16-loaded one bit for bit at every step.
fn same_logits(model: &str, arch: &str, dtype: DType) {
    let device = common::device();
    let config = config_text(model);
    let backend = df11_backend(model);
    let n_units = backend.model().units().len();
    let vb_df11 = backend.clone().into_var_builder(dtype, &device);
    let mut df11 = build(arch, &config, vb_df11).expect("model from df11/");
    // Each unit decoded once while the model loads.
    assert_eq!(backend.units_decoded(), n_units, "{model}: unit decodes");
    let mut bf16 = build(arch, &config, bf16_var_builder(model, dtype, &device)).unwrap();

    let mut ids = prompt_ids(model);
    let mut offset = 0;
    for step in 0..3 {
        let x = Tensor::new(&ids[offset..], &device)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let a = df11(&x, offset).unwrap();
        let b = bf16(&x, offset).unwrap();
        assert_eq!(a.dims(), b.dims());
        let (a, b) = (logit_bits(&a), logit_bits(&b));
        assert_eq!(a.len(), 512, "{model}: one row of vocabulary logits");
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            panic!(
                "{model} {dtype:?} step {step}: logit {i} differs: {} vs {}",
                f32::from_bits(a[i]),
                f32::from_bits(b[i])
            );
        }
        let logits: Vec<f32> = a.iter().map(|&x| f32::from_bits(x)).collect();
        let next = (0..logits.len())
            .max_by(|&i, &j| logits[i].total_cmp(&logits[j]))
            .unwrap();
        offset = ids.len();
        ids.push(next as u32);
    }
}

#[test]
fn qwen3_df11_logits_equal_bf16_f32() {
    same_logits("qwen3-tiny", "qwen3", DType::F32);
}

#[test]
fn qwen3_df11_logits_equal_bf16_bf16() {
    same_logits("qwen3-tiny", "qwen3", DType::BF16);
}

#[test]
fn qwen3_tied_df11_logits_equal_bf16() {
    same_logits("qwen3-tied-tiny", "qwen3", DType::F32);
    same_logits("qwen3-tied-tiny", "qwen3", DType::BF16);
}

#[test]
fn llama_df11_logits_equal_bf16() {
    same_logits("llama-tiny", "llama", DType::F32);
    same_logits("llama-tiny", "llama", DType::BF16);
}

#[test]
fn mistral_nemo_df11_logits_equal_bf16() {
    same_logits("mistral-nemo-tiny", "mistral", DType::F32);
    same_logits("mistral-nemo-tiny", "mistral", DType::BF16);
}

#[test]
fn qwen2_df11_logits_equal_bf16() {
    same_logits("qwen2-tiny", "qwen2", DType::F32);
    same_logits("qwen2-tiny", "qwen2", DType::BF16);
}

#[test]
fn phi3_df11_logits_equal_bf16() {
    same_logits("phi4-tiny", "phi3", DType::F32);
    same_logits("phi4-tiny", "phi3", DType::BF16);
}

/// Every tensor of every BF16 checkpoint, asked for by name and shape in BF16, is byte-identical
/// through the backend; walking the names in order decodes each unit exactly once.
#[test]
fn every_checkpoint_tensor_is_served_exactly() {
    let device = common::device();
    for model in common::MODELS {
        let file = common::model_dir(model, "bf16").join("model.safetensors");
        // SAFETY: the fixture files are not modified while the test runs.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(&file) }.unwrap();
        let mut names: Vec<(String, Vec<usize>)> = st
            .tensors()
            .into_iter()
            .map(|(n, v)| (n, v.shape().to_vec()))
            .collect();
        names.sort();
        let backend = df11_backend(model);
        let vb = backend.clone().into_var_builder(DType::BF16, &device);
        for (name, shape) in &names {
            assert!(vb.contains_tensor(name), "{model}: {name}");
            let got = vb.get(shape.as_slice(), name).unwrap();
            let want = st.load(name, &device).unwrap();
            assert_eq!(got.dims(), want.dims(), "{model}: {name}");
            assert_eq!(got.dtype(), want.dtype(), "{model}: {name}");
            let bytes = |t: &Tensor| -> Vec<u16> {
                t.flatten_all()
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .map(|x| half::bf16::from_f32(*x).to_bits())
                    .collect()
            };
            assert!(bytes(&got) == bytes(&want), "{model}: {name} differs");
        }
        assert_eq!(
            backend.units_decoded(),
            backend.model().units().len(),
            "{model}: each unit decoded once"
        );
    }
}

#[test]
fn contains_tensor_covers_compressed_and_tied_weights() {
    let b = df11_backend("qwen3-tiny");
    let vb = b.clone().into_var_builder(DType::F32, &Device::Cpu);
    assert!(vb.contains_tensor("model.layers.1.mlp.down_proj.weight"));
    assert!(vb.contains_tensor("model.embed_tokens.weight"));
    assert!(vb.contains_tensor("lm_head.weight"));
    assert!(vb.contains_tensor("model.layers.0.input_layernorm.weight"));
    assert!(!vb.contains_tensor("model.layers.0.encoded_exponent"));
    assert!(!vb.contains_tensor("model.layers.2.mlp.down_proj.weight"));
    assert!(!b.tie_word_embeddings());

    // Tied: lm_head.weight is the embedding (here a plain BF16 tensor of df11/model.safetensors).
    let b = df11_backend("qwen3-tied-tiny");
    assert!(b.tie_word_embeddings());
    assert!(b.model().plain_tensor("lm_head.weight").is_none());
    let vb = b.into_var_builder(DType::F32, &Device::Cpu);
    assert!(vb.contains_tensor("lm_head.weight"));
    let head = vb.get((512, 160), "lm_head.weight").unwrap();
    let embed = vb.get((512, 160), "model.embed_tokens.weight").unwrap();
    let diff = (head - embed).unwrap().abs().unwrap().max_all().unwrap();
    assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);

    // Untied repos never alias, tied or not in the config.
    let b = df11_backend("qwen3-tiny");
    let head = b
        .tensor("lm_head.weight", None, DType::F32, &Device::Cpu)
        .unwrap();
    let embed = b
        .tensor("model.embed_tokens.weight", None, DType::F32, &Device::Cpu)
        .unwrap();
    let diff = (head - embed).unwrap().abs().unwrap().max_all().unwrap();
    assert!(diff.to_scalar::<f32>().unwrap() > 0.0);
}

#[test]
fn get_unchecked_returns_compressed_weights_flat() {
    let vb = df11_backend("qwen3-tiny").into_var_builder(DType::BF16, &Device::Cpu);
    let q = vb
        .get_unchecked("model.layers.0.self_attn.q_proj.weight")
        .unwrap();
    assert_eq!(q.dims(), &[128 * 128]);
    let norm = vb.get_unchecked("model.norm.weight").unwrap();
    assert_eq!(norm.dims(), &[128]);
    let gate = vb
        .get((384, 128), "model.layers.0.mlp.gate_proj.weight")
        .unwrap();
    assert_eq!(gate.dims(), &[384, 128]);
    // A weight owns its storage (not a view into the decoded unit).
    assert_eq!(gate.layout().start_offset(), 0);
    let k = vb
        .get_unchecked("model.layers.0.self_attn.k_proj.weight")
        .unwrap();
    assert_eq!(k.layout().start_offset(), 0);
    assert_eq!(k.dims(), &[64 * 128]);
    let vb = df11_backend("qwen3-tiny").into_var_builder(DType::F32, &Device::Cpu);
    let v = vb
        .get((64, 128), "model.layers.0.self_attn.v_proj.weight")
        .unwrap();
    assert_eq!(v.layout().start_offset(), 0);
    assert_eq!(v.dtype(), DType::F32);
}

#[test]
fn errors_name_the_file_and_the_tensor() {
    let b = df11_backend("qwen3-tiny");
    let cpu = Device::Cpu;
    let q = "model.layers.0.self_attn.q_proj.weight";

    // Compressed weight, wrong element count: typed, naming the unit's file.
    let shape = candle_core::Shape::from((128, 64));
    match b.tensor(q, Some(&shape), DType::F32, &cpu) {
        Err(Df11Error::WrongShape {
            path,
            tensor,
            found,
            ..
        }) => {
            assert!(path.ends_with("model_layers_0.safetensors"), "{path:?}");
            assert_eq!(tensor, q);
            assert_eq!(found, [128 * 128]);
        }
        other => panic!("expected WrongShape, got {other:?}"),
    }
    // The same through the VarBuilder: a candle error carrying our message.
    let vb = b.clone().into_var_builder(DType::F32, &cpu);
    let msg = vb.get((128, 64), q).unwrap_err().to_string();
    assert!(msg.contains("model_layers_0.safetensors"), "{msg}");
    assert!(msg.contains(q), "{msg}");

    // Plain tensor, wrong shape.
    let msg = vb.get(64, "model.norm.weight").unwrap_err().to_string();
    assert!(msg.contains("model.safetensors") && msg.contains("model.norm.weight"));
    assert!(matches!(
        b.tensor("model.norm.weight", Some(&64.into()), DType::F32, &cpu),
        Err(Df11Error::WrongShape { .. })
    ));

    // Missing tensor: names the folder and the tensor.
    let missing = "model.layers.7.self_attn.q_proj.weight";
    match b.tensor(missing, None, DType::F32, &cpu) {
        Err(Df11Error::MissingTensor { path, tensor }) => {
            assert!(path.ends_with("df11"), "{path:?}");
            assert_eq!(tensor, missing);
        }
        other => panic!("expected MissingTensor, got {other:?}"),
    }
    let msg = vb.get((128, 128), missing).unwrap_err().to_string();
    assert!(
        msg.contains("missing tensor") && msg.contains(missing),
        "{msg}"
    );
    // A unit's own tensors are not served as weights.
    assert!(b
        .tensor("model.layers.0.luts", None, DType::U8, &cpu)
        .is_err());
}

#[test]
fn one_unit_cached_at_a_time() {
    let b = df11_backend("qwen3-tiny");
    let cpu = Device::Cpu;
    let get = |name: &str| b.tensor(name, None, DType::BF16, &cpu).unwrap();
    let q0 = get("model.layers.0.self_attn.q_proj.weight");
    get("model.layers.0.mlp.down_proj.weight");
    assert_eq!(b.units_decoded(), 1);
    get("model.layers.1.self_attn.q_proj.weight");
    assert_eq!(b.units_decoded(), 2);
    // Back to layer 0: decoded again (only the last unit is kept), same values.
    let again = get("model.layers.0.self_attn.q_proj.weight");
    assert_eq!(b.units_decoded(), 3);
    let d = (q0.to_dtype(DType::F32).unwrap() - again.to_dtype(DType::F32).unwrap())
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0);
    b.clear_cache();
    get("model.layers.0.self_attn.k_proj.weight");
    assert_eq!(b.units_decoded(), 4);
}
