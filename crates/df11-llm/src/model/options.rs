//! How a [`super::DecoderModel`] runs: the maximum context, the CUDA graph, decode-ahead, the
//! prompt's attention, the copies between the GPUs of a split ([`DecodeOptions`],
//! [`PromptAttention`], [`SplitCopy`]). The library reads no environment variable: a program passes the
//! `DF11_*` variables in through [`DecodeOptions::from_vars`].

pub use crate::transfer::SplitCopy;

/// The context a model gets when none is asked for (capped by the model's own maximum).
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// How decode steps run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Positions each sequence may reach (the KV cache's size); `None`: the model's maximum,
    /// capped at [`DEFAULT_MAX_CONTEXT`].
    pub max_context: Option<usize>,
    /// Capture decode steps as CUDA graphs (CUDA, BF16; `DF11_CUDA_GRAPH`).
    pub cuda_graph: bool,
    /// Run decode steps through the step kernels (CUDA, BF16); off, they run the eager pass
    /// (`DF11_STEP_KERNELS`).
    pub step_kernels: bool,
    /// How prompts' attention runs where the step kernels run (CUDA, BF16); elsewhere, and for
    /// head sizes the kernel does not take, candle's matmul attention
    /// (`DF11_PROMPT_ATTENTION=flash|matmul|flash-decoding`).
    pub prompt_attention: PromptAttention,
    /// Prompts whose products take decode + cuBLAS (more rows than the fused kernels take)
    /// decode each layer's units on a second stream of its GPU while the previous layer runs
    /// (`Df11Group::decode_ahead`), instead of each weight just before its product. The same
    /// values and products, so the same logits; one layer of BF16 weights more in memory
    /// during prompts. Off by default (the extra buffer takes DF11's peak at batch 1 from 0.72x
    /// to 0.75x of BF16's; `DF11_DECODE_AHEAD`). Measured on an H100 (8B-shaped model,
    /// docs/PERFORMANCE.md): prefill +10% at 512 tokens, +6% at 2048.
    pub decode_ahead: bool,
    /// How a split model's activations cross between GPUs.
    pub split_copy: SplitCopy,
    /// Sequences decoded at once that a device budget (`--max-gpu-memory`) plans for: their KV
    /// caches, and above 16 the output projection decoded whole for a step (1: one prompt;
    /// a server's `--max-batch`).
    pub sequences: usize,
}

/// The variables [`DecodeOptions::from_vars`] reads, with their values (the default first).
pub const VARIABLES: &[(&str, &str)] = &[
    ("DF11_CUDA_GRAPH", "on, off"),
    ("DF11_STEP_KERNELS", "on, off"),
    ("DF11_PROMPT_ATTENTION", "flash, matmul, flash-decoding"),
    ("DF11_DECODE_AHEAD", "off, on"),
    ("DF11_PEER_COPY", "on, off"),
    ("DF11_SPLIT_SYNC", "off, on"),
];

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            max_context: None,
            cuda_graph: true,
            step_kernels: true,
            prompt_attention: PromptAttention::Flash,
            decode_ahead: false,
            split_copy: SplitCopy::default(),
            sequences: 1,
        }
    }
}

impl DecodeOptions {
    /// Positions each sequence may reach in a model of `model_positions` (the KV cache's
    /// size): [`Self::max_context`], or the model's maximum capped at [`DEFAULT_MAX_CONTEXT`].
    pub fn context(&self, model_positions: usize) -> usize {
        match self.max_context {
            Some(n) => n.min(model_positions),
            None => model_positions.min(DEFAULT_MAX_CONTEXT),
        }
    }

    /// The defaults with the variables of [`VARIABLES`] that `get` has applied (`get(name)`:
    /// variable `name`'s value, `None` where unset; a program passes a lookup over the
    /// environment it read in `main`, e.g. `df11_llm::args::Vars`). An unknown value is an error
    /// naming the variable.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut o = Self::default();
        let switch = |name: &str, value: &str| match value {
            "on" | "1" | "true" => Ok(true),
            "off" | "0" | "false" => Ok(false),
            _ => Err(format!("unknown {name} `{value}` (expected on or off)")),
        };
        for &(name, _) in VARIABLES {
            let Some(value) = get(name) else { continue };
            let value = value.trim();
            match name {
                "DF11_CUDA_GRAPH" => o.cuda_graph = switch(name, value)?,
                "DF11_STEP_KERNELS" => o.step_kernels = switch(name, value)?,
                "DF11_PROMPT_ATTENTION" => {
                    o.prompt_attention = match value {
                        "flash" => PromptAttention::Flash,
                        "matmul" => PromptAttention::Matmul,
                        "flash-decoding" => PromptAttention::FlashDecoding,
                        _ => {
                            return Err(format!(
                                "unknown {name} `{value}` (expected flash, matmul or \
                                 flash-decoding)"
                            ))
                        }
                    }
                }
                "DF11_DECODE_AHEAD" => o.decode_ahead = switch(name, value)?,
                "DF11_PEER_COPY" => o.split_copy.peer = switch(name, value)?,
                "DF11_SPLIT_SYNC" => o.split_copy.host_sync = switch(name, value)?,
                _ => unreachable!("every listed variable is handled"),
            }
        }
        Ok(o)
    }
}

/// How a prompt's attention runs on CUDA in BF16 (see [`DecodeOptions::prompt_attention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptAttention {
    /// candle's ops: scores by cuBLAS, an additive mask, softmax in f32, values by cuBLAS
    /// (what the CPU runs; the reference the others are tested against).
    Matmul,
    /// The decode step's flash-decoding kernel, one query per prompt token over the cache. It
    /// reads each query's prefix once per query, so long prompts are slow; with
    /// `DF11_MATMUL=fused` no cuBLAS product runs anywhere in the forward pass, which is how
    /// compute-sanitizer's initcheck (blind to cuBLAS's writes on Hopper) checks every kernel
    /// of a model (docs/RELIABILITY.md).
    FlashDecoding,
    /// The causal flash-attention kernel over the cache (`crate::ops::prefill_attention`:
    /// tensor cores, online softmax, the query heads of a kv head sharing its tiles), with q/k
    /// norm + RoPE + cache write in one launch before it.
    Flash,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_set_their_fields_and_bad_values_are_named() {
        assert_eq!(
            DecodeOptions::from_vars(|_| None),
            Ok(DecodeOptions::default())
        );
        let o = DecodeOptions::from_vars(|n| {
            let v = match n {
                "DF11_CUDA_GRAPH" => "0",
                "DF11_STEP_KERNELS" => "off",
                "DF11_PROMPT_ATTENTION" => "flash-decoding",
                "DF11_DECODE_AHEAD" => "1",
                "DF11_PEER_COPY" => "0",
                "DF11_SPLIT_SYNC" => "1",
                _ => return None,
            };
            Some(v.to_string())
        })
        .unwrap();
        assert!(!o.cuda_graph && !o.step_kernels && o.decode_ahead);
        assert_eq!(o.prompt_attention, PromptAttention::FlashDecoding);
        assert_eq!(
            o.split_copy,
            SplitCopy {
                peer: false,
                host_sync: true
            }
        );
        let e = DecodeOptions::from_vars(|n| (n == "DF11_CUDA_GRAPH").then(|| "maybe".into()));
        assert!(e.unwrap_err().contains("DF11_CUDA_GRAPH"));
    }
}
