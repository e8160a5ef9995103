//! Llama's `config.json` (Llama 2, 3, 3.1, 3.2, 3.3).

use serde::Deserialize;

use df11_llm::{DecoderSpec, LlmError, ModelConfig, Result, RopeScaling};

fn default_max_positions() -> usize {
    2048
}

fn default_eps() -> f64 {
    1e-6
}

fn default_act() -> String {
    "silu".into()
}

/// The fields of a Llama config this model uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LlamaConfig {
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
    /// Head size (hidden / heads when absent).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// Whether `lm_head` reuses the embedding (Llama 3.2 1B/3B), read from the config: in a DF11
    /// repo `lm_head.weight` is a compressed unit, not a tensor of that name.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Whether q/k/v/o have biases.
    #[serde(default)]
    pub attention_bias: bool,
    /// Whether gate/up/down have biases.
    #[serde(default)]
    pub mlp_bias: bool,
    /// Context length.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// MLP activation (only `silu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// RoPE base (top level or in `rope_parameters`).
    #[serde(skip)]
    pub rope_theta: f64,
    /// RoPE scaling: `llama3` for Llama 3.1 and later, `linear`, or none.
    #[serde(skip, default = "no_scaling")]
    pub rope_scaling: RopeScaling,
}

fn no_scaling() -> RopeScaling {
    RopeScaling::None
}

impl LlamaConfig {
    /// Parses and checks a model's config.
    pub fn from_model_config(config: &ModelConfig) -> Result<Self> {
        let mut c: Self = config.parse()?;
        let bad = |reason: String| LlmError::config(config.path(), reason);
        let rope = config.rope()?;
        c.rope_scaling = RopeScaling::from_config(&rope, config.path())?;
        c.rope_theta = rope.theta;
        if c.hidden_act != "silu" {
            return Err(bad(format!(
                "activation `{}` is not supported",
                c.hidden_act
            )));
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

    /// The decoder layer: `attention_bias` on q/k/v/o, `mlp_bias` on the MLP.
    pub fn decoder(&self) -> DecoderSpec {
        DecoderSpec {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            num_key_value_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim: self.head_dim(),
            rms_norm_eps: self.rms_norm_eps,
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: self.mlp_bias,
            max_positions: self.max_position_embeddings,
        }
    }
}
