//! A unit's exponents in their device form, built on the host (the CPU part of a load): packed
//! (tiled where asked) or the Huffman stream with its segment index, checked by a whole decode
//! first; kept pinned for an offloaded unit.

use candle_core::cuda_backend::CudaDevice;

use crate::cuda::packed::tile_order::{tile_members, TileOrder};
use crate::cuda::packed::{unit_exponents, ExponentForm, PackedExponents};
use crate::cuda::upload::HostArray;
use crate::error::{Df11Error, Result};
use crate::format::unit::{UnitLayout, UnitTensors};

/// A unit's exponents in their device form, built on the host: the CPU part of a load (a
/// checked decode of the whole stream, then packing or a segment index). [`CudaUnit::upload`]
/// puts it on a device; an offloaded unit keeps it (pinned) and uploads it at each staging.
pub(crate) enum HostExponents {
    Packed(crate::cuda::packed::kernels::PackedHost),
    Huffman(HuffmanHost),
}

/// The Huffman form on the host.
pub(crate) struct HuffmanHost {
    pub(super) luts: HostArray<u8>,
    /// The stream padded with zero bytes to whole words (plus one): the segment kernels load
    /// 32-bit words without bounds branches. The block kernel is given the true length.
    pub(super) codes: HostArray<u8>,
    pub(super) gaps: HostArray<u8>,
    pub(super) positions: HostArray<u32>,
    pub(super) segments: Option<crate::cuda::huffman::kernels::SegmentHost>,
    pub(super) lut_rows: usize,
    /// The most elements a block outputs (the validated layout's).
    pub(super) max_block: usize,
    /// The unit's element count (the validated layout's).
    pub(super) n_elements: usize,
}

impl HuffmanHost {
    fn new(
        t: &UnitTensors<'_>,
        layout: &UnitLayout,
        segments: Option<crate::cuda::huffman::kernels::SegmentHost>,
    ) -> Self {
        let mut codes = Vec::with_capacity(t.encoded_exponent.len() + 8);
        codes.extend_from_slice(t.encoded_exponent);
        codes.resize(t.encoded_exponent.len().div_ceil(4) * 4 + 4, 0);
        Self {
            luts: t.luts.to_vec().into(),
            codes: codes.into(),
            gaps: t.gaps.to_vec().into(),
            positions: layout.output_positions.clone().into(),
            segments,
            lut_rows: layout.lut_rows,
            max_block: layout.max_block_elements,
            n_elements: layout.n_elements,
        }
    }
}

impl HostExponents {
    /// Builds the device form `form` asks for (`auto`: packed where it fits). Either way the
    /// whole stream is decoded on the CPU first (with every check), so a corrupt unit is
    /// refused here with a typed error. A packed form stores the members `orders` tiles in the
    /// tile order (`crate::cuda::packed::tile_order`); it then comes with the unit's `sign_mantissa` in
    /// that order, which replaces the file's.
    pub(crate) fn build(
        name: &str,
        t: &UnitTensors<'_>,
        layout: &UnitLayout,
        form: ExponentForm,
        orders: &[Option<TileOrder>],
    ) -> Result<(Self, Option<Vec<u8>>)> {
        let invalid = |defect| Df11Error::InvalidUnit {
            path: std::path::PathBuf::from(format!("<loaded copy of {name}>")),
            unit: name.to_string(),
            defect,
        };
        let table = crate::codec::decode::DecodeTable::new(t.luts);
        if form != ExponentForm::Huffman {
            let exponents = unit_exponents(t, layout, &table).map_err(invalid)?;
            let members = layout.member_ranges();
            let orders = crate::cuda::packed::tile_order::checked_orders(&members, orders)
                .ok_or_else(|| {
                    Df11Error::Usage(format!("`{name}`: a tile order does not match its member"))
                })?;
            let orders = orders.as_slice();
            // Tiled where asked; row order if the tiled form does not pack (a chunk of the new
            // order with too many escapes).
            let tiled = tile_members(&exponents, &members, orders).and_then(|e| {
                let p = PackedExponents::build(&e, &members)?;
                let sm = tile_members(t.sign_mantissa, &members, orders)?;
                Some((p, orders.to_vec(), Some(sm)))
            });
            let packed = tiled.or_else(|| {
                let p = PackedExponents::build(&exponents, &members)?;
                Some((p, vec![None; members.len()], None))
            });
            if let Some((p, orders, sign_mantissa)) = packed {
                if form == ExponentForm::Packed || p.fits() {
                    let host = crate::cuda::packed::kernels::PackedHost::new(p, orders);
                    return Ok((Self::Packed(host), sign_mantissa));
                }
            }
        }
        // Built by decoding the unit on the CPU (all cores): this also checks the whole stream.
        let segments = crate::cuda::huffman::segments::SegmentIndex::build(t, layout, &table)
            .map_err(invalid)?
            .map(crate::cuda::huffman::kernels::SegmentHost::new);
        Ok((Self::Huffman(HuffmanHost::new(t, layout, segments)), None))
    }

    /// Moves the arrays into pinned memory of `device` (for staging).
    pub(crate) fn pin(&mut self, device: &CudaDevice) -> Result<()> {
        let ctx = device.cuda_stream().context().clone();
        match self {
            Self::Packed(p) => p.pin(&ctx)?,
            Self::Huffman(h) => {
                h.luts.pin(&ctx)?;
                h.codes.pin(&ctx)?;
                h.gaps.pin(&ctx)?;
                h.positions.pin(&ctx)?;
                if let Some(s) = &mut h.segments {
                    s.pin(&ctx)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the form is packed.
    pub(crate) fn is_packed(&self) -> bool {
        matches!(self, Self::Packed(_))
    }

    /// Whether a Huffman form has a segment index.
    pub(crate) fn has_segment_index(&self) -> bool {
        matches!(self, Self::Huffman(h) if h.segments.is_some())
    }

    /// Host bytes of the arrays.
    pub(crate) fn host_bytes(&self) -> usize {
        match self {
            Self::Packed(p) => p.host_bytes(),
            Self::Huffman(h) => {
                h.luts.bytes()
                    + h.codes.bytes()
                    + h.gaps.bytes()
                    + h.positions.bytes()
                    + h.segments.as_ref().map_or(0, |s| s.bytes())
            }
        }
    }
}
