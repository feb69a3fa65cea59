//! What the waits mean, from the symbolized records: `why` (causes and
//! critical paths), `locks`, `what` (each wait's label), `blocked` and open
//! waits, thread profiles and rt-app, `diff`, and the grouping of records.

pub mod blocked;
pub mod deps;
pub mod diff;
pub mod goprofile;
pub mod goroutines;
pub mod increments;
pub mod locks;
pub mod longwaits;
pub mod metrics;
pub mod open;
pub mod reduce;
pub mod rtapp;
pub mod snapshot;
pub mod timeshare;
pub mod waitfor;
pub mod what;
pub mod why;
