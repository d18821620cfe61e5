//! The importer's one error type: what is wrong, in which file, at which node or value.

use std::fmt;

/// An import fault. Displayed as `FILE: error: WHERE: MESSAGE`, where `WHERE` names the
/// node (`node 'layer1.0.conv1/Conv' (Conv)`), initializer, input or output at fault, or is
/// left out for faults of the whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The model file.
    pub file: String,
    /// The node or value at fault, as the message names it; empty for the whole file.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl ImportError {
    /// A fault of the whole file.
    pub fn file(file: &str, message: impl Into<String>) -> ImportError {
        ImportError {
            file: file.to_string(),
            location: String::new(),
            message: message.into(),
        }
    }

    /// A fault at a node or value.
    pub fn at(file: &str, location: impl Into<String>, message: impl Into<String>) -> ImportError {
        ImportError {
            file: file.to_string(),
            location: location.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}: error: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}: error: {}: {}",
                self.file, self.location, self.message
            )
        }
    }
}

impl std::error::Error for ImportError {}
