//! Gemma 3's language model: embedding scaled by √hidden → decoder layers (sliding-window and
//! global attention with their own RoPE, each sub-block wrapped in a pre- and a post-norm) →
//! final norm → the tied output projection (→ optional logit soft-capping).
//!
//! Every linear and embedding comes from [`ModelWeights`], so the same code runs a DF11 folder
//! (layers kept compressed, decoded just before use) and a plain BF16 folder, with bit-identical
//! results. The vision tower and projector of a multimodal checkpoint are never read.

use candle_core::{Device, Module, Tensor};
use df11_candle::{Df11Error, Embedding, Linear, ModelWeights};
use df11_llm::{
    decoder_mask, last_position, output_projection, CausalLm, LoadBar, Result, RopeScaling,
    RotaryEmbedding,
};

use crate::config::{Gemma3Config, LayerRope};
use crate::layers::{softcap, Attention, GemmaRmsNorm, Mlp};

/// Where the language model's weights live in a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightLayout {
    /// Prefix of `embed_tokens`, `layers.N` and `norm`.
    pub model: &'static str,
    /// The untied output projection's module.
    pub lm_head: &'static str,
}

/// The layouts, in the order they are tried: transformers 4.50–4.51 multimodal
/// (`language_model.model.…`, the DFloat11 `-it` repos), ≥ 4.52 multimodal
/// (`model.language_model.…`), and text-only `Gemma3ForCausalLM` (`model.…`).
pub const LAYOUTS: [WeightLayout; 3] = [
    WeightLayout {
        model: "language_model.model",
        lm_head: "language_model.lm_head",
    },
    WeightLayout {
        model: "model.language_model",
        lm_head: "lm_head",
    },
    WeightLayout {
        model: "model",
        lm_head: "lm_head",
    },
];

impl WeightLayout {
    /// The layout of the checkpoint `weights` reads, found by the embedding table's name.
    pub fn detect(weights: &ModelWeights) -> Result<Self> {
        LAYOUTS
            .into_iter()
            .find(|l| weights.contains(&format!("{}.embed_tokens.weight", l.model)))
            .ok_or_else(|| {
                Df11Error::MissingTensor {
                    path: weights.dir().to_path_buf(),
                    tensor: format!("{}.embed_tokens.weight", LAYOUTS[0].model),
                }
                .into()
            })
    }
}

/// RoPE tables (f32-computed) for one kind of layer.
fn rotary(rope: LayerRope, cfg: &Gemma3Config, weights: &ModelWeights) -> RotaryEmbedding {
    let scaling = RopeScaling::Linear {
        factor: rope.linear_factor,
    };
    let inv_freq = scaling.inv_freq(rope.theta, cfg.head_dim);
    RotaryEmbedding::new(
        inv_freq,
        cfg.max_position_embeddings,
        weights.dtype(),
        weights.device(),
    )
}

/// A Gemma 3 causal language model (text).
pub struct Gemma3 {
    embed_tokens: Embedding,
    /// √hidden, rounded to f32 and then to the compute dtype (transformers' `embed_scale`).
    embed_scale: Tensor,
    local_rope: RotaryEmbedding,
    global_rope: RotaryEmbedding,
    layers: Vec<DecoderLayer>,
    norm: GemmaRmsNorm,
    lm_head: Linear,
    sliding_window: usize,
    final_logit_softcapping: Option<f64>,
    device: Device,
}

impl Gemma3 {
    /// Builds the model from `weights` (DF11 or dense), finding the weight layout itself.
    pub fn load(cfg: &Gemma3Config, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        let layout = WeightLayout::detect(weights)?;
        Self::load_with_layout(cfg, weights, layout, progress)
    }

    /// Builds the model from `weights` laid out as `layout`.
    pub fn load_with_layout(
        cfg: &Gemma3Config,
        weights: &ModelWeights,
        layout: WeightLayout,
        progress: &LoadBar,
    ) -> Result<Self> {
        progress.set_steps(cfg.num_hidden_layers + 1);
        let (vocab, hidden) = (cfg.vocab_size, cfg.hidden_size);
        let prefix = layout.model;
        let embed_module = format!("{prefix}.embed_tokens");
        let embed_tokens = weights.embedding(&embed_module, vocab, hidden)?;
        let embed_scale =
            Tensor::new(&[(hidden as f32).sqrt()], weights.device())?.to_dtype(weights.dtype())?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let module = format!("{prefix}.layers.{i}");
            layers.push(DecoderLayer::load(
                cfg,
                weights,
                &module,
                cfg.is_sliding(i),
            )?);
            progress.step();
        }
        let norm =
            GemmaRmsNorm::load(weights, &format!("{prefix}.norm"), hidden, cfg.rms_norm_eps)?;
        let lm_head = output_projection(
            weights,
            cfg.tie_word_embeddings,
            layout.lm_head,
            &embed_module,
            &embed_tokens,
            vocab,
            hidden,
        )?;
        progress.step();
        Ok(Self {
            embed_tokens,
            embed_scale,
            local_rope: rotary(cfg.local_rope, cfg, weights),
            global_rope: rotary(cfg.global_rope, cfg, weights),
            layers,
            norm,
            lm_head,
            sliding_window: cfg.sliding_window,
            final_logit_softcapping: cfg.final_logit_softcapping,
            device: weights.device().clone(),
        })
    }
}

impl CausalLm for Gemma3 {
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor> {
        let seq = ids.dim(1)?;
        let x = self.embed_tokens.forward(ids)?;
        let mut x = x.broadcast_mul(&self.embed_scale)?;
        let local = self.local_rope.tables(start_pos, seq)?;
        let global = self.global_rope.tables(start_pos, seq)?;
        // Masks only where a step needs one: several queries, or keys beyond the window.
        let global_mask = decoder_mask(seq, start_pos, None, &self.device)?;
        let local_mask = decoder_mask(seq, start_pos, Some(self.sliding_window), &self.device)?;
        for layer in &mut self.layers {
            let ((cos, sin), mask) = if layer.sliding {
                (&local, local_mask.as_ref())
            } else {
                (&global, global_mask.as_ref())
            };
            x = layer.forward(&x, cos, sin, mask)?;
        }
        let x = self.norm.forward(&last_position(&x)?)?;
        let logits = self.lm_head.forward(&x)?.squeeze(1)?;
        match self.final_logit_softcapping {
            Some(cap) => softcap(&logits, cap),
            None => Ok(logits),
        }
    }

    fn reset(&mut self) {
        for layer in &mut self.layers {
            layer.attn.cache.reset();
        }
    }

    fn reserve(&mut self, positions: usize) {
        for layer in &mut self.layers {
            layer.attn.cache.reserve(positions);
        }
    }

    fn device(&self) -> &Device {
        &self.device
    }
}

/// One decoder layer: `x + post_attn(attn(input_norm(x)))`, then
/// `x + post_ff(mlp(pre_ff(x)))`.
struct DecoderLayer {
    sliding: bool,
    input_layernorm: GemmaRmsNorm,
    attn: Attention,
    post_attention_layernorm: GemmaRmsNorm,
    pre_feedforward_layernorm: GemmaRmsNorm,
    mlp: Mlp,
    post_feedforward_layernorm: GemmaRmsNorm,
}

impl DecoderLayer {
    fn load(
        cfg: &Gemma3Config,
        weights: &ModelWeights,
        prefix: &str,
        sliding: bool,
    ) -> Result<Self> {
        let norm = |name: &str| {
            GemmaRmsNorm::load(
                weights,
                &format!("{prefix}.{name}"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )
        };
        Ok(Self {
            sliding,
            input_layernorm: norm("input_layernorm")?,
            attn: Attention::load(cfg, weights, &format!("{prefix}.self_attn"))?,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            pre_feedforward_layernorm: norm("pre_feedforward_layernorm")?,
            mlp: Mlp::load(cfg, weights, &format!("{prefix}.mlp"))?,
            post_feedforward_layernorm: norm("post_feedforward_layernorm")?,
        })
    }

    fn forward(
        &mut self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let h = self
            .attn
            .forward(&self.input_layernorm.forward(x)?, cos, sin, mask)?;
        let x = (x + self.post_attention_layernorm.forward(&h)?)?;
        let h = self
            .mlp
            .forward(&self.pre_feedforward_layernorm.forward(&x)?)?;
        Ok((&x + self.post_feedforward_layernorm.forward(&h)?)?)
    }
}
