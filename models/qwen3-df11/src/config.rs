//! Qwen3's `config.json`.

use serde::Deserialize;

use df11_llm::{LlmError, ModelConfig, Result};

fn default_max_positions() -> usize {
    40_960
}

fn default_act() -> String {
    "silu".into()
}

/// The fields of a Qwen3 config this model uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen3Config {
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
    /// Head size (Qwen3 sets it; hidden / heads otherwise).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Whether `lm_head` reuses the embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Whether q/k/v/o have biases.
    #[serde(default)]
    pub attention_bias: bool,
    /// Context length.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// MLP activation (only `silu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Sliding-window attention (unsupported; Qwen3 releases leave it off).
    #[serde(default)]
    pub use_sliding_window: bool,
    /// RoPE base (top level or in `rope_parameters`).
    #[serde(skip)]
    pub rope_theta: f64,
}

impl Qwen3Config {
    /// Parses and checks a model's config.
    pub fn from_model_config(config: &ModelConfig) -> Result<Self> {
        let mut c: Self = config.parse()?;
        let rope = config.rope()?;
        let bad = |reason: String| LlmError::config(config.path(), reason);
        if let Some(t) = rope.rope_type {
            return Err(bad(format!("RoPE scaling `{t}` is not supported")));
        }
        c.rope_theta = rope.theta;
        if c.hidden_act != "silu" {
            return Err(bad(format!(
                "activation `{}` is not supported",
                c.hidden_act
            )));
        }
        if c.use_sliding_window {
            return Err(bad("sliding-window attention is not supported".into()));
        }
        if c.num_key_value_heads == 0
            || !c.num_attention_heads.is_multiple_of(c.num_key_value_heads)
        {
            return Err(bad(format!(
                "{} attention heads cannot share {} key/value heads",
                c.num_attention_heads, c.num_key_value_heads
            )));
        }
        if !c.head_dim().is_multiple_of(2) {
            return Err(bad(format!("head_dim {} is odd", c.head_dim())));
        }
        Ok(c)
    }

    /// The head size.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }
}
