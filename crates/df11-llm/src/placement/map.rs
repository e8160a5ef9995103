//! What a user asks for ([`LayerSplit`], [`DeviceMap`]) and what a model weighs
//! ([`ModelSizes`]), the inputs of a plan.

use std::str::FromStr;

use candle_core::Device;

/// How the layers are shared out over the devices the user names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LayerSplit {
    /// Balanced by each device's free memory (embedding on the first device, output
    /// projection on the last).
    #[default]
    Auto,
    /// This many layers on each device, in order (as many counts as devices; they sum to the
    /// model's layers).
    Counts(Vec<usize>),
}

impl FromStr for LayerSplit {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        s.split(',')
            .map(|n| n.trim().parse::<usize>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Self::Counts)
            .map_err(|_| format!("`{s}`: expected `auto` or layer counts per device, e.g. `20,16`"))
    }
}

/// The devices a model is split over and how.
#[derive(Debug, Clone)]
pub struct DeviceMap {
    /// The devices, in pipeline order (the embedding's first).
    pub devices: Vec<Device>,
    /// How the layers are shared out.
    pub split: LayerSplit,
}

/// Bytes of a model's weights by where they run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelSizes {
    /// The input embedding (first device).
    pub embedding: u64,
    /// Each decoder layer.
    pub layers: Vec<u64>,
    /// The final norm and output projection (last device; a tied projection counts the table
    /// again when it lands on another device than the embedding).
    pub head: u64,
}

impl ModelSizes {
    /// Sizes from `(weight name, bytes)` pairs ([`df11_candle::ModelWeights::stored_bytes`]):
    /// names under `{model}.layers.{i}.` belong to layer `i`, `{model}.embed_tokens.` to the
    /// embedding, the rest under `{model}.` (the final norm) and under `{lm_head}.` to the head;
    /// others (a multimodal checkpoint's vision tower) are not the language model's.
    pub fn from_named(
        model: &str,
        lm_head: &str,
        layers: usize,
        named: &[(String, usize)],
    ) -> Self {
        let mut sizes = Self {
            layers: vec![0; layers],
            ..Self::default()
        };
        let layer_prefix = format!("{model}.layers.");
        let embed_prefix = format!("{model}.embed_tokens.");
        for (name, bytes) in named {
            let bytes = *bytes as u64;
            if name.starts_with(&embed_prefix) {
                sizes.embedding += bytes;
            } else if let Some(i) = name
                .strip_prefix(&layer_prefix)
                .and_then(|rest| rest.split('.').next())
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|&i| i < layers)
            {
                sizes.layers[i] += bytes;
            } else if name.starts_with(&format!("{model}."))
                || name.starts_with(&format!("{lm_head}."))
            {
                sizes.head += bytes;
            }
        }
        sizes
    }

    /// Every weight byte.
    pub fn total(&self) -> u64 {
        self.embedding + self.layers.iter().sum::<u64>() + self.head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_split_parses() {
        assert_eq!("auto".parse::<LayerSplit>(), Ok(LayerSplit::Auto));
        assert_eq!(
            "20, 16".parse::<LayerSplit>(),
            Ok(LayerSplit::Counts(vec![20, 16]))
        );
        assert!("20;16".parse::<LayerSplit>().is_err());
        assert!("-1,3".parse::<LayerSplit>().is_err());
    }

    #[test]
    fn sizes_by_name() {
        let named = [
            ("model.embed_tokens.weight".to_string(), 100),
            ("model.layers.0.self_attn.q_proj.weight".to_string(), 10),
            ("model.layers.0.input_layernorm.weight".to_string(), 1),
            ("model.layers.1.mlp.up_proj.weight".to_string(), 20),
            ("model.layers.12.mlp.up_proj.weight".to_string(), 7),
            ("model.norm.weight".to_string(), 2),
            ("lm_head.weight".to_string(), 100),
            ("vision_tower.encoder.weight".to_string(), 1000),
        ];
        let s = ModelSizes::from_named("model", "lm_head", 2, &named);
        assert_eq!(s.embedding, 100);
        assert_eq!(s.layers, vec![11, 20]);
        // A layer index past the model's layers is not a layer of it; the vision tower is not
        // the language model's.
        assert_eq!(s.head, 109);
        assert_eq!(s.total(), 240);
    }
}
