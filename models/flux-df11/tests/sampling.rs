//! The sampler on the FLUX fixture: the scheduler's sigmas and timesteps, the Euler step, the
//! latents' packing, and the whole 4-step denoising loop of the dev-shaped transformer (DF11 and
//! BF16, f32; on the CPU and, with the `cuda` feature, on CUDA) from the fixture's noise and text
//! states, against diffusers' recorded run.

mod common;

use candle_core::{DType, Device, Tensor};
use df11_candle::{ModelWeights, WeightFormat};
use flux_df11::sampling::{
    euler_step, image_ids, pack_latents, text_ids, unpack_latents, SchedulerConfig,
};
use flux_df11::{FluxConfig, FluxInputs, FluxTransformer};

fn as_f32s(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn sigmas_and_timesteps_are_the_schedulers() {
    let r = common::reference_json();
    let tokens = r["image_seq_len"].as_u64().unwrap() as usize;
    let dev =
        SchedulerConfig::open(&common::fixture().join("base/scheduler/scheduler_config.json"))
            .unwrap();
    assert!((dev.mu(tokens) - r["scheduler"]["mu"].as_f64().unwrap()).abs() < 1e-12);
    let sigmas = dev.sigmas(4, tokens).unwrap();
    assert_eq!(sigmas, as_f32s(&r["scheduler"]["sigmas"]));
    let timesteps: Vec<f32> = sigmas[..4].iter().map(|&s| dev.timestep(s)).collect();
    assert_eq!(timesteps, as_f32s(&r["scheduler"]["timesteps"]));
    let schnell = SchedulerConfig::open(
        &common::fixture().join("base-schnell/scheduler/scheduler_config.json"),
    )
    .unwrap();
    assert_eq!(
        schnell.sigmas(4, tokens).unwrap(),
        as_f32s(&r["schnell"]["sigmas"])
    );
    assert!(dev.sigmas(0, tokens).is_err());
}

#[test]
fn packing_and_the_euler_step_are_the_pipelines() {
    let r = common::reference();
    let json = common::reference_json();
    let noise = &r["latents.noise_unpacked"];
    let packed = pack_latents(noise).unwrap();
    assert_eq!(
        common::f32_bits(&packed),
        common::f32_bits(&r["latents.init"])
    );
    let (h, w) = (noise.dim(2).unwrap(), noise.dim(3).unwrap());
    assert_eq!(
        common::f32_bits(&unpack_latents(&packed, h, w).unwrap()),
        common::f32_bits(noise)
    );
    // Every recorded step, f32 and BF16: the step rule on the recorded prediction gives the
    // recorded latents bit for bit.
    for (run, dtype) in [("f32", DType::F32), ("bf16", DType::BF16)] {
        for (i, step) in json[format!("steps_{run}")]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let at = |k: &str| {
                r[&format!("pipeline.{run}.step{i}.{k}")]
                    .to_dtype(dtype)
                    .unwrap()
            };
            let (sigma, next) = (
                step["sigma"].as_f64().unwrap() as f32,
                step["sigma_next"].as_f64().unwrap() as f32,
            );
            let out = euler_step(&at("latents_in"), &at("noise_pred"), sigma, next).unwrap();
            assert_eq!(
                common::f32_bits(&out),
                common::f32_bits(&at("latents_out")),
                "{run} step {i}"
            );
        }
    }
}

/// The dev-shaped transformer's 4 steps in f32 from the fixture's noise and text states: every
/// prediction within 1e-5 of diffusers' and the final latents within 5e-5; DF11 == BF16 at
/// every step, bit for bit.
#[test]
fn the_denoising_loop_matches_diffusers_and_df11_equals_bf16() {
    for device in common::devices() {
        denoising_loop_on(&device);
    }
}

/// The loop on `device`: every step's prediction of DF11 == BF16's, bit for bit, and within the
/// fixture's tolerance of diffusers'.
fn denoising_loop_on(device: &Device) {
    let r = common::reference();
    let json = common::reference_json();
    let config = FluxConfig::open(&common::fixture().join("base/transformer/config.json")).unwrap();
    let scheduler =
        SchedulerConfig::open(&common::fixture().join("base/scheduler/scheduler_config.json"))
            .unwrap();
    let load = |dir: &str, format| {
        let w =
            ModelWeights::open(&common::fixture().join(dir), format, device, DType::F32).unwrap();
        FluxTransformer::load(&config, &w).unwrap()
    };
    let (bf16, df11) = (
        load("base/transformer", WeightFormat::Dense),
        load("df11", WeightFormat::Df11),
    );
    let on = |name: &str| r[name].to_device(device).unwrap();
    let text = &on("pipeline.f32.t5_hidden_states");
    let pooled = &on("pipeline.f32.clip_pooled");
    let tokens = json["image_seq_len"].as_u64().unwrap() as usize;
    let [h, w] = [8usize, 8];
    let (img, txt) = (
        image_ids(h / 2, w / 2, device).unwrap(),
        text_ids(text.dim(1).unwrap(), device).unwrap(),
    );
    let guidance = Tensor::new(&[json["guidance_scale"].as_f64().unwrap() as f32], device).unwrap();
    let sigmas = scheduler.sigmas(4, tokens).unwrap();
    let (mut a, mut b) = (on("latents.init"), on("latents.init"));
    for i in 0..4 {
        let t = Tensor::new(&[scheduler.timestep(sigmas[i])], device).unwrap();
        let t = (t / 1000.0).unwrap();
        let predict = |model: &FluxTransformer, latents: &Tensor| {
            model
                .forward(&FluxInputs {
                    hidden_states: latents,
                    encoder_hidden_states: text,
                    pooled_projections: pooled,
                    timestep: &t,
                    guidance: Some(&guidance),
                    img_ids: &img,
                    txt_ids: &txt,
                })
                .unwrap()
        };
        let (pa, pb) = (predict(&bf16, &a), predict(&df11, &b));
        assert_eq!(
            common::f32_bits(&pa),
            common::f32_bits(&pb),
            "{device:?} step {i}: DF11 differs from BF16"
        );
        let want = &r[&format!("pipeline.f32.step{i}.noise_pred")];
        let err = common::max_abs_diff(&pa, want);
        eprintln!("{device:?} step {i}: prediction {err:.3e} from diffusers'");
        assert!(
            err <= 1e-5,
            "{device:?} step {i}: prediction {err} from diffusers'"
        );
        a = euler_step(&a, &pa, sigmas[i], sigmas[i + 1]).unwrap();
        b = euler_step(&b, &pb, sigmas[i], sigmas[i + 1]).unwrap();
    }
    let err = common::max_abs_diff(&a, &r["pipeline.f32.latents_final"]);
    eprintln!("{device:?}: final latents {err:.3e} from diffusers'");
    assert!(
        err <= 5e-5,
        "{device:?}: final latents {err} from diffusers'"
    );
    assert_eq!(common::f32_bits(&a), common::f32_bits(&b));
}
