//! What agents' model calls cost: a price table per model (shipped in the binary, refreshed
//! from a file, overridden by the user), and reports over the archive's usage roll-up by day,
//! week, month, session and 5-hour billing window.

mod fields;
pub mod prices;
pub mod report;
pub mod zone;

pub use prices::{PriceError, PriceTable};
pub use report::{Breakdown, Period, Scope};
pub use zone::Zone;
