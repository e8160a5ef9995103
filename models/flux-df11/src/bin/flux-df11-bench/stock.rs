//! The baseline: stock candle-transformers' FLUX (`models::flux`, BFL's layout and names) in BF16,
//! same shapes, random weights made on the device (values do not change its speed).

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use candle_transformers::models::flux;

/// A VarBuilder backend that makes every tensor asked for: N(0, 0.02) in `dtype`.
struct RandomWeights;

impl SimpleBackend for RandomWeights {
    fn get(
        &self,
        shape: Shape,
        _name: &str,
        _init: Init,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, 0.02, shape, device)?.to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("`{name}`: the random backend makes tensors of a known shape only")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// candle-transformers' FLUX.1 (dev with `guidance`, else schnell) with `layers` double- and
/// `single_layers` single-stream blocks, BF16 on `device`.
pub fn model(
    layers: usize,
    single_layers: usize,
    guidance: bool,
    device: &Device,
) -> candle_core::Result<flux::model::Flux> {
    let mut config = if guidance {
        flux::model::Config::dev()
    } else {
        flux::model::Config::schnell()
    };
    config.depth = layers;
    config.depth_single_blocks = single_layers;
    let vb = VarBuilder::from_backend(Box::new(RandomWeights), DType::BF16, device.clone());
    flux::model::Flux::new(&config, vb)
}
