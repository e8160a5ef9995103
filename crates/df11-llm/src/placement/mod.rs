//! Where a model runs: its decoder layers split into contiguous ranges, one range a device
//! (a pipeline of segments). The embedding runs on the first segment's device, the final norm
//! and the output projection on the last one's; the residual stream moves from one device to
//! the next between segments ([`crate::transfer`]). Each device runs the same kernels a single
//! device would, so a split model's tokens and logits are those of the unsplit model, bit for bit.
//!
//! [`DeviceMap`] is what a user asks for (`--devices 0,1 --device-map auto|20,16`);
//! [`Placement::plan`] turns it into segments from the weights' sizes and each device's free
//! memory.
//!
//! A placement may also keep compressed units in host memory ([`Offload`]: `--cpu-offload-layers
//! N`, or as much as `--max-gpu-memory` needs, planned into an [`OffloadPlan`]): its last layers
//! and the output projection still run on their segment's device, staged onto it one unit
//! ahead of use; the embedding is then served from host memory.

use std::ops::Range;

use candle_core::Device;

use crate::error::{LlmError, Result};

mod balance;
mod map;
mod offload;

pub use map::{DeviceMap, LayerSplit, ModelSizes};
pub use offload::{parse_size, Offload, OffloadPlan, Reserve};

/// One device's share of a model: layers `layers` (possibly none) run on `device`.
#[derive(Debug, Clone)]
pub struct Segment {
    /// The device.
    pub device: Device,
    /// The decoder layers it runs.
    pub layers: Range<usize>,
}

/// A model's segments, in pipeline order, and what is offloaded.
#[derive(Debug, Clone)]
pub struct Placement {
    segments: Vec<Segment>,
    offload: OffloadPlan,
}

impl Placement {
    /// Every layer on `device`.
    pub fn single(device: &Device, layers: usize) -> Self {
        Self {
            segments: vec![Segment {
                device: device.clone(),
                layers: 0..layers,
            }],
            offload: OffloadPlan::none(layers),
        }
    }

    /// Segments given as they are: ranges must follow each other from layer 0 to `layers`.
    pub fn from_segments(segments: Vec<Segment>, layers: usize) -> Result<Self> {
        let mut next = 0;
        for s in &segments {
            if s.layers.start != next || s.layers.end < s.layers.start {
                return Err(LlmError::Usage(format!(
                    "device map: segment {:?} does not follow layer {next}",
                    s.layers
                )));
            }
            next = s.layers.end;
        }
        if segments.is_empty() || next != layers {
            return Err(LlmError::Usage(format!(
                "device map: {} segments cover {next} of {layers} layers",
                segments.len()
            )));
        }
        let devices: Vec<Device> = segments.iter().map(|s| s.device.clone()).collect();
        crate::device::check_split_streams(&devices)?;
        Ok(Self {
            segments,
            offload: OffloadPlan::none(layers),
        })
    }

    /// The same placement with layers `layers` (a range ending at the last layer, possibly
    /// empty) offloaded, and nothing else.
    pub fn with_offloaded(self, layers: Range<usize>) -> Result<Self> {
        self.with_offload(OffloadPlan {
            layers,
            ..OffloadPlan::default()
        })
    }

    /// The same placement offloading what `plan` says (its layers a range ending at the last
    /// layer, possibly empty).
    pub fn with_offload(self, plan: OffloadPlan) -> Result<Self> {
        let n = self.layers();
        let layers = &plan.layers;
        if layers.end != n || layers.start > n {
            return Err(LlmError::Usage(format!(
                "offloaded layers {layers:?}: they must end at the last of {n} layers"
            )));
        }
        Ok(Self {
            offload: plan,
            ..self
        })
    }

    /// Layers of the model.
    pub fn layers(&self) -> usize {
        self.segments.last().map_or(0, |s| s.layers.end)
    }

    /// The offloaded layers (compressed units in host memory, staged around use).
    pub fn offloaded(&self) -> Range<usize> {
        self.offload.layers.clone()
    }

    /// Whether layer `layer` is offloaded.
    pub fn is_offloaded(&self, layer: usize) -> bool {
        self.offload.layers.contains(&layer)
    }

    /// What is offloaded, and under a budget its accounting.
    pub fn offload(&self) -> &OffloadPlan {
        &self.offload
    }

    /// Whether anything (layers, the embedding, the output projection) is in host memory: then
    /// decode steps are not captured as graphs (the host stages units around each use).
    pub fn offloads(&self) -> bool {
        !self.offload.is_empty()
    }

    /// Plans `map` for a model of `sizes`: explicit counts as given, or `Auto`, the contiguous
    /// split that leaves every device the largest share of its free memory (`free[d]`, bytes
    /// available for weights on `map.devices[d]`). `tied`: the output projection uses the
    /// embedding's table, so a head on another device than the embedding holds a copy.
    pub fn plan(map: &DeviceMap, sizes: &ModelSizes, tied: bool, free: &[u64]) -> Result<Self> {
        let n = map.devices.len();
        if n == 0 {
            return Err(LlmError::Usage("device map: no device".into()));
        }
        if free.len() != n {
            return Err(LlmError::Usage(format!(
                "device map: free memory of {} devices for {n} devices",
                free.len()
            )));
        }
        crate::device::check_split_streams(&map.devices)?;
        let layers = sizes.layers.len();
        let counts = match &map.split {
            LayerSplit::Counts(c) => {
                if c.len() != n || c.iter().sum::<usize>() != layers {
                    return Err(LlmError::Usage(format!(
                        "--device-map {}: {} counts summing to {} for {n} devices and {layers} \
                         layers (give one count per device, summing to {layers})",
                        c.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
                        c.len(),
                        c.iter().sum::<usize>()
                    )));
                }
                c.clone()
            }
            LayerSplit::Auto => balance::balanced_counts(sizes, tied, free),
        };
        let mut start = 0;
        let segments = counts
            .iter()
            .zip(&map.devices)
            .map(|(&count, device)| {
                let s = Segment {
                    device: device.clone(),
                    layers: start..start + count,
                };
                start += count;
                s
            })
            .collect();
        Ok(Self {
            segments,
            offload: OffloadPlan::none(layers),
        })
    }

    /// Bytes of weights each segment holds (the embedding on the first, the head on the last).
    pub fn weight_bytes(&self, sizes: &ModelSizes, tied: bool) -> Vec<u64> {
        let counts: Vec<usize> = self.segments.iter().map(|s| s.layers.len()).collect();
        balance::segment_loads(sizes, tied, &counts)
    }

    /// The segments, in pipeline order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The device the embedding runs on (where token ids go).
    pub fn first_device(&self) -> &Device {
        &self.segments[0].device
    }

    /// The device of the final norm and output projection (where logits come out).
    pub fn last_device(&self) -> &Device {
        &self.segments[self.segments.len() - 1].device
    }

    /// The segment that runs layer `layer`.
    pub fn segment_of(&self, layer: usize) -> usize {
        self.segments
            .iter()
            .position(|s| s.layers.contains(&layer))
            .unwrap_or(self.segments.len() - 1)
    }

    /// The device that runs layer `layer`.
    pub fn device_of(&self, layer: usize) -> &Device {
        &self.segments[self.segment_of(layer)].device
    }

    /// Whether everything runs on one segment.
    pub fn is_single(&self) -> bool {
        self.segments.len() == 1
    }

    /// `cuda:0 layers 0..20, cuda:1 layers 20..36` (`, layers 30..36 offloaded`).
    pub fn describe(&self) -> String {
        let mut text = self
            .segments
            .iter()
            .map(|s| {
                format!(
                    "{} layers {}..{}",
                    device_name(&s.device),
                    s.layers.start,
                    s.layers.end
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let o = &self.offload;
        if !o.layers.is_empty() {
            text.push_str(&format!(
                ", layers {}..{} offloaded",
                o.layers.start, o.layers.end
            ));
        }
        if o.head {
            text.push_str(", output projection offloaded");
        }
        if o.host_embedding {
            text.push_str(", embedding on the host");
        }
        text
    }
}
/// `cuda:1`, `cpu`.
pub fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
        candle_core::DeviceLocation::Cpu => "cpu".into(),
    }
}

/// What the placement tests share.
#[cfg(test)]
pub(super) mod test_util {
    use super::*;

    /// `layers` layers of `layer` bytes, an embedding and a head.
    pub fn sizes(layers: usize, layer: u64, embedding: u64, head: u64) -> ModelSizes {
        ModelSizes {
            embedding,
            layers: vec![layer; layers],
            head,
        }
    }

    /// `n` CPU devices.
    pub fn map(n: usize, split: LayerSplit) -> DeviceMap {
        DeviceMap {
            devices: vec![Device::Cpu; n],
            split,
        }
    }

    /// Layers per segment.
    pub fn counts(p: &Placement) -> Vec<usize> {
        p.segments().iter().map(|s| s.layers.len()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::{counts, map, sizes};
    use super::*;

    #[test]
    fn counts_are_checked() {
        let s = sizes(6, 10, 1, 1);
        let p = Placement::plan(
            &map(3, LayerSplit::Counts(vec![1, 2, 3])),
            &s,
            false,
            &[0; 3],
        )
        .unwrap();
        assert_eq!(counts(&p), vec![1, 2, 3]);
        assert_eq!(p.segments()[2].layers, 3..6);
        let e = Placement::plan(&map(2, LayerSplit::Counts(vec![1, 2])), &s, false, &[0; 2]);
        assert!(e.unwrap_err().to_string().contains("summing to 3"));
        let e = Placement::plan(&map(2, LayerSplit::Counts(vec![6])), &s, false, &[0; 2]);
        assert!(e.is_err());
        assert!(Placement::plan(&map(0, LayerSplit::Auto), &s, false, &[]).is_err());
    }

    #[test]
    fn segments_must_cover_the_layers_in_order() {
        let seg = |layers: Range<usize>| Segment {
            device: Device::Cpu,
            layers,
        };
        assert!(Placement::from_segments(vec![seg(0..2), seg(2..5)], 5).is_ok());
        assert!(Placement::from_segments(vec![seg(0..2), seg(3..5)], 5).is_err());
        assert!(Placement::from_segments(vec![seg(0..2)], 5).is_err());
        assert!(Placement::from_segments(vec![], 0).is_err());
        let p = Placement::from_segments(vec![seg(0..0), seg(0..5)], 5).unwrap();
        assert_eq!(p.segment_of(0), 1);
        assert_eq!(p.describe(), "cpu layers 0..0, cpu layers 0..5");
    }
}
