//! Mistral's `config.json` (Mistral-7B, Mistral-Nemo: `model_type: mistral`).

use serde::Deserialize;

use df11_llm::{DecoderSpec, LlmError, ModelConfig, Result, RopeScaling};

fn default_max_positions() -> usize {
    4096 * 32
}

fn default_act() -> String {
    "silu".into()
}

/// The fields of a Mistral config this model uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MistralConfig {
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
    /// Key/value heads (the query heads when absent).
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head size: Mistral-Nemo sets it (128 with hidden 5120 and 32 heads); hidden / heads
    /// when absent or `null`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Whether `lm_head` reuses the embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Context length (1,024,000 for Mistral-Nemo; the rotary tables and KV cache grow only
    /// as far as a sequence reaches).
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// MLP activation (only `silu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Sliding-window attention span (`null` for Mistral-Nemo; 4096 for Mistral-7B v0.1).
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// RoPE base (top level or in `rope_parameters`).
    #[serde(skip)]
    pub rope_theta: f64,
    /// RoPE scaling (none for Mistral releases).
    #[serde(skip, default = "no_scaling")]
    pub rope_scaling: RopeScaling,
}

fn no_scaling() -> RopeScaling {
    RopeScaling::None
}

impl MistralConfig {
    /// Parses and checks a model's config.
    pub fn from_model_config(config: &ModelConfig) -> Result<Self> {
        let mut c: Self = config.parse()?;
        let rope = config.rope()?;
        c.rope_scaling = RopeScaling::from_config(&rope, config.path())?;
        c.rope_theta = rope.theta;
        let bad = |reason: String| LlmError::config(config.path(), reason);
        if c.hidden_act != "silu" {
            return Err(bad(format!(
                "activation `{}` is not supported",
                c.hidden_act
            )));
        }
        if c.sliding_window == Some(0) {
            return Err(bad("sliding_window 0".into()));
        }
        if let Some(problem) = c.decoder().problem() {
            return Err(bad(problem));
        }
        Ok(c)
    }

    /// The head size.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The decoder layer's sizes: no biases anywhere.
    pub fn decoder(&self) -> DecoderSpec {
        DecoderSpec {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            num_key_value_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim: self.head_dim(),
            rms_norm_eps: self.rms_norm_eps,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            max_positions: self.max_position_embeddings,
        }
    }
}
