//! The packed form built on the GPU at load (`kernels/df11_pack.cu`) is the CPU build's, array
//! for array: every fixture unit, the real Qwen3-4B slice, synthetic units (LLM-like layers,
//! odd sizes, a partial last 8-group, many members, chunks with more than 255 escapes, members
//! off an 8-boundary) and damaged streams (refused by both, or decoded alike by both). CUDA only:
//! this file is empty without the `cuda` feature (the GPU suite runs it).
#![cfg(feature = "cuda")]

mod common;

use df11_candle::cuda::packed::tile_order::{member_orders, tile_members};
use df11_candle::packed::unit_exponents;
use df11_candle::TileMembers;
use df11_candle::{
    encode_unit, synth, DecodeTable, Df11Model, PackedExponents, UnitLayout, UnitTensors,
};
use half::bf16;
use rand::{Rng, SeedableRng};

fn cuda() -> candle_core::cuda_backend::CudaDevice {
    match common::device() {
        candle_core::Device::Cuda(d) => d,
        other => panic!("the GPU-built form needs CUDA, got {other:?}"),
    }
}

/// Builds the packed form both ways and checks they agree: both refuse, or both give the same
/// arrays; a stream the CPU walk refuses is refused on the GPU too. Returns whether it packed.
fn same_both_ways(t: &UnitTensors<'_>, ctx: &str) -> bool {
    same_both_ways_shaped(t, &[], ctx)
}

/// [`same_both_ways`] with the members of known `shapes` in the tile order: the CPU side tiles
/// the exponents and `sign_mantissa` with `tile_members` and packs (row order if that does not
/// pack, as the loads do); the GPU build must give the same arrays and `sign_mantissa`.
fn same_both_ways_shaped(
    t: &UnitTensors<'_>,
    shapes: &[Option<(usize, usize)>],
    ctx: &str,
) -> bool {
    let layout = UnitLayout::validate(t).unwrap_or_else(|d| panic!("{ctx}: {d}"));
    let table = DecodeTable::new(t.luts);
    let members = layout.member_ranges();
    // Every shape the kernels take is tiled here (the default tiles whole 2048-column chunks only).
    let orders = member_orders(TileMembers::All, &members, shapes);
    let cpu = unit_exponents(t, &layout, &table).map(|e| {
        let tiled = tile_members(&e, &members, &orders).and_then(|te| {
            let sm = tile_members(t.sign_mantissa, &members, &orders);
            PackedExponents::build(&te, &members).map(|p| (p, sm))
        });
        tiled.or_else(|| PackedExponents::build(&e, &members).map(|p| (p, None)))
    });
    let gpu = df11_candle::cuda::build_on_gpu_to_host(&cuda(), t, &layout, &orders);
    match (cpu, gpu) {
        (Err(_), Err(_)) => false,
        (Ok(None), Ok(None)) => false,
        (Ok(Some((c, csm))), Ok(Some((g, gsm)))) => {
            assert!(csm == gsm, "{ctx}: tiled sign_mantissa differs");
            assert_eq!(c.tables, g.tables, "{ctx}: tables");
            assert_eq!(c.members, g.members, "{ctx}: members");
            assert!(c.codes == g.codes, "{ctx}: codes differ");
            assert_eq!(c.chunk_escapes, g.chunk_escapes, "{ctx}: chunk_escapes");
            assert!(c.lane_starts == g.lane_starts, "{ctx}: lane_starts differ");
            assert!(c.escapes == g.escapes, "{ctx}: escapes differ");
            true
        }
        (c, g) => panic!(
            "{ctx}: the CPU build gives {:?}, the GPU build {:?}",
            c.map(|p| p.is_some()),
            g.map(|p| p.is_some())
        ),
    }
}

/// `members` (BF16 weights) encoded as one unit, then checked both ways.
fn check_encoded(members: &[Vec<bf16>], ctx: &str) -> bool {
    let bytes: Vec<&[u8]> = members
        .iter()
        .map(|m| bytemuck::cast_slice::<bf16, u8>(m))
        .collect();
    let enc = encode_unit(&bytes).unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
    same_both_ways(&enc.tensors(), ctx)
}

#[test]
fn every_fixture_unit_packs_on_the_gpu_as_on_the_cpu() {
    let mut packed = 0;
    for name in common::MODELS {
        let model = Df11Model::open(common::model_dir(name, "df11")).unwrap();
        for unit in model.units() {
            let t = model.unit_tensors(unit).unwrap();
            packed += same_both_ways(&t, &format!("{name} {}", unit.name)) as usize;
        }
    }
    assert!(packed > 0, "no fixture unit packed");
}

#[test]
fn the_real_qwen3_4b_slice_packs_on_the_gpu_as_on_the_cpu() {
    let idx = common::canary_index();
    let t = common::canary_unit(&idx);
    same_both_ways(&t, "qwen3-4b slice");
}

#[test]
fn tiled_units_pack_on_the_gpu_as_on_the_cpu() {
    let (seed, mut rng) = common::seeded("tiled_units_pack_on_the_gpu_as_on_the_cpu");
    // Qwen3-8B's members with a 16th of the rows; then Gemma-like 3840 and Mistral-like 5120
    // columns (partial 2048-column chunks), a member that cannot be tiled (12 rows) between
    // tiled ones, and one whose shape is not given.
    let layer: Vec<(usize, usize)> = synth::QWEN3_8B_LAYER
        .iter()
        .map(|&(o, i)| (o / 16, i))
        .collect();
    let odd = vec![(16, 3840), (12, 512), (24, 5120), (8, 256), (40, 2304)];
    for (shapes, ctx) in [(layer, "qwen3-like layer"), (odd, "odd shapes")] {
        let ms: Vec<Vec<bf16>> = shapes
            .iter()
            .map(|&(r, c)| synth::normal_bf16(r * c, 0.02, rng.gen()))
            .collect();
        let bytes: Vec<&[u8]> = ms
            .iter()
            .map(|m| bytemuck::cast_slice::<bf16, u8>(m))
            .collect();
        let enc = encode_unit(&bytes).unwrap();
        let mut given: Vec<Option<(usize, usize)>> = shapes.iter().copied().map(Some).collect();
        if ctx == "odd shapes" {
            given[3] = None;
        }
        let t = enc.tensors();
        let layout = UnitLayout::validate(&t).unwrap();
        let orders = member_orders(TileMembers::All, &layout.member_ranges(), &given);
        let tiled = orders.iter().filter(|o| o.is_some()).count();
        assert!(
            tiled >= 3,
            "{ctx} (seed {seed}): only {tiled} members tiled"
        );
        assert!(
            same_both_ways_shaped(&t, &given, ctx),
            "{ctx}: did not pack"
        );
    }
}

#[test]
fn synthetic_units_pack_on_the_gpu_as_on_the_cpu() {
    let (seed, mut rng) = common::seeded("synthetic_units_pack_on_the_gpu_as_on_the_cpu");
    // An LLM-like layer (Qwen3-8B's members, a 16th of the rows), N(0, 0.02).
    let shapes: Vec<usize> = synth::QWEN3_8B_LAYER
        .iter()
        .map(|&(o, i)| o / 16 * i)
        .collect();
    let all = synth::normal_bf16(shapes.iter().sum(), 0.02, seed);
    let mut members = Vec::new();
    let mut at = 0;
    for n in shapes {
        members.push(all[at..at + n].to_vec());
        at += n;
    }
    assert!(check_encoded(&members, "qwen3-like layer"));
    // Odd sizes: a last member of 8k + 5 elements (a partial 8-group), 1-element last member.
    for last in [5usize, 1, 2049, 8 * 300 + 3] {
        let ms = vec![
            synth::normal_bf16(4096, 0.05, rng.gen()),
            synth::normal_bf16(last, 0.05, rng.gen()),
        ];
        assert!(check_encoded(&ms, &format!("last member of {last}")));
    }
    // Many members, each a multiple of 8.
    let ms: Vec<Vec<bf16>> = (0..40)
        .map(|_| synth::normal_bf16(8 * rng.gen_range(1..300), 0.01, rng.gen()))
        .collect();
    assert!(check_encoded(&ms, "40 members"));
    // A member off an 8-boundary: no packed form either way.
    let ms = vec![
        synth::normal_bf16(4099, 0.05, rng.gen()),
        synth::normal_bf16(4096, 0.05, rng.gen()),
    ];
    assert!(!check_encoded(&ms, "unaligned member"));
    // Near-uniform exponents over 12 values: chunks with more than 255 escapes before their last
    // lane, so no packed form either way.
    let flat: Vec<bf16> = (0..200_000)
        .map(|_| {
            let e: u16 = 110 + rng.gen_range(0..12);
            bf16::from_bits((rng.gen::<u16>() & 0x807f) | e << 7)
        })
        .collect();
    assert!(!check_encoded(&[flat], "near-uniform exponents"));
    // Escapes at the limit: a few exponents off the top seven, at random.
    let mut rng2 = rand::rngs::StdRng::seed_from_u64(seed ^ 1);
    let sparse: Vec<bf16> = (0..100_000)
        .map(|_| {
            let e: u16 = if rng2.gen_ratio(1, 12) {
                100 + rng2.gen_range(0..30)
            } else {
                120 + rng2.gen_range(0..5)
            };
            bf16::from_bits((rng2.gen::<u16>() & 0x807f) | e << 7)
        })
        .collect();
    check_encoded(&[sparse], "sparse escapes");
}

#[test]
fn damaged_streams_are_refused_or_decoded_alike() {
    let (_, mut rng) = common::seeded("damaged_streams_are_refused_or_decoded_alike");
    let model = Df11Model::open(common::model_dir("qwen3-tiny", "df11")).unwrap();
    let unit = &model.units()[0];
    let t = model.unit_tensors(unit).unwrap();
    let mut refused = 0;
    for _ in 0..24 {
        let mut stream = t.encoded_exponent.to_vec();
        for _ in 0..rng.gen_range(1..8) {
            let i = rng.gen_range(0..stream.len());
            stream[i] ^= 1 << rng.gen_range(0..8);
        }
        let damaged = UnitTensors {
            encoded_exponent: &stream,
            ..t
        };
        if !same_both_ways(&damaged, "damaged stream") {
            refused += 1;
        }
    }
    assert!(refused > 0, "no damaged stream was refused");
}
