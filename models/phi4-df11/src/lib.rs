//! Phi-4 on candle with DFloat11 weights that stay compressed on the device.
//!
//! Phi-4 (e.g. `DFloat11/Phi-4-reasoning-plus-DF11`) is transformers' `Phi3ForCausalLM`
//! (`model_type: phi3`): a Llama-style decoder with one `qkv_proj` (rows `[q; k; v]`) and one
//! `gate_up_proj` (rows `[gate; up]`), RoPE on the first `partial_rotary_factor` of each head,
//! an optional sliding window and an untied `lm_head`. In a DF11 repo the layer unit holds
//! `o_proj, qkv_proj, gate_up_proj, down_proj` in whatever order its config lists; weights are
//! found by name. [`Phi4Arch`] maps `config.json` to df11-llm's one decoder.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LlmError, ModelConfig, ModelSpec, Result, TextConfig};

/// The Phi-4 architecture (`Phi3ForCausalLM`, `model_type: phi3`, no RoPE scaling).
#[derive(Debug, Clone, Copy)]
pub struct Phi4Arch;

impl Architecture for Phi4Arch {
    const NAME: &'static str = "Phi-4";
    const MODEL_TYPES: &'static [&'static str] = &["phi3"];
    const DEFAULT_REPO: &'static str = "DFloat11/Phi-4-reasoning-plus-DF11";

    /// RoPE scaling (`longrope`, Phi-3.5/Phi-4-mini) is refused: Phi-4 has none.
    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        if let Some(t) = config.rope()?.rope_type {
            let reason = format!("RoPE scaling `{t}` is not supported");
            return Err(LlmError::config(config.path(), reason));
        }
        let (text, mut spec) = TextConfig::spec_of(config, 4096, 1e-5)?;
        let d = &mut spec.decoder;
        (d.fused_qkv, d.fused_gate_up) = (true, true);
        (d.qkv_bias, d.o_bias, d.mlp_bias) = (false, false, false);
        Ok(spec.with_window(text.options.sliding_window))
    }
}
