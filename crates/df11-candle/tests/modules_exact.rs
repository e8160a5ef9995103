//! `Df11Linear` / `Df11Embedding` give bit-identical results to `candle_nn::Linear` /
//! `Embedding` holding the original BF16 weights, for every compressed matrix of every fixture,
//! on the test device (the CPU in CI, CUDA in the GPU suite); and units decoded on the device
//! equal the originals byte for byte.

mod common;

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{
    Df11Group, Df11Model, Embedding, Linear, ModelWeights, SafetensorsIndex, WeightFormat,
};
use rand::{Rng, SeedableRng};

fn dtypes(device: &Device) -> Vec<DType> {
    if device.is_cuda() {
        vec![DType::BF16, DType::F32]
    } else {
        vec![DType::F32, DType::BF16]
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    match t.dtype() {
        DType::F32 => t
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        DType::BF16 => t
            .flatten_all()
            .unwrap()
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits() as u32)
            .collect(),
        d => panic!("unexpected dtype {d:?}"),
    }
}

/// Fixture `name` opened DF11 (kept compressed) and BF16 (dense) on `device` in `dtype`, with
/// the test's options.
fn open_both(name: &str, device: &Device, dtype: DType) -> (ModelWeights, ModelWeights) {
    let open = |kind: &str, format| {
        let dir = common::model_dir(name, kind);
        ModelWeights::open_with(&dir, format, device, dtype, common::options()).unwrap()
    };
    (
        open("df11", WeightFormat::Df11),
        open("bf16", WeightFormat::Dense),
    )
}

#[test]
fn units_decode_exactly_on_the_device() {
    let device = common::device();
    for name in common::MODELS {
        let model = Df11Model::open(common::model_dir(name, "df11")).unwrap();
        let original = SafetensorsIndex::open_dir(&common::model_dir(name, "bf16")).unwrap();
        for unit in model.units() {
            let placement = df11_candle::UnitPlacement {
                options: common::options(),
                ..Default::default()
            };
            let g = Df11Group::load(&model, unit, &device, &placement).unwrap();
            let flat = g.decode().unwrap();
            assert_eq!(flat.dims(), &[unit.layout.n_elements]);
            let host: Vec<half::bf16> = flat.to_vec1().unwrap();
            let host: &[u8] = bytemuck::cast_slice(&host);
            for (i, m) in unit.members.iter().enumerate() {
                let r = unit.member_range(i);
                assert!(
                    host[2 * r.start..2 * r.end] == *original.get(m).unwrap().data,
                    "{name}: {m}"
                );
            }
            g.check_status().unwrap();
        }
    }
}

#[test]
fn df11_linear_equals_bf16_linear_bit_for_bit() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    for name in common::MODELS {
        let model = Df11Model::open(common::model_dir(name, "df11")).unwrap();
        let original = SafetensorsIndex::open_dir(&common::model_dir(name, "bf16")).unwrap();
        for dtype in dtypes(&device) {
            let (df11, dense) = open_both(name, &device, dtype);
            for weight in model.compressed_weights() {
                let module = weight.strip_suffix(".weight").unwrap();
                let shape = original.get(weight).unwrap().shape.to_vec();
                let (out_f, in_f) = (shape[0], shape[1]);
                let has_bias = original.contains(&format!("{module}.bias"));
                let a = df11.linear(module, out_f, in_f, has_bias).unwrap();
                let b = dense.linear(module, out_f, in_f, has_bias).unwrap();
                assert!(matches!(a, Linear::Df11(_)) && matches!(b, Linear::Dense { .. }));
                for batch in [1usize, 7, 64] {
                    let x: Vec<f32> = (0..batch * in_f)
                        .map(|_| rng.gen_range(-1.0f32..1.0))
                        .collect();
                    let x = Tensor::from_vec(x, (1, batch, in_f), &device)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap();
                    let ya = a.forward(&x).unwrap();
                    let yb = b.forward(&x).unwrap();
                    assert_eq!(ya.dims(), &[1, batch, out_f]);
                    assert!(
                        bits(&ya) == bits(&yb),
                        "{name} {module} {dtype:?} batch {batch}"
                    );
                }
            }
        }
    }
}

#[test]
fn df11_embedding_equals_bf16_embedding_bit_for_bit() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    let mut checked = 0;
    for name in common::MODELS {
        let model = Df11Model::open(common::model_dir(name, "df11")).unwrap();
        let original = SafetensorsIndex::open_dir(&common::model_dir(name, "bf16")).unwrap();
        // Embedding units, and layer matrices read as tables (rows that straddle blocks).
        for weight in model.compressed_weights() {
            let module = weight.strip_suffix(".weight").unwrap();
            let shape = original.get(weight).unwrap().shape.to_vec();
            let dtype = dtypes(&device)[0];
            let (df11, dense) = open_both(name, &device, dtype);
            let a = df11.embedding(module, shape[0], shape[1]).unwrap();
            let b = dense.embedding(module, shape[0], shape[1]).unwrap();
            let Embedding::Df11(a) = a else {
                panic!("{name} {module}: not a DF11 embedding")
            };
            // Few ids (row by row), many (one chunk of rows), many over chunks of 7 rows.
            let chunked = a.clone().with_chunk_elements(7 * shape[1]);
            for (n_ids, table) in [
                (1usize, &a),
                (5, &a),
                (40, &a),
                (40, &chunked),
                (300, &chunked),
            ] {
                let ids: Vec<u32> = (0..n_ids)
                    .map(|_| rng.gen_range(0..shape[0] as u32))
                    .collect();
                let on_host = Tensor::from_vec(ids, (1, n_ids), &Device::Cpu).unwrap();
                let ids = on_host.to_device(&device).unwrap();
                let ya = table.forward(&ids).unwrap();
                let yb = b.forward(&ids).unwrap();
                assert_eq!(ya.dims(), &[1, n_ids, shape[1]]);
                assert!(bits(&ya) == bits(&yb), "{name} {module} {n_ids} ids");
                // Ids on the host (a decode step's): the same rows, on the table's device.
                let yh = table.forward(&on_host).unwrap();
                assert!(
                    yh.device().same_device(&device),
                    "{name} {module}: not on the device"
                );
                assert!(bits(&yh) == bits(&yb), "{name} {module} {n_ids} host ids");
                let ydh = b.forward(&on_host).unwrap();
                assert!(
                    bits(&ydh) == bits(&yb),
                    "{name} {module} {n_ids} host ids, dense"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20);
}

#[test]
fn decoded_at_load_mode_matches_compressed_mode() {
    let device = common::device();
    let dir = common::model_dir("qwen3-tiny", "df11");
    let dtype = dtypes(&device)[0];
    let o = common::options();
    let a = ModelWeights::open_with(&dir, WeightFormat::Df11, &device, dtype, o).unwrap();
    let b =
        ModelWeights::open_with(&dir, WeightFormat::Df11DecodedAtLoad, &device, dtype, o).unwrap();
    let la = a
        .linear("model.layers.1.mlp.down_proj", 128, 384, false)
        .unwrap();
    let lb = b
        .linear("model.layers.1.mlp.down_proj", 128, 384, false)
        .unwrap();
    match (&la, &lb) {
        (Linear::Df11(x), Linear::Df11(y)) => assert!(x.is_compressed() && !y.is_compressed()),
        _ => panic!("expected DF11 linears"),
    }
    let x = Tensor::ones((3, 384), dtype, &device).unwrap();
    assert!(bits(&la.forward(&x).unwrap()) == bits(&lb.forward(&x).unwrap()));
}

/// `Df11Group::decode_rows` (an embedding's rows in one launch per 65,535): on CUDA with the
/// packed form, any starts (unaligned, repeated, more than one launch's worth) and any row length
/// give the original BF16 values byte for byte, in order; a row past the unit is a typed error;
/// elsewhere `None` (the caller decodes them another way). Row lengths that are not multiples of
/// 8 put later rows' outputs off 16-byte boundaries, where the kernel must not store 16 bytes at
/// once (a misaligned store faults the context; every length below meets rows that start on
/// a multiple of 8).
#[test]
fn rows_decode_to_the_originals() {
    use df11_candle::{Df11Error, ExponentForm};
    use half::bf16;
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    let (rows, cols) = (96, 200);
    let options = df11_candle::Df11Options {
        exponents: ExponentForm::Packed,
        ..common::options()
    };
    let (w, g) = common::products::unit_of(&[(rows, cols)], rng.gen(), &device, options);
    let n = w.len();
    let drawn = rng.gen_range(1..=cols);
    // Row lengths of every residue mod 8, the drawn one; the drawn one over two launches.
    for (row_len, count) in [
        (1, 257),
        (7, 257),
        (9, 257),
        (13, 257),
        (16, 257),
        (100, 257),
        (195, 257),
        (drawn, 65_535 + 9),
    ] {
        // Half the starts on multiples of 8 (the 16-byte path), half anywhere.
        let starts: Vec<usize> = (0..count)
            .map(|i| {
                let s = rng.gen_range(0..=n - row_len);
                if i % 2 == 0 {
                    s / 8 * 8
                } else {
                    s
                }
            })
            .collect();
        let got = g.decode_rows(&starts, row_len).unwrap();
        if !device.is_cuda() {
            assert!(got.is_none(), "the rows kernel runs on CUDA only");
            return;
        }
        let got: Vec<bf16> = got.expect("a packed unit").to_vec1().unwrap();
        assert_eq!(got.len(), starts.len() * row_len);
        for (i, &s) in starts.iter().enumerate() {
            let row = &got[i * row_len..(i + 1) * row_len];
            assert!(
                row == &w[s..s + row_len],
                "row {i} at {s} (length {row_len})"
            );
        }
        g.check_status().unwrap();
    }
    let row_len = drawn;
    assert!(matches!(
        g.decode_rows(&[n - row_len + 1], row_len),
        Err(Df11Error::Usage(_))
    ));
    assert_eq!(
        g.decode_rows(&[], row_len).unwrap().unwrap().elem_count(),
        0
    );
}
