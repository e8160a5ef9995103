//! The batching engine: sequences join and leave a running batch between decode steps. Each
//! sequence owns a KV-cache slot of the model; [`Engine::add`] prefills its prompt there, and
//! [`Engine::step`] decodes one token for any set of running sequences at once, each at its own
//! position (a ragged batch: on CUDA one launch sequence, captured as a CUDA graph per bucket of
//! rows). This is what a server schedules on.

use candle_core::Tensor;

use crate::error::{LlmError, Result};
use crate::generate::CausalLm;
use crate::model::DecoderModel;
use crate::step::StepRows;

/// A running sequence (its KV-cache slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(usize);

impl SeqId {
    /// The cache slot.
    pub fn slot(self) -> usize {
        self.0
    }
}

/// A model and the sequences running on it.
pub struct Engine {
    model: DecoderModel,
    /// Positions held by the sequence of each slot (`None`: the slot is free).
    lengths: Vec<Option<usize>>,
}

/// Prompts are run in pieces of at most this many tokens (what a device budget counts a
/// prompt's activations for: `DecoderModel::reserve`).
pub const PROMPT_CHUNK: usize = 2048;

/// Tokens of [`Engine::warm_up`]'s prompt.
pub const WARM_UP_PROMPT: usize = 32;

impl Engine {
    /// An engine running at most `max_batch` sequences at once (their KV caches are allocated
    /// now, at the model's maximum context).
    pub fn new(mut model: DecoderModel, max_batch: usize) -> Result<Self> {
        model.reserve_slots(max_batch)?;
        Ok(Self {
            model,
            lengths: vec![None; max_batch],
        })
    }

    /// The model.
    pub fn model(&self) -> &DecoderModel {
        &self.model
    }

    /// Sequences that can run at once.
    pub fn max_batch(&self) -> usize {
        self.lengths.len()
    }

    /// Positions a sequence may reach.
    pub fn max_context(&self) -> usize {
        self.model.max_context()
    }

    /// Sequences running now.
    pub fn running(&self) -> usize {
        self.lengths.iter().filter(|l| l.is_some()).count()
    }

    /// Positions `seq` holds (its prompt and the tokens fed since).
    pub fn len(&self, seq: SeqId) -> Option<usize> {
        self.lengths.get(seq.0).copied().flatten()
    }

    /// Starts a sequence: takes a free slot and prefills `prompt` into it. Returns the sequence
    /// and its last position's logits (`[vocab]`), or an error when no slot is free or the
    /// prompt leaves no room to generate.
    pub fn add(&mut self, prompt: &[u32]) -> Result<(SeqId, Tensor)> {
        let context = self.max_context();
        if prompt.is_empty() || prompt.len() >= context {
            return Err(LlmError::Usage(format!(
                "a prompt of {} tokens for a context of {context} positions",
                prompt.len()
            )));
        }
        let slot = self
            .lengths
            .iter()
            .position(Option::is_none)
            .ok_or_else(|| LlmError::Usage("every sequence slot is in use".into()))?;
        let mut logits = None;
        for (i, part) in prompt.chunks(PROMPT_CHUNK).enumerate() {
            logits = Some(self.model.prefill(slot, part, i * PROMPT_CHUNK)?);
        }
        self.lengths[slot] = Some(prompt.len());
        let logits = logits.expect("the prompt is not empty").squeeze(0)?;
        Ok((SeqId(slot), logits))
    }

    /// Feeds one token to each of `batch`'s sequences (at its own position) and returns their
    /// next logits, `[batch, vocab]` in the batch's order. A sequence whose context is full is
    /// an error: remove it first.
    pub fn step(&mut self, batch: &[(SeqId, u32)]) -> Result<Tensor> {
        let mut rows = StepRows {
            slots: Vec::with_capacity(batch.len()),
            positions: Vec::with_capacity(batch.len()),
        };
        for &(seq, _) in batch {
            let len = self
                .len(seq)
                .ok_or_else(|| LlmError::Usage(format!("sequence {} is not running", seq.0)))?;
            rows.slots.push(seq.0);
            rows.positions.push(len);
        }
        let tokens: Vec<u32> = batch.iter().map(|&(_, t)| t).collect();
        let logits = self.model.decode(&tokens, &rows)?;
        for &(seq, _) in batch {
            if let Some(len) = self.lengths[seq.0].as_mut() {
                *len += 1;
            }
        }
        Ok(logits)
    }

    /// Runs a short prompt ([`WARM_UP_PROMPT`] tokens, long enough for the products that take
    /// decode + cuBLAS) and one decode step in a free slot, then frees it: the first request
    /// then does not pay for loading cuBLAS's kernels, compiling our PTX and capturing the
    /// batch-1 step graph (its time to first token was ~250 ms on an H100; docs/PERFORMANCE.md,
    /// 2026-11-26). Later sequences see nothing of it (a slot's cache is read only up to its own
    /// length).
    pub fn warm_up(&mut self) -> Result<()> {
        let n = WARM_UP_PROMPT.min(self.max_context().saturating_sub(2));
        if n == 0 || self.running() == self.max_batch() {
            return Ok(());
        }
        let (seq, _) = self.add(&vec![0; n])?;
        let stepped = self.step(&[(seq, 0)]);
        self.remove(seq);
        stepped.map(|_| ())
    }

    /// Ends a sequence and frees its slot.
    pub fn remove(&mut self, seq: SeqId) {
        if let Some(l) = self.lengths.get_mut(seq.0) {
            *l = None;
        }
    }

    /// The device the model runs on.
    pub fn device(&self) -> &candle_core::Device {
        self.model.device()
    }
}
