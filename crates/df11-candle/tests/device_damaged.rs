//! Damaged units on the test device (the CPU in CI, CUDA in the GPU suite): a corrupt bitstream
//! or gaps give an error from `Df11Group` (on CUDA, the kernel's status word), never a crash or
//! an out-of-bounds access.

mod common;

use candle_core::Device;
use df11_candle::{Df11Error, Df11Group, Df11Model, UnitLayout, UnitTensors};
use rand::{Rng, SeedableRng};

/// Loads and decodes a unit built from (possibly damaged) tensors; Err if anything reports.
fn load_and_decode(t: &UnitTensors<'_>, device: &Device) -> Result<Vec<u16>, Df11Error> {
    let layout = UnitLayout::validate(t).map_err(|defect| Df11Error::InvalidUnit {
        path: "test".into(),
        unit: "damaged".into(),
        defect,
    })?;
    let placement = df11_candle::UnitPlacement::default();
    let g = Df11Group::new(
        "damaged",
        vec!["damaged.weight".into()],
        t,
        layout,
        device,
        &placement,
    )?;
    let out = g.decode()?;
    g.check_status()?;
    let v: Vec<half::bf16> = out.to_vec1().map_err(Df11Error::from)?;
    Ok(v.iter().map(|x| x.to_bits()).collect())
}

#[test]
fn zeroed_gaps_and_flipped_stream_bytes_are_reported() {
    let device = common::device();
    let model = Df11Model::open(common::model_dir("qwen3-tiny", "df11")).unwrap();
    let unit = model.unit("model.layers.0").unwrap();
    let t = model.unit_tensors(unit).unwrap();
    let good = load_and_decode(&t, &device).unwrap();

    // Gaps all zero: the windows' chains break (a valid unit of this size has non-zero gaps).
    let zero_gaps = vec![0u8; t.gaps.len()];
    let damaged = UnitTensors {
        gaps: &zero_gaps,
        ..t
    };
    assert!(
        load_and_decode(&damaged, &device).is_err(),
        "zeroed gaps went unnoticed"
    );

    // Random byte flips in the stream: errors or (rarely, when a code swaps with another of the
    // same length) a wrong but in-bounds result; never a crash.
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    let (mut reported, trials) = (0, 40);
    for _ in 0..trials {
        let mut stream = t.encoded_exponent.to_vec();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..stream.len());
            stream[i] ^= rng.gen_range(1..=255u8);
        }
        let damaged = UnitTensors {
            encoded_exponent: &stream,
            ..t
        };
        match load_and_decode(&damaged, &device) {
            Err(Df11Error::InvalidUnit { .. }) => reported += 1,
            Err(e) => panic!("unexpected error kind: {e}"),
            Ok(out) => assert_eq!(out.len(), good.len()),
        }
    }
    assert!(
        reported * 2 > trials,
        "only {reported} of {trials} damaged streams were reported"
    );
}
