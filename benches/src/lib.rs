//! Shared setup for the benchmarks: the Qwen3-8B-sized layer unit every bench measures.

use df11_candle::{encode_unit, synth, EncodedUnit};
use half::bf16;

/// The BF16 weights of a Qwen3-8B-shaped layer (192,937,984 of N(0, 0.02)) and their encoding.
pub fn qwen3_8b_layer_unit(seed: u64) -> (Vec<bf16>, EncodedUnit) {
    let n: usize = synth::QWEN3_8B_LAYER.iter().map(|(o, i)| o * i).sum();
    let w = synth::normal_bf16(n, 0.02, seed);
    let enc = encode_unit(&member_bytes(&w)).expect("normal weights encode");
    (w, enc)
}

/// The layer's weights split into its seven members, as byte slices.
pub fn member_bytes(w: &[bf16]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    for (o, i) in synth::QWEN3_8B_LAYER {
        out.push(bytemuck::cast_slice(&w[at..at + o * i]));
        at += o * i;
    }
    out
}
