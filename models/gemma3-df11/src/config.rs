//! Gemma 3's `config.json`.
//!
//! The multimodal `-it` checkpoints (`Gemma3ForConditionalGeneration`, `model_type: gemma3`) nest
//! the language model's settings under `text_config` and omit every field equal to transformers'
//! `Gemma3TextConfig` default; text-only checkpoints (`Gemma3ForCausalLM`, `model_type:
//! gemma3_text`) keep them at the top level. Missing fields get those defaults here.

use serde::Deserialize;
use serde_json::Value;

use df11_llm::{LlmError, ModelConfig, Result};

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

/// RoPE of one kind of layer: base θ and the linear scaling factor (1 when unscaled).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerRope {
    /// The base θ.
    pub theta: f64,
    /// Positions are divided by this (`rope_type: linear`); 1 for plain RoPE.
    pub linear_factor: f64,
}

/// The settings of Gemma 3's language model, defaults applied and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Context length.
    pub max_position_embeddings: usize,
    /// Whether q/k/v/o have biases.
    pub attention_bias: bool,
    /// Attention scores are scaled by `query_pre_attn_scalar^-0.5`.
    pub query_pre_attn_scalar: f64,
    /// Keys a sliding-window layer sees: query `i` attends `i - sliding_window < j <= i`.
    pub sliding_window: usize,
    /// Per layer: sliding-window (local) or global attention.
    pub sliding_layers: Vec<bool>,
    /// RoPE of the global layers (`rope_theta`, with `rope_scaling`).
    pub global_rope: LayerRope,
    /// RoPE of the sliding-window layers (`rope_local_base_freq`, never scaled).
    pub local_rope: LayerRope,
    /// `cap · tanh(logits / cap)` on the output logits, if set.
    pub final_logit_softcapping: Option<f64>,
    /// `cap · tanh(scores / cap)` on the attention scores, if set.
    pub attn_logit_softcapping: Option<f64>,
    /// Whether the output projection is the embedding table (always, in Gemma 3 releases).
    pub tie_word_embeddings: bool,
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

impl Gemma3Config {
    /// Parses and checks a model's config (`text_config` of a multimodal checkpoint, or the top
    /// level of a text-only one).
    pub fn from_model_config(config: &ModelConfig) -> Result<Self> {
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
        Self::from_raw(raw, root).map_err(bad)
    }

    fn from_raw(raw: RawTextConfig, root: &Value) -> std::result::Result<Self, String> {
        if raw.hidden_activation != "gelu_pytorch_tanh" {
            return Err(format!(
                "activation `{}` is not supported (Gemma 3 uses gelu_pytorch_tanh)",
                raw.hidden_activation
            ));
        }
        let (heads, kv_heads) = (raw.num_attention_heads, raw.num_key_value_heads);
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "{heads} attention heads cannot share {kv_heads} key/value heads"
            ));
        }
        if raw.head_dim == 0 || !raw.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head_dim {} is not a positive even number",
                raw.head_dim
            ));
        }
        if raw.sliding_window == 0 || raw.query_pre_attn_scalar <= 0.0 {
            return Err("sliding_window and query_pre_attn_scalar must be positive".into());
        }
        let sliding_layers = match &raw.layer_types {
            Some(types) => {
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
                    .collect::<std::result::Result<Vec<_>, _>>()?
            }
            None => {
                let p = raw.sliding_window_pattern;
                if p == 0 {
                    return Err("sliding_window_pattern is 0".into());
                }
                (0..raw.num_hidden_layers)
                    .map(|i| (i + 1) % p != 0)
                    .collect()
            }
        };
        let (global_rope, local_rope) = Self::ropes(&raw)?;
        let tie_word_embeddings = raw
            .tie_word_embeddings
            .or_else(|| root.get("tie_word_embeddings").and_then(Value::as_bool))
            .unwrap_or(true);
        Ok(Self {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: raw.head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            max_position_embeddings: raw.max_position_embeddings,
            attention_bias: raw.attention_bias,
            query_pre_attn_scalar: raw.query_pre_attn_scalar,
            sliding_window: raw.sliding_window,
            sliding_layers,
            global_rope,
            local_rope,
            final_logit_softcapping: raw.final_logit_softcapping,
            attn_logit_softcapping: raw.attn_logit_softcapping,
            tie_word_embeddings,
        })
    }

    /// Global and local RoPE: from `rope_theta` / `rope_scaling` / `rope_local_base_freq`, or
    /// from a per-layer-type `rope_parameters` block (newer transformers).
    fn ropes(raw: &RawTextConfig) -> std::result::Result<(LayerRope, LayerRope), String> {
        let mut global = LayerRope {
            theta: raw.rope_theta,
            linear_factor: linear_factor(raw.rope_scaling.as_ref())?,
        };
        let mut local = LayerRope {
            theta: raw.rope_local_base_freq,
            linear_factor: 1.0,
        };
        if let Some(params) = raw.rope_parameters.as_ref().filter(|p| p.is_object()) {
            for (key, rope) in [
                ("full_attention", &mut global),
                ("sliding_attention", &mut local),
            ] {
                if let Some(block) = params.get(key).filter(|b| b.is_object()) {
                    if let Some(theta) = block.get("rope_theta").and_then(Value::as_f64) {
                        rope.theta = theta;
                    }
                    rope.linear_factor = linear_factor(Some(block))?;
                }
            }
        }
        Ok((global, local))
    }

    /// Whether layer `i` uses sliding-window attention.
    pub fn is_sliding(&self, i: usize) -> bool {
        self.sliding_layers[i]
    }

    /// The attention score scale, `query_pre_attn_scalar^-0.5`.
    pub fn attention_scale(&self) -> f64 {
        self.query_pre_attn_scalar.powf(-0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: Value) -> std::result::Result<Gemma3Config, String> {
        let text = json.get("text_config").cloned().unwrap_or(json.clone());
        let raw = RawTextConfig::deserialize(&text).map_err(|e| e.to_string())?;
        Gemma3Config::from_raw(raw, &json)
    }

    #[test]
    fn omitted_fields_get_transformers_defaults() {
        // The shape of gemma-3-12b-it's config.json: most text fields omitted.
        let c = parse(serde_json::json!({
            "model_type": "gemma3",
            "text_config": {
                "hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
                "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
                "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024
            }
        }))
        .unwrap();
        assert_eq!(
            (c.vocab_size, c.head_dim, c.sliding_window),
            (262_208, 256, 1024)
        );
        assert_eq!(c.attention_scale(), 1.0 / 16.0);
        assert_eq!(
            c.global_rope,
            LayerRope {
                theta: 1e6,
                linear_factor: 8.0
            }
        );
        assert_eq!(
            c.local_rope,
            LayerRope {
                theta: 1e4,
                linear_factor: 1.0
            }
        );
        assert_eq!(c.sliding_layers.iter().filter(|s| !**s).count(), 8);
        assert!(!c.is_sliding(5) && c.is_sliding(6) && !c.is_sliding(47));
        assert!(c.tie_word_embeddings);
        assert_eq!(c.final_logit_softcapping, None);
    }

    #[test]
    fn layer_types_and_rope_parameters() {
        let c = parse(serde_json::json!({
            "num_hidden_layers": 3, "query_pre_attn_scalar": 168,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e3}
            }
        }))
        .unwrap();
        assert_eq!(c.sliding_layers, [true, false, true]);
        assert_eq!(
            c.global_rope,
            LayerRope {
                theta: 5e5,
                linear_factor: 4.0
            }
        );
        assert_eq!(c.local_rope.theta, 1e3);
        assert_eq!(c.attention_scale(), 168f64.powf(-0.5));
    }

    #[test]
    fn unsupported_settings_are_rejected() {
        for json in [
            serde_json::json!({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}),
            serde_json::json!({"hidden_activation": "silu"}),
            serde_json::json!({"num_key_value_heads": 3}),
            serde_json::json!({"num_hidden_layers": 2, "layer_types": ["full_attention"]}),
            serde_json::json!({"sliding_window_pattern": 0}),
        ] {
            assert!(parse(json.clone()).is_err(), "{json}");
        }
    }
}
