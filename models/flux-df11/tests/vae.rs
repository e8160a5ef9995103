//! The autoencoder's decoder on the FLUX fixture: the pipeline's final latents to its image in
//! f32, against diffusers' recorded decoder input, output and 8-bit image.

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use flux_df11::sampling::unpack_latents;
use flux_df11::vae::{to_rgb8, VaeConfig, VaeDecoder};

#[test]
fn the_decoder_gives_the_pipelines_image() {
    let r: HashMap<String, Tensor> = candle_core::safetensors::load(
        common::fixture().join("reference.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let vae = VaeDecoder::load(
        &common::fixture().join("base/vae"),
        &Device::Cpu,
        DType::F32,
    )
    .unwrap();
    let latents = unpack_latents(&r["pipeline.f32.latents_final"], 8, 8).unwrap();
    let z = vae.scale(&latents).unwrap();
    let e_in = common::max_abs_diff(&z, &r["pipeline.f32.vae_input"]);
    let image = vae.decode_scaled(&r["pipeline.f32.vae_input"]).unwrap();
    let e_out = common::max_abs_diff(&image, &r["pipeline.f32.vae_output"]);
    eprintln!("decoder input {e_in:.3e}, output {e_out:.3e} from diffusers'");
    assert!(e_in <= 2e-6 && e_out <= 5e-5);
    // 8-bit pixels: those of diffusers' image (its post-processing in f32), at most one level
    // apart where a value lies within rounding of a half level.
    let ours = to_rgb8(&image).unwrap();
    let theirs: Vec<u8> = r["pipeline.f32.image"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| (v * 255.0).round() as u8)
        .collect();
    assert_eq!(ours.len(), theirs.len());
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| a.abs_diff(*b))
        .max()
        .unwrap();
    assert!(worst <= 1, "pixels {worst} levels apart");
}

#[test]
fn a_bad_vae_config_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(common::fixture().join("base/vae/config.json")).unwrap();
    std::fs::write(
        &path,
        text.replace("\"norm_num_groups\": 4", "\"norm_num_groups\": 3"),
    )
    .unwrap();
    let e = VaeConfig::open(&path).unwrap_err().to_string();
    assert!(
        e.contains("norm_num_groups") && e.contains("config.json"),
        "{e}"
    );
}
