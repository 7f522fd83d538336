//! Set-ups shared by the integration tests (`mod common;` in each test binary). Each test
//! binary uses a part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod coverage;
pub mod files;
pub mod http;
pub mod need;
pub mod proc;
pub mod sink;
pub mod verdicts;
