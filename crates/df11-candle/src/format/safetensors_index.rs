//! Memory-mapped safetensors files and a name index over all of them.
//!
//! DF11 loaders dispatch on tensor names, never on file names: a unit's six tensors may sit in any
//! file, and leftovers may be sharded. So every `*.safetensors` in a folder is opened and indexed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use crate::error::{Df11Error, Result};

/// Where one tensor lives.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    /// Index of the file in [`SafetensorsIndex::files`].
    pub file: usize,
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub range: std::ops::Range<usize>,
}

/// A borrowed tensor: dtype, shape and raw little-endian bytes.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: &'a [usize],
    /// Raw bytes.
    pub data: &'a [u8],
}

impl safetensors::View for RawTensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// All tensors of the `*.safetensors` files of a folder, memory-mapped.
pub struct SafetensorsIndex {
    files: Vec<(PathBuf, Mmap)>,
    tensors: BTreeMap<String, TensorEntry>,
}

impl SafetensorsIndex {
    /// Opens and indexes every `*.safetensors` file in `dir` (sorted by file name).
    pub fn open_dir(dir: &Path) -> Result<Self> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Df11Error::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        paths.sort();
        Self::open_files(&paths)
    }

    /// Opens and indexes the given files.
    pub fn open_files(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors: BTreeMap<String, TensorEntry> = BTreeMap::new();
        for path in paths {
            let file = std::fs::File::open(path).map_err(|e| Df11Error::io(path, e))?;
            // SAFETY: the map is read-only; as with every mmap-based loader (candle's included),
            // the file must not be modified while the model is open.
            let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Df11Error::io(path, e))?;
            let (header_len, meta) =
                SafeTensors::read_metadata(&mmap).map_err(|e| Df11Error::Safetensors {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            let data_start = 8 + header_len;
            let file_idx = files.len();
            for (name, info) in meta.tensors() {
                let (a, b) = info.data_offsets;
                let entry = TensorEntry {
                    file: file_idx,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    range: data_start + a..data_start + b,
                };
                if let Some(prev) = tensors.get(&name) {
                    return Err(Df11Error::DuplicateTensor {
                        tensor: name,
                        first: files
                            .get(prev.file)
                            .map(|(p, _): &(PathBuf, Mmap)| p.clone())
                            .unwrap_or_else(|| path.clone()),
                        second: path.clone(),
                    });
                }
                tensors.insert(name, entry);
            }
            files.push((path.clone(), mmap));
        }
        Ok(Self { files, tensors })
    }

    /// The indexed files' paths.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(p, _)| p.as_path())
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The entry of a tensor.
    pub fn entry(&self, name: &str) -> Option<&TensorEntry> {
        self.tensors.get(name)
    }

    /// Whether a tensor exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The file that holds a tensor (or the folder's first file, for errors about absent ones).
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.tensors
            .get(name)
            .map(|e| self.files[e.file].0.clone())
            .or_else(|| self.files.first().map(|f| f.0.clone()))
            .unwrap_or_default()
    }

    /// A borrowed view of a tensor.
    pub fn get(&self, name: &str) -> Option<RawTensor<'_>> {
        let e = self.tensors.get(name)?;
        Some(RawTensor {
            dtype: e.dtype,
            shape: &e.shape,
            data: &self.files[e.file].1[e.range.clone()],
        })
    }

    /// A tensor that must exist, with the given dtype and rank (any shape when `rank` is None).
    pub fn require(&self, name: &str, dtype: Dtype, rank: Option<usize>) -> Result<RawTensor<'_>> {
        let t = self.get(name).ok_or_else(|| Df11Error::MissingTensor {
            path: self.path_of(name),
            tensor: name.to_string(),
        })?;
        if t.dtype != dtype {
            return Err(Df11Error::WrongDtype {
                path: self.path_of(name),
                tensor: name.to_string(),
                expected: format!("{dtype:?}"),
                found: format!("{:?}", t.dtype),
            });
        }
        if let Some(r) = rank {
            if t.shape.len() != r {
                return Err(Df11Error::WrongShape {
                    path: self.path_of(name),
                    tensor: name.to_string(),
                    expected: format!("a {r}-dimensional tensor"),
                    found: t.shape.to_vec(),
                });
            }
        }
        Ok(t)
    }
}
