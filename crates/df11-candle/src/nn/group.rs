//! A compressed unit held on a candle device, and the custom op that decodes it.
//!
//! On the CPU the op runs the block-parallel decoder; on CUDA it launches the kernel of
//! `kernels/df11_decode.cu`. Either way the result is a fresh BF16 tensor that lives only as long
//! as the caller keeps it: decoded weights are not cached here.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor};
use half::bf16;

use crate::codec::decode::{
    block_elements, blocks_covering, decode_base, decode_blocks, DecodeTable,
};
use crate::error::{Df11Error, Result};
use crate::format::model::{Df11Model, Df11Unit};
use crate::format::unit::{UnitLayout, UnitTensors};

/// Where the unit's bytes live.
enum Store {
    /// Host copies (the op's argument tensor holds `sign_mantissa`).
    Cpu {
        encoded_exponent: Vec<u8>,
        luts: Vec<u8>,
        gaps: Vec<u8>,
        table: DecodeTable,
    },
    /// Device buffers for the kernel.
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::unit::CudaUnit),
}

/// A compressed unit on a device: its six tensors (validated) and what decoding needs.
pub struct Df11Group {
    name: String,
    layout: UnitLayout,
    members: Vec<String>,
    sign_mantissa: Tensor,
    store: Store,
}

impl std::fmt::Debug for Df11Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Df11Group")
            .field("name", &self.name)
            .field("n_elements", &self.layout.n_elements)
            .field("device", &self.sign_mantissa.device())
            .finish()
    }
}

impl Df11Group {
    /// Puts a unit of an opened model on `device` (exponents in [`crate::exponent_form`]).
    pub fn load(model: &Df11Model, unit: &Df11Unit, device: &Device) -> Result<Arc<Self>> {
        Self::load_with_form(model, unit, device, crate::exponent_form())
    }

    /// [`Self::load`] with the exponents' device form given (ignored on the CPU).
    pub fn load_with_form(
        model: &Df11Model,
        unit: &Df11Unit,
        device: &Device,
        form: crate::ExponentForm,
    ) -> Result<Arc<Self>> {
        let t = model.unit_tensors(unit)?;
        Self::new_with_form(
            &unit.name,
            unit.members.clone(),
            &t,
            unit.layout.clone(),
            device,
            form,
        )
        .map_err(|e| match e {
            Df11Error::InvalidUnit { defect, .. } => model.invalid(unit, defect),
            other => other,
        })
    }

    /// Puts validated unit tensors on `device`. `members` names the decoded matrices. On CUDA
    /// the exponents take the form [`crate::exponent_form`] says.
    ///
    /// On CUDA the unit is decoded once here on the CPU (and, kept as Huffman, once more by the
    /// block kernel, whose status word is checked), so a unit whose bitstream is corrupt is
    /// refused at load with an error, not silently mis-decoded.
    pub fn new(
        name: &str,
        members: Vec<String>,
        t: &UnitTensors<'_>,
        layout: UnitLayout,
        device: &Device,
    ) -> Result<Arc<Self>> {
        Self::new_with_form(name, members, t, layout, device, crate::exponent_form())
    }

    /// [`Self::new`] with the exponents' device form given (ignored on the CPU).
    pub fn new_with_form(
        name: &str,
        members: Vec<String>,
        t: &UnitTensors<'_>,
        layout: UnitLayout,
        device: &Device,
        form: crate::ExponentForm,
    ) -> Result<Arc<Self>> {
        #[cfg(not(feature = "cuda"))]
        let _ = form;
        let sign_mantissa = Tensor::from_slice(t.sign_mantissa, t.sign_mantissa.len(), device)?;
        let store = match device {
            Device::Cpu => Store::Cpu {
                encoded_exponent: t.encoded_exponent.to_vec(),
                luts: t.luts.to_vec(),
                gaps: t.gaps.to_vec(),
                table: DecodeTable::new(t.luts),
            },
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => Store::Cuda(crate::cuda::unit::CudaUnit::new(
                dev, name, t, &layout, form,
            )?),
            other => {
                return Err(Df11Error::Usage(format!(
                    "DF11 decoding is implemented for the CPU and CUDA, not {other:?}"
                )))
            }
        };
        let group = Arc::new(Self {
            name: name.to_string(),
            layout,
            members,
            sign_mantissa,
            store,
        });
        #[cfg(feature = "cuda")]
        if let Store::Cuda(c) = &group.store {
            if c.packed().is_none() {
                let _ = group.decode()?;
                group.check_status()?;
            }
        }
        Ok(group)
    }

    /// Module path of the unit.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Names of the decoded matrices, in order.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Validated sizes.
    pub fn layout(&self) -> &UnitLayout {
        &self.layout
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.sign_mantissa.device()
    }

    /// Bytes the unit occupies on the device.
    pub fn device_bytes(&self) -> usize {
        match &self.store {
            Store::Cpu {
                encoded_exponent,
                luts,
                gaps,
                ..
            } => self.layout.n_elements + encoded_exponent.len() + luts.len() + gaps.len(),
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => self.layout.n_elements + c.device_bytes(),
        }
    }

    /// Decodes the whole unit: a BF16 tensor of N elements.
    pub fn decode(&self) -> Result<Tensor> {
        let (t, base) = self.decode_blocks(0..self.layout.n_blocks)?;
        debug_assert_eq!(base, 0);
        Ok(t)
    }

    /// Decodes blocks `blocks` only. Returns a BF16 tensor and the unit element index of its
    /// first value ([`decode_base`]); it holds the blocks' elements from
    /// `output_positions[start] - base` on (the few values before that are unspecified).
    pub fn decode_blocks(&self, blocks: Range<usize>) -> Result<(Tensor, usize)> {
        if blocks.start > blocks.end || blocks.end > self.layout.n_blocks {
            return Err(Df11Error::Usage(format!(
                "block range {blocks:?} outside the {} blocks of `{}`",
                self.layout.n_blocks, self.name
            )));
        }
        let base = decode_base(&self.layout, blocks.clone());
        let op = DecodeOp {
            group: self,
            blocks,
            defect: std::sync::Mutex::new(None),
        };
        let result = self.sign_mantissa.apply_op1_no_bwd(&op);
        // A defect found by the CPU decoder comes back as the typed error, not as candle's.
        if let Some(defect) = op.defect.into_inner().expect("defect lock") {
            return Err(Df11Error::InvalidUnit {
                path: std::path::PathBuf::from(format!("<loaded copy of {}>", self.name)),
                unit: self.name.clone(),
                defect,
            });
        }
        Ok((result?, base))
    }

    /// Decodes the blocks covering `elements` and returns exactly those elements (a view).
    pub fn decode_elements(&self, elements: Range<usize>) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Store::Cuda(c) = &self.store {
            let packed = c.packed().is_some();
            if packed || (segment_decode_enabled() && c.segment_args(&self.layout).is_some()) {
                if elements.end > self.layout.n_elements || elements.start > elements.end {
                    return Err(Df11Error::Usage(format!(
                        "elements {elements:?} outside the {} of `{}`",
                        self.layout.n_elements, self.name
                    )));
                }
                let op = SegmentDecodeOp {
                    group: self,
                    elements,
                };
                return Ok(self.sign_mantissa.apply_op1_no_bwd(&op)?);
            }
        }
        let blocks = blocks_covering(&self.layout, elements.clone());
        let (t, base) = self.decode_blocks(blocks)?;
        Ok(t.narrow(0, elements.start - base, elements.len())?)
    }

    /// Whether the member `[.., cols]` at unit element `base` can go through the fused kernel:
    /// on CUDA, packed or with a segment index, `base` and `cols` multiples of 8.
    pub fn can_fuse(&self, base: usize, cols: usize) -> bool {
        (self.is_packed() || self.has_segment_index())
            && base.is_multiple_of(8)
            && cols.is_multiple_of(8)
    }

    /// Whether the unit's exponents are kept packed on its device ([`crate::cuda::packed`]).
    pub fn is_packed(&self) -> bool {
        match &self.store {
            Store::Cpu { .. } => false,
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => c.packed().is_some(),
        }
    }

    /// `x2 · Wᵀ` (`x2`: `[nb, cols]` BF16, contiguous, at most `kernel.limit_rows()` rows) for the
    /// member `[rows, cols]` at unit element `base`, through `kernel`'s DF11 kernel where it takes
    /// the member, else by decoding the member and running `kernel`'s BF16 twin: either way the
    /// bits of the BF16 model on the same path ([`crate::matmul`]).
    #[cfg(feature = "cuda")]
    pub(crate) fn fused_matmul(
        &self,
        x2: &Tensor,
        base: usize,
        rows: usize,
        cols: usize,
        kernel: crate::matmul::FusedKernel,
    ) -> Result<Tensor> {
        use crate::cuda::packed_kernels::PackedGemvOp;
        use crate::cuda::tc::PackedTcOp;
        use crate::matmul::FusedKernel;
        let packed = match &self.store {
            Store::Cuda(c) => c.packed(),
            Store::Cpu { .. } => None,
        };
        match (kernel, packed) {
            (FusedKernel::TensorCore, Some(unit)) if PackedTcOp::takes(unit, base, rows, cols) => {
                let op = PackedTcOp {
                    unit,
                    base,
                    rows,
                    cols,
                };
                return Ok(self.sign_mantissa.apply_op2_no_bwd(x2, &op)?);
            }
            (FusedKernel::CudaCore, Some(unit)) if self.can_fuse(base, cols) => {
                let op = PackedGemvOp {
                    unit,
                    base,
                    rows,
                    cols,
                };
                return Ok(self.sign_mantissa.apply_op2_no_bwd(x2, &op)?);
            }
            (FusedKernel::CudaCore, None) if self.can_fuse(base, cols) => {
                if let Store::Cuda(c) = &self.store {
                    if let Some(unit) = c.segment_args(&self.layout) {
                        let op = crate::cuda::fused::Df11GemvOp {
                            unit,
                            base,
                            rows,
                            cols,
                        };
                        return Ok(self.sign_mantissa.apply_op2_no_bwd(x2, &op)?);
                    }
                }
            }
            _ => {}
        }
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
        Ok(crate::cuda::twin::twin_matmul(&w, x2, kernel)?)
    }

    /// Whether the unit has a segment index on its device (the fused and segment kernels).
    pub fn has_segment_index(&self) -> bool {
        match &self.store {
            Store::Cpu { .. } => false,
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => c.segment_args(&self.layout).is_some(),
        }
    }

    /// On CUDA, reads and clears the kernel's error flags (a device sync); Ok on the CPU, whose
    /// decoder returns errors directly.
    pub fn check_status(&self) -> Result<()> {
        match &self.store {
            Store::Cpu { .. } => Ok(()),
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => c.check_status().map_err(|defect| Df11Error::InvalidUnit {
                path: std::path::PathBuf::from(format!("<device copy of {}>", self.name)),
                unit: self.name.clone(),
                defect,
            }),
        }
    }
}

/// The custom op: argument `sign_mantissa`, result the decoded BF16 of `blocks`.
struct DecodeOp<'a> {
    group: &'a Df11Group,
    blocks: Range<usize>,
    /// Set by the CPU path when the stream does not decode.
    defect: std::sync::Mutex<Option<crate::error::UnitDefect>>,
}

impl CustomOp1 for DecodeOp<'_> {
    fn name(&self) -> &'static str {
        "df11-decode"
    }

    // Without the `cuda` feature the CPU store is the only variant.
    #[allow(irrefutable_let_patterns)]
    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let Store::Cpu {
            encoded_exponent,
            luts,
            gaps,
            table,
        } = &self.group.store
        else {
            candle_core::bail!("df11: unit `{}` is not on the CPU", self.group.name)
        };
        let sm = match layout.contiguous_offsets() {
            Some((a, b)) => &storage.as_slice::<u8>()?[a..b],
            None => candle_core::bail!("df11: sign_mantissa must be contiguous"),
        };
        let t = UnitTensors {
            encoded_exponent,
            sign_mantissa: sm,
            luts,
            gaps,
            // The decoder takes positions and splits from the validated layout.
            output_positions: &[],
            split_positions: &[],
        };
        let elements = block_elements(&self.group.layout, self.blocks.clone());
        let base = decode_base(&self.group.layout, self.blocks.clone());
        let n = elements.end - base;
        let mut out = vec![bf16::ZERO; n];
        let dst = &mut out[elements.start - base..];
        decode_blocks(&t, &self.group.layout, table, self.blocks.clone(), dst).map_err(
            |defect| {
                let msg = format!("df11: unit `{}`: {defect}", self.group.name);
                *self.defect.lock().expect("defect lock") = Some(defect);
                candle_core::Error::Msg(msg)
            },
        )?;
        Ok((CpuStorage::BF16(out), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let Store::Cuda(unit) = &self.group.store else {
            candle_core::bail!("df11: unit `{}` is not on CUDA", self.group.name)
        };
        unit.decode(storage, layout, &self.group.layout, self.blocks.clone())
    }
}

/// Whether [`Df11Group::decode_elements`] uses the segment kernel on CUDA (the default;
/// `DF11_DECODE_KERNEL=blocks` selects the block kernel of `kernels/df11_decode.cu`).
#[cfg(feature = "cuda")]
fn segment_decode_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("DF11_DECODE_KERNEL").map_or(true, |v| v != "blocks"))
}

/// The segment kernel's decode of `elements`: argument `sign_mantissa`, result BF16.
#[cfg(feature = "cuda")]
struct SegmentDecodeOp<'a> {
    group: &'a Df11Group,
    elements: Range<usize>,
}

#[cfg(feature = "cuda")]
impl CustomOp1 for SegmentDecodeOp<'_> {
    fn name(&self) -> &'static str {
        "df11-decode-segments"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("df11: the segment kernel runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let Store::Cuda(unit) = &self.group.store else {
            candle_core::bail!("df11: unit `{}` is not on CUDA", self.group.name)
        };
        if let Some(p) = unit.packed() {
            return crate::cuda::packed_kernels::decode_packed(
                p,
                storage,
                layout,
                self.elements.clone(),
            );
        }
        let Some(args) = unit.segment_args(&self.group.layout) else {
            candle_core::bail!("df11: unit `{}` has no segment index", self.group.name)
        };
        crate::cuda::fused::decode_segments(&args, storage, layout, self.elements.clone())
    }
}
