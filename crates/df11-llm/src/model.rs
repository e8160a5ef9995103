//! The one decoder-only model every architecture runs: embedding (scaled for Gemma) → decoder
//! layers → final norm → output projection (tied or not; soft-capped for Gemma 2-style
//! configs). What varies between architectures is a [`ModelSpec`].
//!
//! Every linear and embedding comes from [`ModelWeights`], so the same code runs a DF11 folder
//! (weights kept compressed, decoded just before use) and a plain BF16 folder, with bit-identical
//! results.
//!
//! The KV cache is allocated once per sequence slot for a maximum context
//! ([`DecodeOptions::max_context`]). Prompts (and decode steps off the kernel path) run eagerly
//! ([`DecoderLayer::forward`]); on CUDA in BF16 a decode step runs the step kernels
//! (`DecoderLayer::step`) and, unless turned off, is captured as a CUDA graph per batch size
//! and replayed (`crate::graph`). Both give the same tokens and logits, bit for bit.

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{Embedding, Linear, ModelWeights};

use crate::attention::{decoder_mask, last_position, softcap};
use crate::decoder::{DecoderLayer, EagerAt};
use crate::error::{LlmError, Result};
use crate::generate::CausalLm;
use crate::kv_cache::KvCache;
use crate::norm::RmsNorm;
use crate::progress::LoadBar;
use crate::rope::RotaryEmbedding;
use crate::spec::ModelSpec;
use crate::step::StepRows;
use crate::tie::output_projection;

/// The context a model gets when none is asked for (capped by the model's own maximum).
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// How decode steps run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Positions each sequence may reach (the KV cache's size); `None`: the model's maximum,
    /// capped at [`DEFAULT_MAX_CONTEXT`].
    pub max_context: Option<usize>,
    /// Capture decode steps as CUDA graphs (CUDA, BF16). Off with `DF11_CUDA_GRAPH=0`.
    pub cuda_graph: bool,
    /// Run decode steps through the step kernels (CUDA, BF16); off, they run the eager pass.
    /// Off with `DF11_STEP_KERNELS=0`.
    pub step_kernels: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        let on = |var: &str| std::env::var(var).map_or(true, |v| v != "0");
        Self {
            max_context: None,
            cuda_graph: on("DF11_CUDA_GRAPH"),
            step_kernels: on("DF11_STEP_KERNELS"),
        }
    }
}

/// The per-sequence state: each layer's KV cache and the full rotary tables.
struct Caches {
    kv: Vec<KvCache>,
    /// `(cos, sin)` of each RoPE spec, `capacity` rows.
    tables: Vec<(Tensor, Tensor)>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    capacity: usize,
    slots: usize,
}

/// A decoder-only causal language model built from a [`ModelSpec`].
pub struct DecoderModel {
    spec: ModelSpec,
    embed_tokens: Embedding,
    /// `√hidden` in the compute dtype, when the spec scales the embedding.
    embed_scale: Option<Tensor>,
    ropes: Vec<RotaryEmbedding>,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    device: Device,
    dtype: DType,
    options: DecodeOptions,
    #[cfg(feature = "cuda")]
    graphs: std::collections::HashMap<usize, crate::graph::StepGraph>,
    caches: Option<Caches>,
}

impl DecoderModel {
    /// Builds the model of `spec` from `weights` (DF11 or dense); `progress` counts layers.
    pub fn load(spec: ModelSpec, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        if let Some(problem) = spec.problem() {
            return Err(LlmError::Usage(format!("model spec: {problem}")));
        }
        progress.set_steps(spec.layers.len() + 1);
        let d = &spec.decoder;
        let (vocab, hidden) = (spec.vocab_size, d.hidden_size);
        let prefix = &spec.names.model;
        let embed_module = format!("{prefix}.embed_tokens");
        let embed_tokens = weights.embedding(&embed_module, vocab, hidden)?;
        let embed_scale = if spec.scale_embedding {
            let scale = Tensor::new(&[(hidden as f32).sqrt()], weights.device())?;
            Some(scale.to_dtype(weights.dtype())?)
        } else {
            None
        };
        let ropes = spec
            .ropes
            .iter()
            .map(|r| {
                RotaryEmbedding::new(
                    r.inv_freq(),
                    d.max_positions,
                    weights.dtype(),
                    weights.device(),
                )
            })
            .collect();
        let mut layers = Vec::with_capacity(spec.layers.len());
        for i in 0..spec.layers.len() {
            layers.push(DecoderLayer::load(
                d,
                weights,
                &format!("{prefix}.layers.{i}"),
            )?);
            progress.step();
        }
        let norm = RmsNorm::load_kind(
            weights,
            &format!("{prefix}.norm"),
            hidden,
            d.rms_norm_eps,
            d.norm,
        )?;
        // Tied or not is the config's call, not the weight names': in a DF11 repo
        // `lm_head.weight` is a compressed unit, not a tensor of that name.
        let lm_head = output_projection(
            weights,
            spec.tie_word_embeddings,
            &spec.names.lm_head,
            &embed_module,
            &embed_tokens,
            vocab,
            hidden,
        )?;
        progress.step();
        Ok(Self {
            spec,
            embed_tokens,
            embed_scale,
            ropes,
            layers,
            norm,
            lm_head,
            device: weights.device().clone(),
            dtype: weights.dtype(),
            options: DecodeOptions::default(),
            #[cfg(feature = "cuda")]
            graphs: Default::default(),
            caches: None,
        })
    }

    /// The spec the model was built from.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// How decode steps run.
    pub fn options(&self) -> &DecodeOptions {
        &self.options
    }

    /// Sets how decode steps run; the KV cache and captured graphs are dropped (made again at
    /// the next forward pass).
    pub fn set_options(&mut self, options: DecodeOptions) -> Result<()> {
        if options.max_context == Some(0) {
            return Err(LlmError::Usage("--max-context must be at least 1".into()));
        }
        self.options = options;
        self.drop_caches();
        Ok(())
    }

    /// Positions each sequence may reach: the KV cache's size.
    pub fn max_context(&self) -> usize {
        let model = self.spec.decoder.max_positions;
        match self.options.max_context {
            Some(n) => n.min(model),
            None => model.min(DEFAULT_MAX_CONTEXT),
        }
    }

    /// Device bytes of the KV cache now allocated.
    pub fn cache_bytes(&self) -> usize {
        self.caches
            .as_ref()
            .map_or(0, |c| c.kv.iter().map(KvCache::bytes).sum())
    }

    fn drop_caches(&mut self) {
        // Graphs first: they hold the caches' addresses.
        #[cfg(feature = "cuda")]
        self.graphs.clear();
        self.caches = None;
    }

    /// Makes sure a cache of at least `slots` slots exists (a new one, emptied, when it has
    /// fewer).
    fn ensure_caches(&mut self, slots: usize) -> Result<()> {
        if self.caches.as_ref().is_some_and(|c| c.slots >= slots) {
            return Ok(());
        }
        self.drop_caches();
        let capacity = self.max_context();
        let d = &self.spec.decoder;
        let kv = (0..self.layers.len())
            .map(|_| {
                KvCache::new(
                    slots,
                    d.num_key_value_heads,
                    capacity,
                    d.head_dim,
                    self.dtype,
                    &self.device,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let tables = self
            .ropes
            .iter_mut()
            .map(|r| r.tables(0, capacity))
            .collect::<Result<Vec<_>>>()?;
        self.caches = Some(Caches {
            kv,
            tables,
            capacity,
            slots,
        });
        Ok(())
    }

    /// `[rows, seq, hidden]` embeddings of `ids`.
    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let x = self.embed_tokens.forward(ids)?;
        Ok(match &self.embed_scale {
            Some(scale) => x.broadcast_mul(scale)?,
            None => x,
        })
    }

    /// Final norm, output projection and soft-cap of the last position of `x`.
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.norm.forward(&last_position(x)?)?;
        self.logits(&x)
    }

    fn logits(&self, normed: &Tensor) -> Result<Tensor> {
        let logits = self.lm_head.forward(normed)?.squeeze(1)?;
        match self.spec.final_softcap {
            Some(cap) => softcap(&logits, cap),
            None => Ok(logits),
        }
    }

    /// The eager pass: `ids` `[rows, seq]` at positions `start..`, row `r` in slot
    /// `first_slot + r`.
    fn forward_eager(&self, ids: &Tensor, first_slot: usize, start: usize) -> Result<Tensor> {
        let caches = self.caches.as_ref().expect("caches are allocated first");
        let seq = ids.dim(1)?;
        let mut x = self.embed(ids)?;
        let tables = caches
            .tables
            .iter()
            .map(|(cos, sin)| Ok((cos.narrow(0, start, seq)?, sin.narrow(0, start, seq)?)))
            .collect::<Result<Vec<_>>>()?;
        // One mask per distinct window, only where a step needs one (several queries, or keys
        // beyond the window).
        let mut masks: Vec<(Option<usize>, Option<Tensor>)> = Vec::new();
        for layer in &self.spec.layers {
            if !masks.iter().any(|(w, _)| *w == layer.window) {
                let mask = decoder_mask(seq, start, layer.window, &self.device)?;
                masks.push((layer.window, mask));
            }
        }
        for (i, (layer, ls)) in self.layers.iter().zip(&self.spec.layers).enumerate() {
            let (cos, sin) = &tables[ls.rope];
            let mask = masks
                .iter()
                .find(|(w, _)| *w == ls.window)
                .and_then(|(_, m)| m.as_ref());
            let at = EagerAt {
                cos,
                sin,
                mask,
                kv: &caches.kv[i],
                first_slot,
                start,
            };
            x = layer.forward(&x, &at)?;
        }
        self.head(&x)
    }

    /// Whether decode steps can take the step kernels: CUDA, BF16, head sizes they take.
    #[cfg(feature = "cuda")]
    fn step_kernels_apply(&self) -> bool {
        self.options.step_kernels
            && self.device.is_cuda()
            && self.dtype == DType::BF16
            && self.layers.iter().all(DecoderLayer::step_supported)
    }

    /// One decode step through the step kernels: `x` `[rows, 1, hidden]` embedded tokens,
    /// `positions`/`slots` `[rows]` u32 on the device. Returns logits `[rows, vocab]`.
    #[cfg(feature = "cuda")]
    fn step_body(&self, x: &Tensor, positions: &Tensor, slots: &Tensor) -> Result<Tensor> {
        let caches = self.caches.as_ref().expect("caches are allocated first");
        let dev = self.device.as_cuda_device()?;
        let d = &self.spec.decoder;
        let groups = d.num_attention_heads / d.num_key_value_heads;
        let splits = df11_candle::ops::flash_decode_splits(
            dev,
            x.dim(0)?,
            d.num_key_value_heads,
            groups.div_ceil(groups.next_power_of_two().min(8)),
            caches.capacity,
        )?;
        // The residual stream is updated in place: work on a copy of the inputs.
        let mut x = x.copy()?;
        let mut pending = None;
        for (i, (layer, ls)) in self.layers.iter().zip(&self.spec.layers).enumerate() {
            let (cos, sin) = &caches.tables[ls.rope];
            let ctx = crate::step::StepCtx {
                positions,
                slots,
                cos,
                sin,
                window: ls.window,
                splits,
            };
            let (next, h) = layer.step(x, pending, &ctx, &caches.kv[i])?;
            x = next;
            pending = Some(h);
        }
        let (_, normed) = crate::step::add_norm(x, pending, &self.norm)?;
        self.logits(&normed)
    }

    /// Allocates the KV cache for `slots` sequences (at the maximum context) now, so that
    /// [`DecoderModel::prefill`] and [`DecoderModel::decode`] can use slots `0..slots`.
    pub fn reserve_slots(&mut self, slots: usize) -> Result<()> {
        if slots == 0 {
            return Err(LlmError::Usage(
                "a model needs at least one sequence slot".into(),
            ));
        }
        self.ensure_caches(slots)
    }

    /// Sequence slots of the allocated cache (0 before the first use).
    pub fn slots(&self) -> usize {
        self.caches.as_ref().map_or(0, |c| c.slots)
    }

    /// Runs `ids` (one sequence's prompt or the next part of it) into cache slot `slot` at
    /// positions `start..start + ids.len()`, eagerly; returns the last position's logits,
    /// `[1, vocab]`.
    pub fn prefill(&mut self, slot: usize, ids: &[u32], start: usize) -> Result<Tensor> {
        let capacity = self.max_context();
        if slot >= self.slots() || ids.is_empty() || start + ids.len() > capacity {
            return Err(LlmError::Usage(format!(
                "prefill of {} tokens at position {start} into slot {slot} ({} slots, context \
                 of {capacity} positions)",
                ids.len(),
                self.slots()
            )));
        }
        let ids = Tensor::new(ids, &self.device)?.unsqueeze(0)?;
        self.forward_eager(&ids, slot, start)
    }

    /// One decode step: `tokens[r]` at position `rows.positions[r]` of the sequence in slot
    /// `rows.slots[r]` (rows independent: a ragged batch). Returns `[rows, vocab]`. On CUDA in
    /// BF16 through the step kernels and a CUDA graph per power-of-two bucket of rows (padded
    /// with free slots); elsewhere through the eager pass.
    pub fn decode(&mut self, tokens: &[u32], rows: &StepRows) -> Result<Tensor> {
        let Some(c) = &self.caches else {
            return Err(LlmError::Usage(
                "decode before any slot was reserved".into(),
            ));
        };
        rows.check(c.slots, c.capacity)?;
        if tokens.len() != rows.len() {
            return Err(LlmError::Usage(format!(
                "{} tokens for {} rows",
                tokens.len(),
                rows.len()
            )));
        }
        self.decode_step(tokens, rows)
    }

    /// [`DecoderModel::decode`] after the checks.
    fn decode_step(&mut self, tokens: &[u32], rows: &StepRows) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.step_kernels_apply() {
            return self.decode_kernels(tokens, rows);
        }
        let first = rows.slots[0];
        let uniform = rows.positions.iter().all(|&p| p == rows.positions[0])
            && rows.slots.iter().enumerate().all(|(i, &s)| s == first + i);
        if uniform {
            let ids = Tensor::new(tokens, &self.device)?.unsqueeze(1)?;
            return self.forward_eager(&ids, first, rows.positions[0]);
        }
        let mut out = Vec::with_capacity(rows.len());
        for ((&t, &slot), &pos) in tokens.iter().zip(&rows.slots).zip(&rows.positions) {
            let ids = Tensor::new(&[t], &self.device)?.unsqueeze(0)?;
            out.push(self.forward_eager(&ids, slot, pos)?);
        }
        Ok(Tensor::cat(&out, 0)?)
    }

    /// The step kernels, through a CUDA graph per bucket of rows unless graphs are off.
    #[cfg(feature = "cuda")]
    fn decode_kernels(&mut self, tokens: &[u32], rows: &StepRows) -> Result<Tensor> {
        let n = rows.len();
        if !self.options.cuda_graph {
            let ids = Tensor::new(tokens, &self.device)?.unsqueeze(1)?;
            let x = self.embed(&ids)?.contiguous()?;
            let (positions, slots) = rows.to_device(&self.device)?;
            return self.step_body(&x, &positions, &slots);
        }
        // Pad to a power of two with free slots at position 0 (a new sequence overwrites it),
        // so a handful of graphs serve every batch size.
        let total = self.slots();
        let bucket = n.next_power_of_two().min(total);
        let mut padded = rows.clone();
        let mut tokens = tokens.to_vec();
        let mut free = (0..total).filter(|s| !rows.slots.contains(s));
        while padded.len() < bucket {
            padded
                .slots
                .push(free.next().expect("a bucket never exceeds the slots"));
            padded.positions.push(0);
            tokens.push(0);
        }
        let ids = Tensor::new(tokens.as_slice(), &self.device)?.unsqueeze(1)?;
        let x = self.embed(&ids)?.contiguous()?;
        let logits = match self.graphs.get(&bucket) {
            Some(graph) => graph.replay(&x, &padded.positions, &padded.slots)?,
            None => {
                let dev = self.device.as_cuda_device()?.clone();
                let (graph, logits) = crate::graph::StepGraph::capture(
                    &dev,
                    &x,
                    &padded.positions,
                    &padded.slots,
                    &|x, p, s| self.step_body(x, p, s),
                )?;
                self.graphs.insert(bucket, graph);
                logits
            }
        };
        Ok(if bucket > n {
            logits.narrow(0, 0, n)?
        } else {
            logits
        })
    }
}

impl CausalLm for DecoderModel {
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor> {
        let (rows, seq) = ids.dims2()?;
        self.ensure_caches(rows)?;
        let capacity = self.max_context();
        if start_pos + seq > capacity {
            return Err(LlmError::Usage(format!(
                "the sequence ({} positions) exceeds the context of {capacity} positions \
                 (--max-context)",
                start_pos + seq
            )));
        }
        if seq == 1 {
            let tokens = ids.flatten_all()?.to_vec1::<u32>()?;
            self.decode_step(&tokens, &StepRows::uniform(rows, start_pos))
        } else {
            self.forward_eager(ids, 0, start_pos)
        }
    }

    fn reset(&mut self) {
        // Positions are overwritten as a sequence grows: nothing to clear.
    }

    fn max_context(&self) -> usize {
        DecoderModel::max_context(self)
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
