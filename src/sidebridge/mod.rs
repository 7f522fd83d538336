//! Side Bridge v1.0: Side Search (an iOS app) POSTs JSON to an HTTP "bridge".
//!
//! Spec: `protocols/side-bridge-v1.0.md`; client behaviour and rule table:
//! `reference/side-bridge-clients.md`.
//!
//! * [`profiles`]: the client's request byte habits and the decoders of its builds;
//! * [`transport`]: a raw, bounded HTTP/1.1 client;
//! * [`client`]: the emulated screen (history, options, upsert by id);
//! * [`rules`]: `check sidebridge`, the live rule table;
//! * [`wire`]: the lane envelope of one HTTP request or reply;
//! * [`proxy`]: `record sidebridge`, the recording reverse proxy;
//! * [`player`]: `replay sidebridge`;
//! * [`normalizer`], [`rows`], [`SideBridgeModel`]: the offline pipeline (pins, parity).

pub mod client;
pub mod cmd;
pub mod profiles;
pub mod rules;
pub mod spawn;
pub mod transport;
