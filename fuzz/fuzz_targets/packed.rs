//! The packer: a unit's exponents -> `PackedExponents` -> exponents again. Two kinds of input
//! (first byte even / odd):
//! - a raw unit (`df11_fuzz::RawUnit`): `unit_exponents` (the packer's own checked decode) must
//!   accept exactly the units `decode_parallel` accepts and give the same exponents;
//! - weights: byte pairs are BF16 weights (sign/mantissa byte, then exponent byte taken mod 240,
//!   the codable range), cut into
//!   members at offsets the input gives; `encode_unit` -> validate -> decode must give the
//!   weights back bit for bit.
//!
//! Then the exponents are packed with the unit's members and must decode, whole and from a
//! start inside the unit, to the same exponents.
#![no_main]

use std::ops::Range;

use df11_candle::packed::unit_exponents;
use df11_candle::{decode_parallel, encode_unit, DecodeTable, PackedExponents, UnitLayout};
use df11_fuzz::RawUnit;
use half::bf16;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (unit, expected) = if mode % 2 == 0 {
        (RawUnit::parse(rest), None)
    } else {
        let Some((unit, weights)) = encode_weights(rest) else {
            return;
        };
        (unit, Some(weights))
    };
    let t = unit.tensors();
    let layout = match UnitLayout::validate(&t) {
        Ok(l) => l,
        Err(d) => {
            assert!(expected.is_none(), "an encoded unit does not validate: {d}");
            return;
        }
    };
    let table = DecodeTable::new(t.luts);
    let mut weights = vec![bf16::ZERO; layout.n_elements];
    let decoded = decode_parallel(&t, &layout, &table, &mut weights);
    let exponents = unit_exponents(&t, &layout, &table);
    match (&decoded, &exponents) {
        (Ok(()), Ok(e)) => {
            let from_weights: Vec<u8> = weights.iter().map(|w| (w.to_bits() >> 7) as u8).collect();
            assert_eq!(
                *e, from_weights,
                "unit_exponents and decode_parallel disagree"
            );
        }
        (Err(_), Err(_)) => return,
        (a, b) => panic!("decode_parallel: {a:?}, unit_exponents: {b:?}"),
    }
    if let Some(w) = expected {
        let bits: Vec<u16> = weights.iter().map(|x| x.to_bits()).collect();
        assert_eq!(bits, w, "compress -> decode is not the identity");
    }
    let exponents = exponents.unwrap();
    let members = layout.member_ranges();
    pack_and_check(&exponents, &members, data.len());
});

/// Encodes the weights an input describes: a byte whose value mod 8 is the number of `u16` cut
/// points that follow (multiples of 8, as the packer needs), then the weights. `None` when the
/// encoder refuses them (an empty member).
fn encode_weights(data: &[u8]) -> Option<(RawUnit, Vec<u16>)> {
    let (&count, rest) = data.split_first()?;
    let cuts = (count % 8) as usize;
    let (head, body) = rest.split_at((2 * cuts).min(rest.len()));
    let weights: Vec<u16> = body
        .chunks_exact(2)
        .map(|p| {
            // The first byte is the sign and mantissa byte, the second the exponent.
            let e = (p[1] % 240) as u16;
            ((p[0] as u16 & 0x80) << 8) | (e << 7) | (p[0] as u16 & 0x7F)
        })
        .collect();
    let n = weights.len();
    let mut bounds: Vec<usize> = head
        .chunks_exact(2)
        .map(|c| (8 * (u16::from_le_bytes([c[0], c[1]]) as usize % (n / 8 + 1))).min(n))
        .collect();
    bounds.push(0);
    bounds.push(n);
    bounds.sort_unstable();
    let bytes: Vec<u8> = weights.iter().flat_map(|w| w.to_le_bytes()).collect();
    let members: Vec<&[u8]> = bounds
        .windows(2)
        .map(|w| &bytes[2 * w[0]..2 * w[1]])
        .collect();
    match encode_unit(&members) {
        Ok(u) => Some((RawUnit::of(&u.tensors()), weights)),
        Err(e) => {
            // Refused: an empty member, or a flat histogram of so many exponents that its code
            // needs more LUT rows than the format's 17 decode rows (no real weights come near).
            assert!(
                members.iter().any(|m| m.is_empty()) || e.reason.contains("decode tables"),
                "encode_unit refused codable weights: {e:?}"
            );
            None
        }
    }
}

fn pack_and_check(exponents: &[u8], members: &[Range<usize>], salt: usize) {
    let n = exponents.len();
    let Some(p) = PackedExponents::build(exponents, members) else {
        return;
    };
    assert_eq!(p.n_elements(), n);
    assert_eq!(p.members, members);
    assert_eq!(*p.chunk_escapes.last().unwrap() as usize, p.escapes.len());
    assert_eq!(p.decode(0..n), exponents, "packed -> exponents");
    if n > 0 {
        let a = salt % n;
        assert_eq!(p.decode(a..n), exponents[a..], "packed from element {a}");
    }
    let _ = (p.bits_per_weight(), p.fits());
}
