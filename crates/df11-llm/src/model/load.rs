//! Building a [`DecoderModel`] from its weights: the embedding, the rotary tables, the final
//! norm and the output projection, then the layers, each on the device its placement gives it
//! (offloaded layers first: their builds' transient device memory is free again for the
//! resident ones).

use candle_core::{Device, Tensor};
use df11_candle::ModelWeights;

use super::{checks, DecodeOptions, DecoderModel};
use crate::decoder::DecoderLayer;
use crate::error::{LlmError, Result};
use crate::norm::RmsNorm;
use crate::placement::{DeviceMap, Offload, Placement};
use crate::progress::LoadBar;
use crate::rope::RotaryEmbedding;
use crate::spec::ModelSpec;
use crate::tie::output_projection;

impl DecoderModel {
    /// Builds the model of `spec` from `weights` (DF11 or dense) on the weights' device;
    /// `progress` counts layers.
    pub fn load(spec: ModelSpec, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        let placement = Placement::single(weights.device(), spec.layers.len());
        Self::load_placed(spec, weights, placement, progress)
    }

    /// Builds the model of `spec` split over the devices of `map` (layers balanced by free
    /// memory, or as counted). A split that cannot fit is an [`LlmError::OutOfMemory`] naming
    /// the device, before any weight is put on one. Open CUDA devices with
    /// [`crate::cuda_devices`] or [`crate::open_cuda`] (a stream each; see there why not
    /// candle's `Device::new_cuda`).
    pub fn load_split(
        spec: ModelSpec,
        weights: &ModelWeights,
        map: &DeviceMap,
        progress: &LoadBar,
    ) -> Result<Self> {
        let placement = Self::plan(&spec, weights, Some(map), Offload::None)?;
        Self::load_placed(spec, weights, placement, progress)
    }

    /// Builds the model of `spec` with its layers where `placement` puts them.
    pub fn load_placed(
        spec: ModelSpec,
        weights: &ModelWeights,
        placement: Placement,
        progress: &LoadBar,
    ) -> Result<Self> {
        if let Some(problem) = spec.problem() {
            return Err(LlmError::Usage(format!("model spec: {problem}")));
        }
        checks::check_layer_weights(&spec, weights)?;
        let offload = placement.offload().clone();
        let placement = Placement::from_segments(placement.segments().to_vec(), spec.layers.len())?
            .with_offload(offload)?;
        progress.set_steps(spec.layers.len() + 1);
        let d = &spec.decoder;
        let (vocab, hidden) = (spec.vocab_size, d.hidden_size);
        let prefix = &spec.names.model;
        let first = weights.on_device(placement.first_device());
        let plan = placement.offload().clone();
        let mut last = weights.on_device(placement.last_device());
        if plan.head {
            last = last.offloaded()?;
        }
        if plan.head_built_on_host {
            last = last.built_on_host();
        }
        let embed_module = format!("{prefix}.embed_tokens");
        // An embedding served from host memory: its rows are decoded on the host, then copied.
        let embed_tokens = if plan.host_embedding {
            weights
                .on_device(&Device::Cpu)
                .embedding(&embed_module, vocab, hidden)?
        } else {
            first.embedding(&embed_module, vocab, hidden)?
        };
        let embed_scale = if spec.scale_embedding {
            let scale = Tensor::new(&[(hidden as f32).sqrt()], first.device())?;
            Some(scale.to_dtype(first.dtype())?)
        } else {
            None
        };
        let ropes = spec
            .ropes
            .iter()
            .map(|r| {
                RotaryEmbedding::new(r.inv_freq(), d.max_positions, first.dtype(), first.device())
            })
            .collect();
        let norm = RmsNorm::load_kind(
            &weights.on_device(placement.last_device()),
            &format!("{prefix}.norm"),
            hidden,
            d.rms_norm_eps,
            d.norm,
        )?;
        // The output projection before the layers: loading a unit can take transient device
        // memory (the GPU build of its packed form decodes it whole first), and the largest
        // unit's then comes before the layers' weights rather than on top of them.
        // Tied or not is the config's call, not the weight names': in a DF11 repo
        // `lm_head.weight` is a compressed unit, not a tensor of that name.
        let lm_head = output_projection(
            &last,
            spec.tie_word_embeddings,
            &spec.names.lm_head,
            &embed_module,
            &embed_tokens,
            vocab,
            hidden,
        )?;
        let head_units = match (plan.head, lm_head.group()) {
            (true, Some(g)) => vec![g.clone()],
            _ => Vec::new(),
        };
        progress.step();
        // Offloaded layers first: each one's build takes device memory only while it is made,
        // which is then free for the resident layers.
        let n = spec.layers.len();
        let order = plan.layers.clone().chain(0..plan.layers.start.min(n));
        let mut loaded: Vec<Option<DecoderLayer>> = (0..n).map(|_| None).collect();
        for i in order {
            let mut on = weights.on_device(placement.device_of(i));
            if placement.is_offloaded(i) {
                on = on.offloaded()?;
            }
            if plan.layers_built_on_host {
                on = on.built_on_host();
            }
            loaded[i] = Some(DecoderLayer::load(d, &on, &format!("{prefix}.layers.{i}"))?);
            progress.step();
        }
        let layers: Vec<DecoderLayer> = loaded.into_iter().flatten().collect();
        let mut offloaded_units: Vec<_> = layers
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                if placement.is_offloaded(i) {
                    layer.units()
                } else {
                    Vec::new()
                }
            })
            .collect();
        // The output projection is staged as one more layer, after the last.
        offloaded_units.push(head_units);
        Ok(Self {
            spec,
            embed_tokens,
            embed_scale,
            ropes,
            layers,
            norm,
            lm_head,
            placement,
            offloaded_units,
            dtype: weights.dtype(),
            options: DecodeOptions::default(),
            weight_options: *weights.options(),
            decoded_ahead: Default::default(),
            #[cfg(feature = "cuda")]
            graphs: Default::default(),
            caches: None,
        })
    }
}
