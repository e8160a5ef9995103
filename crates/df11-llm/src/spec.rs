//! What an architecture is, as options of the one decoder ([`crate::DecoderModel`]): a model
//! crate maps its `config.json` to a [`ModelSpec`] and nothing else.
//!
//! Every architecture we ship is a pre-norm decoder-only transformer with RMSNorm, grouped-query
//! attention with RoPE and a gated MLP; they differ only by the options here: fused or separate
//! projections (Phi-4's `qkv_proj`, `gate_up_proj`), biases (Qwen2, Llama's `attention_bias`),
//! per-head q/k norms (Qwen3, Gemma 3), Gemma's `(1 + w)` norms and sandwich norms, the
//! activation, the attention scale and soft-caps, sliding-window layers with their own RoPE, the
//! embedding scale, and where the weights live.

use crate::rope::RopeScaling;

/// The RMSNorm flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `w * (x * rsqrt(mean(x²) + eps)).to(dtype)` (Llama, Qwen, Mistral, Phi).
    Weight,
    /// `(x32 * rsqrt(mean(x32²) + eps) * (1 + w32)).to(dtype)` (Gemma).
    OnePlusWeight,
}

/// The gated MLP's activation: `down(act(gate) * up)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (`silu`).
    Silu,
    /// GELU, tanh approximation, computed in f32 and rounded once (`gelu_pytorch_tanh`).
    GeluTanh,
}

impl Activation {
    /// The activation named `name` in a config (`hidden_act` / `hidden_activation`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "silu" | "swish" => Some(Self::Silu),
            "gelu_pytorch_tanh" => Some(Self::GeluTanh),
            _ => None,
        }
    }
}

/// One decoder layer's sizes and options (shared by all layers of a model).
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderSpec {
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (a divisor of `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Head size (may differ from `hidden_size / num_attention_heads`, e.g. Mistral-Nemo).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// The norm flavour (every norm of the model, q/k norms included).
    pub norm: NormKind,
    /// q/k/v come from one `qkv_proj` whose rows are `[q; k; v]` (Phi-3/Phi-4).
    pub fused_qkv: bool,
    /// gate/up come from one `gate_up_proj` whose rows are `[gate; up]` (Phi-3/Phi-4).
    pub fused_gate_up: bool,
    /// q/k/v projections have biases (Qwen2; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// o_proj has a bias (Llama's `attention_bias`).
    pub o_bias: bool,
    /// gate/up/down have biases (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (`q_norm`, `k_norm`: Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Gemma's sandwich: the attention and MLP outputs are normed before the residual add
    /// (`post_attention_layernorm`, `post_feedforward_layernorm`) and the MLP input by
    /// `pre_feedforward_layernorm`.
    pub sandwich_norms: bool,
    /// The MLP activation.
    pub activation: Activation,
    /// Attention scores are multiplied by this (`1/√head_dim` unless the config says otherwise).
    pub attention_scale: f64,
    /// `cap · tanh(scores / cap)` on the attention scores (Gemma 2's soft-capping).
    pub attn_softcap: Option<f64>,
    /// Positions the KV cache may hold (the context length).
    pub max_positions: usize,
}

impl DecoderSpec {
    /// A Llama-style layer: standard norms, separate projections without biases, SiLU, scale
    /// `1/√head_dim`; set the options that differ.
    pub fn llama(
        hidden_size: usize,
        intermediate_size: usize,
        heads: (usize, usize),
        head_dim: usize,
        rms_norm_eps: f64,
        max_positions: usize,
    ) -> Self {
        Self {
            hidden_size,
            intermediate_size,
            num_attention_heads: heads.0,
            num_key_value_heads: heads.1,
            head_dim,
            rms_norm_eps,
            norm: NormKind::Weight,
            fused_qkv: false,
            fused_gate_up: false,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            sandwich_norms: false,
            activation: Activation::Silu,
            attention_scale: 1.0 / (head_dim.max(1) as f64).sqrt(),
            attn_softcap: None,
            max_positions,
        }
    }

    /// Why the sizes cannot work, if they cannot.
    pub fn problem(&self) -> Option<String> {
        let (h, kv) = (self.num_attention_heads, self.num_key_value_heads);
        if h == 0 || kv == 0 || !h.is_multiple_of(kv) {
            return Some(format!(
                "{h} attention heads cannot share {kv} key/value heads"
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Some(format!(
                "head_dim {} is not a positive even number",
                self.head_dim
            ));
        }
        if self.hidden_size == 0 || self.intermediate_size == 0 {
            return Some("hidden_size and intermediate_size must be positive".into());
        }
        if !(self.attention_scale.is_finite() && self.attention_scale > 0.0) {
            return Some(format!(
                "attention scale {} is not positive",
                self.attention_scale
            ));
        }
        if self.max_positions == 0 || self.max_positions > MAX_POSITIONS {
            return Some(format!(
                "max_position_embeddings {} is not in 1..={MAX_POSITIONS} (positions are 32-bit on the device)",
                self.max_positions
            ));
        }
        if self.kv_cache_bytes(self.max_positions).is_none() {
            return Some(format!(
                "max_position_embeddings {}: one sequence's KV cache at that length is beyond this machine's address space",
                self.max_positions
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Some(format!(
                "rms_norm_eps {} is not a finite non-negative number",
                crate::error::shown(self.rms_norm_eps)
            ));
        }
        if let Some(cap) = self.attn_softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return Some(format!("attention soft-cap {cap} is not positive"));
            }
        }
        None
    }

    /// Bytes of one layer's keys and values for one sequence of `positions` (BF16), if that
    /// fits a `usize` (with room to multiply by the layers).
    pub fn kv_cache_bytes(&self, positions: usize) -> Option<usize> {
        let bytes = [2, self.num_key_value_heads, self.head_dim, positions, 2]
            .into_iter()
            .try_fold(1usize, usize::checked_mul)?;
        (bytes <= isize::MAX as usize / MAX_LAYERS).then_some(bytes)
    }
}

/// Decoder layers a config may declare: far above any published model (the largest have a
/// few hundred); a larger count is a damaged config, refused before anything is sized by it.
pub const MAX_LAYERS: usize = 4096;

/// The largest `max_position_embeddings`: positions are 32-bit on the device.
pub const MAX_POSITIONS: usize = i32::MAX as usize;

/// Why `num_hidden_layers` cannot be, if it cannot (checked before any per-layer table is made).
pub fn layer_count_problem(layers: usize) -> Option<String> {
    (layers == 0 || layers > MAX_LAYERS)
        .then(|| format!("num_hidden_layers {layers} is not in 1..={MAX_LAYERS}"))
}

/// The rotary embedding of a kind of layer.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    /// The base θ.
    pub theta: f64,
    /// Features of each head that are rotated (the head size, or fewer: partial rotary).
    pub dim: usize,
    /// The frequency scaling.
    pub scaling: RopeScaling,
}

impl RopeSpec {
    /// The inverse frequencies, computed in f32 as transformers does.
    pub fn inv_freq(&self) -> Vec<f32> {
        self.scaling.inv_freq(self.theta, self.dim)
    }

    /// Why the base or the scaling cannot give usable frequencies, if they cannot: the base
    /// must be a finite number above 1 that f32 (the precision the tables are computed in)
    /// holds, and every scaled inverse frequency finite and positive.
    pub fn problem(&self) -> Option<String> {
        let theta = self.theta;
        if !(theta.is_finite() && theta > 1.0 && (theta as f32).is_finite()) {
            return Some(format!(
                "rope_theta {} is not a finite number above 1 (at most {:e})",
                crate::error::shown(theta),
                f32::MAX
            ));
        }
        if let Some(p) = self.scaling.problem() {
            return Some(p);
        }
        let bad = self
            .inv_freq()
            .into_iter()
            .find(|f| !(f.is_finite() && *f > 0.0));
        bad.map(|f| {
            format!(
                "rope_theta {} with {:?} gives the inverse frequency {f}",
                crate::error::shown(theta),
                self.scaling
            )
        })
    }
}

/// What differs between the layers of one model: which RoPE, and a sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerSpec {
    /// Index into [`ModelSpec::ropes`].
    pub rope: usize,
    /// Keys a query may see: `pos - window < j <= pos` (`None`: all earlier keys).
    pub window: Option<usize>,
}

/// Where a checkpoint keeps the language model's weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightNames {
    /// Prefix of `embed_tokens`, `layers.N` and `norm` (e.g. `model`).
    pub model: String,
    /// The untied output projection's module (e.g. `lm_head`).
    pub lm_head: String,
}

impl Default for WeightNames {
    fn default() -> Self {
        Self {
            model: "model".into(),
            lm_head: "lm_head".into(),
        }
    }
}

/// A whole decoder-only model: its layers' spec, each layer's RoPE and window, and the ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// The layer options.
    pub decoder: DecoderSpec,
    /// One entry per layer.
    pub layers: Vec<LayerSpec>,
    /// The RoPE tables the layers use (most models have one).
    pub ropes: Vec<RopeSpec>,
    /// The embedding is multiplied by `√hidden` (rounded to f32, then to the compute dtype).
    pub scale_embedding: bool,
    /// `cap · tanh(logits / cap)` on the output logits.
    pub final_softcap: Option<f64>,
    /// The output projection is the embedding table.
    pub tie_word_embeddings: bool,
    /// Weight names.
    pub names: WeightNames,
}

impl ModelSpec {
    /// A model of `layers` identical layers with one RoPE and no window.
    pub fn uniform(
        vocab_size: usize,
        decoder: DecoderSpec,
        layers: usize,
        rope: RopeSpec,
        tie_word_embeddings: bool,
    ) -> Self {
        Self {
            vocab_size,
            decoder,
            layers: vec![
                LayerSpec {
                    rope: 0,
                    window: None
                };
                layers
            ],
            ropes: vec![rope],
            scale_embedding: false,
            final_softcap: None,
            tie_word_embeddings,
            names: WeightNames::default(),
        }
    }

    /// Sets every layer's sliding window.
    pub fn with_window(mut self, window: Option<usize>) -> Self {
        for layer in &mut self.layers {
            layer.window = window;
        }
        self
    }

    /// Why the spec cannot work, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if let Some(p) = self.decoder.problem() {
            return Some(p);
        }
        if self.vocab_size == 0 || self.vocab_size > u32::MAX as usize {
            return Some(format!(
                "vocab_size {} is not in 1..={} (token ids are 32-bit)",
                self.vocab_size,
                u32::MAX
            ));
        }
        if let Some(p) = layer_count_problem(self.layers.len()) {
            return Some(p);
        }
        if let Some(cap) = self.final_softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return Some(format!("final logit soft-cap {cap} is not positive"));
            }
        }
        for (i, layer) in self.layers.iter().enumerate() {
            if layer.rope >= self.ropes.len() {
                return Some(format!("layer {i} names RoPE table {}", layer.rope));
            }
            if layer.window == Some(0) {
                return Some(format!("layer {i}: sliding window 0"));
            }
        }
        for rope in &self.ropes {
            if let Some(p) = rope.problem() {
                return Some(p);
            }
            if rope.dim == 0 || !rope.dim.is_multiple_of(2) || rope.dim > self.decoder.head_dim {
                return Some(format!(
                    "{} rotary features for head_dim {} (must be even, non-zero, at most the head)",
                    rope.dim, self.decoder.head_dim
                ));
            }
        }
        None
    }
}

/// A Llama-shaped spec for unit tests: vocab 512, hidden 128, intermediate 256, 4 / 2 heads of
/// 32, 2 layers, 64 positions.
#[cfg(test)]
pub(crate) fn tiny_spec() -> ModelSpec {
    let rope = RopeSpec {
        theta: 1e4,
        dim: 32,
        scaling: RopeScaling::None,
    };
    ModelSpec::uniform(
        512,
        DecoderSpec::llama(128, 256, (4, 2), 32, 1e-6, 64),
        2,
        rope,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ModelSpec {
        tiny_spec()
    }

    #[test]
    fn problems_are_found() {
        assert_eq!(spec().problem(), None);
        let mut s = spec();
        s.decoder.num_key_value_heads = 3;
        assert!(s.problem().unwrap().contains("cannot share"));
        let mut s = spec();
        s.ropes[0].dim = 34;
        assert!(s.problem().unwrap().contains("rotary features"));
        let mut s = spec();
        s.layers[1].rope = 1;
        assert!(s.problem().unwrap().contains("layer 1"));
        let s = spec().with_window(Some(0));
        assert!(s.problem().unwrap().contains("sliding window 0"));
        let mut s = spec();
        s.decoder.head_dim = 31;
        assert!(s.problem().unwrap().contains("head_dim"));
    }

    #[test]
    fn activation_names() {
        assert_eq!(Activation::from_name("silu"), Some(Activation::Silu));
        assert_eq!(
            Activation::from_name("gelu_pytorch_tanh"),
            Some(Activation::GeluTanh)
        );
        assert_eq!(Activation::from_name("relu"), None);
    }
}
