//! The products a unit serves: whether a member can take the fused kernels, its tile order,
//! the fused product itself (or decode + the BF16 twin where no DF11 kernel takes the member),
//! and the stacked ranges a linear layer reads as one matrix.

#[cfg(feature = "cuda")]
use candle_core::Tensor;

use super::Df11Group;
#[cfg(feature = "cuda")]
use super::Store;
#[cfg(feature = "cuda")]
use crate::error::{Df11Error, Result};

impl Df11Group {
    /// Whether the member `[.., cols]` at unit element `base` can go through the fused kernel:
    /// on CUDA, packed or with a segment index, `base` and `cols` multiples of 8.
    pub fn can_fuse(&self, base: usize, cols: usize) -> bool {
        (self.is_packed() || self.has_segment_index())
            && base.is_multiple_of(8)
            && cols.is_multiple_of(8)
    }

    /// Member `member`'s tile order, if its device form stores it so (CUDA, packed, shape given
    /// at load and suited: [`super::UnitPlacement::shapes`]).
    pub fn tile_order(&self, member: usize) -> Option<crate::TileOrder> {
        #[cfg(feature = "cuda")]
        if let Ok(on) = self.on_device() {
            if let Store::Cuda(c) = &on.store {
                return c.packed().and_then(|p| p.tile_order(member));
            }
        }
        let _ = member;
        None
    }

    /// `x2 · Wᵀ` (`x2`: `[nb, cols]` BF16, contiguous, at most `kernel.limit_rows()` rows) for the
    /// member `[rows, cols]` at unit element `base`, through `kernel`'s DF11 kernel where it takes
    /// the member, else by decoding the member and running `kernel`'s BF16 twin: either way the
    /// bits of the BF16 model on the same path ([`crate::matmul`]), under `options` (the
    /// layer's: streaming, panel and warpgroup kernels, PDL).
    #[cfg(feature = "cuda")]
    pub(crate) fn fused_matmul(
        &self,
        x2: &Tensor,
        base: usize,
        rows: usize,
        cols: usize,
        kernel: crate::matmul::FusedKernel,
        options: &crate::Df11Options,
    ) -> Result<Tensor> {
        use crate::cuda::forms::Matrix;
        let on = self.on_device()?;
        if let Store::Cuda(c) = &on.store {
            if let Some(form) = c.form() {
                let matrix = Matrix { base, rows, cols };
                let y = form.fused_matmul(&on.sign_mantissa, x2, matrix, kernel, options)?;
                if let Some(y) = y {
                    return Ok(y);
                }
            }
        }
        drop(on);
        // The DF11 kernel cannot take this member: decode it and run the twin (same bits).
        let end = rows
            .checked_mul(cols)
            .and_then(|n| n.checked_add(base))
            .filter(|&end| end <= self.layout.n_elements)
            .ok_or_else(|| {
                Df11Error::Usage(format!(
                    "`{}`: the [{rows}, {cols}] matrix at element {base} is outside the unit",
                    self.name
                ))
            })?;
        let w = self.decode_elements(base..end)?.reshape((rows, cols))?;
        // The twins read w with 16-byte loads from its first element.
        let w = if w.layout().start_offset().is_multiple_of(8) {
            w
        } else {
            w.copy()?
        };
        Ok(crate::cuda::dense::twin_matmul(&w, x2, kernel, options)?)
    }

    /// Records that a linear layer reads the consecutive members at `elements` as one matrix.
    pub(crate) fn add_stack(&self, elements: std::ops::Range<usize>) {
        let mut stacks = self.stacks.lock().expect("stack lock");
        if !stacks.contains(&elements) {
            stacks.push(elements);
        }
    }

    /// The element ranges a product reads: the stacks ([`Self::add_stack`]) and every member
    /// outside them.
    #[cfg(feature = "cuda")]
    pub(crate) fn product_ranges(&self) -> Vec<std::ops::Range<usize>> {
        let stacks = self.stacks.lock().expect("stack lock").clone();
        let mut out = stacks.clone();
        for m in self.layout.member_ranges() {
            if !stacks.iter().any(|s| s.start <= m.start && m.end <= s.end) {
                out.push(m);
            }
        }
        out
    }
}
