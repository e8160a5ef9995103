//! What cannot be encoded is refused, never mis-encoded: empty members, exponents from 240
//! (inf, NaN, huge values) naming the member and element, and (`compress_model`) a unit weight
//! that is not BF16 or holds inf.
//!
//! Every run draws fresh random seeds; each assertion message names the seed. To reproduce a
//! failure, run with `DF11_TEST_SEED=<seed>`.

mod common;

use common::roundtrip::*;
use common::seeded;
use df11_candle::{compress_model, encode_unit, CompressOptions, Df11Error, RawTensor, UnitLayout};
use half::bf16;
use rand::rngs::StdRng;
use rand::Rng;
use safetensors::Dtype;

/// Units with no element, or with an empty member, are not valid DF11 units (split positions
/// must increase strictly; a code needs a symbol). The encoder must not panic on them, and
/// whatever it produces must be refused by validation rather than mis-decoded.
#[test]
fn empty_members_are_refused_not_mis_encoded() {
    let (seed, mut rng) = seeded("empty_members_are_refused_not_mis_encoded");
    let a = le_bytes(&normal(&mut rng, 1000, 0.0, 0.02));
    let b = le_bytes(&normal(&mut rng, 77, 0.0, 0.02));
    let cases: [(&str, Vec<&[u8]>); 5] = [
        ("no members", vec![]),
        ("one empty member", vec![&[]]),
        ("empty first member", vec![&[], &a]),
        ("empty middle member", vec![&a, &[], &b]),
        ("empty last member", vec![&a, &b, &[]]),
    ];
    for (what, members) in cases {
        let ctx = format!("seed {seed}: {what}");
        match encode_unit(&members) {
            Err(e) => assert!(!e.reason.is_empty(), "{ctx}"),
            Ok(enc) => {
                let r = UnitLayout::validate(&enc.tensors());
                assert!(r.is_err(), "{ctx}: an invalid unit validated: {r:?}");
            }
        }
    }
    // Members of odd byte length are refused, naming the member.
    let odd = [0u8; 3];
    let e = encode_unit(&[&a, &odd]).unwrap_err();
    assert_eq!(e.member, Some(1), "seed {seed}: {e:?}");
}

#[test]
fn exponents_from_240_are_refused_naming_the_member() {
    let (seed, mut rng) = seeded("exponents_from_240_are_refused_naming_the_member");
    let bad_values: [(u16, &str); 6] = [
        (0x7F80, "+inf"),
        (0xFF80, "-inf"),
        (0x7FC0, "NaN"),
        (0xFFC1, "-NaN"),
        (0x7800, "2^113 (exponent 240)"),
        (0xFA35, "exponent 244"),
    ];
    for (bad, what) in bad_values {
        let m = rng.gen_range(1..5);
        let mut members: Vec<Vec<u16>> = (0..m)
            .map(|_| {
                let n = rng.gen_range(1..3000);
                normal(&mut rng, n, 0.0, 0.02)
            })
            .collect();
        let target = rng.gen_range(0..m);
        let at = rng.gen_range(0..members[target].len());
        members[target][at] = bad;
        let ctx = format!("seed {seed}: {what} at member {target} element {at}");
        let bytes: Vec<Vec<u8>> = members.iter().map(|m| le_bytes(m)).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let e = encode_unit(&refs).expect_err(&ctx);
        assert_eq!(e.member, Some(target), "{ctx}: {e:?}");
        let e_val = exponent(bad);
        assert!(
            e.reason.contains(&format!("element {at} ")) && e.reason.contains(&e_val.to_string()),
            "{ctx}: {}",
            e.reason
        );
    }
    // Exponent 239 (the largest codable) is fine.
    let w: Vec<u16> = (0..100).map(|_| with_exponent(&mut rng, 239)).collect();
    roundtrip(&[w, vec![0x77FF]], &format!("seed {seed}: exponent 239"));
}

/// Writes a tiny one-layer qwen3 model; `q_dtype` is q_proj's dtype, `poison` an optional
/// (tensor, element, bf16 bits) to plant.
fn tiny_model(
    dir: &std::path::Path,
    rng: &mut StdRng,
    q_dtype: Dtype,
    poison: Option<(&str, usize, u16)>,
) {
    let config = serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": 1,
        "tie_word_embeddings": false,
        "torch_dtype": "bfloat16",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let (h, i) = (16usize, 24usize);
    let specs: [(&str, [usize; 2]); 7] = [
        ("self_attn.q_proj", [h, h]),
        ("self_attn.k_proj", [h / 2, h]),
        ("self_attn.v_proj", [h / 2, h]),
        ("self_attn.o_proj", [h, h]),
        ("mlp.gate_proj", [i, h]),
        ("mlp.up_proj", [i, h]),
        ("mlp.down_proj", [h, i]),
    ];
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (m, shape) in specs {
        let name = format!("model.layers.0.{m}.weight");
        let n = shape[0] * shape[1];
        let mut w = normal(rng, n, 0.0, 0.02);
        if let Some((t, at, v)) = poison {
            if t == name {
                w[at] = v;
            }
        }
        let (dtype, data) = if m == "self_attn.q_proj" && q_dtype == Dtype::F32 {
            let f: Vec<u8> = w
                .iter()
                .flat_map(|&x| bf16::from_bits(x).to_f32().to_le_bytes())
                .collect();
            (Dtype::F32, f)
        } else {
            (Dtype::BF16, le_bytes(&w))
        };
        owned.push((name, dtype, shape.to_vec(), data));
    }
    owned.push((
        "model.norm.weight".into(),
        Dtype::BF16,
        vec![h],
        le_bytes(&normal(rng, h, 1.0, 0.1)),
    ));
    let views = owned.iter().map(|(n, dtype, shape, data)| {
        (
            n.clone(),
            RawTensor {
                dtype: *dtype,
                shape,
                data,
            },
        )
    });
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn no_safetensors_in(dir: &std::path::Path) -> bool {
    !std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
    })
}

#[test]
fn compress_model_refuses_a_non_bf16_unit_weight() {
    let (seed, mut rng) = seeded("compress_model_refuses_a_non_bf16_unit_weight");
    let src = common::temp_dir();
    let dst = common::temp_dir();
    tiny_model(src.path(), &mut rng, Dtype::F32, None);
    let err = compress_model(src.path(), dst.path(), &CompressOptions::default(), |_| {})
        .expect_err("an F32 q_proj must be refused");
    let msg = err.to_string();
    match &err {
        Df11Error::Unencodable {
            path,
            tensor,
            reason,
        } => {
            assert_eq!(
                tensor, "model.layers.0.self_attn.q_proj.weight",
                "seed {seed}: {msg}"
            );
            assert_eq!(
                path.file_name().unwrap(),
                "model.safetensors",
                "seed {seed}: {msg}"
            );
            assert!(reason.contains("F32"), "seed {seed}: {msg}");
        }
        other => panic!("seed {seed}: expected Unencodable, got {other:?}"),
    }
    assert!(
        msg.contains("model.safetensors") && msg.contains("model.layers.0.self_attn.q_proj.weight"),
        "seed {seed}: {msg}"
    );
    assert!(no_safetensors_in(dst.path()), "seed {seed}: output written");

    // The same model in BF16 compresses, opens and decodes to its weights.
    let src = common::temp_dir();
    let dst = common::temp_dir();
    tiny_model(src.path(), &mut rng, Dtype::BF16, None);
    compress_model(src.path(), dst.path(), &CompressOptions::default(), |_| {})
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let r = df11_candle::verify_model(dst.path(), src.path(), |_| {})
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert!(r.is_ok() && r.units == 1 && r.weights == 16 * 16 * 2 + 8 * 16 * 2 + 24 * 16 * 3);

    // A BF16 weight holding inf is refused, naming that weight.
    let src = common::temp_dir();
    let dst = common::temp_dir();
    let at = rng.gen_range(0..16 * 24);
    tiny_model(
        src.path(),
        &mut rng,
        Dtype::BF16,
        Some(("model.layers.0.mlp.up_proj.weight", at, 0xFF80)),
    );
    let err = compress_model(src.path(), dst.path(), &CompressOptions::default(), |_| {})
        .expect_err("an inf weight must be refused");
    let msg = err.to_string();
    match &err {
        Df11Error::Unencodable { tensor, .. } => {
            assert_eq!(
                tensor, "model.layers.0.mlp.up_proj.weight",
                "seed {seed}: {msg}"
            )
        }
        other => panic!("seed {seed}: expected Unencodable, got {other:?}"),
    }
    assert!(
        msg.contains("model.safetensors") && msg.contains(&format!("element {at} ")),
        "seed {seed}: {msg}"
    );
}
