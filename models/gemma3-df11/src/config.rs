//! Gemma 3's `config.json`.
//!
//! The multimodal `-it` checkpoints (`Gemma3ForConditionalGeneration`, `model_type: gemma3`) nest
//! the language model's settings under `text_config` and omit every field equal to transformers'
//! `Gemma3TextConfig` default; text-only checkpoints (`Gemma3ForCausalLM`, `model_type:
//! gemma3_text`) keep them at the top level. Missing fields get those defaults here, and the
//! result is df11-llm's [`ModelSpec`]: `(1 + w)` norms, q/k norms, sandwich norms, GELU-tanh,
//! the embedding scaled by √hidden, sliding-window layers with their own RoPE.

use serde::Deserialize;
use serde_json::Value;

use df11_llm::{
    Activation, DecoderSpec, LayerSpec, LlmError, ModelConfig, ModelSpec, NormKind, Result,
    RopeScaling, RopeSpec, WeightNames,
};

/// The raw text config, with transformers' `Gemma3TextConfig` defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
struct RawTextConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    hidden_activation: String,
    max_position_embeddings: usize,
    rms_norm_eps: f64,
    rope_theta: f64,
    rope_local_base_freq: f64,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    attention_bias: bool,
    query_pre_attn_scalar: f64,
    sliding_window: usize,
    sliding_window_pattern: usize,
    layer_types: Option<Vec<String>>,
    final_logit_softcapping: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    tie_word_embeddings: Option<bool>,
}

impl Default for RawTextConfig {
    fn default() -> Self {
        Self {
            vocab_size: 262_208,
            hidden_size: 2304,
            intermediate_size: 9216,
            num_hidden_layers: 26,
            num_attention_heads: 8,
            num_key_value_heads: 4,
            head_dim: 256,
            hidden_activation: "gelu_pytorch_tanh".into(),
            max_position_embeddings: 131_072,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_local_base_freq: 10_000.0,
            rope_scaling: None,
            rope_parameters: None,
            attention_bias: false,
            query_pre_attn_scalar: 256.0,
            sliding_window: 4096,
            sliding_window_pattern: 6,
            layer_types: None,
            final_logit_softcapping: None,
            attn_logit_softcapping: None,
            tie_word_embeddings: None,
        }
    }
}

/// The scaling factor of a `rope_scaling` block: 1 for none or `default`, `factor` for `linear`.
fn linear_factor(scaling: Option<&Value>) -> std::result::Result<f64, String> {
    let Some(s) = scaling.filter(|s| !s.is_null()) else {
        return Ok(1.0);
    };
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    match kind {
        "default" => Ok(1.0),
        "linear" => match s.get("factor").and_then(Value::as_f64) {
            Some(f) if f > 0.0 => Ok(f),
            _ => Err("linear RoPE scaling without a positive `factor`".into()),
        },
        other => Err(format!("RoPE scaling `{other}` is not supported")),
    }
}

/// The language model's spec from a Gemma 3 `config.json` (`text_config` of a multimodal
/// checkpoint, or the top level of a text-only one), its weights under `names`.
pub fn spec(config: &ModelConfig, names: WeightNames) -> Result<ModelSpec> {
    let bad = |reason: String| LlmError::config(config.path(), reason);
    let root = config.json();
    let text = match root.get("text_config") {
        Some(t) if t.is_object() => t.clone(),
        Some(t) if !t.is_null() => return Err(bad("`text_config` is not an object".into())),
        // A multimodal config without text_config gets every default, as in transformers.
        _ if root.get("model_type").and_then(Value::as_str) == Some("gemma3") => {
            Value::Object(Default::default())
        }
        _ => root.clone(),
    };
    let raw = RawTextConfig::deserialize(&text).map_err(|e| bad(e.to_string()))?;
    from_raw(raw, root, names).map_err(bad)
}

fn from_raw(
    raw: RawTextConfig,
    root: &Value,
    names: WeightNames,
) -> std::result::Result<ModelSpec, String> {
    if raw.hidden_activation != "gelu_pytorch_tanh" {
        return Err(format!(
            "activation `{}` is not supported (Gemma 3 uses gelu_pytorch_tanh)",
            raw.hidden_activation
        ));
    }
    if raw.sliding_window == 0 || raw.query_pre_attn_scalar <= 0.0 {
        return Err("sliding_window and query_pre_attn_scalar must be positive".into());
    }
    let sliding = sliding_layers(&raw)?;
    let (global, local) = ropes(&raw)?;
    let mut decoder = DecoderSpec::llama(
        raw.hidden_size,
        raw.intermediate_size,
        (raw.num_attention_heads, raw.num_key_value_heads),
        raw.head_dim,
        raw.rms_norm_eps,
        raw.max_position_embeddings,
    );
    decoder.norm = NormKind::OnePlusWeight;
    decoder.qkv_bias = raw.attention_bias;
    decoder.o_bias = raw.attention_bias;
    decoder.qk_norm = true;
    decoder.sandwich_norms = true;
    decoder.activation = Activation::GeluTanh;
    decoder.attention_scale = raw.query_pre_attn_scalar.powf(-0.5);
    decoder.attn_softcap = raw.attn_logit_softcapping;
    let rope = |(theta, factor): (f64, f64)| RopeSpec {
        theta,
        dim: raw.head_dim,
        scaling: RopeScaling::Linear { factor },
    };
    let spec = ModelSpec {
        vocab_size: raw.vocab_size,
        decoder,
        // RoPE table 0: global layers; 1: sliding-window layers.
        layers: sliding
            .into_iter()
            .map(|s| LayerSpec {
                rope: usize::from(s),
                window: s.then_some(raw.sliding_window),
            })
            .collect(),
        ropes: vec![rope(global), rope(local)],
        scale_embedding: true,
        final_softcap: raw.final_logit_softcapping,
        tie_word_embeddings: raw
            .tie_word_embeddings
            .or_else(|| root.get("tie_word_embeddings").and_then(Value::as_bool))
            .unwrap_or(true),
        names,
    };
    match spec.problem() {
        Some(p) => Err(p),
        None => Ok(spec),
    }
}

/// Per layer: sliding-window (true) or global, from `layer_types` or `sliding_window_pattern`.
fn sliding_layers(raw: &RawTextConfig) -> std::result::Result<Vec<bool>, String> {
    // Before a table of that many layers is made.
    if let Some(problem) = df11_llm::spec::layer_count_problem(raw.num_hidden_layers) {
        return Err(problem);
    }
    let Some(types) = &raw.layer_types else {
        let p = raw.sliding_window_pattern;
        if p == 0 {
            return Err("sliding_window_pattern is 0".into());
        }
        return Ok((0..raw.num_hidden_layers)
            .map(|i| (i + 1) % p != 0)
            .collect());
    };
    if types.len() != raw.num_hidden_layers {
        return Err(format!(
            "{} layer_types for {} layers",
            types.len(),
            raw.num_hidden_layers
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "sliding_attention" => Ok(true),
            "full_attention" => Ok(false),
            other => Err(format!("layer type `{other}` is not supported")),
        })
        .collect()
}

/// `(theta, linear factor)` of the global and the local RoPE: from `rope_theta` /
/// `rope_scaling` / `rope_local_base_freq` (never scaled), or from a per-layer-type
/// `rope_parameters` block (newer transformers).
type LayerRope = (f64, f64);
fn ropes(raw: &RawTextConfig) -> std::result::Result<(LayerRope, LayerRope), String> {
    let mut global = (raw.rope_theta, linear_factor(raw.rope_scaling.as_ref())?);
    let mut local = (raw.rope_local_base_freq, 1.0);
    if let Some(params) = raw.rope_parameters.as_ref().filter(|p| p.is_object()) {
        for (key, rope) in [
            ("full_attention", &mut global),
            ("sliding_attention", &mut local),
        ] {
            if let Some(block) = params.get(key).filter(|b| b.is_object()) {
                if let Some(theta) = block.get("rope_theta").and_then(Value::as_f64) {
                    rope.0 = theta;
                }
                rope.1 = linear_factor(Some(block))?;
            }
        }
    }
    Ok((global, local))
}
