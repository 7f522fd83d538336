//! bridgewire: record, replay, check and compare chat-bridge programs.
//!
//! The pipeline, in one page:
//!
//! ```text
//! record ──▶ lanes (NDJSON, one file per direction, (run, seq) ordered)
//!              │
//!              ▼ merge by (run, seq)            [lane::merge, cell]
//!        entries ──▶ protocol model: assemble ──▶ events ──▶ grammar ──▶ kept events
//!                                                              │
//!                       rows (projection) ◀────────────────────┤
//!                       pins (counts) ◀────────────────────────┤
//!                       normalize ──▶ diff / parity ◀──────────┘
//! ```
//!
//! * [`lane`]: the on-disk format (read, write, merge), bb-compatible byte for byte;
//! * [`cell`]: discovering recorded cells;
//! * [`protocol`]: the per-protocol pure interface the core calls;
//! * [`bb`]: the bb provider-bridge protocol (assembler, grammar, recorder);
//! * [`pins`], [`normalize`]: counts and comparison-ready lists;
//! * [`jsjson`]: JSON exactly as JavaScript writes it.

pub mod allowlist;
pub mod bb;
pub mod bridle;
pub mod cell;
pub mod cells;
pub mod cli;
pub mod config;
pub mod content_coding;
pub mod diff;
pub mod http_forward;
pub mod jsjson;
pub mod jsonref;
pub mod lane;
pub mod normalize;
pub mod parity;
pub mod pins;
pub mod port_owner;
pub mod proc;
pub mod protocol;
pub mod recordings;
pub mod redact;
pub mod report;
pub mod rpc_scan;
pub mod rule;
pub mod sidebridge;
pub mod signals;
pub mod util;
