//! The whole pipeline on the FLUX fixture from its recorded noise: the image of the DF11
//! transformer == the BF16 transformer's, byte for byte (f32 and BF16, on the CPU and, with the
//! `cuda` feature, on CUDA), and on the CPU in f32 the pixels of diffusers' run within one
//! level.

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use df11_candle::{Df11Options, WeightFormat};
use flux_df11::pipeline::{
    decode, denoise, encode_prompt, load_transformer, GenerateOptions, PipelineFolders,
};
use flux_df11::{SchedulerConfig, VaeDecoder};

#[test]
fn df11_and_bf16_images_are_identical_and_match_diffusers() {
    for device in common::devices() {
        images_on(&device);
    }
}

fn images_on(device: &Device) {
    let r: HashMap<String, Tensor> = candle_core::safetensors::load(
        common::fixture().join("reference.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture().join("reference.json")).unwrap(),
    )
    .unwrap();
    let base = common::fixture().join("base");
    let options = GenerateOptions {
        width: 64,
        height: 64,
        steps: 4,
        guidance: json["guidance_scale"].as_f64().unwrap() as f32,
        max_sequence_length: json["max_sequence_length"].as_u64().unwrap() as usize,
        noise: Some(r["latents.noise_unpacked"].clone()),
        seed: 0,
    };
    let scheduler = SchedulerConfig::open(&base.join("scheduler/scheduler_config.json")).unwrap();
    for dtype in [DType::F32, DType::BF16] {
        let prompt = encode_prompt(
            &base,
            json["prompt"].as_str().unwrap(),
            device,
            dtype,
            options.max_sequence_length,
        )
        .unwrap();
        let vae = VaeDecoder::load(&base.join("vae"), device, DType::F32).unwrap();
        let image = |transformer: &std::path::Path, format| {
            let folders = PipelineFolders {
                transformer,
                format,
                base: &base,
            };
            let t = load_transformer(&folders, device, dtype, Df11Options::default()).unwrap();
            let mut steps = Vec::new();
            let latents = denoise(&t, &scheduler, &prompt, &options, |i| steps.push(i)).unwrap();
            assert_eq!(steps, [0, 1, 2, 3]);
            decode(&vae, &latents, &options).unwrap()
        };
        let bf16 = image(&base.join("transformer"), WeightFormat::Dense);
        let df11 = image(&common::fixture().join("df11"), WeightFormat::Df11);
        assert!(
            df11 == bf16,
            "{device:?} {dtype:?}: the DF11 image differs from the BF16 one"
        );
        if dtype == DType::F32 && device.is_cpu() {
            let theirs: Vec<u8> = r["pipeline.f32.image"]
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|v| (v * 255.0).round() as u8)
                .collect();
            let worst = bf16
                .rgb
                .iter()
                .zip(&theirs)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .unwrap();
            assert!(worst <= 1, "pixels {worst} levels from diffusers'");
        }
    }
}
