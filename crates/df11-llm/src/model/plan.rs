//! Planning where a model's weights go, from its folder and the devices: layer ranges over
//! several devices ([`crate::placement::Placement::plan`]) and the offloaded layers
//! ([`Offload`]), checked against each device's free memory before any weight is put on one.

use df11_candle::ModelWeights;

use super::DecoderModel;
use crate::error::{LlmError, Result};
use crate::placement::{device_name, DeviceMap, ModelSizes, Offload, Placement};
use crate::spec::ModelSpec;

/// Room left on a device for activations, the KV cache and workspaces: the weights may take
/// its free memory less 1 GiB and a tenth of the device.
fn weight_room(free: u64, total: u64) -> u64 {
    free.saturating_sub((1 << 30) + total / 10)
}

impl DecoderModel {
    /// Where the weights of `spec` go: over `map`'s devices (or all on the weights' device),
    /// with `offload`'s layers in host memory. Sizes come from the folder, free memory from the
    /// driver (on the CPU, which reports none, layers are balanced by bytes). A plan that
    /// cannot fit is an [`LlmError::OutOfMemory`] naming the device and the sizes.
    pub fn plan(
        spec: &ModelSpec,
        weights: &ModelWeights,
        map: Option<&DeviceMap>,
        offload: Offload,
    ) -> Result<Placement> {
        let sizes = ModelSizes::from_named(
            &spec.names.model,
            &spec.names.lm_head,
            spec.layers.len(),
            &weights.stored_bytes(),
        );
        let tied = spec.tie_word_embeddings;
        let path = weights.dir();
        if offload != Offload::None && weights.df11_model().is_none() {
            return Err(LlmError::Usage(format!(
                "{}: offloading keeps DF11 units in host memory; this is a plain BF16 folder",
                path.display()
            )));
        }
        let offloaded = offload.layers(&sizes).map_err(LlmError::Usage)?;
        let placement = match map {
            Some(map) => plan_split(&sizes, tied, weights, map)?,
            None => Placement::single(weights.device(), spec.layers.len()),
        };
        let placement = placement.with_offloaded(offloaded.clone())?;
        // One device with offloaded layers: what stays must fit (the budget's check for
        // --max-gpu-memory is `Offload::layers`; this one is the device's).
        if map.is_none() && !offloaded.is_empty() {
            if let Some((free, total)) = crate::memory::device_memory(weights.device()) {
                let mut staying = sizes.clone();
                let largest = sizes.layers[offloaded.clone()].iter().copied().max();
                for b in &mut staying.layers[offloaded] {
                    *b = 0;
                }
                let needed = staying.total() + 2 * largest.unwrap_or(0);
                let name = device_name(weights.device());
                crate::memory::check_fits(path, &name, needed, weight_room(free, total), total)?;
            }
        }
        Ok(placement)
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
