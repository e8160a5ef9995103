//! The one decoder-only model every architecture runs: embedding (scaled for Gemma) → decoder
//! layers → final norm → output projection (tied or not; soft-capped for Gemma 2-style
//! configs). What varies between architectures is a [`ModelSpec`].
//!
//! Every linear and embedding comes from [`ModelWeights`], so the same code runs a DF11 folder
//! (weights kept compressed, decoded just before use) and a plain BF16 folder, with bit-identical
//! results.
//!
//! A model may be split over several devices ([`Placement`]): each layer, its KV cache and its
//! rotary tables live on the device of its segment, the residual stream moves between segments
//! ([`crate::transfer`]), and every device runs the kernels one device would: the same tokens
//! and logits, bit for bit.
//!
//! The KV cache is allocated once per sequence slot for a maximum context
//! ([`DecodeOptions::max_context`]). Prompts (and decode steps off the kernel path) run eagerly
//! ([`DecoderLayer::forward`]); on CUDA in BF16 a decode step runs the step kernels
//! (`DecoderLayer::step`) and, unless turned off, is captured as a CUDA graph per batch size
//! and replayed (`crate::graph`). Both give the same tokens and logits, bit for bit.

mod checks;
mod eager;
#[cfg(feature = "cuda")]
mod kernel_step;
mod load;
mod options;
mod plan;

pub use options::VARIABLES as DECODE_VARIABLES;
pub use options::{DecodeOptions, PromptAttention, SplitCopy, DEFAULT_MAX_CONTEXT};

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{Embedding, Linear};

use crate::attention::{last_position, softcap};
use crate::decoder::DecoderLayer;
use crate::error::{LlmError, Result};
use crate::generate::CausalLm;
use crate::kv_cache::KvCache;
use crate::norm::RmsNorm;
use crate::placement::Placement;
use crate::rope::RotaryEmbedding;
use crate::spec::ModelSpec;
use crate::step::StepRows;
use crate::transfer::to_device;

/// The per-sequence state: each layer's KV cache and the full rotary tables.
struct Caches {
    /// Layer `i`'s cache, on its segment's device.
    kv: Vec<KvCache>,
    /// `tables[segment][rope]`: `(cos, sin)` of each RoPE spec, `capacity` rows, on the
    /// segment's device (copies of one computation: every device sees the same values).
    tables: Vec<Vec<(Tensor, Tensor)>>,
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
    placement: Placement,
    /// The compressed units of each offloaded layer (empty for the others) and, last, of the
    /// output projection when it is offloaded: staged a layer ahead of use, released after it.
    offloaded_units: Vec<Vec<std::sync::Arc<df11_candle::Df11Group>>>,
    dtype: DType,
    options: DecodeOptions,
    /// The options its weights were loaded with (the fused launches and the plan follow them).
    weight_options: df11_candle::Df11Options,
    /// Units decoded ahead so far ([`DecodeOptions::decode_ahead`]; for tests and reports).
    decoded_ahead: std::sync::atomic::AtomicUsize,
    /// Captured decode steps by bucket of rows: one graph per segment.
    #[cfg(feature = "cuda")]
    graphs: std::collections::HashMap<usize, Vec<crate::graph::StepGraph>>,
    caches: Option<Caches>,
}

impl DecoderModel {
    /// Units decoded ahead on a second stream since the model was built
    /// ([`DecodeOptions::decode_ahead`]).
    pub fn units_decoded_ahead(&self) -> usize {
        self.decoded_ahead
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where the layers run.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The offloaded units of every layer (for the harness's checks of the staging schedule).
    #[doc(hidden)]
    pub fn offloaded_units_for_tests(&self) -> Vec<std::sync::Arc<df11_candle::Df11Group>> {
        self.offloaded_units.iter().flatten().cloned().collect()
    }

    /// Puts layer `layer`'s offloaded units on its device ahead of use (nothing for a resident
    /// layer, or one past the last).
    fn stage_layer(&self, layer: usize) -> Result<()> {
        for unit in self.offloaded_units.get(layer).into_iter().flatten() {
            unit.stage()?;
        }
        Ok(())
    }

    /// Drops layer `layer`'s offloaded units from its device (after its work is queued).
    fn release_layer(&self, layer: usize) {
        for unit in self.offloaded_units.get(layer).into_iter().flatten() {
            unit.release();
        }
    }

    /// Runs `body` for layer `layer` with the next layer's offloaded units staged during it and
    /// this layer's released after it.
    fn with_staging<T>(&self, layer: usize, body: impl FnOnce() -> Result<T>) -> Result<T> {
        self.with_staging_of(layer, Some(layer + 1), body)
    }

    /// Runs `body` for layer `layer` (the output projection is layer `layers.len()`) with
    /// `next`'s offloaded units staged during it and this layer's released after it.
    fn with_staging_of<T>(
        &self,
        layer: usize,
        next: Option<usize>,
        body: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if let Some(next) = next {
            self.stage_layer(next)?;
        }
        let out = body();
        self.release_layer(layer);
        #[cfg(feature = "cuda")]
        if self.weight_options.debug_sync.layer {
            if let candle_core::Device::Cuda(dev) = self.placement.device_of(layer) {
                df11_candle::cuda::streams::sync_unless_capturing(dev)?;
            }
        }
        out
    }

    /// The spec the model was built from.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// How decode steps run.
    pub fn options(&self) -> &DecodeOptions {
        &self.options
    }

    /// How its weights are laid out and multiplied (given at load).
    pub fn weight_options(&self) -> &df11_candle::Df11Options {
        &self.weight_options
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
        self.options.context(self.spec.decoder.max_positions)
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
            .map(|i| {
                KvCache::new(
                    slots,
                    d.num_key_value_heads,
                    capacity,
                    d.head_dim,
                    self.dtype,
                    self.placement.device_of(i),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let computed = self
            .ropes
            .iter_mut()
            .map(|r| r.tables(0, capacity))
            .collect::<Result<Vec<_>>>()?;
        let tables = self
            .placement
            .segments()
            .iter()
            .map(|seg| {
                computed
                    .iter()
                    .map(|(cos, sin)| {
                        Ok((to_device(cos, &seg.device)?, to_device(sin, &seg.device)?))
                    })
                    .collect::<Result<Vec<_>>>()
            })
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
        // An embedding on the host: its rows go to the first layer's device.
        let x = to_device(&x, self.placement.first_device())?;
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
        // An offloaded output projection is staged while the last layer runs (as layer
        // `layers.len()`) and released once its product is queued.
        let n = self.layers.len();
        let logits = self.with_staging_of(n, None, || Ok(self.lm_head.forward(normed)?))?;
        let logits = logits.squeeze(1)?;
        match self.spec.final_softcap {
            Some(cap) => softcap(&logits, cap),
            None => Ok(logits),
        }
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
        let ids = Tensor::new(ids, self.placement.first_device())?.unsqueeze(0)?;
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
        let device = self.placement.first_device();
        if uniform {
            let ids = Tensor::new(tokens, device)?.unsqueeze(1)?;
            return self.forward_eager(&ids, first, rows.positions[0]);
        }
        let mut out = Vec::with_capacity(rows.len());
        for ((&t, &slot), &pos) in tokens.iter().zip(&rows.slots).zip(&rows.positions) {
            let ids = Tensor::new(&[t], device)?.unsqueeze(0)?;
            out.push(self.forward_eager(&ids, slot, pos)?);
        }
        Ok(Tensor::cat(&out, 0)?)
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

    /// Where token ids go (the first segment's device); logits come from the last one's.
    fn device(&self) -> &Device {
        self.placement.first_device()
    }

    fn devices(&self) -> Vec<Device> {
        self.placement
            .segments()
            .iter()
            .map(|s| s.device.clone())
            .collect()
    }
}
