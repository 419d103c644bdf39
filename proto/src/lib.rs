//! Generated gRPC types and services of `floe.proto`, and their conversions to domain types
//! ([`convert`]). Only the edges of each process use the generated types (CONVENTIONS.md). Read
//! `floe.proto` first.

pub mod channel;
pub mod convert;
pub mod fencing;
/// Binding and advertising addresses (the `floe-net` crate, shared with the operator).
pub use floe_net as net;
pub mod tls;

#[allow(missing_debug_implementations, clippy::all, clippy::unwrap_used)] // generated code
pub mod v1 {
    tonic::include_proto!("floe.v1");
}
