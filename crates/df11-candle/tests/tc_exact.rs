//! The tensor-core fused products (`kernels/df11_tc.cu`) on the test device: with every linear on
//! the fused path (`MatmulPath::Fused`, [`fused`]), a
//! DF11 linear and its decoded BF16 twin must give the same bits at 1 to 70 rows (two launches
//! above 64), for members the packed DF11 kernel takes (chunk-aligned rows, rows starting
//! mid-chunk, 5120 columns, row counts that are not a multiple of 8, many escapes) and for those
//! it does not (a member not starting on a 256-element boundary, the Huffman form: decoded and
//! given to the twin); and both must be within rounding distance of an f64 reference computed on
//! the host. On the CPU the same comparisons run through the CPU path.

mod common;

use candle_core::{DType, Device, Module, Tensor};
use common::products::{bits, check_against_reference, random_x, unit_of, unit_of_shaped};
use df11_candle::{
    encode_unit, fused_plan, synth, Df11Group, Df11Linear, Df11Options, ExponentForm, FusedKernel,
    MatmulPath, TileMembers, UnitLayout, UnitPlacement,
};

use half::bf16;
use rand::{Rng, SeedableRng};

const BATCHES: [usize; 10] = [1, 2, 3, 5, 8, 16, 17, 33, 64, 70];

/// The test's options with every product on the fused path and the exponents in `form`.
fn fused(form: ExponentForm) -> Df11Options {
    Df11Options {
        matmul: MatmulPath::Fused,
        exponents: form,
        ..common::options()
    }
}

/// [`fused`] with members tiled as `tiles` says.
fn fused_tiled(form: ExponentForm, tiles: TileMembers) -> Df11Options {
    Df11Options {
        tiles,
        ..fused(form)
    }
}

/// Checks every member of a unit of `shapes` in `form`: decode == original, fused == twin bit for
/// bit, fused close to the reference, at every batch of [`BATCHES`].
fn check_members(
    shapes: &[(usize, usize)],
    form: ExponentForm,
    rng: &mut impl Rng,
    device: &Device,
) {
    let options = fused(form);
    let (w, g) = unit_of(shapes, rng.gen(), device, options);
    let mut at = 0;
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let wm = &w[at..at + rows * cols];
        at += rows * cols;
        let fused = Df11Linear::new(g.clone(), i, rows, cols, None, DType::BF16).unwrap();
        let twin = fused.clone().decoded().unwrap();
        for batch in BATCHES {
            if device.is_cuda() && cols % 256 == 0 {
                assert_eq!(
                    fused_plan(batch, cols, device, &options),
                    Some(FusedKernel::TensorCore)
                );
            }
            let (xh, x) = random_x(rng, batch, cols, device);
            let (ya, yb) = (fused.forward(&x).unwrap(), twin.forward(&x).unwrap());
            let what = format!("member {i} [{rows}, {cols}] {form:?} batch {batch}");
            assert!(bits(&ya) == bits(&yb), "{what}: DF11 differs from the twin");
            check_against_reference(&ya, &xh, wm, rows, cols, &what);
        }
    }
    g.check_status().unwrap();
}

#[test]
fn tensor_core_products_agree_with_the_twin_and_the_reference() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // Rows aligned to the packed form's 2048-element chunks (base 0, columns a multiple of 2048).
    let aligned = [(16, 4096), (8, 2048)];
    // 13 and 5 rows (a partial row group), 768 columns (one partial chunk), 2048-column rows
    // starting mid-chunk (base 9472), 5120 columns (two and a half chunks).
    let unaligned = [(13, 256), (8, 768), (24, 2048), (5, 5120)];
    // Members not on a 256-element boundary (after a 40-element one): decoded for the twin.
    let off_boundary = [(1, 40), (9, 512), (3, 1280)];
    for form in [ExponentForm::Packed, ExponentForm::Huffman] {
        for shapes in [&aligned[..], &unaligned[..], &off_boundary[..]] {
            check_members(shapes, form, &mut rng, &device);
        }
    }
}

#[test]
fn tensor_core_products_with_many_escapes_agree_with_the_twin() {
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // ~6% of the weights scaled down by 2^-8..2^-19: a lane often has more than the 8 escapes it
    // fetches at once; 2304-column rows start mid-chunk (escapes counted across two chunks).
    let (rows, cols) = (21, 2304);
    let mut w = synth::normal_bf16(rows * cols, 0.02, rng.gen());
    for v in &mut w {
        if rng.gen_bool(0.06) {
            *v = bf16::from_f32(v.to_f32() * (-(rng.gen_range(8..20) as f32)).exp2());
        }
    }
    let enc = encode_unit(&[bytemuck::cast_slice(&w)]).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let names = vec!["escapes.weight".to_string()];
    let placement = UnitPlacement {
        options: fused(ExponentForm::Packed),
        ..Default::default()
    };
    let g = Df11Group::new("escapes", names, &t, layout, &device, &placement).unwrap();
    assert_eq!(g.is_packed(), device.is_cuda(), "the unit should pack");
    let fused = Df11Linear::new(g.clone(), 0, rows, cols, None, DType::BF16).unwrap();
    let twin = fused.clone().decoded().unwrap();
    for batch in BATCHES {
        let (xh, x) = random_x(&mut rng, batch, cols, &device);
        let (ya, yb) = (fused.forward(&x).unwrap(), twin.forward(&x).unwrap());
        let what = format!("many escapes, batch {batch}");
        assert!(bits(&ya) == bits(&yb), "{what}: DF11 differs from the twin");
        check_against_reference(&ya, &xh, &w, rows, cols, &what);
    }
    g.check_status().unwrap();
}

#[test]
fn tiled_members_decode_and_agree_with_the_twin_and_the_reference() {
    // Every tensor-core shape tiled (the default tiles whole 2048-column chunks only).
    let options = fused_tiled(ExponentForm::Packed, TileMembers::All);
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // Tiled: whole chunks, a partial chunk (768, 5120, 3840 columns), a member starting
    // mid-chunk (after 8 x 768 = 6144 elements); not tiled: 13 rows between them.
    let shapes = [
        (16, 4096),
        (8, 768),
        (13, 256),
        (24, 5120),
        (16, 3840),
        (8, 2048),
    ];
    let tileable = [true, true, false, true, true, true];
    let (w, g) = unit_of_shaped(&shapes, rng.gen(), &device, options, true);
    let mut at = 0;
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let wm = &w[at..at + rows * cols];
        let want =
            (device.is_cuda() && tileable[i]).then_some(df11_candle::TileOrder { rows, cols });
        assert_eq!(g.tile_order(i), want, "member {i} [{rows}, {cols}]");
        // Decode: the whole member, and ranges of rows and of elements that cut row groups.
        let got: Vec<bf16> = g
            .decode_elements(at..at + rows * cols)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(got == wm, "member {i}: decode differs");
        for _ in 0..6 {
            let a = rng.gen_range(0..rows * cols);
            let b = rng.gen_range(a..=rows * cols);
            let got: Vec<bf16> = g
                .decode_elements(at + a..at + b)
                .unwrap()
                .to_vec1()
                .unwrap();
            assert!(got == wm[a..b], "member {i}: elements {a}..{b} differ");
        }
        at += rows * cols;
        let fused = Df11Linear::new(g.clone(), i, rows, cols, None, DType::BF16).unwrap();
        let twin = fused.clone().decoded().unwrap();
        for batch in BATCHES {
            let (xh, x) = random_x(&mut rng, batch, cols, &device);
            let (ya, yb) = (fused.forward(&x).unwrap(), twin.forward(&x).unwrap());
            let what = format!("tiled member {i} [{rows}, {cols}] batch {batch}");
            assert!(bits(&ya) == bits(&yb), "{what}: DF11 differs from the twin");
            check_against_reference(&ya, &xh, wm, rows, cols, &what);
        }
    }
    // The whole unit decodes to the original (every member back in row order).
    let all: Vec<bf16> = g.decode().unwrap().to_vec1().unwrap();
    assert!(all == w, "whole-unit decode differs");
    g.check_status().unwrap();
}

/// A `[rows, 2048]` member (rows % 8 == 0) whose every tile-order chunk (row group `G`, sub-step
/// `m`: 2048 consecutive elements when tiled) has `escaped` (drawn per chunk) escaped weights: the
/// other weights take 7 exponents (the member's table), the escaped ones 20 rarer ones. With 200 to
/// 255 a chunk's escapes pass the streaming kernel's 256-byte window; with 40 to 120 they fit it
/// but some lanes have more than the 8 escapes a lane holds at once (both: its slow path).
#[cfg(feature = "cuda")]
fn escape_heavy(
    rows: usize,
    escaped: std::ops::RangeInclusive<usize>,
    rng: &mut impl Rng,
) -> Vec<bf16> {
    let cols = 2048;
    let mut w = vec![bf16::ZERO; rows * cols];
    for group in 0..rows / 8 {
        for m in 0..8 {
            let mut order: Vec<usize> = (0..2048).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.gen_range(0..=i));
            }
            let escaped = rng.gen_range(escaped.clone());
            for (n, &p) in order.iter().enumerate() {
                // Position p of the chunk: pass i, lane (g, t), element e of the 8-group.
                let (i, g, t, e) = (p >> 8, (p >> 5) & 7, (p >> 3) & 3, p & 7);
                let (row, col) = (8 * group + g, 8 * (4 * m + t) + 256 * i + e);
                let exponent: u16 = if n < escaped {
                    rng.gen_range(100..120)
                } else {
                    rng.gen_range(120..127)
                };
                let bits =
                    (rng.gen_range(0..2u16) << 15) | (exponent << 7) | rng.gen_range(0..128u16);
                w[row * cols + col] = bf16::from_bits(bits);
            }
        }
    }
    w
}

/// The streaming and panel kernels (`kernels/df11_tc_stream.cu`, `DF11_TC_STREAM`;
/// `kernels/df11_tc_panel.cu`, `DF11_TC_PANEL`): DF11 over tiled members on 2048-element
/// boundaries and the twin over any matrix, against the other kernels.
#[cfg(feature = "cuda")]
#[test]
fn streamed_members_agree_with_the_other_kernel_and_the_twin() {
    use df11_candle::WgUse;
    let options = fused_tiled(ExponentForm::Packed, TileMembers::Chunked);
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // Tiled members on 2048-element boundaries with 2048-multiple rows: the streaming kernel takes
    // them. 40 x 6144 and 136 x 4096 run several tiles per CTA and a last tile with missing row
    // groups; 8 x 65536 at 33 rows and more has more partial sums than the streaming kernels' shared
    // memory holds (the other kernels take it); the two 64 x 2048 members are escape_heavy (beyond
    // the window, beyond 8 a lane).
    let shapes = [
        (8, 2048),
        (40, 6144),
        (136, 4096),
        (8, 65536),
        (64, 2048),
        (64, 2048),
    ];
    let mut members = Vec::new();
    for &(rows, cols) in &shapes[..4] {
        members.push(synth::normal_bf16(rows * cols, 0.02, rng.gen()));
    }
    members.push(escape_heavy(shapes[4].0, 200..=255, &mut rng));
    members.push(escape_heavy(shapes[5].0, 40..=120, &mut rng));
    let bytes: Vec<&[u8]> = members.iter().map(|w| bytemuck::cast_slice(w)).collect();
    let enc = encode_unit(&bytes).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let names = (0..shapes.len()).map(|i| format!("s{i}.weight")).collect();
    let given: Vec<Option<(usize, usize)>> = shapes.iter().copied().map(Some).collect();
    let placement = UnitPlacement {
        options,
        offloaded: false,
        shapes: given,
    };
    let g = Df11Group::new("streamed", names, &t, layout, &device, &placement).unwrap();
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        assert_eq!(
            g.tile_order(i),
            Some(df11_candle::TileOrder { rows, cols }),
            "member {i}"
        );
        let fused = Df11Linear::new(g.clone(), i, rows, cols, None, DType::BF16).unwrap();
        let twin = fused.clone().decoded().unwrap();
        for batch in BATCHES {
            let (xh, x) = random_x(&mut rng, batch, cols, &device);
            let mut outs = Vec::new();
            let mut run = |o: Df11Options| {
                outs.push(bits(&fused.clone().with_options(o).forward(&x).unwrap()));
                outs.push(bits(&twin.clone().with_options(o).forward(&x).unwrap()));
            };
            // The panel and warpgroup kernels where the build has them.
            let experimental = cfg!(feature = "experimental-kernels");
            let panels: &[bool] = if experimental {
                &[false, true]
            } else {
                &[false]
            };
            for &panel in panels {
                for streaming in [true, false] {
                    run(Df11Options {
                        panel,
                        streaming,
                        warpgroup: WgUse::Off,
                        ..options
                    });
                }
            }
            // The warpgroup kernels at every batch (Hopper sm_90a builds; elsewhere the same
            // kernels as above run again).
            if experimental {
                run(Df11Options {
                    panel: false,
                    streaming: true,
                    warpgroup: WgUse::All,
                    ..options
                });
            }
            let what = format!("streamed member {i} [{rows}, {cols}] batch {batch}");
            let names = ["DF11 streaming", "twin streaming", "DF11", "twin"];
            let names = names
                .iter()
                .map(|n| format!("{n}, panel off"))
                .chain(names.iter().map(|n| format!("{n}, panel on")))
                .chain(["DF11 warpgroup".to_string(), "twin warpgroup".to_string()]);
            for (o, name) in outs.iter().zip(names).skip(1) {
                assert!(*o == outs[0], "{what}: {name} differs from DF11 streaming");
            }
            check_against_reference(
                &fused.forward(&x).unwrap(),
                &xh,
                &members[i],
                rows,
                cols,
                &what,
            );
        }
    }
    g.check_status().unwrap();
}

/// Stacked linear layers (`Df11Linear::stacked`, q/k/v and gate/up): members consecutive in one
/// unit (one slice: on CUDA, tiled, one streaming launch over all of them) and members that are
/// not (multiplied one by one) give, with a stacked bias, what the dense stacked layer gives,
/// bit for bit, and on CUDA what the members give one by one.
#[test]
fn stacked_members_agree_with_the_dense_stack_and_the_members() {
    let options = fused_tiled(ExponentForm::Packed, TileMembers::Chunked);
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    // q/k/v-like members of 4096 columns (the middle one 8 rows), then one of 2048 columns.
    let shapes = [(40, 4096), (8, 4096), (24, 4096), (16, 2048)];
    let (w, g) = common::products::unit_of_shaped(&shapes, rng.gen(), &device, options, true);
    let cols = 4096;
    let member_w = |i: usize| {
        let at: usize = shapes[..i].iter().map(|(r, c)| r * c).sum();
        w[at..at + shapes[i].0 * shapes[i].1].to_vec()
    };
    for picked in [vec![0usize, 1, 2], vec![0, 2], vec![1, 2]] {
        let rows: usize = picked.iter().map(|&i| shapes[i].0).sum();
        let bias: Vec<bf16> = (0..rows)
            .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)))
            .collect();
        let bias_t = Tensor::from_vec(bias.clone(), rows, &device).unwrap();
        let members = picked
            .iter()
            .map(|&i| (g.clone(), i, shapes[i].0))
            .collect();
        let stacked =
            Df11Linear::stacked(members, cols, Some(bias_t.clone()), DType::BF16).unwrap();
        assert_eq!(stacked.shape(), (rows, cols));
        let dense_w: Vec<bf16> = picked.iter().flat_map(|&i| member_w(i)).collect();
        let dense = df11_candle::Linear::dense(
            Tensor::from_vec(dense_w, (rows, cols), &device).unwrap(),
            Some(bias_t.clone()),
            options,
        );
        let one_by_one: Vec<Df11Linear> = picked
            .iter()
            .map(|&i| Df11Linear::new(g.clone(), i, shapes[i].0, cols, None, DType::BF16).unwrap())
            .collect();
        for batch in BATCHES {
            let (_, x) = random_x(&mut rng, batch, cols, &device);
            let what = format!("members {picked:?} batch {batch}");
            let ys = stacked.forward(&x).unwrap();
            assert!(
                bits(&ys) == bits(&dense.forward(&x).unwrap()),
                "{what}: stacked DF11 differs from the dense stack"
            );
            if device.is_cuda() {
                let parts: Vec<Tensor> =
                    one_by_one.iter().map(|l| l.forward(&x).unwrap()).collect();
                let each = Tensor::cat(&parts, 1)
                    .unwrap()
                    .broadcast_add(&bias_t)
                    .unwrap();
                assert!(
                    bits(&ys) == bits(&each),
                    "{what}: stacked differs from the members one by one"
                );
            }
        }
    }
    g.check_status().unwrap();
}

/// The decode of whole tiled members (`df11_decode_packed_pieces`: whole members tiled in
/// 2048-column chunks, each on a 16384-element boundary, as a prompt's and a large batch's
/// products decode them) gives the original weights: each member, stacked neighbours (a range
/// over several members, each with its own table), the whole unit, and members whose escapes
/// pass a lane's 8 held ones (40 to 120 a chunk) and the 256-byte window (200 to 255). Ranges that
/// cut members take the general kernel; they are checked too.
#[cfg(feature = "cuda")]
#[test]
fn whole_tiled_members_decode_to_the_original() {
    let options = fused_tiled(ExponentForm::Packed, TileMembers::Chunked);
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    let shapes = [(16, 2048), (8, 4096), (24, 2048), (16, 2048), (40, 6144)];
    let members = [
        synth::normal_bf16(16 * 2048, 0.02, rng.gen()),
        synth::normal_bf16(8 * 4096, 0.05, rng.gen()),
        escape_heavy(24, 40..=120, &mut rng),
        escape_heavy(16, 200..=255, &mut rng),
        synth::normal_bf16(40 * 6144, 0.02, rng.gen()),
    ];
    let bytes: Vec<&[u8]> = members.iter().map(|w| bytemuck::cast_slice(w)).collect();
    let enc = encode_unit(&bytes).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let names = (0..shapes.len()).map(|i| format!("p{i}.weight")).collect();
    let placement = UnitPlacement {
        options,
        offloaded: false,
        shapes: shapes.iter().copied().map(Some).collect(),
    };
    let g = Df11Group::new("pieces", names, &t, layout, &device, &placement).unwrap();
    let w: Vec<bf16> = members.concat();
    let starts: Vec<usize> = shapes
        .iter()
        .scan(0, |at, &(r, c)| {
            let s = *at;
            *at += r * c;
            Some(s)
        })
        .collect();
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        assert_eq!(g.tile_order(i), Some(df11_candle::TileOrder { rows, cols }));
    }
    let decode = |r: std::ops::Range<usize>| -> Vec<bf16> {
        g.decode_elements(r).unwrap().to_vec1().unwrap()
    };
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let r = starts[i]..starts[i] + rows * cols;
        assert!(
            decode(r.clone()) == w[r.clone()],
            "member {i}: decode differs"
        );
    }
    for (a, b) in [(0, 1), (1, 3), (2, 4), (0, 4)] {
        let r = starts[a]..starts[b] + shapes[b].0 * shapes[b].1;
        assert!(
            decode(r.clone()) == w[r],
            "members {a}..={b}: decode differs"
        );
    }
    for _ in 0..8 {
        let a = rng.gen_range(0..w.len());
        let b = rng.gen_range(a..=w.len());
        assert!(decode(a..b) == w[a..b], "elements {a}..{b}: decode differs");
    }
    let all: Vec<bf16> = g.decode().unwrap().to_vec1().unwrap();
    assert!(all == w, "whole-unit decode differs");
    g.check_status().unwrap();
}

/// The warp-specialized kernels (`kernels/df11_ws_gemm.cu`, `DF11_TC_WS`, Hopper `sm_90a`
/// builds; elsewhere the streaming kernels run and the test checks them again): DF11 and its twin
/// bit for bit at 9-64 rows, close to the reference, over tiled members of widths in whole chunks:
/// rows that leave a last 128-row tile part empty (136, 40), several tiles and splits of K
/// (256 x 6144), and escape-heavy members (beyond the held escapes of a lane).
#[cfg(feature = "experimental-kernels")]
#[test]
fn warp_specialized_products_keep_df11_and_its_twin_alike() {
    use df11_candle::WsUse;
    let options = Df11Options {
        warp_specialized: WsUse::All,
        ..fused_tiled(ExponentForm::Packed, TileMembers::Chunked)
    };
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    let shapes = [(136, 4096), (256, 6144), (40, 2048), (64, 2048), (64, 2048)];
    let mut members = Vec::new();
    for &(rows, cols) in &shapes[..3] {
        members.push(synth::normal_bf16(rows * cols, 0.02, rng.gen()));
    }
    members.push(escape_heavy(shapes[3].0, 200..=255, &mut rng));
    members.push(escape_heavy(shapes[4].0, 40..=120, &mut rng));
    let bytes: Vec<&[u8]> = members.iter().map(|w| bytemuck::cast_slice(w)).collect();
    let enc = encode_unit(&bytes).unwrap();
    let t = enc.tensors();
    let layout = UnitLayout::validate(&t).unwrap();
    let names = (0..shapes.len()).map(|i| format!("w{i}.weight")).collect();
    let placement = UnitPlacement {
        options,
        offloaded: false,
        shapes: shapes.iter().copied().map(Some).collect(),
    };
    let g = Df11Group::new("ws", names, &t, layout, &device, &placement).unwrap();
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let fused = Df11Linear::new(g.clone(), i, rows, cols, None, DType::BF16)
            .unwrap()
            .with_options(options);
        let twin = fused.clone().decoded().unwrap().with_options(options);
        for batch in [9, 16, 17, 24, 33, 48, 64] {
            let (xh, x) = random_x(&mut rng, batch, cols, &device);
            let what = format!("member {i} [{rows}, {cols}] batch {batch}");
            let d = fused.forward(&x).unwrap();
            let b = twin.forward(&x).unwrap();
            assert!(bits(&d) == bits(&b), "{what}: DF11 differs from its twin");
            check_against_reference(&d, &xh, &members[i], rows, cols, &what);
        }
    }
    g.check_status().unwrap();
}

/// Stacked members under the warp-specialized kernels (`DF11_TC_WS=all`): where the members'
/// tables change on the kernels' 128-row tiles they read the stack, elsewhere the stack is decoded
/// for the twin; either way the stacked DF11 layer equals the dense BF16 stack with the same
/// options bit for bit, at 9-64 rows.
#[cfg(feature = "experimental-kernels")]
#[test]
fn warp_specialized_stacks_keep_df11_and_the_dense_stack_alike() {
    use df11_candle::WsUse;
    let options = Df11Options {
        warp_specialized: WsUse::All,
        ..fused_tiled(ExponentForm::Packed, TileMembers::Chunked)
    };
    let device = common::device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed());
    let shapes = [(40, 4096), (128, 4096), (256, 4096)];
    let (w, g) = common::products::unit_of_shaped(&shapes, rng.gen(), &device, options, true);
    let cols = 4096;
    let member_w = |i: usize| {
        let at: usize = shapes[..i].iter().map(|(r, c)| r * c).sum();
        w[at..at + shapes[i].0 * shapes[i].1].to_vec()
    };
    // [1, 2]: the second member begins at row 128, a tile boundary (the kernel reads the stack);
    // [0, 1] and [0, 1, 2]: at row 40 (decoded for the twin).
    for picked in [vec![1usize, 2], vec![0, 1], vec![0, 1, 2]] {
        let rows: usize = picked.iter().map(|&i| shapes[i].0).sum();
        let members = picked
            .iter()
            .map(|&i| (g.clone(), i, shapes[i].0))
            .collect();
        let stacked = Df11Linear::stacked(members, cols, None, DType::BF16)
            .unwrap()
            .with_options(options);
        let dense_w: Vec<bf16> = picked.iter().flat_map(|&i| member_w(i)).collect();
        let dense = df11_candle::Linear::dense(
            Tensor::from_vec(dense_w, (rows, cols), &device).unwrap(),
            None,
            options,
        );
        for batch in [9, 17, 33, 64] {
            let (_, x) = random_x(&mut rng, batch, cols, &device);
            assert!(
                bits(&stacked.forward(&x).unwrap()) == bits(&dense.forward(&x).unwrap()),
                "members {picked:?} batch {batch}: stacked DF11 differs from the dense stack"
            );
        }
    }
    g.check_status().unwrap();
}
