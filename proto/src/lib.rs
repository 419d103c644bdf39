//! Generated gRPC types and services of `floe.proto`. Only the edges of each process use these: convert
//! to domain types where a message enters (CONVENTIONS.md). Read `floe.proto` first.

#![allow(missing_debug_implementations, clippy::all)] // generated code

pub mod v1 {
    tonic::include_proto!("floe.v1");
}
