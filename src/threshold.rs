//! Moved to [`crate::model::limit`]; re-exported while importers move.

pub use crate::model::limit::*;
pub use crate::model::worst;
