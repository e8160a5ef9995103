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
    /// Compressed; decoded at every forward.
    Compressed(MemberSlice),
    /// Decoded once (reference mode), already in the compute dtype.
    Decoded(Tensor),
}

/// A linear layer `y = x Wᵀ + b` whose `W` is a member of a DF11 unit.
#[derive(Debug, Clone)]
pub struct Df11Linear {
    weight: Weight,
    bias: Option<Tensor>,
    dtype: DType,
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
        let slice = MemberSlice::new(group, member, (out_features, in_features))?;
        Ok(Self {
            weight: Weight::Compressed(slice),
            bias: bias.map(|b| b.to_dtype(dtype)).transpose()?,
            dtype,
        })
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
        matches!(self.weight, Weight::Compressed(_))
    }

    /// The weight `[out, in]` in the compute dtype (decoded now if compressed).
    pub fn weight(&self) -> Result<Tensor> {
        match &self.weight {
            Weight::Compressed(s) => Ok(s.decode()?.to_dtype(self.dtype)?),
            Weight::Decoded(w) => Ok(w.clone()),
        }
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `(out_features, in_features)`.
    pub fn shape(&self) -> (usize, usize) {
        match &self.weight {
            Weight::Compressed(s) => s.shape,
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
                if crate::cuda::launch::fused_rows(x, cols).is_some()
                    && s.group.can_fuse(base, cols)
                {
                    return crate::cuda::launch::apply_rows(
                        x,
                        cols,
                        rows,
                        self.bias.as_ref(),
                        |x2| {
                            s.group
                                .fused_matmul(x2, base, rows, cols)
                                .map_err(candle_core::Error::wrap)
                        },
                    );
                }
            }
            Weight::Decoded(w) => {
                if let Some(y) = crate::cuda::twin::twin_linear(w, self.bias.as_ref(), x)? {
                    return Ok(y);
                }
            }
        }
        let w = self.weight().map_err(candle_core::Error::wrap)?;
        candle_nn::Linear::new(w, self.bias.clone()).forward(x)
    }
}

/// An embedding table stored as a DF11 unit (or one member of one).
#[derive(Debug, Clone)]
pub struct Df11Embedding {
    weight: Weight,
    dtype: DType,
    hidden: usize,
}

/// Above this many distinct ids, the whole table is decoded; below, only the rows' blocks.
const ROW_DECODE_LIMIT: usize = 16;

impl Df11Embedding {
    /// The embedding of member `member` with table shape `(vocab, hidden)`, output in `dtype`.
    pub fn new(
        group: Arc<Df11Group>,
        member: usize,
        vocab: usize,
        hidden: usize,
        dtype: DType,
    ) -> Result<Self> {
        let slice = MemberSlice::new(group, member, (vocab, hidden))?;
        Ok(Self {
            weight: Weight::Compressed(slice),
            dtype,
            hidden,
        })
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
            Weight::Decoded(w) => Ok(w.clone()),
        }
    }

    /// Decodes only the rows `ids` need, when they are few: the blocks holding each row.
    fn rows(&self, s: &MemberSlice, ids: &Tensor) -> Result<Option<Tensor>> {
        let flat = ids.flatten_all()?.to_dtype(DType::U32)?.to_vec1::<u32>()?;
        let mut unique = flat.clone();
        unique.sort_unstable();
        unique.dedup();
        if unique.len() > ROW_DECODE_LIMIT {
            return Ok(None);
        }
        let vocab = s.shape.0;
        let mut rows = Vec::with_capacity(unique.len());
        for &id in &unique {
            let id = id as usize;
            if id >= vocab {
                return Err(Df11Error::Usage(format!(
                    "token id {id} is outside the embedding's {vocab} rows"
                )));
            }
            let start = s.elements.start + id * self.hidden;
            rows.push(s.group.decode_elements(start..start + self.hidden)?);
        }
        let table = Tensor::stack(&rows, 0)?.to_dtype(self.dtype)?;
        let index: Vec<u32> = flat
            .iter()
            .map(|id| unique.binary_search(id).expect("present") as u32)
            .collect();
        let index = Tensor::from_vec(index, flat.len(), ids.device())?;
        let mut out_shape = ids.dims().to_vec();
        out_shape.push(self.hidden);
        Ok(Some(table.index_select(&index, 0)?.reshape(out_shape)?))
    }
}

impl Module for Df11Embedding {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        if let Weight::Compressed(s) = &self.weight {
            if let Some(t) = self.rows(s, ids).map_err(candle_core::Error::wrap)? {
                return Ok(t);
            }
        }
        let table = self.table().map_err(candle_core::Error::wrap)?;
        candle_nn::Embedding::new(table, self.hidden).forward(ids)
    }
}
