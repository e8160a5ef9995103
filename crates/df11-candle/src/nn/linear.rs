//! `Df11Linear` and `Df11Embedding`: candle modules whose weights stay DF11-compressed on the
//! device and are decoded just before use.
//!
//! Each module decodes only the blocks that hold its own matrix (a unit holds 4-7 matrices; at
//! most two partial blocks are decoded twice), multiplies through `candle_nn::Linear` (so the
//! result is bit-identical to a `Linear` holding the original BF16 weight) and drops the decoded
//! weight at once. [`Df11Linear::decoded`] keeps the weight decoded instead: the speed and
//! correctness reference.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{DType, Module, Tensor};

use crate::error::{Df11Error, Result};
use crate::nn::group::Df11Group;
use crate::options::Df11Options;

/// One member matrix of a unit: where it lies in the unit.
#[derive(Debug, Clone)]
struct MemberSlice {
    group: Arc<Df11Group>,
    /// Element range of the member in the unit.
    elements: Range<usize>,
    shape: (usize, usize),
}

impl MemberSlice {
    fn new(group: Arc<Df11Group>, member: usize, shape: (usize, usize)) -> Result<Self> {
        let ranges = group.layout().member_ranges();
        let elements = ranges.get(member).cloned().ok_or_else(|| {
            Df11Error::Usage(format!(
                "unit `{}` has {} members, asked for member {member}",
                group.name(),
                ranges.len()
            ))
        })?;
        if elements.len() != shape.0 * shape.1 {
            return Err(Df11Error::Usage(format!(
                "`{}`: the unit stores {} elements, shape {:?} needs {}",
                group.members().get(member).map_or("?", |s| s.as_str()),
                elements.len(),
                shape,
                shape.0 * shape.1
            )));
        }
        Ok(Self {
            group,
            elements,
            shape,
        })
    }

    /// Decodes the member (only the blocks that hold it): a BF16 `[rows, cols]` tensor.
    fn decode(&self) -> Result<Tensor> {
        Ok(self
            .group
            .decode_elements(self.elements.clone())?
            .reshape(self.shape)?)
    }
}

/// How a module holds its weight.
#[derive(Debug, Clone)]
enum Weight {
    /// Compressed; decoded at every forward. Stacked members consecutive in one unit are one
    /// slice over all of them.
    Compressed(MemberSlice),
    /// Members stacked by rows that are not consecutive in one unit: multiplied (or decoded) one
    /// by one and concatenated.
    Stacked(Vec<MemberSlice>),
    /// Decoded once (reference mode), already in the compute dtype.
    Decoded(Tensor),
}

/// A linear layer `y = x Wᵀ + b` whose `W` is a member of a DF11 unit.
#[derive(Debug, Clone)]
pub struct Df11Linear {
    weight: Weight,
    bias: Option<Tensor>,
    dtype: DType,
    /// The unit's options (kept when the weight is decoded at load: the products plan by them).
    options: Df11Options,
}

impl Df11Linear {
    /// The linear layer of member `member` (index in the unit's pattern order) with weight
    /// shape `(out_features, in_features)`, computing in `dtype` (the weight is decoded to BF16
    /// and converted, exactly as a BF16 checkpoint loaded in `dtype` would be).
    pub fn new(
        group: Arc<Df11Group>,
        member: usize,
        out_features: usize,
        in_features: usize,
        bias: Option<Tensor>,
        dtype: DType,
    ) -> Result<Self> {
        let options = *group.options();
        let slice = MemberSlice::new(group, member, (out_features, in_features))?;
        Ok(Self {
            weight: Weight::Compressed(slice),
            bias: bias.map(|b| b.to_dtype(dtype)).transpose()?,
            dtype,
            options,
        })
    }

    /// One linear layer over several members stacked by rows (`[q; k; v]`, `[gate; up]`):
    /// `members[i]` is `(unit, member index, out_features)`, every one `in_features` wide; the
    /// output's columns are theirs in order, `bias` the stacked bias. Members consecutive in one
    /// unit are one slice (on CUDA the streaming tensor-core kernel multiplies tiled ones in one
    /// launch); others are multiplied one by one. The result is the same bits either way: each
    /// output depends only on its own row of weights.
    pub fn stacked(
        members: Vec<(Arc<Df11Group>, usize, usize)>,
        in_features: usize,
        bias: Option<Tensor>,
        dtype: DType,
    ) -> Result<Self> {
        if members.is_empty() {
            return Err(Df11Error::Usage(
                "a stacked linear layer needs at least one member".into(),
            ));
        }
        let options = *members[0].0.options();
        let slices = members
            .iter()
            .map(|(g, m, out)| MemberSlice::new(g.clone(), *m, (*out, in_features)))
            .collect::<Result<Vec<_>>>()?;
        let consecutive = slices.windows(2).all(|w| {
            Arc::ptr_eq(&w[0].group, &w[1].group) && w[0].elements.end == w[1].elements.start
        });
        let weight = if consecutive {
            let rows = slices.iter().map(|s| s.shape.0).sum();
            let elements = slices[0].elements.start..slices[slices.len() - 1].elements.end;
            if slices.len() > 1 {
                slices[0].group.add_stack(elements.clone());
            }
            Weight::Compressed(MemberSlice {
                group: slices[0].group.clone(),
                elements,
                shape: (rows, in_features),
            })
        } else {
            Weight::Stacked(slices)
        };
        Ok(Self {
            weight,
            bias: bias.map(|b| b.to_dtype(dtype)).transpose()?,
            dtype,
            options,
        })
    }

    /// The same layer running by `options` (its unit's by default). The run-time choices apply
    /// (matmul path, fused kernel families, PDL); the layout fields (exponent form, tiling) stay
    /// as the unit was loaded, so give the options it was loaded with but those. A BF16 twin
    /// given the same options gives the same bits.
    pub fn with_options(self, options: Df11Options) -> Self {
        Self { options, ..self }
    }

    /// The options its products plan by.
    pub fn options(&self) -> &Df11Options {
        &self.options
    }

    /// The same layer with its weight decoded once and kept (BF16-sized memory): the reference
    /// for speed and correctness.
    pub fn decoded(self) -> Result<Self> {
        let w = self.weight()?;
        Ok(Self {
            weight: Weight::Decoded(w),
            ..self
        })
    }

    /// Whether the weight is kept compressed.
    pub fn is_compressed(&self) -> bool {
        !matches!(self.weight, Weight::Decoded(_))
    }

    /// The weight `[out, in]` in the compute dtype (decoded now if compressed).
    pub fn weight(&self) -> Result<Tensor> {
        match &self.weight {
            Weight::Compressed(s) => Ok(s.decode()?.to_dtype(self.dtype)?),
            Weight::Stacked(slices) => {
                let parts = slices
                    .iter()
                    .map(MemberSlice::decode)
                    .collect::<Result<Vec<_>>>()?;
                Ok(Tensor::cat(&parts, 0)?.to_dtype(self.dtype)?)
            }
            Weight::Decoded(w) => Ok(w.clone()),
        }
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// The unit the weight is a member of, while it is kept compressed.
    pub fn group(&self) -> Option<&Arc<Df11Group>> {
        match &self.weight {
            Weight::Compressed(s) => Some(&s.group),
            Weight::Stacked(slices) => Some(&slices[0].group),
            Weight::Decoded(_) => None,
        }
    }

    /// `(out_features, in_features)`.
    pub fn shape(&self) -> (usize, usize) {
        match &self.weight {
            Weight::Compressed(s) => s.shape,
            Weight::Stacked(slices) => (slices.iter().map(|s| s.shape.0).sum(), slices[0].shape.1),
            Weight::Decoded(w) => w.dims2().unwrap_or((0, 0)),
        }
    }
}

impl Module for Df11Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        // Small batches on CUDA: the fused kernel (compressed) or its BF16 twin (decoded), which
        // sum in the same order; see `crate::cuda::matmul` for when.
        #[cfg(feature = "cuda")]
        match &self.weight {
            Weight::Compressed(s) => {
                let (rows, cols) = s.shape;
                let base = s.elements.start;
                if let Some(kernel) = crate::cuda::matmul::fused_kernel(x, cols, &self.options) {
                    return crate::cuda::launch::apply_rows(
                        x,
                        cols,
                        rows,
                        self.bias.as_ref(),
                        kernel.limit_rows(),
                        |x2| {
                            s.group
                                .fused_matmul(x2, base, rows, cols, kernel, &self.options)
                                .map_err(candle_core::Error::wrap)
                        },
                    );
                }
            }
            Weight::Stacked(slices) => {
                let cols = slices[0].shape.1;
                if let Some(kernel) = crate::cuda::matmul::fused_kernel(x, cols, &self.options) {
                    let parts = slices
                        .iter()
                        .map(|s| {
                            let (rows, base) = (s.shape.0, s.elements.start);
                            crate::cuda::launch::apply_rows(
                                x,
                                cols,
                                rows,
                                None,
                                kernel.limit_rows(),
                                |x2| {
                                    s.group
                                        .fused_matmul(x2, base, rows, cols, kernel, &self.options)
                                        .map_err(candle_core::Error::wrap)
                                },
                            )
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    let y = Tensor::cat(&parts, parts[0].rank() - 1)?;
                    return match &self.bias {
                        Some(b) => y.broadcast_add(b),
                        None => Ok(y),
                    };
                }
            }
            Weight::Decoded(w) => {
                if let Some(y) =
                    crate::cuda::dense::twin_linear(w, self.bias.as_ref(), x, &self.options)?
                {
                    return Ok(y);
                }
            }
        }
        #[cfg(feature = "cuda")]
        if let Some(y) = self.forward_decoded_ahead(x)? {
            return Ok(y);
        }
        let w = self.weight().map_err(candle_core::Error::wrap)?;
        candle_nn::Linear::new(w, self.bias.clone()).forward(x)
    }
}

impl Df11Linear {
    /// The product through the weight decoded ahead on a second stream, if it was
    /// (`Df11Group::decode_ahead`): the same decoded values and the same cuBLAS product as the
    /// path below, so the same result bit for bit.
    #[cfg(feature = "cuda")]
    fn forward_decoded_ahead(&self, x: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let Weight::Compressed(s) = &self.weight else {
            return Ok(None);
        };
        let Some((flat, side)) = s
            .group
            .take_ahead(&s.elements)
            .map_err(candle_core::Error::wrap)?
        else {
            return Ok(None);
        };
        let y = {
            let w = flat.reshape(s.shape)?.to_dtype(self.dtype)?;
            candle_nn::Linear::new(w, self.bias.clone()).forward(x)?
        };
        // `flat`'s buffer is freed on the side stream: after the work queued so far here.
        if let candle_core::Device::Cuda(own) = x.device() {
            crate::cuda::streams::wait_for(&side, own)?;
        }
        drop(flat);
        Ok(Some(y))
    }
}

/// An embedding table stored as a DF11 unit (or one member of one).
#[derive(Debug, Clone)]
pub struct Df11Embedding {
    weight: Weight,
    dtype: DType,
    hidden: usize,
    chunk_elements: usize,
    /// Lookups take the rows kernel where it runs ([`Df11Options::embedding_rows`]).
    rows_kernel: bool,
}

/// Up to this many distinct ids, each row is decoded on its own; above, the table is decoded a
/// chunk of rows at a time and the rows the ids need are kept (where no rows kernel runs).
const ROW_DECODE_LIMIT: usize = 16;
/// Elements of the table decoded at once above [`ROW_DECODE_LIMIT`] (64 MB of BF16): the
/// transient memory of an embedding, instead of the whole table.
const CHUNK_ELEMENTS: usize = 1 << 25;

impl Df11Embedding {
    /// The embedding of member `member` with table shape `(vocab, hidden)`, output in `dtype`.
    pub fn new(
        group: Arc<Df11Group>,
        member: usize,
        vocab: usize,
        hidden: usize,
        dtype: DType,
    ) -> Result<Self> {
        let rows_kernel = group.options().embedding_rows;
        let slice = MemberSlice::new(group, member, (vocab, hidden))?;
        Ok(Self {
            weight: Weight::Compressed(slice),
            dtype,
            hidden,
            chunk_elements: CHUNK_ELEMENTS,
            rows_kernel,
        })
    }

    /// The same table decoded `elements` at a time for many ids (tests use small chunks).
    #[doc(hidden)]
    pub fn with_chunk_elements(self, elements: usize) -> Self {
        Self {
            chunk_elements: elements.max(1),
            ..self
        }
    }

    /// The same table decoded once and kept.
    pub fn decoded(self) -> Result<Self> {
        let w = self.table()?;
        Ok(Self {
            weight: Weight::Decoded(w),
            ..self
        })
    }

    /// The whole table `[vocab, hidden]` in the output dtype (decoded now if compressed).
    pub fn table(&self) -> Result<Tensor> {
        match &self.weight {
            Weight::Compressed(s) => Ok(s.decode()?.to_dtype(self.dtype)?),
            // An embedding is made of one member (`Df11Embedding::new`).
            Weight::Stacked(_) => Err(Df11Error::Usage("an embedding is one member".into())),
            Weight::Decoded(w) => Ok(w.clone()),
        }
    }

    /// Decodes only the rows `ids` need (`ids` on any device; the result on the table's): on
    /// CUDA with the packed form, every id's row (repeats too) in the ids' order by one kernel
    /// launch ([`Df11Group::decode_rows`]); on the CPU each distinct row's elements (rows in
    /// parallel); elsewhere each distinct row's elements when the ids are few, else the table a
    /// chunk of rows at a time, keeping the rows of the chunk that are asked for. The table is
    /// never decoded whole.
    fn rows(&self, s: &MemberSlice, ids: &Tensor) -> Result<Tensor> {
        let flat = ids.flatten_all()?.to_dtype(DType::U32)?.to_vec1::<u32>()?;
        let (vocab, hidden) = (s.shape.0, self.hidden);
        if let Some(&id) = flat.iter().max().filter(|&&id| id as usize >= vocab) {
            return Err(Df11Error::Usage(format!(
                "token id {id} is outside the embedding's {vocab} rows"
            )));
        }
        let row = |id: usize| s.elements.start + id * hidden;
        let mut out_shape = ids.dims().to_vec();
        out_shape.push(hidden);
        if self.rows_kernel {
            let starts: Vec<usize> = flat.iter().map(|&id| row(id as usize)).collect();
            if let Some(t) = s.group.decode_rows(&starts, hidden)? {
                return Ok(t.reshape(out_shape)?.to_dtype(self.dtype)?);
            }
        }
        let mut unique = flat.clone();
        unique.sort_unstable();
        unique.dedup();
        let mut pieces = Vec::new();
        // On the host (an embedding served from host memory while the model runs on a GPU)
        // each distinct row is decoded on its own, on all cores: the blocks a row spans cost
        // far less than the chunks of the table a prompt's ids fall in.
        if s.group.device().is_cpu() && unique.len() > 1 {
            use rayon::prelude::*;
            pieces = unique
                .par_iter()
                .map(|&id| {
                    let id = id as usize;
                    s.group.decode_elements(row(id)..row(id) + hidden)
                })
                .collect::<Result<Vec<_>>>()?;
        } else if unique.len() <= ROW_DECODE_LIMIT {
            for &id in &unique {
                let id = id as usize;
                pieces.push(s.group.decode_elements(row(id)..row(id) + hidden)?);
            }
        } else {
            let chunk_rows = (self.chunk_elements / hidden.max(1)).max(1);
            let mut rest = unique.as_slice();
            while let Some(&first) = rest.first() {
                let c0 = first as usize / chunk_rows * chunk_rows;
                let c1 = (c0 + chunk_rows).min(vocab);
                let n = rest.partition_point(|&id| (id as usize) < c1);
                let chunk = s.group.decode_elements(row(c0)..row(c1))?;
                let chunk = chunk.reshape((c1 - c0, hidden))?;
                let local: Vec<u32> = rest[..n].iter().map(|&id| id - c0 as u32).collect();
                let local = Tensor::from_vec(local, n, chunk.device())?;
                pieces.push(chunk.index_select(&local, 0)?.flatten_all()?);
                rest = &rest[n..];
            }
        }
        let table = Tensor::cat(&pieces, 0)?
            .reshape((unique.len(), hidden))?
            .to_dtype(self.dtype)?;
        let index: Vec<u32> = flat
            .iter()
            .map(|id| unique.binary_search(id).expect("present") as u32)
            .collect();
        let index = Tensor::from_vec(index, flat.len(), table.device())?;
        Ok(table.index_select(&index, 0)?.reshape(out_shape)?)
    }
}

impl Module for Df11Embedding {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        if let Weight::Compressed(s) = &self.weight {
            return self.rows(s, ids).map_err(candle_core::Error::wrap);
        }
        let table = self.table().map_err(candle_core::Error::wrap)?;
        let ids = ids.to_device(table.device())?;
        candle_nn::Embedding::new(table, self.hidden).forward(&ids)
    }
}
