//! Planning where a model's weights go, from its folder and the devices: layer ranges over
//! several devices ([`crate::placement::Placement::plan`]) and the offloaded layers
//! ([`Offload`]), checked against each device's free memory before any weight is put on one.

use df11_candle::ModelWeights;

use super::DecodeOptions;
use super::DecoderModel;
use crate::error::{LlmError, Result};
use crate::placement::{device_name, DeviceMap, ModelSizes, Offload, Placement, Reserve};
use crate::spec::ModelSpec;
use candle_core::DType;

/// Room left on a device for activations, the KV cache and workspaces: the weights may take
/// its free memory less 1 GiB and a tenth of the device.
fn weight_room(free: u64, total: u64) -> u64 {
    free.saturating_sub((1 << 30) + total / 10)
}

impl DecoderModel {
    /// Where the weights of `spec` go: over `map`'s devices (or all on the weights' device),
    /// with `offload`'s layers in host memory. Sizes come from the folder, free memory from the
    /// driver (on the CPU, which reports none, layers are balanced by bytes). A plan that
    /// cannot fit is an [`LlmError::OutOfMemory`] naming the device and the sizes. A budget
    /// counts what [`DecoderModel::reserve`] estimates for the default [`DecodeOptions`].
    pub fn plan(
        spec: &ModelSpec,
        weights: &ModelWeights,
        map: Option<&DeviceMap>,
        offload: Offload,
    ) -> Result<Placement> {
        Self::plan_with(spec, weights, map, offload, &DecodeOptions::default())
    }

    /// [`DecoderModel::plan`] for a model that will run with `decode` (its maximum context
    /// sizes the KV cache a budget counts).
    pub fn plan_with(
        spec: &ModelSpec,
        weights: &ModelWeights,
        map: Option<&DeviceMap>,
        offload: Offload,
        decode: &DecodeOptions,
    ) -> Result<Placement> {
        let sizes_of = |named: &[(String, usize)]| {
            ModelSizes::from_named(
                &spec.names.model,
                &spec.names.lm_head,
                spec.layers.len(),
                named,
            )
        };
        let sizes = sizes_of(&weights.stored_bytes());
        let tied = spec.tie_word_embeddings;
        let path = weights.dir();
        if offload != Offload::None && weights.df11_model().is_none() {
            return Err(LlmError::Usage(format!(
                "{}: offloading keeps DF11 units in host memory; this is a plain BF16 folder",
                path.display()
            )));
        }
        // A budget is planned with the most each unit's device form can take; a tied output
        // projection is the embedding's unit, on the device too when the embedding is not
        // (counted twice where everything stays: a conservative plan).
        let mut bound = sizes_of(&weights.device_bytes_bound());
        if tied {
            bound.head += bound.embedding;
        }
        let reserve = Self::reserve(spec, decode, weights.dtype());
        let plan = offload.plan(&bound, &reserve).map_err(LlmError::Usage)?;
        let offloaded = plan.layers.clone();
        let placement = match map {
            Some(map) => plan_split(&sizes, tied, weights, map)?,
            None => Placement::single(weights.device(), spec.layers.len()),
        };
        let placement = placement.with_offload(plan)?;
        // One device with offloaded layers: what stays must fit (the budget's check for
        // --max-gpu-memory is `Offload::plan`; this one is the device's).
        if map.is_none() && placement.offloads() {
            if let Some((free, total)) = crate::memory::device_memory(weights.device()) {
                let mut staying = bound.clone();
                let largest = bound.layers[offloaded.clone()].iter().copied().max();
                for b in &mut staying.layers[offloaded] {
                    *b = 0;
                }
                if placement.offload().host_embedding {
                    staying.embedding = 0;
                }
                let needed = staying.total() + 2 * largest.unwrap_or(0);
                let name = device_name(weights.device());
                crate::memory::check_fits(path, &name, needed, weight_room(free, total), total)?;
            }
        }
        Ok(placement)
    }

    /// What a model of `spec` running with `decode` holds on its device besides its weights,
    /// estimated from its shapes in `dtype`: the KV caches of [`DecodeOptions::sequences`] at
    /// the maximum context, the activations of a prompt chunk of up to
    /// [`crate::engine::PROMPT_CHUNK`] tokens and the logits, and the largest projection
    /// decoded into a buffer: q/k/v or gate/up stacked for a prompt, the output projection for
    /// steps of more rows than the fused kernels take.
    pub fn reserve(spec: &ModelSpec, decode: &DecodeOptions, dtype: DType) -> Reserve {
        let d = &spec.decoder;
        let size = dtype.size_in_bytes() as u64;
        let context = decode.context(d.max_positions) as u64;
        let sequences = decode.sequences.max(1) as u64;
        let kv_width = (d.num_key_value_heads * d.head_dim) as u64;
        let q_width = (d.num_attention_heads * d.head_dim) as u64;
        let (hidden, inter) = (d.hidden_size as u64, d.intermediate_size as u64);
        let vocab = spec.vocab_size as u64;
        let kv_cache = spec.layers.len() as u64 * 2 * kv_width * context * size * sequences;
        // A token's live activations in a layer: the residual stream and its normed copy, q/k/v
        // and the attention's output, gate/up and the activation's output.
        let per_token = 4 * hidden + q_width + 2 * kv_width + q_width + 3 * inter;
        let rows = context
            .min(crate::engine::PROMPT_CHUNK as u64)
            .max(sequences);
        let activations = rows * per_token * size + 2 * sequences * vocab * 4;
        let mut decoded_weight = 2
            * (hidden * (q_width + 2 * kv_width))
                .max(hidden * 2 * inter)
                .max(hidden * q_width);
        if decode.sequences > df11_candle::matmul::TC_MAX_ROWS {
            decoded_weight = decoded_weight.max(2 * vocab * hidden);
        }
        Reserve {
            kv_cache,
            activations,
            decoded_weight,
        }
    }
}

/// Plans `map`, checking each device's share against its free memory.
fn plan_split(
    sizes: &ModelSizes,
    tied: bool,
    weights: &ModelWeights,
    map: &DeviceMap,
) -> Result<Placement> {
    let path = weights.dir();
    let memory: Vec<Option<(u64, u64)>> = map
        .devices
        .iter()
        .map(crate::memory::device_memory)
        .collect();
    let free: Vec<u64> = memory
        .iter()
        .map(|m| m.map_or(u64::MAX / 4, |(free, total)| weight_room(free, total)))
        .collect();
    let names: Vec<String> = map.devices.iter().map(device_name).collect();
    let total_free = free.iter().fold(0u64, |a, &f| a.saturating_add(f));
    if sizes.total() > total_free {
        return Err(LlmError::OutOfMemory {
            path: path.to_path_buf(),
            device: names.join(" + "),
            needed: sizes.total(),
            free: total_free,
            total: memory.iter().flatten().map(|m| m.1).sum(),
        });
    }
    let placement = Placement::plan(map, sizes, tied, &free)?;
    for (d, bytes) in placement.weight_bytes(sizes, tied).into_iter().enumerate() {
        if let Some((_, total)) = memory[d] {
            crate::memory::check_fits(path, &names[d], bytes, free[d], total)?;
        }
    }
    Ok(placement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tiny_spec as spec;

    #[test]
    fn the_reserve_follows_the_context_and_the_sequences() {
        let one = DecodeOptions {
            max_context: Some(32),
            ..DecodeOptions::default()
        };
        let r = DecoderModel::reserve(&spec(), &one, DType::BF16);
        // 2 layers x (K, V) x 2 heads x 32 dims x 32 positions x 2 bytes.
        assert_eq!(r.kv_cache, 2 * 2 * 64 * 32 * 2);
        // gate/up stacked: 2 x 256 x 128 BF16.
        assert_eq!(r.decoded_weight, 2 * 2 * 256 * 128);
        // The context caps at the model's positions.
        let long = DecodeOptions {
            max_context: Some(1 << 20),
            ..one.clone()
        };
        assert_eq!(
            DecoderModel::reserve(&spec(), &long, DType::BF16).kv_cache,
            2 * 2 * 64 * 64 * 2
        );
        // A batch above the fused kernels' rows decodes the output projection whole.
        let batch = DecodeOptions {
            sequences: 32,
            ..one.clone()
        };
        let b = DecoderModel::reserve(&spec(), &batch, DType::BF16);
        assert_eq!(b.kv_cache, 32 * r.kv_cache);
        assert_eq!(b.decoded_weight, 2 * 512 * 128);
        assert!(b.activations > r.activations);
    }
}
