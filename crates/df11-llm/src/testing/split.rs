//! A model split over several devices ([`crate::placement`]), or with layers offloaded to host
//! memory, gives the logits of the same model on one device with every weight on it, bit for
//! bit: at the prompt, at decode steps and in a ragged engine batch.
//!
//! In CI the devices are the CPU several times over (the split's own logic: segments, empty
//! segments, per-segment caches and rotary tables, the residual stream handed on). In the GPU
//! suite they are CUDA devices 0 and 1 when the machine has two GPUs (peer copies between them,
//! a CUDA graph per segment), else two devices on GPU 0, and the test says which.

use candle_core::Device;

use super::{input_on, logit_bits, test_device, ModelUnderTest};
use crate::engine::Engine;
use crate::placement::{DeviceMap, LayerSplit, Offload, OffloadPlan, Placement, Segment};
use crate::{CausalLm, DecodeOptions, DecoderModel, LoadBar};

/// The devices a split runs on here, and a line saying which.
fn split_devices() -> (Vec<Device>, String) {
    let device = test_device();
    if !device.is_cuda() {
        return (vec![Device::Cpu; 3], "three CPU segments".into());
    }
    let gpus = crate::device::cuda_device_count();
    if gpus >= 2 {
        let devices = crate::device::cuda_devices(&[0, 1]).expect("two CUDA devices");
        (devices, format!("CUDA devices 0 and 1 ({gpus} GPUs)"))
    } else {
        let second = crate::device::open_cuda(0).expect("a second device on GPU 0");
        (
            vec![device, second],
            "two devices on GPU 0 (one GPU here: the multi-GPU part needs two)".into(),
        )
    }
}

/// Logit bits of the prompt and of `steps` greedy decode steps.
fn prompt_and_steps(model: &mut DecoderModel, prompt: &[u32], steps: usize) -> Vec<Vec<u32>> {
    model.reset();
    let device = model.device().clone();
    let logits = model.forward(&input_on(prompt, &device), 0).unwrap();
    let mut out = vec![logit_bits(&logits)];
    let mut next = argmax(&logits);
    for i in 0..steps {
        let logits = model
            .forward(&input_on(&[next], &device), prompt.len() + i)
            .unwrap();
        next = argmax(&logits);
        out.push(logit_bits(&logits));
    }
    out
}

fn argmax(logits: &candle_core::Tensor) -> u32 {
    logits
        .flatten_all()
        .unwrap()
        .argmax(0)
        .unwrap()
        .to_scalar::<u32>()
        .unwrap()
}

/// The split model equals the one-device model, bit for bit, for every fixture: layers split
/// `[1, 0, rest]` over three segments (on CUDA: `[1, rest]`) and as `auto` plans them; decode
/// steps with and without CUDA graphs; two sequences in a ragged engine batch.
pub fn split_layers_equal_one_device(m: &ModelUnderTest) {
    let (devices, which) = split_devices();
    eprintln!("{}: split over {which}", m.name);
    let device = devices[0].clone();
    for name in m.fixtures {
        let (prompt, config, weights) = m.open_df11(name, &device);
        let spec = || (m.spec)(&config, &weights).unwrap();
        let layers = spec().layers.len();
        assert!(layers >= 2, "{name}: a split needs two layers");
        let options = |cuda_graph: bool| DecodeOptions {
            max_context: Some(prompt.len() + 8),
            cuda_graph,
            ..m.decode.clone()
        };
        let mut single = m.built(&config, &weights).unwrap();
        // Explicit segments: the first layer alone, an empty segment, the rest.
        let counts: Vec<usize> = if devices.len() == 3 {
            vec![1, 0, layers - 1]
        } else {
            vec![1, layers - 1]
        };
        let mut start = 0;
        let segments = counts
            .iter()
            .zip(&devices)
            .map(|(&c, d)| {
                start += c;
                Segment {
                    device: d.clone(),
                    layers: start - c..start,
                }
            })
            .collect();
        let placement = Placement::from_segments(segments, layers).unwrap();
        let mut split =
            DecoderModel::load_placed(spec(), &weights, placement, &LoadBar::hidden()).unwrap();
        let map = DeviceMap {
            devices: devices.clone(),
            split: LayerSplit::Auto,
        };
        let mut auto =
            DecoderModel::load_split(spec(), &weights, &map, &LoadBar::hidden()).unwrap();
        eprintln!(
            "{name}: explicit {}; auto {}",
            split.placement().describe(),
            auto.placement().describe()
        );
        let graphs: &[bool] = if device.is_cuda() {
            &[true, false]
        } else {
            &[false]
        };
        for &graph in graphs {
            single.set_options(options(graph)).unwrap();
            split.set_options(options(graph)).unwrap();
            auto.set_options(options(graph)).unwrap();
            let want = prompt_and_steps(&mut single, &prompt, 4);
            for (what, model) in [("explicit", &mut split), ("auto", &mut auto)] {
                let got = prompt_and_steps(model, &prompt, 4);
                for (step, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        a == b,
                        "{name} ({what} split, graph {graph}): step {step}: the split model's \
                         logits differ from one device's"
                    );
                }
            }
        }
        // A ragged batch through the engine: two prompts of different lengths, then steps.
        let batch = |model: DecoderModel| -> Vec<Vec<u32>> {
            let mut e = Engine::new(model, 2).unwrap();
            let (a, la) = e.add(&prompt).unwrap();
            let (b, lb) = e.add(&prompt[..prompt.len() / 2]).unwrap();
            let mut out = vec![logit_bits(&la), logit_bits(&lb)];
            let (mut na, mut nb) = (argmax(&la), argmax(&lb));
            for _ in 0..3 {
                let l = e.step(&[(b, nb), (a, na)]).unwrap();
                let (lb, la) = (l.get(0).unwrap(), l.get(1).unwrap());
                out.push(logit_bits(&la));
                out.push(logit_bits(&lb));
                (na, nb) = (argmax(&la), argmax(&lb));
            }
            out
        };
        assert!(
            batch(single) == batch(split),
            "{name}: a ragged batch on the split model differs from one device's"
        );
    }
}

/// Offloaded layers (their compressed units in host memory, staged one layer ahead of use and
/// released after it) give the resident model's logits bit for bit, for every fixture: the last
/// layer offloaded, every layer, the last layer of a split model (two devices; on CUDA two
/// devices of GPU 0), and every layer with the output projection (the embedding served from
/// host memory in each); prompt and decode steps. After each pass no
/// offloaded unit is left on the device. On [`test_device`].
pub fn offloaded_layers_equal_resident(m: &ModelUnderTest) {
    let device = test_device();
    for name in m.fixtures {
        let (prompt, config, weights) = m.open_df11(name, &device);
        let spec = || (m.spec)(&config, &weights).unwrap();
        let layers = spec().layers.len();
        let options = DecodeOptions {
            max_context: Some(prompt.len() + 8),
            ..m.decode.clone()
        };
        let mut resident = m.built(&config, &weights).unwrap();
        resident.set_options(options.clone()).unwrap();
        let want = prompt_and_steps(&mut resident, &prompt, 4);
        // The last layer, every layer, and the last layer of a model split over two devices.
        let two = DeviceMap {
            devices: vec![device.clone(); 2],
            split: LayerSplit::Counts(vec![1, layers - 1]),
        };
        let everything = OffloadPlan {
            layers: 0..layers,
            host_embedding: true,
            head: true,
            ..OffloadPlan::default()
        };
        let cases = [
            (Offload::Layers(1), None, None),
            (Offload::Layers(layers), None, None),
            (Offload::Layers(1), Some(&two), None),
            (Offload::None, None, Some(everything)),
        ];
        for (offload, map, plan) in cases {
            let placement = DecoderModel::plan(&spec(), &weights, map, offload).unwrap();
            let placement = match &plan {
                Some(plan) => placement.with_offload(plan.clone()).unwrap(),
                None => placement,
            };
            let mut model =
                DecoderModel::load_placed(spec(), &weights, placement, &LoadBar::hidden()).unwrap();
            model.set_options(options.clone()).unwrap();
            let placed = model.placement().offload().clone();
            let want_layers = match (offload, &plan) {
                (_, Some(p)) => p.layers.len(),
                (Offload::Layers(n), None) => layers.min(n),
                _ => 0,
            };
            assert_eq!(placed.layers.len(), want_layers, "{name} ({offload:?})");
            assert!(
                placed.host_embedding,
                "{name}: the embedding of an offloading model is not on the host"
            );
            assert_eq!(placed.head, plan.is_some(), "{name} ({offload:?})");
            let units = model.offloaded_units_for_tests();
            assert!(
                !units.is_empty() && units.iter().all(|u| u.is_offloaded()),
                "{name}: the offloaded layers hold no offloaded unit"
            );
            let got = prompt_and_steps(&mut model, &prompt, 4);
            for (step, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    a == b,
                    "{name} ({offload:?}): step {step}: offloaded and resident logits differ"
                );
            }
            assert!(
                units.iter().all(|u| !u.is_staged()),
                "{name}: an offloaded unit was left on the device after the pass"
            );
        }
    }
}
