//! The Bridle protocol: browsers and agent runtimes meeting at a stateless Socket.IO relay hub.
//!
//! Spec: `protocols/bridle-protocol.txt`.
//!
//! * [`wire`]: Engine.IO 4 / Socket.IO 5 frames, pure;
//! * [`transport`]: the harness client on tokio-tungstenite.

pub mod transport;
pub mod wire;
