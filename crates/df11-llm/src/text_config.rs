//! The fields the Llama-family `config.json` files share (Llama, Mistral, Qwen2, Qwen3, Phi-3),
//! read once, and the [`ModelSpec`] of a Llama-style decoder built from them. A model crate
//! reads a [`TextConfig`], refuses what its architecture does not have, and sets the options
//! that differ (biases, q/k norms, fused projections, partial rotary, windows).

use serde::Deserialize;

use crate::config::ModelConfig;
use crate::error::{LlmError, Result};
use crate::rope::RopeScaling;
use crate::spec::{Activation, DecoderSpec, ModelSpec, RopeSpec};

/// The shared fields: the sizes every such config has, and [`TextOptions`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TextConfig {
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
    /// What a config may leave out.
    #[serde(flatten)]
    pub options: TextOptions,
}

/// The fields a config may leave out; absent ones keep their absence (`None`, `false`) so each
/// architecture applies its own transformers default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TextOptions {
    /// Key/value heads (the query heads when absent).
    pub num_key_value_heads: Option<usize>,
    /// Head size (hidden / heads when absent or `null`).
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: Option<f64>,
    /// Whether `lm_head` reuses the embedding. Decided here, never from the weight names: in a
    /// DF11 repo `lm_head.weight` is a compressed unit, not a tensor of that name.
    pub tie_word_embeddings: bool,
    /// Whether q/k/v/o have biases (Llama, Qwen3).
    pub attention_bias: bool,
    /// Whether gate/up/down have biases (Llama).
    pub mlp_bias: bool,
    /// Context length.
    pub max_position_embeddings: Option<usize>,
    /// MLP activation.
    pub hidden_act: Option<String>,
    /// Sliding-window span (Mistral-7B v0.1 4096, Phi-3; `null` for most).
    pub sliding_window: Option<usize>,
    /// Whether `sliding_window` is used (Qwen2/Qwen3 keep the field but turn it off; turned on,
    /// it is refused: their window applies to some layers only, which is not implemented).
    pub use_sliding_window: bool,
    /// The share of each head that RoPE rotates (Phi-3; 1 when absent).
    pub partial_rotary_factor: Option<f64>,
}

/// The transformers defaults of one architecture for the optional fields.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextDefaults {
    /// `max_position_embeddings` when absent.
    pub max_positions: usize,
    /// `rms_norm_eps` when absent.
    pub rms_norm_eps: f64,
}

impl TextConfig {
    /// Reads the shared fields of `config`.
    pub fn read(config: &ModelConfig) -> Result<Self> {
        config.parse()
    }

    /// Reads `config` and builds its Llama-style spec ([`TextConfig::llama_spec`]) with the
    /// architecture's defaults for the context and epsilon.
    pub fn spec_of(
        config: &ModelConfig,
        max_positions: usize,
        rms_norm_eps: f64,
    ) -> Result<(Self, ModelSpec)> {
        let text = Self::read(config)?;
        let defaults = TextDefaults {
            max_positions,
            rms_norm_eps,
        };
        let spec = text.llama_spec(config, defaults)?;
        Ok((text, spec))
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.options
            .num_key_value_heads
            .unwrap_or(self.num_attention_heads)
    }

    /// The head size.
    pub fn head_dim(&self) -> usize {
        self.options
            .head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Features of each head that RoPE rotates: `int(head_dim * partial_rotary_factor)`, as
    /// transformers computes it.
    pub fn rotary_dim(&self) -> usize {
        let factor = self.options.partial_rotary_factor.unwrap_or(1.0);
        (self.head_dim() as f64 * factor) as usize
    }

    /// The spec of a Llama-style model: standard RMSNorm, separate projections (`attention_bias`
    /// on q/k/v/o, `mlp_bias` on the MLP), the config's activation (SiLU only), RoPE with the
    /// config's scaling (linear, llama3) on `rotary_dim` features, every layer global (the
    /// architecture sets windows). Sizes and values are checked; errors name `config`'s file.
    pub fn llama_spec(&self, config: &ModelConfig, defaults: TextDefaults) -> Result<ModelSpec> {
        let bad = |reason: String| LlmError::config(config.path(), reason);
        let o = &self.options;
        let act = o.hidden_act.as_deref().unwrap_or("silu");
        if Activation::from_name(act) != Some(Activation::Silu) {
            return Err(bad(format!("activation `{act}` is not supported")));
        }
        if o.use_sliding_window {
            return Err(bad("sliding-window attention is not supported".into()));
        }
        if let Some(f) = o.partial_rotary_factor {
            if !(f > 0.0 && f <= 1.0) {
                return Err(bad(format!("partial_rotary_factor {f} is not in (0, 1]")));
            }
        }
        if o.sliding_window == Some(0) {
            return Err(bad("sliding_window 0".into()));
        }
        // Before anything is sized by it.
        if let Some(problem) = crate::spec::layer_count_problem(self.num_hidden_layers) {
            return Err(bad(problem));
        }
        let rope = config.rope()?;
        let mut decoder = DecoderSpec::llama(
            self.hidden_size,
            self.intermediate_size,
            (self.num_attention_heads, self.kv_heads()),
            self.head_dim(),
            o.rms_norm_eps.unwrap_or(defaults.rms_norm_eps),
            o.max_position_embeddings.unwrap_or(defaults.max_positions),
        );
        decoder.qkv_bias = o.attention_bias;
        decoder.o_bias = o.attention_bias;
        decoder.mlp_bias = o.mlp_bias;
        let rope = RopeSpec {
            theta: rope.theta,
            dim: self.rotary_dim(),
            scaling: RopeScaling::from_config(&rope, config.path())?,
        };
        let spec = ModelSpec::uniform(
            self.vocab_size,
            decoder,
            self.num_hidden_layers,
            rope,
            o.tie_word_embeddings,
        );
        match spec.problem() {
            Some(problem) => Err(bad(problem)),
            None => Ok(spec),
        }
    }
}

/// Checks `spec` again after an architecture changed it; errors name `config`'s file.
pub fn checked(spec: ModelSpec, config: &ModelConfig) -> Result<ModelSpec> {
    match spec.problem() {
        Some(problem) => Err(LlmError::config(config.path(), problem)),
        None => Ok(spec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> ModelConfig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
        ModelConfig::open(dir.path()).unwrap()
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
            "rope_theta": 10000.0
        })
    }

    const DEFAULTS: TextDefaults = TextDefaults {
        max_positions: 2048,
        rms_norm_eps: 1e-6,
    };

    #[test]
    fn defaults_and_sizes() {
        let c = config(base());
        let spec = TextConfig::read(&c)
            .unwrap()
            .llama_spec(&c, DEFAULTS)
            .unwrap();
        assert_eq!(spec.layers.len(), 3);
        assert_eq!(spec.decoder.head_dim, 16);
        assert_eq!(spec.decoder.max_positions, 2048);
        assert_eq!(spec.ropes[0].dim, 16);
        assert_eq!(spec.decoder.attention_scale, 0.25);
    }

    #[test]
    fn bad_values_are_invalid_config() {
        for (key, value) in [
            ("hidden_act", serde_json::json!("relu")),
            ("num_key_value_heads", serde_json::json!(3)),
            ("partial_rotary_factor", serde_json::json!(1.5)),
            ("sliding_window", serde_json::json!(0)),
            ("use_sliding_window", serde_json::json!(true)),
            ("head_dim", serde_json::json!(15)),
            (
                "rope_scaling",
                serde_json::json!({"rope_type": "yarn", "factor": 2.0}),
            ),
        ] {
            let mut json = base();
            json[key] = value;
            let c = config(json);
            let e = TextConfig::read(&c).unwrap().llama_spec(&c, DEFAULTS);
            assert!(
                matches!(e, Err(LlmError::InvalidConfig { .. })),
                "{key}: {e:?}"
            );
        }
    }

    /// Values a damaged config carries: each is refused with an error naming the field and
    /// the value, before any weight is read.
    #[test]
    fn out_of_range_values_name_the_field_and_value() {
        use serde_json::json;
        for (key, value, field, shown) in [
            ("rope_theta", json!(0.0), "rope_theta", "0"),
            ("rope_theta", json!(-1.0), "rope_theta", "-1"),
            ("rope_theta", json!(1.0), "rope_theta", "1"),
            ("rope_theta", json!(1e308), "rope_theta", "1e308"),
            ("num_hidden_layers", json!(0), "num_hidden_layers", "0"),
            (
                "num_hidden_layers",
                json!(1u64 << 40),
                "num_hidden_layers",
                "1099511627776",
            ),
            (
                "max_position_embeddings",
                json!(0),
                "max_position_embeddings",
                "0",
            ),
            (
                "max_position_embeddings",
                json!(1u64 << 40),
                "max_position_embeddings",
                "1099511627776",
            ),
            ("rms_norm_eps", json!(-1.0), "rms_norm_eps", "-1"),
            ("vocab_size", json!(0), "vocab_size", "0"),
            (
                "rope_scaling",
                json!({"rope_type": "linear", "factor": 0.0}),
                "factor",
                "0",
            ),
            (
                "rope_scaling",
                json!({"rope_type": "linear", "factor": -2.0}),
                "factor",
                "-2",
            ),
            (
                "rope_scaling",
                json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 0.0}),
                "original_max_position_embeddings",
                "0",
            ),
            (
                "rope_scaling",
                json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192.0}),
                "high_freq_factor",
                "4",
            ),
        ] {
            let mut config_json = base();
            config_json[key] = value.clone();
            let c = config(config_json);
            let e = TextConfig::read(&c)
                .map_err(|e| e.to_string())
                .and_then(|t| t.llama_spec(&c, DEFAULTS).map_err(|e| e.to_string()));
            let msg = e.expect_err(&format!("{key} = {value} was accepted"));
            assert!(
                msg.contains(field) && msg.contains(shown) && msg.contains("config.json"),
                "{key} = {value}: {msg}"
            );
        }
        // The edges that are fine.
        for (key, value) in [
            ("rope_theta", json!(1.5)),
            ("rope_theta", json!(1e12)),
            ("num_hidden_layers", json!(crate::spec::MAX_LAYERS)),
            ("max_position_embeddings", json!(crate::spec::MAX_POSITIONS)),
        ] {
            let mut config_json = base();
            config_json[key] = value.clone();
            let c = config(config_json);
            let spec = TextConfig::read(&c).unwrap().llama_spec(&c, DEFAULTS);
            assert!(spec.is_ok(), "{key} = {value}: {spec:?}");
        }
    }
}
