//! The output projection (`lm_head`), untied or tied to the input embedding.

use df11_candle::{Embedding, Linear, ModelWeights};

use crate::error::Result;

/// `lm_head` of a model on `weights`' device: its own weight (`lm_head_module.weight`,
/// compressed or plain), or, when `tied`, the embedding table itself. A dense table is shared
/// (no copy) when the embedding is on the same device, copied there otherwise; a DF11-compressed
/// table is used through the same compressed unit (put on that device too), so it is never held
/// decoded.
pub fn output_projection(
    weights: &ModelWeights,
    tied: bool,
    lm_head_module: &str,
    embed_module: &str,
    embedding: &Embedding,
    vocab: usize,
    hidden: usize,
) -> Result<Linear> {
    if !tied {
        return Ok(weights.linear(lm_head_module, vocab, hidden, false)?);
    }
    match embedding {
        Embedding::Dense(e) => Ok(Linear::dense(
            crate::transfer::to_device(e.embeddings(), weights.device())?,
            None,
            *weights.options(),
        )),
        Embedding::Df11(_) => Ok(weights.linear(embed_module, vocab, hidden, false)?),
    }
}
