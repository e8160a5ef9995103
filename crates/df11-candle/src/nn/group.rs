//! A compressed unit held on a candle device, and what it does: decode (whole, by blocks, by
//! elements) and the fused products (`group/products.rs`).
//!
//! On the CPU the decode op runs the block-parallel decoder; on CUDA it launches the kernels
//! (`crate::nn::decode_ops`). Either way the result is a fresh BF16 tensor that lives only as
//! long as the caller keeps it: decoded weights are not cached here, except the members a
//! decode-ahead decoded on a second stream until their one use (`group/ahead.rs`).
//!
//! A unit is resident on its device, or offloaded (`crate::nn::offload`): kept in host
//! memory and put on the device while staged ([`Df11Group::stage`]). Every operation below first
//! takes the unit's device form (`Df11Group::on_device`), staging an offloaded unit at once if
//! nobody staged it ahead.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{Device, Tensor};

use crate::codec::decode::{blocks_covering, decode_base};
use crate::error::{Df11Error, Result};
use crate::format::model::{Df11Model, Df11Unit};
use crate::format::unit::{UnitLayout, UnitTensors};
use crate::nn::decode_ops::DecodeOp;
#[cfg(feature = "cuda")]
use crate::nn::decode_ops::{SegmentDecodeOp, Wanted};
pub(crate) use crate::nn::device_form::Store;
use crate::nn::device_form::{upload, Held, OnDevice};
use crate::options::Df11Options;

#[cfg(feature = "cuda")]
mod ahead;
mod products;

/// Whether the unit stays on its device.
enum Residency {
    Resident(Box<OnDevice>),
    Offloaded(Box<crate::nn::offload::Offloaded>),
}

/// A compressed unit on a device: its six tensors (validated) and what decoding needs.
pub struct Df11Group {
    name: String,
    layout: UnitLayout,
    members: Vec<String>,
    device: Device,
    options: Df11Options,
    residency: Residency,
    /// Members decoded ahead on a second stream (`Df11Group::decode_ahead`).
    #[cfg(feature = "cuda")]
    ahead: std::sync::Mutex<Option<ahead::Ahead>>,
    /// Element ranges of consecutive members that a stacked linear layer reads as one matrix
    /// ([`crate::Df11Linear::stacked`]): decoded ahead as one piece.
    stacks: std::sync::Mutex<Vec<std::ops::Range<usize>>>,
}

impl std::fmt::Debug for Df11Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Df11Group")
            .field("name", &self.name)
            .field("n_elements", &self.layout.n_elements)
            .field("device", &self.device)
            .field("offloaded", &self.is_offloaded())
            .finish()
    }
}

/// How a unit is put on its device: the options it runs by, whether it is offloaded, and the
/// shapes of its members where the caller knows them.
#[derive(Debug, Clone, Default)]
pub struct UnitPlacement {
    /// The options the unit's form and products follow ([`Df11Options`]).
    pub options: Df11Options,
    /// Keep the unit in host memory and put it on the device only while staged
    /// ([`Df11Group::stage`]; an operation on an unstaged unit stages it itself). Its device
    /// form is built at load and checked as a resident unit's is.
    pub offloaded: bool,
    /// `[rows, cols]` of member `i` at `shapes[i]` (missing or `None`: unknown). On CUDA, in the
    /// packed form, a member whose shape suits the tensor-core kernels is stored in their tile
    /// order where [`Df11Options::tiles`] says so (`crate::cuda::packed::tile_order`): the products read
    /// it in long runs. Decoded weights and products are the same bits either way; a tiled
    /// member is used through the tensor-core kernels (or decoded), never the CUDA-core fused
    /// kernels.
    pub shapes: Vec<Option<(usize, usize)>>,
}

impl Df11Group {
    /// Puts a unit of an opened model on `device` as `placement` says; a defect names the
    /// model's file.
    pub fn load(
        model: &Df11Model,
        unit: &Df11Unit,
        device: &Device,
        placement: &UnitPlacement,
    ) -> Result<Arc<Self>> {
        let t = model.unit_tensors(unit)?;
        let (name, members, layout) = (&unit.name, unit.members.clone(), unit.layout.clone());
        let built = Self::new(name, members, &t, layout, device, placement);
        built.map_err(|e| match e {
            Df11Error::InvalidUnit { defect, .. } => model.invalid(unit, defect),
            other => other,
        })
    }

    /// Puts validated unit tensors on `device` as `placement` says. `members` names the decoded
    /// matrices. On CUDA the exponents take the form [`Df11Options::exponents`] says.
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
        placement: &UnitPlacement,
    ) -> Result<Arc<Self>> {
        Self::build(name, members, t, layout, device, placement)
    }

    fn build(
        name: &str,
        members: Vec<String>,
        t: &UnitTensors<'_>,
        layout: UnitLayout,
        device: &Device,
        placement: &UnitPlacement,
    ) -> Result<Arc<Self>> {
        let options = placement.options;
        options.check().map_err(Df11Error::Usage)?;
        let orders = if options.tiles != crate::TileMembers::Off {
            let ranges = layout.member_ranges();
            crate::cuda::packed::tile_order::member_orders(
                options.tiles,
                &ranges,
                &placement.shapes,
            )
        } else {
            Vec::new()
        };
        let residency = if placement.offloaded {
            Residency::Offloaded(Box::new(crate::nn::offload::Offloaded::new(
                name, t, &layout, device, &options, &orders,
            )?))
        } else {
            Residency::Resident(Box::new(upload(
                name, t, &layout, device, &options, &orders,
            )?))
        };
        let group = Arc::new(Self {
            name: name.to_string(),
            layout,
            members,
            device: device.clone(),
            options,
            residency,
            #[cfg(feature = "cuda")]
            ahead: std::sync::Mutex::new(None),
            stacks: std::sync::Mutex::new(Vec::new()),
        });
        group.check_loaded()?;
        group.release();
        Ok(group)
    }

    /// On CUDA a unit kept as Huffman is decoded once by the block kernel, whose status word
    /// is checked: a stream the CPU walk accepted but the kernel does not is refused at load.
    fn check_loaded(&self) -> Result<()> {
        #[cfg(feature = "cuda")]
        if !self.is_packed() && self.device.is_cuda() {
            let _ = self.decode()?;
            self.check_status()?;
        }
        Ok(())
    }

    /// Drops the members decoded ahead and not taken (`Df11Group::decode_ahead`; their memory
    /// goes back in their stream's order). Nothing to do without CUDA.
    pub fn clear_ahead(&self) {
        #[cfg(feature = "cuda")]
        {
            *self.ahead.lock().expect("decode-ahead lock") = None;
        }
    }

    /// Whether the unit is kept in host memory and put on its device only while staged.
    pub fn is_offloaded(&self) -> bool {
        matches!(self.residency, Residency::Offloaded(_))
    }

    /// Puts an offloaded unit on its device ahead of use (on CUDA: copied on the device's copy
    /// stream, which the compute stream waits for only where the unit is first used). Nothing
    /// for a resident unit, or one already staged.
    pub fn stage(&self) -> Result<()> {
        if let Residency::Offloaded(o) = &self.residency {
            o.stage(&self.device)?;
        }
        Ok(())
    }

    /// Drops an offloaded unit's device form (its memory is reused in stream order once the
    /// work queued on it is done). Nothing for a resident unit.
    pub fn release(&self) {
        if let Residency::Offloaded(o) = &self.residency {
            o.release();
        }
    }

    /// Whether an offloaded unit is on its device now (a resident unit always is).
    pub fn is_staged(&self) -> bool {
        match &self.residency {
            Residency::Resident(_) => true,
            Residency::Offloaded(o) => o.is_staged(),
        }
    }

    /// The unit's device form for an operation: resident, or staged (now, if it was not).
    pub(crate) fn on_device(&self) -> Result<Held<'_>> {
        match &self.residency {
            Residency::Resident(r) => Ok(Held::Resident(r)),
            Residency::Offloaded(o) => Ok(Held::Staged(o.acquire(&self.device)?)),
        }
    }

    /// Bytes the unit takes in host memory while offloaded (0 when resident).
    pub fn host_bytes(&self) -> usize {
        match &self.residency {
            Residency::Resident(_) => 0,
            Residency::Offloaded(o) => o.host_bytes(),
        }
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
        &self.device
    }

    /// The options the unit was put on its device with (and its products follow).
    pub fn options(&self) -> &Df11Options {
        &self.options
    }

    /// Bytes the unit occupies on the device (an offloaded unit: while staged).
    pub fn device_bytes(&self) -> usize {
        match &self.residency {
            Residency::Resident(r) => r.device_bytes(self.layout.n_elements),
            Residency::Offloaded(o) => o.device_bytes(),
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
        let on = self.on_device()?;
        let op = DecodeOp {
            name: &self.name,
            layout: &self.layout,
            on: &on,
            blocks,
            defect: std::sync::Mutex::new(None),
        };
        let result = on.sign_mantissa.apply_op1_no_bwd(&op);
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
        {
            let on = self.on_device()?;
            if let Store::Cuda(c) = &on.store {
                let packed = c.packed().is_some();
                if packed || (self.options.segment_decode && c.segment_args().is_some()) {
                    if elements.end > self.layout.n_elements || elements.start > elements.end {
                        return Err(Df11Error::Usage(format!(
                            "elements {elements:?} outside the {} of `{}`",
                            self.layout.n_elements, self.name
                        )));
                    }
                    let op = SegmentDecodeOp {
                        name: &self.name,
                        on: &on,
                        wanted: Wanted::Elements(elements),
                    };
                    return Ok(on.sign_mantissa.apply_op1_no_bwd(&op)?);
                }
            }
        }
        let blocks = blocks_covering(&self.layout, elements.clone());
        let (t, base) = self.decode_blocks(blocks)?;
        Ok(t.narrow(0, elements.start - base, elements.len())?)
    }

    /// Rows `[start, start + row_len)` for each of `starts`, one after another (`[starts.len() *
    /// row_len]` BF16), decoded by one kernel launch (per 65,535 rows) where the unit is packed on
    /// CUDA with no member in the tile order (a step's embedding rows); `None` elsewhere (the
    /// caller decodes them with [`Self::decode_elements`]).
    pub fn decode_rows(&self, starts: &[usize], row_len: usize) -> Result<Option<Tensor>> {
        #[cfg(feature = "cuda")]
        return self.decode_rows_on_cuda(starts, row_len);
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (starts, row_len);
            Ok(None)
        }
    }

    #[cfg(feature = "cuda")]
    fn decode_rows_on_cuda(&self, starts: &[usize], row_len: usize) -> Result<Option<Tensor>> {
        use crate::cuda::packed::kernels::ROWS_A_LAUNCH;
        let on = self.on_device()?;
        let Store::Cuda(c) = &on.store else {
            return Ok(None);
        };
        if c.packed().is_none_or(|p| p.has_tiled_member()) {
            return Ok(None);
        }
        if let Some(&s) = starts.iter().find(|&&s| {
            s.checked_add(row_len)
                .is_none_or(|e| e > self.layout.n_elements)
        }) {
            return Err(Df11Error::Usage(format!(
                "row [{s}, +{row_len}) outside the {} elements of `{}`",
                self.layout.n_elements, self.name
            )));
        }
        let mut parts = Vec::new();
        for some in starts.chunks(ROWS_A_LAUNCH) {
            let op = SegmentDecodeOp {
                name: &self.name,
                on: &on,
                wanted: Wanted::Rows {
                    starts: some,
                    row_len,
                },
            };
            parts.push(on.sign_mantissa.apply_op1_no_bwd(&op)?);
        }
        Ok(Some(match parts.len() {
            0 => Tensor::zeros(0, candle_core::DType::BF16, on.sign_mantissa.device())?,
            1 => parts.remove(0),
            _ => Tensor::cat(&parts, 0)?,
        }))
    }

    /// Whether the unit's exponents are kept packed on its device ([`crate::cuda::packed`]).
    pub fn is_packed(&self) -> bool {
        match &self.residency {
            Residency::Resident(r) => r.is_packed(),
            Residency::Offloaded(o) => o.is_packed(),
        }
    }

    /// Whether the unit has a segment index on its device (the fused and segment kernels).
    pub fn has_segment_index(&self) -> bool {
        match &self.residency {
            Residency::Resident(r) => r.has_segment_index(),
            Residency::Offloaded(o) => o.has_segment_index(),
        }
    }

    /// On CUDA, reads and clears the kernel's error flags (a device sync); Ok on the CPU, whose
    /// decoder returns errors directly.
    pub fn check_status(&self) -> Result<()> {
        let on = self.on_device()?;
        match &on.store {
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
