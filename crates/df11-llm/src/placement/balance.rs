//! The auto split: contiguous layer ranges that leave every device the largest share of its
//! free memory.

use super::ModelSizes;

/// Weight bytes of each segment when segment `d` takes `counts[d]` layers in order.
pub(super) fn segment_loads(sizes: &ModelSizes, tied: bool, counts: &[usize]) -> Vec<u64> {
    let n = counts.len();
    let mut start = 0;
    let mut loads: Vec<u64> = counts
        .iter()
        .map(|&c| {
            let bytes = sizes.layers[start..start + c].iter().sum();
            start += c;
            bytes
        })
        .collect();
    loads[0] += sizes.embedding;
    loads[n - 1] += sizes.head;
    if tied && n > 1 {
        loads[n - 1] += sizes.embedding;
    }
    loads
}

/// The contiguous split minimising the largest `load / free` over the devices (dynamic
/// programming over split points: devices and layers are few). Devices with no free memory get
/// no layers where that can be helped.
pub(super) fn balanced_counts(sizes: &ModelSizes, tied: bool, free: &[u64]) -> Vec<usize> {
    let n = free.len();
    let layers = sizes.layers.len();
    let prefix: Vec<u64> = std::iter::once(0)
        .chain(sizes.layers.iter().scan(0u64, |acc, &b| {
            *acc += b;
            Some(*acc)
        }))
        .collect();
    let fill = |d: usize, from: usize, to: usize| -> f64 {
        let mut bytes = prefix[to] - prefix[from];
        if d == 0 {
            bytes += sizes.embedding;
        }
        if d == n - 1 {
            bytes += sizes.head;
            if tied && n > 1 {
                bytes += sizes.embedding;
            }
        }
        match free[d] {
            0 if bytes == 0 => 0.0,
            0 => f64::INFINITY,
            f => bytes as f64 / f as f64,
        }
    };
    // best[d][l]: the smallest worst fill of devices 0..=d running layers 0..l; cut[d][l]: the
    // first layer of device d in that split.
    let mut best = vec![vec![f64::INFINITY; layers + 1]; n];
    let mut cut = vec![vec![0usize; layers + 1]; n];
    for (l, b) in best[0].iter_mut().enumerate() {
        *b = fill(0, 0, l);
    }
    for d in 1..n {
        for l in 0..=layers {
            for k in 0..=l {
                let worst = best[d - 1][k].max(fill(d, k, l));
                // `<=` keeps the latest cut among equals: layers go to earlier devices first.
                if worst <= best[d][l] {
                    best[d][l] = worst;
                    cut[d][l] = k;
                }
            }
        }
    }
    let mut counts = vec![0; n];
    let mut end = layers;
    for d in (1..n).rev() {
        let k = cut[d][end];
        counts[d] = end - k;
        end = k;
    }
    counts[0] = end;
    counts
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{counts, map, sizes};
    use super::super::{LayerSplit, Placement};
    use super::*;

    #[test]
    fn equal_devices_share_layers_evenly_around_embedding_and_head() {
        // 36 layers of 10 units, embedding and head 30 units each: 36 * 10 + 60 = 420, so
        // each of two equal devices should hold about 210.
        let s = sizes(36, 10, 30, 30);
        let p = Placement::plan(&map(2, LayerSplit::Auto), &s, false, &[1000, 1000]).unwrap();
        assert_eq!(counts(&p), vec![18, 18]);
        assert_eq!(p.weight_bytes(&s, false), vec![210, 210]);
        // A tied head on the second device carries a copy of the table.
        let p = Placement::plan(&map(2, LayerSplit::Auto), &s, true, &[1000, 1000]).unwrap();
        assert_eq!(counts(&p), vec![20, 16]);
        assert_eq!(p.weight_bytes(&s, true), vec![230, 220]);
    }

    #[test]
    fn layers_follow_free_memory() {
        let s = sizes(30, 10, 0, 0);
        let p = Placement::plan(&map(2, LayerSplit::Auto), &s, false, &[100, 200]).unwrap();
        assert_eq!(counts(&p), vec![10, 20]);
        let p = Placement::plan(&map(3, LayerSplit::Auto), &s, false, &[100, 0, 200]).unwrap();
        assert_eq!(counts(&p), vec![10, 0, 20]);
        assert_eq!(p.segments()[1].layers, 10..10);
        assert_eq!(p.segment_of(10), 2);
        assert_eq!(p.segment_of(9), 0);
    }

    #[test]
    fn more_devices_than_layers() {
        let s = sizes(2, 10, 1, 1);
        let p = Placement::plan(&map(4, LayerSplit::Auto), &s, false, &[100; 4]).unwrap();
        assert_eq!(counts(&p).iter().sum::<usize>(), 2);
        assert_eq!(p.segments().len(), 4);
    }

    /// The worst `load / free` of a split (0 for an empty device with no memory, infinite for a
    /// loaded one).
    fn worst(sizes: &ModelSizes, tied: bool, free: &[u64], counts: &[usize]) -> f64 {
        segment_loads(sizes, tied, counts)
            .iter()
            .zip(free)
            .map(|(&bytes, &f)| match (bytes, f) {
                (0, 0) => 0.0,
                (_, 0) => f64::INFINITY,
                (b, f) => b as f64 / f as f64,
            })
            .fold(0.0, f64::max)
    }

    /// Every way to cut `layers` layers into `parts` contiguous (possibly empty) ranges.
    fn splits(layers: usize, parts: usize) -> Vec<Vec<usize>> {
        if parts == 1 {
            return vec![vec![layers]];
        }
        (0..=layers)
            .flat_map(|first| {
                splits(layers - first, parts - 1)
                    .into_iter()
                    .map(move |mut rest| {
                        rest.insert(0, first);
                        rest
                    })
            })
            .collect()
    }

    /// On random small models (up to 9 layers over up to 3 devices, devices without memory
    /// included, tied heads or not), no contiguous split has a smaller worst fill than the one
    /// `balanced_counts` picks (brute force over every split).
    #[test]
    fn the_auto_split_is_the_best_contiguous_split() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        for case in 0..500 {
            let devices = 1 + next(3) as usize;
            let layers = next(10) as usize;
            let sizes = ModelSizes {
                embedding: next(50),
                layers: (0..layers).map(|_| 1 + next(100)).collect(),
                head: next(50),
            };
            let tied = next(2) == 1;
            let free: Vec<u64> = (0..devices).map(|_| next(400)).collect();
            let counts = balanced_counts(&sizes, tied, &free);
            assert_eq!(counts.len(), devices, "case {case}");
            assert_eq!(counts.iter().sum::<usize>(), layers, "case {case}");
            let best = splits(layers, devices)
                .iter()
                .map(|c| worst(&sizes, tied, &free, c))
                .fold(f64::INFINITY, f64::min);
            let got = worst(&sizes, tied, &free, &counts);
            assert!(
                got <= best || (got.is_infinite() && best.is_infinite()),
                "case {case}: {counts:?} fills {got}, a split fills {best} ({sizes:?}, {free:?})"
            );
        }
    }
}
