//! The words every layer returns: statuses, results, limits and library identities. A leaf: nothing here
//! imports from the rest of the crate, so probes, the runner, reporters and commands all build on it.

pub(crate) mod finding;
pub(crate) mod library;
pub(crate) mod limit;
pub(crate) mod result;
pub(crate) mod status;

pub use finding::{common, Environment, Finding, FindingCode, Remedy};
pub use library::Library;
pub use limit::Limit;
pub use result::{CheckResult, EvidenceValue, Findings, Measurement};
pub use status::{overall, worst, AnswerSource, Status};
