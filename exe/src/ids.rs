//! The ids of an executable's entities (indices into its tables), at the bottom so that every
//! data module can name them.

use serde::{Deserialize, Serialize};

/// Index of a tensor in [`crate::Executable::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TensorId(pub u32);

/// Index of a compute set in [`crate::Executable::compute_sets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ComputeSetId(pub u32);

/// Index of an exchange in [`crate::Executable::exchanges`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExchangeId(pub u32);

/// Index of a host stream in [`crate::Executable::streams`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId(pub u32);
