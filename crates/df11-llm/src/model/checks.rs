//! Checks of a model's weights against its spec, before anything is put on a device.

use df11_candle::ModelWeights;

use crate::error::{LlmError, Result};
use crate::spec::ModelSpec;

/// The config's layer count against the weights: a weight of a layer at or past
/// `num_hidden_layers` is an [`LlmError::InvalidConfig`] naming it (a layer the weights lack is
/// a missing tensor when it loads). Other tensors outside the decoder (a vision tower, say)
/// are not the decoder's to judge.
pub(super) fn check_layer_weights(spec: &ModelSpec, weights: &ModelWeights) -> Result<()> {
    let prefix = format!("{}.layers.", spec.names.model);
    let layers = spec.layers.len();
    let unused: Vec<String> = weights
        .names()
        .into_iter()
        .filter(|name| {
            let index = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split('.').next());
            index
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= layers)
        })
        .collect();
    if unused.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 4;
    let mut listed = unused[..unused.len().min(SHOWN)].join(", ");
    if unused.len() > SHOWN {
        listed.push_str(&format!(" and {} more", unused.len() - SHOWN));
    }
    Err(LlmError::config(
        weights.dir().join("config.json"),
        format!(
            "num_hidden_layers is {layers}, but the weights hold layers past it, which the config does not use: {listed}"
        ),
    ))
}
